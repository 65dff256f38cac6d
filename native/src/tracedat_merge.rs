//! Merging one event type's per-CPU columns into one table in timestamp order.
//!
//! The streaming decode (tracedat_fused) fills, per CPU, one set of column builders per event type, in
//! that CPU's ring-buffer order. A table is the k-way merge of those runs by timestamp, ties going to the
//! run listed first (the CPU whose data comes first in the file), which is exactly the global order of
//! the record-index path (tracedat_pages::time_order) restricted to the type, as long as every CPU's
//! timestamps never go backwards (the caller checks that and otherwise uses the record-index path).
//!
//! A table's timestamps are merged first (two runs: branch-free, from the back, recording the run of
//! every merged row); the resulting Plan then moves every other column the same way, each column a
//! separate piece of work: row by row along the per-row run selector (branch-free) when the runs
//! interleave every few rows, or by segments (run, first row, rows) with slice copies when the runs
//! come in long stretches. Either way the merge happens in place in the largest run's arrays (grown to
//! the table's size and filled from the back), so that only the other runs' rows are written to new
//! memory, and that new memory is mapped in with one call (MADV_POPULATE_WRITE) rather than a page fault
//! per 4 KiB. Text dictionaries (Categorical columns) are rebuilt in order of first appearance in the
//! merged table, as a single time-ordered pass would have built them.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

use super::tracedat_columns::{Builder, Col, FxHasher, Num};

/// Map in the spare capacity of a vector that is about to be filled (MADV_POPULATE_WRITE, Linux 5.14+):
/// one call instead of a page fault per 4 KiB page; huge pages where the range allows (THP `madvise`).
/// Only the whole pages inside the spare capacity are touched; a kernel without the call ignores it.
#[cfg(target_os = "linux")]
pub fn prefault<T>(v: &Vec<T>) {
    prefault_upto(v, usize::MAX)
}

