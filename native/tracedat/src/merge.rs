//! Tables from pieces: every event type's per-piece columns merged in timestamp order.
//!
//! The order is a stable sort by timestamp of all records in data order (buffers, their CPUs in file
//! order, pages): each piece is a sorted run (a piece whose timestamps go backwards is first sorted
//! stably on its own) and the runs are merged, ties going to the run that comes first in data order.
//! Consecutive pieces of one CPU that continue in time form one run. The merge is computed on the
//! timestamps as segments (piece, first row, rows); every column then follows the segments, one column
//! at a time, its pieces' arrays freed as soon as it is built.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::columns::{Builder, Data, Dict, Ints, Var};
use crate::decode::{Piece, PieceOut, TypeCols};
use crate::events::EventType;

/// (part, first row, rows) of a merged table, in output order.
type Seg = (u32, u32, u32);

/// One event type's columns in each piece: (piece index, columns), in data order.
type Parts = Vec<(usize, TypeCols)>;

/// One event type's merged table.
pub struct Table {
    pub ty: Arc<EventType>,
    pub ts: Vec<i64>,
    /// ring-buffer CPU of every row
    pub cpu: Vec<i32>,
    /// buffer (index into the layout's buffers) of every row; empty when the file has one buffer
    pub buffer: Vec<u16>,
    pub cols: Vec<Builder>,
}

/// Rows of `parts` (each sorted by ts, in data order) merged by (ts, part order); `same_run[k]`: part k
/// continues part k - 1 (same CPU, no earlier timestamp).
fn merge_segments(ts: &[&[i64]], same_run: &[bool]) -> Vec<Seg> {
    // runs: consecutive parts; a cursor (part, row) per run
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (first part, end part)
    for (k, &same) in same_run.iter().enumerate().take(ts.len()) {
        match runs.last_mut() {
            Some(r) if same => r.1 = k + 1,
            _ => runs.push((k, k + 1)),
        }
    }
    let mut cur: Vec<(usize, usize)> = runs.iter().map(|r| (r.0, 0)).collect();
    let head = |c: (usize, usize), end: usize| -> Option<(usize, usize)> {
        let (mut p, mut i) = c;
        while p < end && i >= ts[p].len() {
            p += 1;
            i = 0;
        }
        (p < end).then_some((p, i))
    };
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (r, run) in runs.iter().enumerate() {
        if let Some(c) = head(cur[r], run.1) {
            cur[r] = c;
            heap.push(Reverse((ts[c.0][c.1], r)));
        }
    }
    let mut segs: Vec<Seg> = Vec::new();
    while let Some(Reverse((_, r))) = heap.pop() {
        let end = runs[r].1;
        let limit = heap.peek().map(|Reverse(x)| *x);
        let (mut p, mut i) = cur[r];
        loop {
            let part = ts[p];
            let start = i;
            i = match limit {
                None => part.len(),
                // rows of run r precede the next head (t, q) while (ts, r) < (t, q)
                Some((t, q)) if r < q => run_end(part, start, |x| x <= t),
                Some((t, _)) => run_end(part, start, |x| x < t),
            };
            if i > start {
                segs.push((p as u32, start as u32, (i - start) as u32));
            }
            if i < part.len() {
                break;
            }
            match head((p + 1, 0), end) {
                Some((np, ni)) if limit.is_none_or(|(t, q)| (ts[np][ni], r) < (t, q)) => (p, i) = (np, ni),
                Some(c) => {
                    (p, i) = c;
                    break;
                }
                None => {
                    (p, i) = (end, 0);
                    break;
                }
            }
        }
        if p < end {
            cur[r] = (p, i);
            heap.push(Reverse((ts[p][i], r)));
        }
    }
    segs
}

