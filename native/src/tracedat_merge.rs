//! Merging one event type's per-CPU columns into one table in timestamp order.
//!
//! The streaming decode (tracedat_fused) fills, per CPU, one set of column builders per event type, in
//! that CPU's ring-buffer order. A table is the k-way merge of those runs by timestamp, ties going to the
//! run listed first (the CPU whose data comes first in the file), which is exactly the global order of
//! the record-index path (tracedat_pages::time_order) restricted to the type, as long as every CPU's
//! timestamps never go backwards (the caller checks that and otherwise uses the record-index path).
//!
//! The merge is described by segments (run, first row, rows): every column is then merged segment by
//! segment with slice copies, in place in the largest run's arrays (grown to the table's size and filled
//! from the back), so that only the other runs' rows are written to new memory. Text dictionaries (Categorical columns) are rebuilt in order of first
//! appearance in the merged table, as a single time-ordered pass would have built them.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

use super::tracedat_columns::{Builder, Col, FxHasher, Num};

/// (run, first row, number of rows) of a merged table, in output order.
pub type Seg = (u32, u32, u32);

/// Segments of the merge of sorted runs `ts` by (timestamp, run index).
pub fn merge_segments(ts: &[&[i64]]) -> Vec<Seg> {
    let mut pos = vec![0usize; ts.len()];
    let mut segs: Vec<Seg> = Vec::new();
    let mut heap = BinaryHeap::with_capacity(ts.len());
    for (p, run) in ts.iter().enumerate() {
        if let Some(&t) = run.first() {
            heap.push(Reverse((t, p)));
        }
    }
    while let Some(Reverse((_, p))) = heap.pop() {
        let run = ts[p];
        let start = pos[p];
        let mut i = start + 1;
        match heap.peek() {
            None => i = run.len(),
            // rows of run p precede the next other head (t, q) while (ts, p) < (t, q)
            Some(&Reverse((t, q))) if p < q => {
                while i < run.len() && run[i] <= t {
                    i += 1;
                }
            }
            Some(&Reverse((t, _))) => {
                while i < run.len() && run[i] < t {
                    i += 1;
                }
            }
        }
        segs.push((p as u32, start as u32, (i - start) as u32));
        pos[p] = i;
        if i < run.len() {
            heap.push(Reverse((run[i], p)));
        }
    }
    segs
}

/// Merge element ranges `ranges` (run, first element, end element; in output order) of `parts` into one
/// vector, in place in `parts[base]`: it is grown to the total (a large block is remapped, not copied)
/// and filled from the back, so that each of its own elements moves only towards the end and is read
/// before anything overwrites it. Only the other runs' elements touch new memory.
/// `range(k)` = (run, first element, end element) of segment k of `nseg` (no range list is
/// allocated: the segments of a large table are many).
pub fn merge_vec<T: Copy, R: Fn(usize) -> (usize, usize, usize)>(mut parts: Vec<Vec<T>>, base: usize, nseg: usize,
                                                                  range: R) -> Vec<T> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = std::mem::take(&mut parts[base]);
    out.reserve_exact(total - out.len());
    let dst = out.as_mut_ptr();
    let mut w = total;
    for k in (0..nseg).rev() {
        let (p, lo, hi) = range(k);
        let n = hi - lo;
        assert!(n <= w && (p == base || hi <= parts[p].len()), "merge ranges do not cover the runs");
        w -= n;
        // SAFETY: [w, w + n) < total <= capacity; own elements: lo <= w (an element's place in the merge
        // is at or after its place in its run) and [lo, hi) is not yet overwritten (filled from the back);
        // other runs: [lo, hi) lies in that run (checked above).
        unsafe {
            let src: *const T = if p == base { dst } else { parts[p].as_ptr() };
            if p == base && lo == w {
                // already in place
            } else if n <= 8 {
                // short segments (CPUs interleave every few rows): element moves, descending so that an
                // own element is read before its slot is overwritten
                for j in (0..n).rev() {
                    *dst.add(w + j) = *src.add(lo + j);
                }
            } else if p == base {
                std::ptr::copy(src.add(lo), dst.add(w), n);
            } else {
                std::ptr::copy_nonoverlapping(src.add(lo), dst.add(w), n);
            }
        }
    }
    assert!(w == 0, "merge ranges do not cover the runs");
    // SAFETY: every index below total was written above (the ranges cover the output exactly).
    unsafe { out.set_len(total) };
    out
}

