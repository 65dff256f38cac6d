//! Merging one event type's per-CPU columns into one table in timestamp order.
//!
//! The streaming decode (tracedat_fused) fills, per CPU, one set of column builders per event type, in
//! that CPU's ring-buffer order. A table is the k-way merge of those runs by timestamp, ties going to the
//! run listed first (the CPU whose data comes first in the file), which is exactly the global order of
//! the record-index path (tracedat_pages::time_order) restricted to the type, as long as every CPU's
//! timestamps never go backwards (the caller checks that and otherwise uses the record-index path).
//!
//! The merge is described by segments (run, first row, rows): every column is then gathered segment by
//! segment with slice copies. Text dictionaries (Categorical columns) are rebuilt in order of first
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

/// Copy `ranges` (run, first element, end element) of the runs `parts`, in order.
pub fn gather_slices<T: Copy>(parts: &[&[T]], ranges: impl Iterator<Item = (usize, usize, usize)>, total: usize)
    -> Vec<T> {
    let mut out = Vec::with_capacity(total);
    for (p, a, b) in ranges {
        out.extend_from_slice(&parts[p][a..b]);
    }
    out
}

/// Gather a numeric column: element ranges of each run (all runs have the same variant: one field spec).
fn gather_num(parts: Vec<Num>, ranges: &[(usize, usize, usize)]) -> Num {
    let total: usize = ranges.iter().map(|r| r.2 - r.1).sum();
    macro_rules! g {
        ($var:ident) => {{
            let v: Vec<&[_]> = parts.iter().map(|p| match p {
                Num::$var(x) => x.as_slice(),
                _ => unreachable!("runs of one field share its type"),
            }).collect();
            Num::$var(gather_slices(&v, ranges.iter().copied(), total))
        }};
    }
    match parts.first() {
        None | Some(Num::U8(_)) => if parts.is_empty() { Num::U8(Vec::new()) } else { g!(U8) },
        Some(Num::I8(_)) => g!(I8),
        Some(Num::U16(_)) => g!(U16),
        Some(Num::I16(_)) => g!(I16),
        Some(Num::U32(_)) => g!(U32),
        Some(Num::I32(_)) => g!(I32),
        Some(Num::U64(_)) => g!(U64),
        Some(Num::I64(_)) => g!(I64),
    }
}

/// Row segments -> element ranges through per-row offsets (offsets[k] = first element of row k).
fn offset_ranges(offsets: &[&[i64]], segs: &[Seg]) -> Vec<(usize, usize, usize)> {
    segs.iter().map(|&(p, a, n)| {
        let o = offsets[p as usize];
        (p as usize, o[a as usize] as usize, o[(a + n) as usize] as usize)
    }).collect()
}

/// Offsets of the gathered rows: each segment's offsets rebased onto the output.
fn gather_offsets(offsets: &[&[i64]], segs: &[Seg], rows: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(rows + 1);
    out.push(0i64);
    for &(p, a, n) in segs {
        let o = &offsets[p as usize][a as usize..=(a + n) as usize];
        let delta = *out.last().unwrap() - o[0];
        out.extend(o[1..].iter().map(|&x| x + delta));
    }
    out
}

/// Merge one field's per-run builders along `segs` (consumes them; `rows` = rows of the merged table).
pub fn gather_builder(parts: Vec<Builder>, segs: &[Seg], rows: usize) -> Builder {
    let spec = parts[0].spec.clone();
    let cols: Vec<Col> = parts.into_iter().map(|b| b.col).collect();
    let col = match &cols[0] {
        Col::Num(_) => {
            let ranges: Vec<_> = segs.iter().map(|&(p, a, n)| (p as usize, a as usize, (a + n) as usize)).collect();
            Col::Num(gather_num(cols.into_iter().map(|c| match c { Col::Num(n) => n, _ => unreachable!() }).collect(),
                                &ranges))
        }
        Col::List { count, .. } => {
            let count = *count;
            let ranges: Vec<_> = segs.iter()
                .map(|&(p, a, n)| (p as usize, a as usize * count, (a + n) as usize * count)).collect();
            let flat = gather_num(cols.into_iter().map(|c| match c { Col::List { flat, .. } => flat, _ => unreachable!() })
                                  .collect(), &ranges);
            Col::List { count, flat }
        }
        Col::VarList { .. } => {
            let (offs, flats): (Vec<Vec<i64>>, Vec<Num>) = cols.into_iter().map(|c| match c {
                Col::VarList { offsets, flat } => (offsets, flat),
                _ => unreachable!(),
            }).unzip();
            let o: Vec<&[i64]> = offs.iter().map(|v| v.as_slice()).collect();
            let ranges = offset_ranges(&o, segs);
            let offsets = gather_offsets(&o, segs, rows);
            Col::VarList { offsets, flat: gather_num(flats, &ranges) }
        }
        Col::Var { text, .. } => {
            let text = *text;
            let (offs, bytes): (Vec<Vec<i64>>, Vec<Vec<u8>>) = cols.into_iter().map(|c| match c {
                Col::Var { offsets, bytes, .. } => (offsets, bytes),
                _ => unreachable!(),
            }).unzip();
            let o: Vec<&[i64]> = offs.iter().map(|v| v.as_slice()).collect();
            let b: Vec<&[u8]> = bytes.iter().map(|v| v.as_slice()).collect();
            let ranges = offset_ranges(&o, segs);
            let total = ranges.iter().map(|r| r.2 - r.1).sum();
            Col::Var { text, offsets: gather_offsets(&o, segs, rows), bytes: gather_slices(&b, ranges.into_iter(), total) }
        }
        Col::Cat { .. } => gather_cat(cols, segs, rows),
    };
    Builder { spec, col }
}

/// Categorical columns: codes remapped onto one dictionary whose entries appear in order of first use
/// in the merged table (equal texts from different runs share one code).
fn gather_cat(cols: Vec<Col>, segs: &[Seg], rows: usize) -> Col {
    let parts: Vec<(&[u32], &[i64], &[u8])> = cols.iter().map(|c| match c {
        Col::Cat { codes, offsets, bytes, .. } => (codes.as_slice(), offsets.as_slice(), bytes.as_slice()),
        _ => unreachable!(),
    }).collect();
    let mut remap: Vec<Vec<u32>> = parts.iter().map(|p| vec![u32::MAX; p.1.len() - 1]).collect();
    let mut seen: HashMap<&[u8], u32, BuildHasherDefault<FxHasher>> = HashMap::default();
    let (mut codes, mut offsets, mut bytes) = (Vec::with_capacity(rows), vec![0i64], Vec::new());
    for &(p, a, n) in segs {
        let (src, off, txt) = parts[p as usize];
        let map = &mut remap[p as usize];
        for &c in &src[a as usize..(a + n) as usize] {
            let mut g = map[c as usize];
            if g == u32::MAX {
                let s = &txt[off[c as usize] as usize..off[c as usize + 1] as usize];
                g = *seen.entry(s).or_insert_with(|| {
                    bytes.extend_from_slice(s);
                    offsets.push(bytes.len() as i64);
                    (offsets.len() - 2) as u32
                });
                map[c as usize] = g;
            }
            codes.push(g);
        }
    }
    Col::Cat { codes, map: Default::default(), small: Default::default(), offsets, bytes }
}