/// A vector for `n` elements that are all written next: from 64 KiB its pages are mapped in by one call
/// (one page fault per 4 KiB otherwise: 71,000 -> 52,500 faults for a fresh decode of the 3.5 M-event
/// bench trace), from 4 MiB it asks for transparent huge pages (THP in `madvise` mode).
fn output<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    let bytes = n * std::mem::size_of::<T>();
    #[cfg(target_os = "linux")]
    if bytes >= 4 << 20 {
        let (start, end) = (v.as_ptr() as usize, v.as_ptr() as usize + bytes);
        let (lo, hi) = (start.div_ceil(2 << 20) * (2 << 20), end / (2 << 20) * (2 << 20));
        if hi > lo {
            // SAFETY: [lo, hi) lies inside the vector's allocation (its unused capacity); the call only sets
            // a paging hint on it.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(target_os = "linux")]
    if bytes >= 64 << 10 {
        // every byte is written next: map the pages in with one call rather than a fault per page
        let (start, end) = (v.as_ptr() as usize, v.as_ptr() as usize + bytes);
        let (lo, hi) = (start.div_ceil(4096) * 4096, end / 4096 * 4096);
        if hi > lo {
            // SAFETY: as above; MADV_POPULATE_WRITE (Linux 5.14+, ignored before) maps zero pages in
            // without changing contents.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_POPULATE_WRITE) };
        }
    }
    v
}

fn gather<T: Copy>(parts: &[&[T]], segs: &[Seg], scale: usize, rows: usize) -> Vec<T> {
    let mut out = output(rows * scale);
    for &(p, a, n) in segs {
        let (a, n) = (a as usize * scale, n as usize * scale);
        let src = &parts[p as usize][a..a + n];
        if n <= 4 {
            // runs interleave every few rows: element moves beat a memmove call
            for &x in src {
                out.push(x);
            }
        } else {
            out.extend_from_slice(src);
        }
    }
    out
}

/// First position at or after `start` whose value does not satisfy `below` (values sorted): a short
/// linear scan (runs of interleaved CPUs are short), then galloping.
#[inline]
fn run_end(part: &[i64], start: usize, below: impl Fn(i64) -> bool) -> usize {
    let mut i = start;
    while i < part.len() && i < start + 8 {
        if !below(part[i]) {
            return i;
        }
        i += 1;
    }
    let mut step = 8;
    let mut hi = i;
    while hi < part.len() && below(part[hi]) {
        i = hi + 1;
        hi = (hi + step).min(part.len());
        step *= 2;
    }
    i + part[i..hi.min(part.len())].partition_point(|&x| below(x))
}

/// Ints of the same variant (every part of a column has the builder's variant).
fn gather_ints(parts: Vec<Ints>, segs: &[Seg], scale: usize, rows: usize) -> Ints {
    macro_rules! go {
        ($var:ident) => {{
            let v: Vec<_> = parts
                .iter()
                .map(|p| match p {
                    Ints::$var(v) => v.as_slice(),
                    _ => &[],
                })
                .collect();
            Ints::$var(gather(&v, segs, scale, rows))
        }};
    }
    match parts.first().unwrap_or(&Ints::U8(Vec::new())) {
        Ints::U8(_) => go!(U8),
        Ints::I8(_) => go!(I8),
        Ints::U16(_) => go!(U16),
        Ints::I16(_) => go!(I16),
        Ints::U32(_) => go!(U32),
        Ints::I32(_) => go!(I32),
        Ints::U64(_) => go!(U64),
        Ints::I64(_) => go!(I64),
    }
}

/// Variable-length values (offsets + values) following the segments: (offsets, element ranges).
fn gather_offsets(parts: &[&[i64]], segs: &[Seg], rows: usize) -> (Vec<i64>, Vec<Seg>) {
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0i64);
    let mut ranges = Vec::with_capacity(segs.len());
    for &(p, a, n) in segs {
        let o = parts[p as usize];
        let (lo, hi) = (o[a as usize], o[(a + n) as usize]);
        let base = *offsets.last().unwrap_or(&0) - lo;
        offsets.extend(o[a as usize + 1..=(a + n) as usize].iter().map(|x| x + base));
        ranges.push((p, lo as u32, (hi - lo) as u32));
    }
    (offsets, ranges)
}

fn gather_bytes(parts: &[&[u8]], ranges: &[Seg], total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total);
    for &(p, a, n) in ranges {
        out.extend_from_slice(&parts[p as usize][a as usize..(a + n) as usize]);
    }
    out
}

