//! trace-cmd trace.dat ring-buffer decoding: pages -> event records -> typed columns.
//!
//! Python (abtest/trace/tracedat.py) parses the file layout and event formats and passes, per CPU,
//! the raw ring-buffer pages plus the field layout of every event type. This module
//! 1. walks every page (header: u64 timestamp, `commit` of long size with the
//!    RB_MISSED_EVENTS (bit 31) / RB_MISSED_STORED (bit 30) flags; a stored missed count
//!    sits right after the committed data) and every event header (type_len 1..28: data of
//!    type_len*4 bytes, 0: u32 length word, 29: padding, 30: time extend, 31: absolute time),
//! 2. sorts all records by timestamp (stable, so events of one CPU keep their order),
//! 3. fills one typed column per field per event type, read straight from the record bytes.
//!
//! Columns come back as numpy arrays (integers), ("utf8"|"binary", offsets i64, bytes u8)
//! triples (strings/blobs, Arrow layout) or ("list", flat values, elements per row).
//! Submodules: tracedat_pages (page walk, time order), tracedat_columns (column builders),
//! tracedat_printf (bprint formatting).
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use numpy::IntoPyArray;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

#[path = "tracedat_printf.rs"]
mod tracedat_printf;
#[path = "tracedat_columns.rs"]
mod tracedat_columns;
use tracedat_columns::{Builder, Env, FieldSpec};
#[path = "tracedat_pages.rs"]
mod tracedat_pages;
#[path = "tracedat_merge.rs"]
mod tracedat_merge;
#[path = "tracedat_fused.rs"]
mod tracedat_fused;
#[path = "tracedat_split.rs"]
mod tracedat_split;
#[path = "tracedat_lazy.rs"]
pub(crate) mod tracedat_lazy;
#[path = "tracedat_tables.rs"]
mod tracedat_tables;
use tracedat_pages::{split_balanced, time_order, walk_cpu, worker_count, Clock, CpuStats, DecodeError, PageLayout, Records};

/// Columns of one event type, built off the GIL.
struct TypeColumns {
    ty: u16,
    ts: Vec<i64>,
    cpu: Vec<i32>,
    builders: Vec<Builder>,
    /// indices of the builders filled record by record (variable place: strings, tails)
    var: Vec<usize>,
    /// Some(stride) when every field has a fixed place: records are staged in `block` at this stride
    /// and the fields filled block-wise.
    stride: Option<usize>,
    block: Vec<u8>,
    pending: usize,
    short_rows: u64,
}

const BLOCK_ROWS: usize = 1024;

impl TypeColumns {
    fn new(ty: u16, n: usize, builders: Vec<Builder>) -> TypeColumns {
        // fields with a fixed place are filled block-wise; the others (strings found through
        // __data_loc, tails) record by record
        let max_fixed = builders.iter().filter_map(|b| b.fixed_extent()).max();
        let stride = max_fixed.map(|e| e.max(1));
        let block = match stride {
            Some(st) => vec![0u8; st * BLOCK_ROWS],
            None => Vec::new(),
        };
        let var = (0..builders.len()).filter(|&j| builders[j].fixed_extent().is_none()).collect();
        TypeColumns { ty, ts: Vec::with_capacity(n), cpu: Vec::with_capacity(n), builders, var, stride, block,
                      pending: 0, short_rows: 0 }
    }

    #[inline(always)]
    fn push(&mut self, r: &[u8], env: &mut Env) {
        if let Some(st) = self.stride {
            let dst = &mut self.block[self.pending * st..(self.pending + 1) * st];
            if r.len() >= st {
                // fixed-size moves for the usual strides (a memcpy call per record costs more)
                macro_rules! cp {
                    ($($n:literal)*) => {
                        match st {
                            $($n => dst[..$n].copy_from_slice(&r[..$n]),)*
                            _ => dst.copy_from_slice(&r[..st]),
                        }
                    };
                }
                cp!(4 8 12 16 20 24 28 32 36 40 44 48 52 56 60 64 68 72 76 80);
            } else {
                dst[..r.len()].copy_from_slice(r);
                dst[r.len()..].fill(0);
                self.short_rows += 1;
            }
            self.pending += 1;
        }
        for &j in &self.var {
            self.builders[j].push(r, env);
        }
        if self.pending == BLOCK_ROWS {
            self.flush(env);
        }
    }