/// Element range of segment `s` when every row holds `count` elements.
#[inline(always)]
fn scaled(s: &Seg, count: usize) -> (usize, usize, usize) {
    (s.0 as usize, s.1 as usize * count, (s.1 + s.2) as usize * count)
}

/// Merge a numeric column along merge_vec's ranges (all runs have the same variant: one field spec).
fn merge_num<R: Fn(usize) -> (usize, usize, usize)>(parts: Vec<Num>, base: usize, nseg: usize, range: R) -> Num {
    macro_rules! g {
        ($var:ident) => {{
            let v: Vec<Vec<_>> = parts.into_iter().map(|p| match p {
                Num::$var(x) => x,
                _ => unreachable!("runs of one field share its type"),
            }).collect();
            Num::$var(merge_vec(v, base, nseg, &range))
        }};
    }
    match parts[0] {
        Num::U8(_) => g!(U8),
        Num::I8(_) => g!(I8),
        Num::U16(_) => g!(U16),
        Num::I16(_) => g!(I16),
        Num::U32(_) => g!(U32),
        Num::I32(_) => g!(I32),
        Num::U64(_) => g!(U64),
        Num::I64(_) => g!(I64),
    }
}

/// Merge per-row offsets (offsets[k] = first element of row k, one more entry than rows), in place in
/// the base run as merge_vec does. Returns the merged offsets and the element ranges of the segments.
fn merge_offsets(mut parts: Vec<Vec<i64>>, base: usize, segs: &[Seg], rows: usize)
    -> (Vec<i64>, Vec<(usize, usize, usize)>) {
    let ranges: Vec<(usize, usize, usize)> = segs.iter().map(|&(p, a, n)| {
        let o = &parts[p as usize];
        (p as usize, o[a as usize] as usize, o[(a + n) as usize] as usize)
    }).collect();
    let mut out = std::mem::take(&mut parts[base]);
    out.reserve_exact(rows + 1 - out.len());
    let dst = out.as_mut_ptr();
    // output element offset at the end of each segment, from the back
    let mut end: i64 = ranges.iter().map(|r| (r.2 - r.1) as i64).sum();
    let mut w = rows;
    for (k, &(p, a, n)) in segs.iter().enumerate().rev() {
        let (p, a, n) = (p as usize, a as usize, n as usize);
        w -= n;
        let len = (ranges[k].2 - ranges[k].1) as i64;
        let start = end - len;
        // SAFETY: rows w+1..=w+n of the output (<= rows < capacity); the base run's own entries a..=a+n
        // sit at or before them and are read (descending) before being overwritten, entry a (this
        // segment's start, read first) is not overwritten here (w + 1 > a).
        unsafe {
            let src: *const i64 = if p == base { dst } else { parts[p].as_ptr() };
            let first = *src.add(a);
            for j in (1..=n).rev() {
                *dst.add(w + j) = *src.add(a + j) - first + start;
            }
        }
        end = start;
    }
    // SAFETY: entry 0 of the base run is 0 and stays; entries 1..=rows were written above.
    unsafe {
        *dst = 0;
        out.set_len(rows + 1);
    }
    (out, ranges)
}