/// One column of every part, following the segments (the parts' data is consumed).
fn gather_data(parts: Vec<Data>, segs: &[Seg], rows: usize) -> Data {
    let Some(first) = parts.first() else { return Data::default() };
    match first {
        Data::Int(_) => Data::Int(gather_ints(parts.into_iter().map(Data::into_ints).collect(), segs, 1, rows)),
        Data::List { count, .. } => {
            let count = *count;
            Data::List { count, flat: gather_ints(parts.into_iter().map(Data::into_ints).collect(), segs, count, rows) }
        }
        Data::Var(v) => {
            let utf8 = v.utf8;
            let vars: Vec<Var> = parts
                .into_iter()
                .map(|d| match d {
                    Data::Var(v) => v,
                    _ => Var::new(utf8),
                })
                .collect();
            let offs: Vec<&[i64]> = vars.iter().map(|v| v.offsets.as_slice()).collect();
            let (offsets, ranges) = gather_offsets(&offs, segs, rows);
            let bytes: Vec<&[u8]> = vars.iter().map(|v| v.bytes.as_slice()).collect();
            let total = *offsets.last().unwrap_or(&0) as usize;
            Data::Var(Var { bytes: gather_bytes(&bytes, &ranges, total), offsets, utf8 })
        }
        Data::VarList { .. } => {
            let (offs, flats): (Vec<Vec<i64>>, Vec<Ints>) = parts
                .into_iter()
                .map(|d| match d {
                    Data::VarList { offsets, flat } => (offsets, flat),
                    _ => (vec![0], Ints::U8(Vec::new())),
                })
                .unzip();
            let o: Vec<&[i64]> = offs.iter().map(|v| v.as_slice()).collect();
            let (offsets, ranges) = gather_offsets(&o, segs, rows);
            let total = *offsets.last().unwrap_or(&0) as usize;
            // element ranges as segments of scale 1
            Data::VarList { offsets, flat: gather_ints(flats, &ranges, 1, total) }
        }
        Data::Cat { .. } => {
            // one dictionary: the parts' entries in part order, each part's codes translated
            let mut dict = Dict::new();
            let mut codes: Vec<Vec<u32>> = Vec::with_capacity(parts.len());
            for d in parts {
                let Data::Cat { codes: c, dict: pd } = d else { continue };
                let remap: Vec<u32> = (0..pd.values.len()).map(|k| dict.code(pd.values.get(k))).collect();
                codes.push(c.into_iter().map(|x| remap[x as usize]).collect());
            }
            let c: Vec<&[u32]> = codes.iter().map(|v| v.as_slice()).collect();
            Data::Cat { codes: gather(&c, segs, 1, rows), dict }
        }
    }
}

/// Sort one part stably by ts (a piece whose timestamps go backwards).
fn sort_part(t: &mut TypeCols) {
    let n = t.ts.len();
    let mut perm: Vec<u32> = (0..n as u32).collect();
    perm.sort_by_key(|&i| t.ts[i as usize]);
    let segs: Vec<Seg> = perm.iter().map(|&i| (0, i, 1)).collect();
    t.ts = gather(&[&t.ts], &segs, 1, n);
    for c in t.cols.iter_mut() {
        let d = std::mem::take(&mut c.data);
        c.data = gather_data(vec![d], &segs, n);
    }
}