    fn flush(&mut self, env: &mut Env) {
        if let Some(st) = self.stride {
            for b in self.builders.iter_mut() {
                if b.fixed_extent().is_some() {
                    b.push_block(&self.block, st, self.pending, env);
                }
            }
            self.pending = 0;
        }
    }
}

/// /proc/kallsyms text (`address type name [module]` lines) -> (sorted addresses, names).
fn parse_kallsyms(text: &[u8]) -> (Vec<u64>, Vec<String>) {
    let mut pairs: Vec<(u64, String)> = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let mut it = line.split(|&c| c == b' ' || c == b'\t').filter(|t| !t.is_empty());
        let (Some(addr), Some(_kind), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
        let Ok(addr) = std::str::from_utf8(addr) else { continue };
        if let Ok(a) = u64::from_str_radix(addr, 16) {
            pairs.push((a, String::from_utf8_lossy(name).into_owned()));
        }
    }
    pairs.sort_by_key(|p| p.0);
    pairs.into_iter().unzip()
}

/// Give the memory of the whole pages inside `s` back to the kernel (MADV_DONTNEED). Used only on
/// buffers the caller hands over for this (a read-only file mapping, whose pages fault back in from the
/// file; or inflated chunks it drops right after the column pass, whose pages then read as zeros).
#[cfg(target_os = "linux")]
fn release_pages(s: &[u8]) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        fn sysconf(name: i32) -> i64;
    }
    const MADV_DONTNEED: i32 = 4;
    const SC_PAGESIZE: i32 = 30;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { sysconf(SC_PAGESIZE) }.max(4096) as usize;
    let start = s.as_ptr() as usize;
    let lo = start.div_ceil(page) * page;
    let hi = (start + s.len()) / page * page;
    if hi > lo {
        // SAFETY: [lo, hi) lies inside `s`; the caller guarantees nothing reads these bytes again
        // (or that they are file-backed and read back unchanged).
        unsafe { madvise(lo as *mut std::ffi::c_void, hi - lo, MADV_DONTNEED) };
    }
}

#[cfg(not(target_os = "linux"))]
fn release_pages(_s: &[u8]) {}

/// Keep glibc from raising its mmap threshold (it does so after large blocks are freed, up to 32 MiB):
/// the record arrays (tens of MB) are then always mmapped, so `realloc` remaps instead of copying and
/// `free` gives the memory back at once instead of leaving it resident in the heap.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_mmap_threshold() {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only sets an allocator tunable.
    unsafe { mallopt(M_MMAP_THRESHOLD, 256 * 1024) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold() {}

/// release_pages over (address, length) spans, merging exact neighbours (chunks inflated side by side)
/// so that there are few madvise calls (each one interrupts the other threads of the process).
fn release_spans(mut spans: Vec<(usize, usize)>) {
    spans.sort_unstable();
    let mut cur: Option<(usize, usize)> = None;
    for (a, n) in spans {
        cur = match cur {
            Some((ca, cn)) if a == ca + cn => Some((ca, cn + n)),
            Some((ca, cn)) => {
                // SAFETY: (ca, cn) is the union of adjacent released sources, all of them live buffers.
                release_pages(unsafe { std::slice::from_raw_parts(ca as *const u8, cn) });
                Some((a, n))
            }
            None => Some((a, n)),
        };
    }
    if let Some((ca, cn)) = cur {
        // SAFETY: as above.
        release_pages(unsafe { std::slice::from_raw_parts(ca as *const u8, cn) });
    }
}

/// Steps of the column pass when pages are released as they are consumed: after each step a thread
/// publishes its progress and releases the sources every thread has passed.
const RELEASE_SLICES: usize = 64;

/// One pass over all records in time order, filling the columns of the types this thread owns
/// (`slot[type]` = index into `mine`, u32::MAX = another thread's type).
/// `last`: this is the final slice of the pass (flush the staged blocks, count the short rows).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn fill_columns(order: &[u32], recs: &Records, srcs: &[&[u8]], cpus: &[i32], slot: &[u32],
                mine: &mut [TypeColumns], env: &mut Env, last: bool) {
    for &i in order {
        let i = i as usize;
        let s = slot[recs.ty[i] as usize];
        if s == u32::MAX {
            continue;
        }
        let tc = &mut mine[s as usize];
        let si = recs.src[i] as usize;
        let p = recs.pos[i] as usize;
        let r = &srcs[si][p..p + recs.record_len(i)];
        tc.ts.push(recs.ts[i]);
        tc.cpu.push(cpus[si]);
        tc.push(r, env);
    }
    if !last {
        return;
    }
    for tc in mine.iter_mut() {
        tc.flush(env);
        // fields of records shorter than the format read as 0 (padded), as in the per-record path
        env.short_fields += tc.short_rows;
    }
}