/// Merge one field's per-run builders along `segs` (consumes them; `rows` = rows of the merged table;
/// `base` = the run whose arrays are grown into the merged ones, best the largest).
pub fn gather_builder(parts: Vec<Builder>, segs: &[Seg], rows: usize, base: usize) -> Builder {
    let spec = parts[0].spec.clone();
    let cols: Vec<Col> = parts.into_iter().map(|b| b.col).collect();
    let col = match &cols[0] {
        Col::Num(_) => {
            let nums = cols.into_iter().map(|c| match c { Col::Num(n) => n, _ => unreachable!() }).collect();
            Col::Num(merge_num(nums, base, segs.len(), |k| scaled(&segs[k], 1)))
        }
        Col::List { count, .. } => {
            let count = *count;
            let flats = cols.into_iter().map(|c| match c { Col::List { flat, .. } => flat, _ => unreachable!() }).collect();
            Col::List { count, flat: merge_num(flats, base, segs.len(), |k| scaled(&segs[k], count)) }
        }
        Col::VarList { .. } => {
            let (offs, flats): (Vec<Vec<i64>>, Vec<Num>) = cols.into_iter().map(|c| match c {
                Col::VarList { offsets, flat } => (offsets, flat),
                _ => unreachable!(),
            }).unzip();
            let (offsets, ranges) = merge_offsets(offs, base, segs, rows);
            Col::VarList { offsets, flat: merge_num(flats, base, ranges.len(), |k| ranges[k]) }
        }
        Col::Var { text, .. } => {
            let text = *text;
            let (offs, bytes): (Vec<Vec<i64>>, Vec<Vec<u8>>) = cols.into_iter().map(|c| match c {
                Col::Var { offsets, bytes, .. } => (offsets, bytes),
                _ => unreachable!(),
            }).unzip();
            let (offsets, ranges) = merge_offsets(offs, base, segs, rows);
            Col::Var { text, offsets, bytes: merge_vec(bytes, base, ranges.len(), |k| ranges[k]) }
        }
        Col::Cat { .. } => merge_cat(cols, segs, rows, base),
    };
    Builder { spec, col }
}

/// Categorical columns: codes remapped onto one dictionary whose entries appear in order of first use
/// in the merged table (equal texts from different runs share one code), then merged in place.
fn merge_cat(cols: Vec<Col>, segs: &[Seg], rows: usize, base: usize) -> Col {
    let mut parts: Vec<(Vec<u32>, Vec<i64>, Vec<u8>)> = cols.into_iter().map(|c| match c {
        Col::Cat { codes, offsets, bytes, .. } => (codes, offsets, bytes),
        _ => unreachable!(),
    }).collect();
    // dictionary in order of first use: a read-only pass in merged order
    let mut remap: Vec<Vec<u32>> = parts.iter().map(|p| vec![u32::MAX; p.1.len() - 1]).collect();
    let (mut offsets, mut bytes) = (vec![0i64], Vec::new());
    {
        let mut seen: HashMap<&[u8], u32, BuildHasherDefault<FxHasher>> = HashMap::default();
        for &(p, a, n) in segs {
            let (src, off, txt) = &parts[p as usize];
            let map = &mut remap[p as usize];
            for &c in &src[a as usize..(a + n) as usize] {
                if map[c as usize] == u32::MAX {
                    let s = &txt[off[c as usize] as usize..off[c as usize + 1] as usize];
                    map[c as usize] = *seen.entry(s).or_insert_with(|| {
                        bytes.extend_from_slice(s);
                        offsets.push(bytes.len() as i64);
                        (offsets.len() - 2) as u32
                    });
                }
            }
        }
    }
    let mut codes = std::mem::take(&mut parts[base].0);
    codes.reserve_exact(rows - codes.len());
    let dst = codes.as_mut_ptr();
    let mut w = rows;
    for &(p, a, n) in segs.iter().rev() {
        let (p, a, n) = (p as usize, a as usize, n as usize);
        w -= n;
        let map = &remap[p];
        // SAFETY: as in merge_vec (own codes move towards the end and are read, descending, first).
        unsafe {
            let src: *const u32 = if p == base { dst } else { parts[p].0.as_ptr() };
            for j in (0..n).rev() {
                *dst.add(w + j) = map[*src.add(a + j) as usize];
            }
        }
    }
    // SAFETY: rows 0..rows were all written above.
    unsafe { codes.set_len(rows) };
    Col::Cat { codes, map: Default::default(), small: Default::default(), offsets, bytes }
}