/// Merge one event type's parts ((piece index, columns) in data order).
fn merge_table(pieces: &[Piece], mut parts: Parts, nbuffers: usize) -> Table {
    for (_, t) in parts.iter_mut() {
        if !t.ts.is_sorted() {
            sort_part(t);
        }
    }
    let ty = parts[0].1.ty.clone();
    let rows: usize = parts.iter().map(|p| p.1.ts.len()).sum();
    let same_run: Vec<bool> = (0..parts.len())
        .map(|k| {
            k > 0 && {
                let (a, b) = (&pieces[parts[k - 1].0], &pieces[parts[k].0]);
                a.buffer == b.buffer && a.cpu == b.cpu && parts[k - 1].1.ts.last() <= parts[k].1.ts.first()
            }
        })
        .collect();
    let part_ts: Vec<&[i64]> = parts.iter().map(|p| p.1.ts.as_slice()).collect();
    let segs = merge_segments(&part_ts, &same_run);
    let ts = gather(&part_ts, &segs, 1, rows);
    for (_, t) in parts.iter_mut() {
        t.ts = Vec::new();
    }
    if rows >= TRIM_ROWS {
        release_freed_memory();
    }
    let ncols = parts[0].1.cols.len();
    let mut cols = Vec::with_capacity(ncols);
    for j in 0..ncols {
        let spec = parts[0].1.cols[j].spec.clone();
        let datas: Vec<Data> = parts.iter_mut().map(|(_, t)| std::mem::take(&mut t.cols[j].data)).collect();
        cols.push(Builder { spec, data: gather_data(datas, &segs, rows) });
        if rows >= TRIM_ROWS {
            release_freed_memory();
        }
    }
    // the ring-buffer CPU (and buffer) of every row, last: the columns' transient memory is gone by now
    let mut cpu: Vec<i32> = Vec::with_capacity(rows);
    let mut buffer: Vec<u16> = Vec::with_capacity(if nbuffers > 1 { rows } else { 0 });
    for &(p, _, n) in &segs {
        let piece = &pieces[parts[p as usize].0];
        cpu.resize(cpu.len() + n as usize, piece.cpu as i32);
        if nbuffers > 1 {
            buffer.resize(buffer.len() + n as usize, piece.buffer as u16);
        }
    }
    Table { ty, ts, cpu, buffer, cols }
}

/// Tables from this many rows up give their pieces' freed memory back to the kernel column by column.
const TRIM_ROWS: usize = 1 << 16;