/// The decoded records of a trace.dat (page walk done, sorted by time), waiting for field layouts.
#[pyclass(unsendable)]
pub struct TraceDatRecords {
    bufs: Vec<PyBuffer<u8>>,
    spans: Vec<(usize, usize)>,
    cpus: Vec<i32>,
    be: bool,
    recs: Records,
    order: Vec<u32>,
    lost: Vec<(i32, u64, u64)>,
    pages: u64,
}

impl TraceDatRecords {
    fn src(&self, si: usize) -> &[u8] {
        let b = &self.bufs[si];
        // SAFETY: read-only view of a buffer object kept alive by `self.bufs`.
        let all = unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) };
        &all[self.spans[si].0..self.spans[si].0 + self.spans[si].1]
    }
}

/// Walk all CPUs' ring-buffer pages. cpu_bufs: [(cpu, buffer, start, size)];
/// page: (page_size, ts_off, ts_size, commit_off, commit_size, data_off); id_field: common_type
/// (offset, size); tsc2nsec: (mult, shift, offset) or None; ts_offset_ns added to every timestamp.
/// Raises ValueError((message, source_index, byte_position)) on corrupt data.
#[pyfunction]
#[pyo3(signature = (cpu_bufs, page, big_endian, id_field, tsc2nsec, ts_offset_ns))]
fn tracedat_walk(
    cpu_bufs: Vec<(i32, PyBuffer<u8>, usize, usize)>,
    page: (usize, usize, usize, usize, usize, usize),
    big_endian: bool,
    id_field: (usize, usize),
    tsc2nsec: Option<(u32, u32, u64)>,
    ts_offset_ns: i64,
) -> PyResult<TraceDatRecords> {
    let lay = PageLayout {
        page_size: page.0, ts_off: page.1, ts_size: page.2, commit_off: page.3, commit_size: page.4,
        data_off: page.5, be: big_endian, id_off: id_field.0, id_size: id_field.1,
    };
    if lay.data_off >= lay.page_size {
        return Err(PyValueError::new_err(("page header larger than the page", 0usize, 0usize)));
    }
    fix_mmap_threshold();
    let clock = Clock { tsc: tsc2nsec, offset_ns: ts_offset_ns };
    let mut out = TraceDatRecords {
        bufs: Vec::new(), spans: Vec::new(), cpus: Vec::new(), be: big_endian, recs: Records::default(),
        order: Vec::new(), lost: Vec::new(), pages: 0,
    };
    for (cpu, buf, start, size) in cpu_bufs {
        if start + size > buf.len_bytes() {
            return Err(PyValueError::new_err(("CPU data outside its buffer", out.bufs.len(), start)));
        }
        out.cpus.push(cpu);
        out.spans.push((start, size));
        out.bufs.push(buf);
    }
    // walk sources in parallel: contiguous groups of sources, one per thread, joined in source order
    let srcs: Vec<&[u8]> = (0..out.bufs.len()).map(|si| out.src(si)).collect();
    let groups = split_balanced(&srcs, worker_count());
    let results: Vec<Result<(Records, Vec<(usize, usize, CpuStats)>), DecodeError>> = std::thread::scope(|sc| {
        let handles: Vec<_> = groups.iter().map(|&(a, b)| {
            let srcs = &srcs;
            let (lay, clock) = (&lay, &clock);
            sc.spawn(move || {
                let mut recs = Records::default();
                let bytes: usize = srcs[a..b].iter().map(|s| s.len()).sum();
                let guess = bytes / 24;
                recs.ts.reserve(guess);
                recs.src.reserve(guess);
                recs.pos.reserve(guess);
                recs.len.reserve(guess);
                recs.ty.reserve(guess);
                let mut per_src = Vec::with_capacity(b - a);
                for si in a..b {
                    let mut st = CpuStats::default();
                    let start = recs.ts.len();
                    walk_cpu(si, srcs[si], lay, clock, &mut recs, &mut st)?;
                    per_src.push((start, recs.ts.len(), st));
                }
                Ok((recs, per_src))
            })
        }).collect();
        handles.into_iter().map(|h| h.join().expect("trace.dat walker thread panicked")).collect()
    });
    let mut ranges = Vec::with_capacity(out.bufs.len());
    let mut parts = Vec::with_capacity(results.len());
    for r in results {
        parts.push(r.map_err(|e| PyValueError::new_err((e.msg, e.src, e.pos)))?);
    }
    // concatenate: grow the first part in place (large reallocations are remapped, not copied) and
    // drop every other part as soon as it is appended
    let total: usize = parts.iter().map(|p| p.0.ts.len()).sum();
    let mut parts = parts.into_iter();
    let (mut recs, first_src) = match parts.next() {
        Some(p) => p,
        None => (Records::default(), Vec::new()),
    };
    let extra = total - recs.ts.len();
    recs.ts.reserve_exact(extra);
    recs.src.reserve_exact(extra);
    recs.pos.reserve_exact(extra);
    recs.len.reserve_exact(extra);
    recs.ty.reserve_exact(extra);
    let mut si = 0usize;
    for (a, b, st) in first_src {
        ranges.push((a, b));
        out.pages += st.pages;
        out.lost.push((out.cpus[si], st.lost, st.lost_unknown_pages));
        si += 1;
    }
    for (part, per_src) in parts {
        let base = recs.ts.len();
        for (a, b, st) in per_src {
            ranges.push((base + a, base + b));
            out.pages += st.pages;
            out.lost.push((out.cpus[si], st.lost, st.lost_unknown_pages));
            si += 1;
        }
        // append field by field, freeing each of the part's fields at once (keeps the transient small)
        let Records { ts, src, pos, len, ty, long } = part;
        recs.long.extend(long.into_iter().map(|(k, l)| (k + base as u32, l)));
        recs.ts.extend_from_slice(&ts);
        drop(ts);
        recs.src.extend_from_slice(&src);
        drop(src);
        recs.pos.extend_from_slice(&pos);
        drop(pos);
        recs.len.extend_from_slice(&len);
        drop(len);
        recs.ty.extend_from_slice(&ty);
        drop(ty);
    }
    // consecutive sources of one CPU (v7 chunks) form one run when their timestamps continue in order
    let mut runs: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    let mut run_cpu: Vec<i32> = Vec::with_capacity(ranges.len());
    for (si, &(a, b)) in ranges.iter().enumerate() {
        if a == b {
            continue;
        }
        if let (Some(last), Some(&c)) = (runs.last_mut(), run_cpu.last()) {
            if c == out.cpus[si] && last.1 == a && recs.ts[a - 1] <= recs.ts[a] {
                last.1 = b;
                continue;
            }
        }
        runs.push((a, b));
        run_cpu.push(out.cpus[si]);
    }
    out.order = time_order(&recs.ts, &runs);
    out.recs = recs;
    Ok(out)
}

