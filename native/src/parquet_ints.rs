//! Integer column chunks (INT32 / INT64 physical types). With `IntMode::Auto` the encoding is chosen
//! per column chunk for write speed and for the read speed of polars, which decodes
//! DELTA_BINARY_PACKED ~3x slower than PLAIN or dictionary indices (631 k-row sched_switch,
//! measured with pyarrow-written files: all int columns PLAIN 8 ms, dictionary 11 ms, delta 30 ms):
//! - non-decreasing INT64 values (the `ts` column): DELTA_BINARY_PACKED;
//! - values spanning fewer than 2^16 (cpu, pid, prio, flags, ...): a PLAIN dictionary page +
//!   RLE_DICTIONARY indices; spans below 16 list every value of [min, max] (index = value - min),
//!   wider ones the values present in order of first appearance, found with a direct-mapped table
//!   (no hashing);
//! - anything else: PLAIN.
use super::column::{as_bytes, flat_def_levels, ChunkStats, Col, IntMode, Opts, Sink};
use super::{enc, thrift};

/// The two integer physical types.
pub trait Phys: Copy + Ord + Into<i64> {
    fn delta(out: &mut Vec<u8>, vals: &[Self]);
    fn from_i64(v: i64) -> Self;
}

impl Phys for i32 {
    fn delta(out: &mut Vec<u8>, vals: &[i32]) {
        enc::delta_i32(out, vals)
    }
    fn from_i64(v: i64) -> i32 {
        v as i32
    }
}

impl Phys for i64 {
    fn delta(out: &mut Vec<u8>, vals: &[i64]) {
        enc::delta_i64(out, vals)
    }
    fn from_i64(v: i64) -> i64 {
        v
    }
}

/// Largest value span (max - min) given a dictionary in Auto mode.
const DICT_SPAN: i128 = 1 << 16;
/// Spans below this get a dense dictionary (every value of [min, max], index = value - min: no
/// lookup table); larger ones list only the values present.
const DENSE_SPAN: i64 = 1 << 4;

enum Plan {
    Plain,
    Delta,
    /// number of distinct values (dictionary page body and indices already in `sink`)
    Dict(u32),
}

/// Write rows [r0, r1) of an integer column whose non-null values are `vals` (in row order).
pub fn write_ints<T: Phys>(sink: &mut Sink, st: &mut ChunkStats, col: &Col, r0: usize, r1: usize, opts: &Opts,
                           vals: &[T]) -> std::io::Result<()> {
    let plan = match opts.ints {
        IntMode::Plain => Plan::Plain,
        IntMode::Delta => Plan::Delta,
        IntMode::Auto if std::mem::size_of::<T>() == 8 && vals.len() > 1 && sorted(vals) => Plan::Delta,
        IntMode::Auto => dictionary(sink, vals).unwrap_or(Plan::Plain),
    };
    let encoding = match plan {
        Plan::Plain => thrift::ENC_PLAIN,
        Plan::Delta => thrift::ENC_DELTA_BINARY_PACKED,
        Plan::Dict(n) => {
            // dictionary page: the distinct values in order of first appearance (written by `dictionary`)
            st.dictionary_page_offset = Some(sink.pos as i64);
            sink.page(st, thrift::PAGE_DICTIONARY, n as usize, thrift::ENC_PLAIN)?;
            st.data_page_offset = sink.pos as i64;
            st.encodings.push(thrift::ENC_PLAIN);
            thrift::ENC_RLE_DICTIONARY
        }
    };
    st.encodings.push(encoding);
    let mut k = 0; // index into vals of the page's first non-null value
    let mut p0 = r0;
    while p0 < r1 {
        let p1 = (p0 + opts.page_rows).min(r1);
        let nn = if col.validity.is_some() { (p0..p1).filter(|&i| col.valid(i)).count() } else { p1 - p0 };
        let page = &vals[k..k + nn];
        k += nn;
        let mut body = std::mem::take(&mut sink.body);
        flat_def_levels(&mut body, col, p0, p1);
        match plan {
            Plan::Plain => body.extend_from_slice(as_bytes(page)),
            Plan::Delta => T::delta(&mut body, page),
            Plan::Dict(n) => {
                // sink.idx holds the chunk's indices (one per non-null value)
                let width = enc::bit_width(n.saturating_sub(1) as u64).max(1);
                body.push(width as u8);
                enc::hybrid(&mut body, &sink.idx[k - nn..k], width);
            }
        }
        sink.body = body;
        sink.page(st, thrift::PAGE_DATA, p1 - p0, encoding)?;
        p0 = p1;
    }
    Ok(())
}

/// Values never decrease (checked in blocks without early exit inside a block, so it vectorises).
fn sorted<T: Phys>(vals: &[T]) -> bool {
    vals[1..].chunks(1024).zip(vals.chunks(1024)).all(|(b, a)| a.iter().zip(b).fold(true, |ok, (x, y)| ok & (x <= y)))
}

/// Dictionary plan when the values span less than `DICT_SPAN`: the dictionary page body (distinct
/// values in order of first appearance) goes to `sink.body`, the index of every value to `sink.idx`;
/// `sink.table` maps value - min to its index (u32::MAX: not seen).
fn dictionary<T: Phys>(sink: &mut Sink, vals: &[T]) -> Option<Plan> {
    let (&first, rest) = vals.split_first()?;
    let (min, max) = rest.iter().fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let (min, max): (i64, i64) = (min.into(), max.into());
    if (max as i128 - min as i128) >= DICT_SPAN {
        return None;
    }
    // locals (not fields behind `sink`) so the loops keep lengths and pointers in registers
    let mut idx = std::mem::take(&mut sink.idx);
    let mut body = std::mem::take(&mut sink.body);
    idx.clear();
    body.clear();
    let n = if max - min < DENSE_SPAN {
        for v in min..=max {
            body.extend_from_slice(as_bytes(&[T::from_i64(v)]));
        }
        idx.extend(vals.iter().map(|&v| (v.into() - min) as u32));
        (max - min + 1) as u32
    } else {
        let mut table = std::mem::take(&mut sink.table);
        table.clear();
        table.resize((max - min) as usize + 1, u32::MAX);
        idx.resize(vals.len(), 0);
        let mut n = 0u32;
        for (&v, out) in vals.iter().zip(idx.iter_mut()) {
            let slot = &mut table[(v.into() - min) as usize];
            if *slot == u32::MAX {
                *slot = n;
                n += 1;
                body.extend_from_slice(as_bytes(&[v]));
            }
            *out = *slot;
        }
        sink.table = table;
        n
    };
    sink.idx = idx;
    sink.body = body;
    Some(Plan::Dict(n))
}
