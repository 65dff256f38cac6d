//! Ring-buffer pages -> event records.
//!
//! Page header: u64 timestamp, `commit` (kernel long) whose bits 31/30 are RB_MISSED_EVENTS /
//! RB_MISSED_STORED; with STORED, the number of missed events follows the committed data.
//! Event header: u32 with type_len (5 bits) and time_delta (27 bits); bit-field order follows the
//! file's endianness. type_len 1..28: data of type_len*4 bytes; 0: u32 length word then data;
//! 29: padding; 30: time extend; 31: absolute timestamp.

use crate::bytes::rd;
use crate::format::PageHeader;

const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;
const RB_COMMIT_MASK: u64 = (1 << 30) - 1;
const TS_SHIFT: u32 = 27;

/// Where things are in a page and in a record.
#[derive(Debug, Clone, Copy)]
pub struct PageLayout {
    pub page_size: usize,
    pub header: PageHeader,
    pub be: bool,
    /// common_type of every record: (offset, size)
    pub id_off: usize,
    pub id_size: usize,
}

/// Timestamp corrections trace-cmd applies: TSC2NSEC (mult, shift, offset), then a fixed offset (ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct Clock {
    pub tsc: Option<(u32, u32, u64)>,
    pub offset_ns: i64,
}

impl Clock {
    /// ns on the trace clock; None when the value does not fit an i64 (a corrupt timestamp).
    #[inline]
    pub fn apply(&self, raw: u64) -> Option<i64> {
        let t = match self.tsc {
            Some((mult, shift, off)) => (raw.wrapping_sub(off) as u128 * mult as u128) >> shift.min(127),
            None => raw as u128,
        };
        i64::try_from(t as i128 + self.offset_ns as i128).ok()
    }
}

/// Counts of one walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageStats {
    pub pages: u64,
    /// events lost before pages whose count is stored
    pub lost: u64,
    /// pages flagged as following lost events without a stored count
    pub lost_unknown_pages: u64,
    /// records whose timestamp overflowed the 64-bit range (not emitted)
    pub bad_ts: u64,
    /// position of the first such record
    pub first_bad_ts: Option<usize>,
}

/// A corrupt page: byte position in the walked data and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageError {
    pub pos: usize,
    pub msg: String,
}

