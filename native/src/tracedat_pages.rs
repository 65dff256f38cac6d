//! trace.dat ring-buffer page walk: pages -> event records (timestamp, source, position, length,
//! type id), and the timestamp order across CPUs.
//!
//! Page header: u64 timestamp, `commit` (kernel long) whose bits 31/30 are RB_MISSED_EVENTS /
//! RB_MISSED_STORED; with STORED, the number of missed events follows the committed data.
//! Event header: u32 with type_len (5 bits) and time_delta (27 bits); bit-field order follows the
//! file's endianness. type_len 1..28: data of type_len*4 bytes; 0: u32 length word then data;
//! 29: padding; 30: time extend; 31: absolute timestamp.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::tracedat_columns::rd;

const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;
const RB_COMMIT_MASK: u64 = (1 << 30) - 1;
const TS_SHIFT: u32 = 27;

pub struct PageLayout {
    pub page_size: usize,
    pub ts_off: usize,
    pub ts_size: usize,
    pub commit_off: usize,
    pub commit_size: usize,
    pub data_off: usize,
    pub be: bool,
    pub id_off: usize,
    pub id_size: usize,
}

/// Timestamp corrections trace-cmd applies: TSC2NSEC (mult, shift, offset), then a fixed offset (ns).
pub struct Clock {
    pub tsc: Option<(u32, u32, u64)>,
    pub offset_ns: i64,
}

impl Clock {
    #[inline]
    fn apply(&self, raw: u64) -> i64 {
        let t = match self.tsc {
            Some((mult, shift, off)) => ((raw.wrapping_sub(off) as u128 * mult as u128) >> shift) as u64,
            None => raw,
        };
        (t as i64).wrapping_add(self.offset_ns)
    }
}

/// Event records of all CPUs, struct-of-arrays (20 bytes per event).
#[derive(Default)]
pub struct Records {
    pub ts: Vec<i64>,
    pub src: Vec<u32>,
    pub pos: Vec<u32>,
    /// record length in bytes; LONG_RECORD means "see `long`"
    pub len: Vec<u16>,
    pub ty: Vec<u16>,
    /// (record index, length) of the rare records of >= 65,535 bytes (sub-buffers above 64 KiB), by index
    pub long: Vec<(u32, u32)>,
}

pub const LONG_RECORD: u16 = u16::MAX;

impl Records {
    /// Length in bytes of record `i`.
    #[inline(always)]
    pub fn record_len(&self, i: usize) -> usize {
        let l = self.len[i];
        if l != LONG_RECORD {
            return l as usize;
        }
        match self.long.binary_search_by_key(&(i as u32), |&(k, _)| k) {
            Ok(k) => self.long[k].1 as usize,
            Err(_) => l as usize,
        }
    }
}

pub struct DecodeError {
    pub src: usize,
    pub pos: usize,
    pub msg: String,
}

#[derive(Default)]
pub struct CpuStats {
    pub lost: u64,
    pub lost_unknown_pages: u64,
    pub pages: u64,
}

impl CpuStats {
    /// Add the counts of another part of the same CPU's data.
    pub fn add(&mut self, o: &CpuStats) {
        self.lost += o.lost;
        self.lost_unknown_pages += o.lost_unknown_pages;
        self.pages += o.pages;
    }
}

/// Walk every page of one CPU's ring-buffer data, appending records.
#[inline(never)]
pub fn walk_cpu(si: usize, data: &[u8], lay: &PageLayout, clock: &Clock, recs: &mut Records, st: &mut CpuStats)
    -> Result<(), DecodeError> {
    walk_pages(si, data, lay, clock, st, |ts, ty, rec, pos| {
        recs.ts.push(ts);
        recs.src.push(si as u32);
        recs.pos.push(pos as u32);
        if rec.len() >= LONG_RECORD as usize {
            recs.long.push((recs.len.len() as u32, rec.len() as u32));
            recs.len.push(LONG_RECORD);
        } else {
            recs.len.push(rec.len() as u16);
        }
        recs.ty.push(ty);
    })
}