/// Give the memory the allocator holds free back to the kernel. glibc keeps freed blocks in its heaps
/// (growing columns are reallocated there, and its mmap threshold rises as large blocks are freed):
/// without this the merged columns and the pieces' freed ones would both count in the peak RSS (on the
/// bench trace 197-202 MB against 136 MB for the decode alone, ~79 MB of it the tables; no time
/// measurably lost). No allocator setting is changed.
pub fn release_freed_memory() {
    if KEEP_FREED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the kernel; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

static KEEP_FREED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on this process keeps the memory it frees for reuse: `release_freed_memory` does nothing, and
/// glibc's mmap threshold is fixed at its maximum (32 MiB) with no automatic trim, so that blocks up to that
/// size come back from the heap instead of fresh zeroed pages. For a worker that analyses trace after trace
/// (a comparison's): each one's memory is reused by the next instead of being faulted in again (on the
/// bench store, a few hundred thousand page faults per iteration); its RSS stays near its largest iteration's.
pub fn keep_freed_memory() {
    KEEP_FREED.store(true, std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is thread-safe.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// Every event type's table from the decoded pieces (in data order), merged on up to `threads` threads,
/// the largest tables first; tables in order of event id.
pub fn merge(pieces: &[Piece], outs: Vec<PieceOut>, nbuffers: usize, threads: usize) -> Vec<Table> {
    let mut by_type: HashMap<u16, Parts> = HashMap::new();
    for (k, out) in outs.into_iter().enumerate() {
        for t in out.types {
            by_type.entry(t.ty.id).or_default().push((k, t));
        }
    }
    let mut jobs: Vec<(u16, Parts)> = by_type.into_iter().collect();
    jobs.sort_by_key(|(id, parts)| (Reverse(parts.iter().map(|p| p.1.ts.len()).sum::<usize>()), *id));
    let jobs: Vec<Mutex<Option<Parts>>> = jobs.into_iter().map(|j| Mutex::new(Some(j.1))).collect();
    let done: Vec<Mutex<Option<Table>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            sc.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(k) else { break };
                let parts = job.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
                if !parts.is_empty() {
                    let t = merge_table(pieces, parts, nbuffers);
                    *done[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
                }
            });
        }
    });
    let mut tables: Vec<Table> =
        done.into_iter().filter_map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner())).collect();
    tables.sort_by_key(|t| t.ty.id);
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: stable sort of all rows (ts, part) in part order.
    fn reference(ts: &[Vec<i64>]) -> Vec<(u32, u32)> {
        let mut all: Vec<(i64, u32, u32)> = Vec::new();
        for (p, v) in ts.iter().enumerate() {
            for (i, &t) in v.iter().enumerate() {
                all.push((t, p as u32, i as u32));
            }
        }
        all.sort_by_key(|x| x.0);
        all.into_iter().map(|x| (x.1, x.2)).collect()
    }

    fn expand(segs: &[Seg]) -> Vec<(u32, u32)> {
        segs.iter().flat_map(|&(p, a, n)| (a..a + n).map(move |i| (p, i))).collect()
    }

    #[test]
    fn segments_equal_a_stable_sort() {
        let cases: Vec<(Vec<Vec<i64>>, Vec<bool>)> = vec![
            (vec![vec![1, 3, 5], vec![2, 3, 4]], vec![false, false]),
            (vec![vec![1, 2], vec![2, 9], vec![0, 2, 2]], vec![false, true, false]),
            (vec![vec![], vec![5], vec![], vec![5, 5]], vec![false, true, true, false]),
            (vec![vec![3, 3], vec![3], vec![1]], vec![false, false, false]),
        ];
        for (ts, same) in cases {
            let refs: Vec<&[i64]> = ts.iter().map(|v| v.as_slice()).collect();
            assert_eq!(expand(&merge_segments(&refs, &same)), reference(&ts), "{ts:?}");
        }
    }

    #[test]
    fn pseudo_random_runs() {
        let mut x = 12345u64;
        let mut rnd = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..200 {
            let n = 1 + rnd(5) as usize;
            let mut ts = Vec::new();
            for _ in 0..n {
                let mut v: Vec<i64> = (0..rnd(8)).map(|_| rnd(10) as i64).collect();
                v.sort();
                ts.push(v);
            }
            // consecutive parts may be one run only when they continue in time
            let same: Vec<bool> = (0..n).map(|k| k > 0 && ts[k - 1].last() <= ts[k].first() && rnd(2) == 0).collect();
            let refs: Vec<&[i64]> = ts.iter().map(|v| v.as_slice()).collect();
            assert_eq!(expand(&merge_segments(&refs, &same)), reference(&ts), "{ts:?} {same:?}");
        }
    }

    #[test]
    fn run_end_scans_then_gallops() {
        let v: Vec<i64> = (0..100).map(|x| x / 3).collect();
        for start in [0, 5, 50, 99] {
            for t in [0, 1, 7, 20, 40, 99] {
                let want = start + v[start..].partition_point(|&x| x <= t);
                assert_eq!(run_end(&v, start, |x| x <= t), want, "{start} {t}");
            }
        }
    }

    #[test]
    fn columns_follow_segments() {
        let segs = [(1, 0, 1), (0, 0, 2), (1, 1, 1)];
        let a = Data::Var({
            let mut v = Var::new(true);
            v.push(b"a");
            v.push(b"bb");
            v
        });
        let b = Data::Var({
            let mut v = Var::new(true);
            v.push(b"c");
            v.push(b"");
            v
        });
        let Data::Var(v) = gather_data(vec![a, b], &segs, 4) else { panic!() };
        assert_eq!(
            (0..4).map(|i| v.get(i).to_vec()).collect::<Vec<_>>(),
            vec![b"c".to_vec(), b"a".to_vec(), b"bb".to_vec(), vec![]]
        );
        let mut d1 = Dict::new();
        let c1 = vec![d1.code(b"x"), d1.code(b"y")];
        let mut d2 = Dict::new();
        let c2 = vec![d2.code(b"y"), d2.code(b"z")];
        let Data::Cat { codes, dict } =
            gather_data(vec![Data::Cat { codes: c1, dict: d1 }, Data::Cat { codes: c2, dict: d2 }], &segs, 4)
        else {
            panic!()
        };
        let texts: Vec<&[u8]> = codes.iter().map(|&c| dict.values.get(c as usize)).collect();
        assert_eq!(texts, vec![&b"y"[..], b"x", b"y", b"z"]);
        let l = gather_data(
            vec![
                Data::List { count: 2, flat: Ints::U16(vec![1, 2, 3, 4]) },
                Data::List { count: 2, flat: Ints::U16(vec![5, 6, 7, 8]) },
            ],
            &segs,
            4,
        );
        assert!(matches!(l, Data::List { flat: Ints::U16(v), .. } if v == vec![5, 6, 1, 2, 3, 4, 7, 8]));
    }
}