/// Walk every page of `data` (whole ring-buffer pages of one CPU), calling
/// `emit(timestamp ns, type id, record bytes)` per event record.
#[inline(always)]
pub fn walk<F: FnMut(i64, u16, &[u8])>(
    data: &[u8],
    lay: &PageLayout,
    clock: &Clock,
    st: &mut PageStats,
    mut emit: F,
) -> Result<(), PageError> {
    let ps = lay.page_size;
    let h = lay.header;
    let be = lay.be;
    let err = |pos: usize, msg: String| PageError { pos, msg };
    if h.data_offset >= ps {
        return Err(err(0, format!("page header ({} bytes) larger than the page ({ps} bytes)", h.data_offset)));
    }
    if !data.len().is_multiple_of(ps) {
        return Err(err(
            data.len() - data.len() % ps,
            format!("CPU data ends with a partial ring-buffer page ({} of {ps} bytes)", data.len() % ps),
        ));
    }
    for (pi, page) in data.chunks_exact(ps).enumerate() {
        let base = pi * ps;
        st.pages += 1;
        // a timestamp that leaves the u64 range is None from there on (its records are not emitted)
        let mut ts = rd(page, h.ts_offset, h.ts_size, be);
        let commit_raw = rd(page, h.commit_offset, h.commit_size, be).unwrap_or(0);
        let commit = (commit_raw & RB_COMMIT_MASK) as usize;
        let end = h.data_offset + commit;
        if end > ps {
            return Err(err(
                base + h.commit_offset,
                format!("page header commit {commit} exceeds the page's data area ({} bytes)", ps - h.data_offset),
            ));
        }
        if commit_raw & RB_MISSED_EVENTS != 0 {
            if commit_raw & RB_MISSED_STORED != 0 {
                st.lost = st.lost.saturating_add(rd(page, end, h.commit_size, be).unwrap_or(0));
            } else {
                st.lost_unknown_pages += 1;
            }
        }
        let mut i = h.data_offset;
        while i < end {
            if i + 4 > end {
                return Err(err(base + i, "event header crosses the end of the page's committed data".into()));
            }
            let w = rd(page, i, 4, be).unwrap_or(0) as u32;
            let (type_len, delta) = if be { (w >> 27, (w & 0x07ff_ffff) as u64) } else { (w & 31, (w >> 5) as u64) };
            let word = |j: usize| -> Result<u64, PageError> {
                match rd(page, j, 4, be) {
                    Some(v) if j + 4 <= end => Ok(v),
                    _ => Err(err(base + i, format!("event of type {type_len} truncated by the page commit"))),
                }
            };
            let (data_at, data_len) = match type_len {
                29 => {
                    // padding (discarded event); time_delta 0 = rest of page unused
                    if delta == 0 {
                        break;
                    }
                    let l = word(i + 4)? as usize;
                    ts = ts.and_then(|t| t.checked_add(delta));
                    i = i.saturating_add(4).saturating_add(l);
                    continue;
                }
                30 => {
                    let ext = (word(i + 4)? << TS_SHIFT) + delta;
                    ts = ts.and_then(|t| t.checked_add(ext));
                    i += 8;
                    continue;
                }
                31 => {
                    ts = Some((word(i + 4)? << TS_SHIFT) + delta);
                    i += 8;
                    continue;
                }
                0 => {
                    let l = word(i + 4)? as usize;
                    if l < 4 {
                        return Err(err(base + i, format!("event length word {l} is below its own 4 bytes")));
                    }
                    (i + 8, (l - 4 + 3) & !3)
                }
                n => (i + 4, n as usize * 4),
            };
            if data_at + data_len > end {
                return Err(err(
                    base + i,
                    format!(
                        "event record of {data_len} bytes runs past the page's committed data ({} bytes left)",
                        end.saturating_sub(data_at)
                    ),
                ));
            }
            ts = ts.and_then(|t| t.checked_add(delta));
            let rec = &page[data_at..data_at + data_len];
            let Some(ty) = rd(rec, lay.id_off, lay.id_size, be) else {
                return Err(err(base + i, format!("event record of {data_len} bytes too short for its type id")));
            };
            match ts.and_then(|t| clock.apply(t)) {
                Some(t) => emit(t, ty as u16, rec),
                None => {
                    st.bad_ts += 1;
                    st.first_bad_ts.get_or_insert(base + i);
                }
            }
            i = data_at + data_len;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> PageLayout {
        let header = PageHeader { ts_offset: 0, ts_size: 8, commit_offset: 8, commit_size: 8, data_offset: 16 };
        PageLayout { page_size: 64, header, be: false, id_off: 0, id_size: 2 }
    }

    fn page(ts: u64, body: &[u8], flags: u64) -> Vec<u8> {
        let mut p = ts.to_le_bytes().to_vec();
        p.extend(((body.len() as u64) | flags).to_le_bytes());
        p.extend(body);
        p.resize(64, 0);
        p
    }

    fn ev(type_len: u32, delta: u32) -> [u8; 4] {
        (delta << 5 | type_len).to_le_bytes()
    }

    #[test]
    fn records_time_extends_and_lost_counts() {
        let mut body = Vec::new();
        body.extend(ev(1, 10));
        body.extend([7, 0, 0, 0]); // record of 4 bytes, type 7
        body.extend(ev(30, 1));
        body.extend(2u32.to_le_bytes()); // + (2 << 27) + 1
        body.extend(ev(1, 0));
        body.extend([8, 0, 0, 0]);
        let mut data = page(1000, &body, RB_MISSED_EVENTS | RB_MISSED_STORED);
        data[16 + body.len()..16 + body.len() + 8].copy_from_slice(&5u64.to_le_bytes());
        let mut got = Vec::new();
        let mut st = PageStats::default();
        walk(&data, &layout(), &Clock::default(), &mut st, |t, ty, r| got.push((t, ty, r.len()))).unwrap();
        assert_eq!(got, vec![(1010, 7, 4), (1011 + (2 << 27), 8, 4)]);
        assert_eq!((st.pages, st.lost), (1, 5));
    }

    #[test]
    fn corrupt_pages_are_errors_with_positions() {
        let mut st = PageStats::default();
        let bad_commit = page(0, &[], 0x3FFF_0000);
        let e = walk(&bad_commit, &layout(), &Clock::default(), &mut st, |_, _, _| {}).unwrap_err();
        assert_eq!(e.pos, 8);
        let long = page(0, &[ev(0, 0), 0xFFFF_FF7Fu32.to_le_bytes()].concat(), 0);
        let e = walk(&long, &layout(), &Clock::default(), &mut st, |_, _, _| {}).unwrap_err();
        assert!(e.msg.contains("runs past"), "{}", e.msg);
        assert!(walk(&[0u8; 65], &layout(), &Clock::default(), &mut st, |_, _, _| {}).is_err());
    }

    #[test]
    fn timestamps_beyond_i64_are_counted_not_emitted() {
        let body = [ev(1, 100).to_vec(), vec![1, 0, 0, 0]].concat();
        let data = page(i64::MAX as u64 - 10, &body, 0);
        let mut st = PageStats::default();
        let mut n = 0;
        walk(&data, &layout(), &Clock::default(), &mut st, |_, _, _| n += 1).unwrap();
        assert_eq!((n, st.bad_ts, st.first_bad_ts), (0, 1, Some(16)));
        let tsc = Clock { tsc: Some((3, 1, 0)), offset_ns: -5 };
        assert_eq!(tsc.apply(10), Some(10));
        assert_eq!(Clock { tsc: None, offset_ns: 0 }.apply(u64::MAX), None);
    }
}