/// Walk every page of `data` (whole ring-buffer pages of one CPU; `si` names the source in errors),
/// calling `emit(timestamp ns, type id, record bytes, byte position of the record in data)` per event.
#[inline(always)]
pub fn walk_pages<F: FnMut(i64, u16, &[u8], usize)>(si: usize, data: &[u8], lay: &PageLayout, clock: &Clock,
                                                    st: &mut CpuStats, mut emit: F) -> Result<(), DecodeError> {
    let ps = lay.page_size;
    let err = |pos: usize, msg: String| DecodeError { src: si, pos, msg };
    if data.len() % ps != 0 {
        return Err(err(data.len() - data.len() % ps, format!(
            "CPU data ends with a partial ring-buffer page ({} of {} bytes)", data.len() % ps, ps)));
    }
    if data.len() > u32::MAX as usize {
        return Err(err(0, "CPU data larger than 4 GiB is not supported".into()));
    }
    for (pi, page) in data.chunks_exact(ps).enumerate() {
        let base = pi * ps;
        st.pages += 1;
        let mut ts = rd(page, lay.ts_off, lay.ts_size, lay.be).unwrap_or(0);
        let commit_raw = rd(page, lay.commit_off, lay.commit_size, lay.be).unwrap_or(0);
        let commit = (commit_raw & RB_COMMIT_MASK) as usize;
        let end = lay.data_off + commit;
        if end > ps {
            return Err(err(base + lay.commit_off, format!(
                "page header commit {} exceeds the page's data area ({} bytes)", commit, ps - lay.data_off)));
        }
        if commit_raw & RB_MISSED_EVENTS != 0 {
            if commit_raw & RB_MISSED_STORED != 0 {
                st.lost += rd(page, end, lay.commit_size, lay.be).unwrap_or(0);
            } else {
                st.lost_unknown_pages += 1;
            }
        }
        let mut i = lay.data_off;
        while i < end {
            if i + 4 > end {
                return Err(err(base + i, "event header crosses the end of the page's committed data".into()));
            }
            let w = rd(page, i, 4, lay.be).unwrap() as u32;
            let (type_len, delta) = if lay.be { (w >> 27, (w & 0x07ff_ffff) as u64) } else { (w & 31, (w >> 5) as u64) };
            let word = |j: usize| -> Result<u64, DecodeError> {
                if j + 4 > end {
                    return Err(err(base + i, format!("event of type {} truncated by the page commit", type_len)));
                }
                Ok(rd(page, j, 4, lay.be).unwrap())
            };
            let (data_at, data_len) = match type_len {
                29 => {
                    // padding (discarded event); time_delta 0 = rest of page unused
                    if delta == 0 {
                        break;
                    }
                    let l = word(i + 4)? as usize;
                    ts = ts.wrapping_add(delta);
                    i += 4 + l;
                    continue;
                }
                30 => {
                    ts = ts.wrapping_add((word(i + 4)? << TS_SHIFT) + delta);
                    i += 8;
                    continue;
                }
                31 => {
                    ts = (word(i + 4)? << TS_SHIFT) + delta;
                    i += 8;
                    continue;
                }
                0 => {
                    let l = word(i + 4)? as usize;
                    if l < 4 {
                        return Err(err(base + i, format!("event length word {} is below its own 4 bytes", l)));
                    }
                    (i + 8, (l - 4 + 3) & !3)
                }
                n => (i + 4, n as usize * 4),
            };
            if data_at + data_len > end {
                return Err(err(base + i, format!(
                    "event record of {} bytes runs past the page's committed data ({} bytes left)",
                    data_len, end.saturating_sub(data_at))));
            }
            ts = ts.wrapping_add(delta);
            let rec = &page[data_at..data_at + data_len];
            let ty = match rd(rec, lay.id_off, lay.id_size, lay.be) {
                Some(t) => t as u16,
                None => return Err(err(base + i, format!("event record of {} bytes too short for its type id", data_len))),
            };
            emit(clock.apply(ts), ty, rec, base + data_at);
            i = data_at + data_len;
        }
    }
    Ok(())
}


/// Record indices in timestamp order. Each CPU's records are contiguous and normally already in
/// order, so a k-way merge (ties: lower source index first) gives the same result as a stable sort;
/// a CPU whose timestamps go backwards falls back to a stable sort of everything.
pub fn time_order(ts: &[i64], ranges: &[(usize, usize)]) -> Vec<u32> {
    let monotonic = ranges.iter().all(|&(a, b)| ts[a..b].windows(2).all(|w| w[0] <= w[1]));
    if !monotonic {
        let mut perm: Vec<u32> = (0..ts.len() as u32).collect();
        perm.sort_by_key(|&i| ts[i as usize]);
        return perm;
    }
    let mut out = Vec::with_capacity(ts.len());
    let mut pos: Vec<usize> = ranges.iter().map(|r| r.0).collect();
    let mut heap = BinaryHeap::new();
    for (s, &(a, b)) in ranges.iter().enumerate() {
        if a < b {
            heap.push(Reverse((ts[a], s)));
        }
    }
    while let Some(Reverse((_, s))) = heap.pop() {
        let end = ranges[s].1;
        let mut i = pos[s];
        // emit the run of this source that stays <= the next head of another source
        let limit = heap.peek().map(|Reverse((t, _))| *t);
        loop {
            out.push(i as u32);
            i += 1;
            if i >= end {
                break;
            }
            match limit {
                Some(t) if ts[i] > t || (ts[i] == t && heap.peek().map(|Reverse((_, s2))| *s2 < s).unwrap_or(false)) => break,
                _ => {}
            }
        }
        pos[s] = i;
        if i < end {
            heap.push(Reverse((ts[i], s)));
        }
    }
    out
}

pub fn worker_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 16)
}

/// Split sources into at most `n` contiguous groups of roughly equal byte size.
pub fn split_balanced(srcs: &[&[u8]], n: usize) -> Vec<(usize, usize)> {
    let total: usize = srcs.iter().map(|s| s.len()).sum();
    let per = total / n.max(1) + 1;
    let mut out = Vec::new();
    let (mut a, mut acc) = (0usize, 0usize);
    for (i, s) in srcs.iter().enumerate() {
        acc += s.len();
        if acc >= per && out.len() + 1 < n {
            out.push((a, i + 1));
            a = i + 1;
            acc = 0;
        }
    }
    if a < srcs.len() || out.is_empty() {
        out.push((a, srcs.len()));
    }
    out
}