#[pymethods]
impl TraceDatRecords {
    /// {event id: number of records}
    fn event_counts(&self) -> HashMap<u16, u64> {
        let mut counts = vec![0u64; 1 << 16];
        for &t in &self.recs.ty {
            counts[t as usize] += 1;
        }
        counts.iter().enumerate().filter(|(_, &n)| n > 0).map(|(t, &n)| (t as u16, n)).collect()
    }

    /// {"lost": {cpu: n}, "lost_unknown_pages": {cpu: pages}, "pages": n, "records": n}
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let lost = PyDict::new(py);
        let unknown = PyDict::new(py);
        for &(cpu, n, u) in &self.lost {
            let prev: u64 = lost.get_item(cpu)?.map(|v| v.extract().unwrap_or(0)).unwrap_or(0);
            lost.set_item(cpu, prev + n)?;
            if u > 0 {
                // summed over the CPU's sources (v7: one per chunk)
                let prev_u: u64 = unknown.get_item(cpu)?.map(|v| v.extract().unwrap_or(0)).unwrap_or(0);
                unknown.set_item(cpu, prev_u + u)?;
            }
        }
        d.set_item("lost", lost)?;
        d.set_item("lost_unknown_pages", unknown)?;
        d.set_item("pages", self.pages)?;
        d.set_item("records", self.recs.ts.len())?;
        Ok(d)
    }

    /// Fill the columns of every event type. events: {id: [FieldSpec]}; unknown_fields: used for ids
    /// without a format; printk: {address: format bytes}; kallsyms: /proc/kallsyms text (for %pS in
    /// bprint formats; empty when not needed); release: per source, true when the caller hands its
    /// pages over (a read-only file mapping, or an inflated chunk it drops afterwards): the pass then
    /// runs in time slices and gives each such source's pages back to the kernel once all its records
    /// are consumed, so the ring-buffer pages and the columns are not both resident at the peak.
    /// Returns {"events": {id: {"ts", "__buffer_cpu", field...}}, "short_fields": n, "missing_formats": n}.
    #[pyo3(signature = (events, unknown_fields, long_size, printk, kallsyms, release=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn columns<'py>(
        &mut self,
        py: Python<'py>,
        events: HashMap<u16, Vec<FieldSpec>>,
        unknown_fields: Vec<FieldSpec>,
        long_size: usize,
        printk: HashMap<u64, Vec<u8>>,
        kallsyms: Vec<u8>,
        release: Vec<bool>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let kallsyms = tracedat_columns::Syms::ready(parse_kallsyms(&kallsyms));
        // event types present, with their record counts; each thread owns a set of types (largest first
        // to the least loaded thread) and makes one pass over all records in time order, filling the
        // columns of its own types: record bytes are read once, in file order per CPU.
        let mut counts = vec![0usize; 1 << 16];
        for &t in &self.recs.ty {
            counts[t as usize] += 1;
        }
        let mut types: Vec<(u16, usize)> = counts.iter().enumerate().filter(|(_, &n)| n > 0)
            .map(|(t, &n)| (t as u16, n)).collect();
        types.sort_by_key(|&(t, n)| (std::cmp::Reverse(n), t));
        let nthreads = worker_count().min(types.len().max(1));
        let mut owner = vec![u8::MAX; 1 << 16];
        let mut load = vec![0usize; nthreads];
        for &(t, n) in &types {
            let k = (0..nthreads).min_by_key(|&k| load[k]).unwrap();
            owner[t as usize] = k as u8;
            load[k] += n;
        }
        let srcs: Vec<&[u8]> = (0..self.bufs.len()).map(|si| self.src(si)).collect();
        let (recs, cpus, be, order) = (&self.recs, &self.cpus, self.be, &self.order);
        // per thread: its types' columns and slot table, kept across the time slices
        let mut states: Vec<(Vec<u32>, Vec<TypeColumns>)> = (0..nthreads).map(|me| {
            let mut slot = vec![u32::MAX; 1 << 16];
            let mut mine: Vec<TypeColumns> = Vec::new();
            for &(t, _) in types.iter().filter(|&&(t, _)| owner[t as usize] as usize == me) {
                let n = counts[t as usize];
                let fields = events.get(&t).unwrap_or(&unknown_fields);
                slot[t as usize] = mine.len() as u32;
                mine.push(TypeColumns::new(t, n, fields.iter().map(|f| Builder::new(f, n)).collect()));
            }
            (slot, mine)
        }).collect();
        let releasing = release.iter().any(|&r| r);
        // position in `order` of the last record of each source: its pages are free after that
        let mut last_use = vec![0usize; srcs.len()];
        if releasing {
            for (k, &i) in order.iter().enumerate() {
                last_use[recs.src[i as usize] as usize] = k;
            }
        }
        // sources to release, by the position of their last record; released by whichever thread sees
        // that every thread has passed that position (no barrier between the threads)
        let mut by_last: Vec<(usize, usize)> = (0..srcs.len())
            .filter(|&si| release.get(si).copied().unwrap_or(false))
            .map(|si| (last_use[si], si)).collect();
        by_last.sort_unstable();
        let progress: Vec<AtomicUsize> = (0..states.len()).map(|_| AtomicUsize::new(0)).collect();
        let cursor = Mutex::new(0usize);
        let nslices = if releasing { RELEASE_SLICES } else { 1 };
        let slice_len = order.len().div_ceil(nslices).max(1);
        let counts_done: Vec<(u64, u64)> = std::thread::scope(|sc| {
            let handles: Vec<_> = states.iter_mut().enumerate().map(|(me, (slot, mine))| {
                let (srcs, printk, kallsyms) = (&srcs, &printk, &kallsyms);
                let (progress, cursor, by_last) = (&progress, &cursor, &by_last);
                sc.spawn(move || {
                    let mut env = Env {
                        be, long_size, printk, syms: kallsyms,
                        short_fields: 0, missing_formats: 0,
                    };
                    let mut start = 0usize;
                    loop {
                        let end = (start + slice_len).min(order.len());
                        let last = end == order.len();
                        fill_columns(&order[start..end], recs, srcs, cpus, slot, mine, &mut env, last);
                        if last {
                            break;
                        }
                        progress[me].store(end, Ordering::Release);
                        let done = progress.iter().map(|p| p.load(Ordering::Acquire)).min().unwrap_or(0);
                        if let Ok(mut c) = cursor.try_lock() {
                            let mut spans: Vec<(usize, usize)> = Vec::new();
                            while *c < by_last.len() && by_last[*c].0 < done {
                                let s = srcs[by_last[*c].1];
                                spans.push((s.as_ptr() as usize, s.len()));
                                *c += 1;
                            }
                            release_spans(spans);
                        }
                        start = end;
                    }
                    (env.short_fields, env.missing_formats)
                })
            }).collect();
            handles.into_iter().map(|h| h.join().expect("trace.dat column thread panicked")).collect()
        });
        let (mut short_fields, mut missing_formats) = (0u64, 0u64);
        for (short, missing) in counts_done {
            short_fields += short;
            missing_formats += missing;
        }
        let out = PyDict::new(py);
        for (_, done) in states {
            for tc in done {
                let cols = PyDict::new(py);
                cols.set_item("ts", tc.ts.into_pyarray(py))?;
                cols.set_item("__buffer_cpu", tc.cpu.into_pyarray(py))?;
                for b in tc.builders {
                    let name = b.name().to_string();
                    cols.set_item(name, b.into_py(py)?)?;
                }
                out.set_item(tc.ty, cols)?;
            }
        }
        let d = PyDict::new(py);
        d.set_item("events", out)?;
        d.set_item("short_fields", short_fields)?;
        d.set_item("missing_formats", missing_formats)?;
        Ok(d)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tracedat_walk, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_fused::tracedat_fused, m)?)?;
    m.add_class::<TraceDatRecords>()?;
    m.add_class::<tracedat_lazy::RunColumn>()?;
    m.add_function(wrap_pyfunction!(tracedat_lazy::tracedat_materialize, m)?)?;
    Ok(())
}