/// prefault, limited to the first `max_bytes` of the spare capacity.
#[cfg(target_os = "linux")]
pub fn prefault_upto<T>(v: &Vec<T>, max_bytes: usize) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    const MADV_POPULATE_WRITE: i32 = 23;
    const PAGE: usize = 4096;
    const HUGE: usize = 2 << 20;
    let start = v.as_ptr() as usize + v.len() * std::mem::size_of::<T>();
    let end = v.as_ptr() as usize + v.capacity() * std::mem::size_of::<T>();
    let end = end.min(start.saturating_add(max_bytes));
    if end - start < 16 * PAGE {
        return;
    }
    let (hlo, hhi) = (start.div_ceil(HUGE) * HUGE, end / HUGE * HUGE);
    let (lo, hi) = (start.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
    // SAFETY: both ranges lie inside the vector's allocation, in its unused capacity; the calls only set a
    // paging hint and map zero pages where nothing was mapped (no content changes).
    unsafe {
        if hhi > hlo {
            madvise(hlo as *mut std::ffi::c_void, hhi - hlo, MADV_HUGEPAGE);
        }
        madvise(lo as *mut std::ffi::c_void, hi - lo, MADV_POPULATE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn prefault<T>(_v: &Vec<T>) {}

#[cfg(not(target_os = "linux"))]
pub fn prefault_upto<T>(_v: &Vec<T>, _max_bytes: usize) {}

/// Most of a growing column's new capacity mapped in ahead (see `grow`).
const PREFAULT_AHEAD: usize = 2 << 20;

thread_local! {
    /// Expected share of this thread's columns still to come, as (data to decode) / (data decoded) of
    /// the piece being decoded, x 1024 (0: unknown); set by the decode loop before each chunk.
    static GROWTH_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Tell `grow` how much of the piece decoded on this thread is still ahead: `left` of `done` bytes of
/// (inflated) ring-buffer data decoded so far (done 0: unknown, `grow` maps PREFAULT_AHEAD ahead).
pub fn set_growth_hint(done: usize, left: usize) {
    let x = if done == 0 { 0 } else { ((left as u128 * 1024) / done as u128).min(u64::MAX as u128) as u64 };
    GROWTH_LEFT.with(|c| c.set(x));
}

/// Bytes of a column holding `len_bytes` to map in ahead when it grows: PREFAULT_AHEAD, or less when
/// the decode's progress says the column will not fill that much (expected rest + 1/16 + 64 KiB), so
/// that the capacity doubling leaves no mapped-in pages behind that nothing writes (on the benchmark
/// trace ~60 MB of them, each page costing about as much as a fault to map in).
fn prefault_ahead(len_bytes: usize) -> usize {
    let left = GROWTH_LEFT.with(|c| c.get());
    if left == 0 {
        return PREFAULT_AHEAD;
    }
    let rest = (len_bytes as u128 * left as u128 / 1024) as usize;
    (rest + rest / 16 + (64 << 10)).min(PREFAULT_AHEAD)
}

/// Make room for `extra` more elements (capacity at least doubled, as Vec does), mapping in up to
/// PREFAULT_AHEAD bytes of the new capacity at once (less near the end of the decode: `prefault_ahead`)
/// instead of one page fault per 4 KiB as it fills.
#[inline(never)]
pub fn grow<T>(v: &mut Vec<T>, extra: usize) {
    v.reserve(extra.max(v.capacity()).max(256));
    prefault_upto(v, prefault_ahead(v.len() * std::mem::size_of::<T>()));
}

/// Push with `grow` when full.
#[inline(always)]
pub fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        grow(v, 1);
    }
    v.push(x);
}

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
    prefault(&out);
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

/// One arm of merge_runs!: the runs' vectors of variant `$var` bound to `$v`, `$merged` rewrapped.
macro_rules! num_arm {
    ($parts:ident, $var:ident, $v:ident, $merged:expr) => {{
        let $v: Vec<Vec<_>> = $parts.into_iter().map(|p| match p {
            Num::$var(x) => x,
            _ => unreachable!("runs of one field share its type"),
        }).collect();
        Num::$var($merged)
    }};
}

/// Merge same-variant numeric runs `$parts` (Vec<Num>, one field spec): `$merged` computes the merged
/// vector from `$v: Vec<Vec<T>>` for whichever element type T the field has.
macro_rules! merge_runs {
    ($parts:ident, $v:ident => $merged:expr) => {
        match $parts[0] {
            Num::U8(_) => num_arm!($parts, U8, $v, $merged),
            Num::I8(_) => num_arm!($parts, I8, $v, $merged),
            Num::U16(_) => num_arm!($parts, U16, $v, $merged),
            Num::I16(_) => num_arm!($parts, I16, $v, $merged),
            Num::U32(_) => num_arm!($parts, U32, $v, $merged),
            Num::I32(_) => num_arm!($parts, I32, $v, $merged),
            Num::U64(_) => num_arm!($parts, U64, $v, $merged),
            Num::I64(_) => num_arm!($parts, I64, $v, $merged),
        }
    };
}

/// Element range of segment `s` when every row holds `count` elements.
#[inline(always)]
fn scaled(s: &Seg, count: usize) -> (usize, usize, usize) {
    (s.0 as usize, s.1 as usize * count, (s.1 + s.2) as usize * count)
}

/// Merge a numeric column along merge_vec's ranges (all runs have the same variant: one field spec).
fn merge_num<R: Fn(usize) -> (usize, usize, usize)>(parts: Vec<Num>, base: usize, nseg: usize, range: R) -> Num {
    merge_runs!(parts, v => merge_vec(v, base, nseg, &range))
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

/// How the runs of one table interleave: the run of every merged row (`sel`, when the runs interleave
/// every few rows: each column is then gathered row by row, branch-free) or the segments (runs of rows
/// from one run: each column is then moved with slice copies). Both describe the same order.
pub struct Plan {
    /// rows of the merged table
    pub rows: usize,
    /// the run whose arrays are grown into the merged ones (the largest)
    pub base: usize,
    /// rows of each run (as many entries as runs); `sel` holds exactly lens[p] entries p
    pub lens: Vec<usize>,
    /// run of each merged row (empty when `segs` alone is used)
    pub sel: Vec<u8>,
    /// segments (empty when the gather goes by `sel`; built from `sel` for variable-length columns)
    pub segs: Vec<Seg>,
}

/// Average segment length (rows) from which columns are merged by slice copies rather than row by row.
const SEG_MIN_AVG: usize = 16;

/// Merge style: chosen per table from its average segment length, or forced for tests through the
/// environment variable ABTEST_FUSED_MERGE=rows|segments (read per table: a few per trace).
fn forced_mode() -> Option<bool> {
    match std::env::var("ABTEST_FUSED_MERGE").as_deref() {
        Ok("segments") => Some(true),
        Ok("rows") => Some(false),
        _ => None,
    }
}

/// Whether a table of `rows` rows in `nsegs` segments over `runs` runs is merged by segments.
fn by_segments(rows: usize, nsegs: usize, runs: usize) -> bool {
    runs > 256 || forced_mode().unwrap_or(nsegs * SEG_MIN_AVG <= rows)
}

impl Plan {
    /// Segments of the merge (computed from `sel` when the plan gathers row by row).
    pub fn segments(&self) -> std::borrow::Cow<'_, [Seg]> {
        if !self.segs.is_empty() || self.sel.is_empty() {
            return std::borrow::Cow::Borrowed(&self.segs);
        }
        let mut pos = vec![0u32; self.lens.len()];
        let mut segs = Vec::new();
        let mut i = 0;
        while i < self.sel.len() {
            let s = self.sel[i];
            let mut j = i + 1;
            while j < self.sel.len() && self.sel[j] == s {
                j += 1;
            }
            let n = (j - i) as u32;
            segs.push((s as u32, pos[s as usize], n));
            pos[s as usize] += n;
            i = j;
        }
        std::borrow::Cow::Owned(segs)
    }
}

/// Merge the sorted timestamp runs `ts` (ties: lower run first) into one vector (in place in the largest
/// run) and return it with the plan that moves every other column the same way. Needs >= 2 runs.
pub fn plan_merge(mut ts: Vec<Vec<i64>>) -> (Vec<i64>, Plan) {
    let lens: Vec<usize> = ts.iter().map(|v| v.len()).collect();
    let rows: usize = lens.iter().sum();
    let base = (0..ts.len()).max_by_key(|&p| (lens[p], std::cmp::Reverse(p))).unwrap_or(0);
    if ts.len() == 2 {
        let (merged, sel, nsegs) = merge2(&mut ts, base);
        let mut plan = Plan { rows, base, lens: lens.clone(), sel, segs: Vec::new() };
        if by_segments(rows, nsegs, 2) {
            plan.segs = plan.segments().into_owned();
            plan.sel = Vec::new();
        }
        return (merged, plan);
    }
    let segs = {
        let runs: Vec<&[i64]> = ts.iter().map(|v| v.as_slice()).collect();
        merge_segments(&runs)
    };
    let merged = merge_vec(ts, base, segs.len(), |k| scaled(&segs[k], 1));
    let mut plan = Plan { rows, base, lens: lens.clone(), sel: Vec::new(), segs };
    if !by_segments(rows, plan.segs.len(), lens.len()) {
        let mut sel = Vec::with_capacity(rows);
        for &(p, _, n) in &plan.segs {
            sel.resize(sel.len() + n as usize, p as u8);
        }
        plan.sel = sel;
        plan.segs = Vec::new();
    }
    (merged, plan)
}

/// Two-run merge from the back, in place in run `base`: returns the merged timestamps, the run of every
/// row and the number of segments. Ties: run 0 first (so, from the back, run 1 is taken first).
fn merge2(ts: &mut [Vec<i64>], base: usize) -> (Vec<i64>, Vec<u8>, usize) {
    let (la, lb) = (ts[0].len(), ts[1].len());
    let rows = la + lb;
    let other = std::mem::take(&mut ts[1 - base]);
    let mut out = std::mem::take(&mut ts[base]);
    out.reserve_exact(rows - out.len());
    prefault(&out);
    let mut sel: Vec<u8> = Vec::with_capacity(rows);
    prefault(&sel);
    let o = out.as_mut_ptr();
    let (a, b): (*const i64, *const i64) = if base == 0 { (o, other.as_ptr()) } else { (other.as_ptr(), o) };
    let sp = sel.as_mut_ptr();
    let (mut ia, mut ib, mut w) = (la, lb, rows);
    let mut prev = 2u8;
    let mut nsegs = 0usize;
    // SAFETY: ia <= la, ib <= lb index the runs; w = ia + ib <= rows < capacity. The base run's element
    // read at ia - 1 or ib - 1 lies at or before w - 1 (the other run's remaining count is added), and is
    // read before out[w - 1] is written; elements after it were already read.
    unsafe {
        while ia > 0 && ib > 0 {
            let (x, y) = (*a.add(ia - 1), *b.add(ib - 1));
            let take_b = y >= x;
            w -= 1;
            *o.add(w) = if take_b { y } else { x };
            let s = take_b as u8;
            *sp.add(w) = s;
            nsegs += (s != prev) as usize;
            prev = s;
            ib -= take_b as usize;
            ia -= (!take_b) as usize;
        }
        // at most one run has rows left: one more segment
        nsegs += ((ia > 0 && prev != 0) || (ib > 0 && prev != 1)) as usize;
        while ia > 0 {
            ia -= 1;
            w -= 1;
            *o.add(w) = *a.add(ia);
            *sp.add(w) = 0;
        }
        while ib > 0 {
            ib -= 1;
            w -= 1;
            *o.add(w) = *b.add(ib);
            *sp.add(w) = 1;
        }
        out.set_len(rows);
        sel.set_len(rows);
    }
    (out, sel, nsegs)
}

/// Gather one element per row along `sel` (in place in parts[plan.base], filled from the back).
fn gather_sel<T: Copy>(parts: Vec<Vec<T>>, plan: &Plan) -> Vec<T> {
    gather_sel_with(parts, plan, |_, v| v)
}

/// gather_sel, each element passed through `f(run, element)` on its way.
#[inline(always)]
fn gather_sel_with<T: Copy, F: Fn(usize, T) -> T>(mut parts: Vec<Vec<T>>, plan: &Plan, f: F) -> Vec<T> {
    let (rows, base, sel) = (plan.rows, plan.base, &plan.sel[..]);
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    assert!(lens.iter().sum::<usize>() == rows && sel.len() == rows, "merge plan does not fit the runs");
    let mut out = std::mem::take(&mut parts[base]);
    out.reserve_exact(rows - out.len());
    prefault(&out);
    let o = out.as_mut_ptr();
    let ptrs: Vec<*const T> = (0..parts.len()).map(|p| if p == base { o as *const T } else { parts[p].as_ptr() })
        .collect();
    // SAFETY: every run p is read at positions below lens[p], each once, from the back: `sel` holds
    // exactly lens[p] entries p, as plan_merge built it from these runs' timestamps (the k > 2 path also
    // checks every step, the 2-run path the final counts); own elements of the base run are read at or
    // before the row being written, as in merge2.
    unsafe {
        if ptrs.len() == 2 {
            let (a, b) = (ptrs[0], ptrs[1]);
            // rows left of run 1; those of run 0 are then w - ib (both runs' rows left add up to w)
            let mut ib = lens[1];
            for w in (0..rows).rev() {
                let s = *sel.get_unchecked(w) as usize;
                ib -= s;
                let p = if s != 0 { b.add(ib) } else { a.add(w - ib) };
                *o.add(w) = f(s, *p);
            }
            assert!(ib == 0, "merge plan does not fit the runs");
        } else {
            let mut pos = lens.clone();
            for w in (0..rows).rev() {
                let s = *sel.get_unchecked(w) as usize;
                let q = pos.get_mut(s).expect("run index in the merge plan");
                *q = q.checked_sub(1).expect("merge plan does not fit the runs");
                *o.add(w) = f(s, *ptrs.get_unchecked(s).add(*q));
            }
        }
        out.set_len(rows);
    }
    out
}

/// Merge a numeric column along the plan's rows (one element per row).
fn merge_num_rows(parts: Vec<Num>, plan: &Plan) -> Num {
    if plan.sel.is_empty() {
        return merge_num(parts, plan.base, plan.segs.len(), |k| scaled(&plan.segs[k], 1));
    }
    merge_runs!(parts, v => gather_sel(v, plan))
}

/// The ring-buffer CPU of every merged row.
pub fn cpu_column(plan: &Plan, cpus: &[i32]) -> Vec<i32> {
    if !plan.sel.is_empty() {
        if cpus.len() == 2 {
            let mut cpu = Vec::with_capacity(plan.rows);
            prefault(&cpu);
            let (c0, c1) = (cpus[0], cpus[1]);
            cpu.extend(plan.sel.iter().map(|&s| if s != 0 { c1 } else { c0 }));
            return cpu;
        }
        return plan.sel.iter().map(|&s| cpus[s as usize]).collect();
    }
    let mut cpu = Vec::with_capacity(plan.rows);
    for &(p, _, n) in &plan.segs {
        cpu.resize(cpu.len() + n as usize, cpus[p as usize]);
    }
    cpu
}

/// Merge one field's per-run builders along the plan (consumes them).
pub fn gather_builder(parts: Vec<Builder>, plan: &Plan) -> Builder {
    let spec = parts[0].spec.clone();
    let cols: Vec<Col> = parts.into_iter().map(|b| b.col).collect();
    let (rows, base) = (plan.rows, plan.base);
    let col = match &cols[0] {
        Col::Num(_) => {
            let nums = cols.into_iter().map(|c| match c { Col::Num(n) => n, _ => unreachable!() }).collect();
            Col::Num(merge_num_rows(nums, plan))
        }
        Col::List { count, .. } => {
            let count = *count;
            let segs = plan.segments();
            let flats = cols.into_iter().map(|c| match c { Col::List { flat, .. } => flat, _ => unreachable!() }).collect();
            Col::List { count, flat: merge_num(flats, base, segs.len(), |k| scaled(&segs[k], count)) }
        }
        Col::VarList { .. } => {
            let segs = plan.segments();
            let (offs, flats): (Vec<Vec<i64>>, Vec<Num>) = cols.into_iter().map(|c| match c {
                Col::VarList { offsets, flat } => (offsets, flat),
                _ => unreachable!(),
            }).unzip();
            let (offsets, ranges) = merge_offsets(offs, base, &segs, rows);
            Col::VarList { offsets, flat: merge_num(flats, base, ranges.len(), |k| ranges[k]) }
        }
        Col::Var { text, .. } => {
            let text = *text;
            let segs = plan.segments();
            let (offs, bytes): (Vec<Vec<i64>>, Vec<Vec<u8>>) = cols.into_iter().map(|c| match c {
                Col::Var { offsets, bytes, .. } => (offsets, bytes),
                _ => unreachable!(),
            }).unzip();
            let (offsets, ranges) = merge_offsets(offs, base, &segs, rows);
            Col::Var { text, offsets, bytes: merge_vec(bytes, base, ranges.len(), |k| ranges[k]) }
        }
        Col::Cat { .. } => merge_cat(cols, plan),
    };
    Builder { spec, col }
}

/// Categorical columns: codes remapped onto one dictionary whose entries appear in order of first use
/// in the merged table (equal texts from different runs share one code), then merged in place.
fn merge_cat(cols: Vec<Col>, plan: &Plan) -> Col {
    let mut parts: Vec<(Vec<u32>, Vec<i64>, Vec<u8>)> = cols.into_iter().map(|c| match c {
        Col::Cat { codes, offsets, bytes, .. } => (codes, offsets, bytes),
        _ => unreachable!(),
    }).collect();
    let (remap, offsets, bytes) = cat_dictionary(&parts, plan);
    // codes of each run translated onto the merged dictionary while merged like any other u32 column
    let codes: Vec<Vec<u32>> = parts.iter_mut().map(|p| std::mem::take(&mut p.0)).collect();
    let codes = if plan.sel.is_empty() {
        let codes = codes.into_iter().zip(&remap).map(|(mut v, m)| {
            for c in v.iter_mut() {
                *c = m[*c as usize];
            }
            v
        }).collect();
        merge_vec(codes, plan.base, plan.segs.len(), |k| scaled(&plan.segs[k], 1))
    } else {
        let maps: Vec<&[u32]> = remap.iter().map(|m| m.as_slice()).collect();
        // SAFETY: every code of run s is below its dictionary's size, the length of remap[s].
        gather_sel_with(codes, plan, |s, c| unsafe { *maps.get_unchecked(s).get_unchecked(c as usize) })
    };
    Col::Cat { codes, map: Default::default(), small: Default::default(), cache: Box::default(), offsets, bytes }
}

/// The merged dictionary of a Categorical field's runs (`parts`: codes, dictionary offsets, dictionary
/// bytes of each run), its entries in order of first use in the merged table (equal texts from
/// different runs share one code): (each run's code -> merged code, offsets, bytes). A read-only pass
/// in merged order that stops once every code of every run is mapped.
pub fn cat_dictionary(parts: &[(Vec<u32>, Vec<i64>, Vec<u8>)], plan: &Plan) -> (Vec<Vec<u32>>, Vec<i64>, Vec<u8>) {
    let mut remap: Vec<Vec<u32>> = parts.iter().map(|p| vec![u32::MAX; p.1.len() - 1]).collect();
    let mut left: usize = remap.iter().map(|m| m.len()).sum();
    let (mut offsets, mut bytes) = (vec![0i64], Vec::new());
    let mut seen: HashMap<&[u8], u32, BuildHasherDefault<FxHasher>> = HashMap::default();
    let mut first_use = |p: usize, c: u32, remap: &mut Vec<Vec<u32>>| {
        let (_, off, txt) = &parts[p];
        let s = &txt[off[c as usize] as usize..off[c as usize + 1] as usize];
        remap[p][c as usize] = *seen.entry(s).or_insert_with(|| {
            bytes.extend_from_slice(s);
            offsets.push(bytes.len() as i64);
            (offsets.len() - 2) as u32
        });
    };
    if plan.sel.is_empty() {
        'segs: for &(p, a, n) in plan.segs.iter() {
            let p = p as usize;
            for i in a as usize..(a + n) as usize {
                let c = parts[p].0[i];
                if remap[p][c as usize] == u32::MAX {
                    first_use(p, c, &mut remap);
                    left -= 1;
                    if left == 0 {
                        break 'segs;
                    }
                }
            }
        }
    } else {
        let mut pos = vec![0usize; parts.len()];
        for &s in plan.sel.iter() {
            let p = s as usize;
            let c = parts[p].0[pos[p]];
            pos[p] += 1;
            if remap[p][c as usize] == u32::MAX {
                first_use(p, c, &mut remap);
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
    }
    (remap, offsets, bytes)
}
