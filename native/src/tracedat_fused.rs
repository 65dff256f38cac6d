//! Streaming trace.dat decode: inflate, walk and fill columns per CPU in one pass, then merge per table.
//!
//! One job per CPU (its ring-buffer data: v7 compressed chunks, or one stored span of the file), run on
//! min(CPUs with data, cores) threads; a thread left without a job takes over the back half of the
//! chunks another job has left, as a piece of that CPU joined to it again before the merge
//! (tracedat_split). A job inflates its chunks one by one into a reused buffer
//! (zstd / zlib, 10 pages of 4 KiB per chunk as trace-cmd writes them), walks the pages of each chunk
//! while they are hot in cache and pushes every record straight into that CPU's column builders of its
//! event type (tracedat_columns, fixed-layout types staged in blocks). No record index, no copy of the
//! inflated data. The compressed chunks' pages of a file mapping are given back to the kernel as they
//! are consumed (the caller says when the buffer is a read-only mapping).
//!
//! Each table is then the merge of its per-CPU runs by timestamp (tracedat_tables, tracedat_merge), which
//! reproduces the record-index path exactly when every CPU's timestamps are non-decreasing. When they are not, or on
//! any decode or inflate error, this returns {"fallback": reason} and the caller uses the record-index
//! path (tracedat_walk + columns), which orders such traces and reports errors with their exact
//! positions and messages.
//!
//! Field layouts come from a Python callable (event id -> field specs or None), called once per event
//! type that occurs, under the GIL, from the thread that meets the type first; likewise the kallsyms
//! text for bprint `%pS`, fetched on the first bprint record. The GIL is released otherwise.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::tracedat_columns::{Builder, Env, FieldSpec, SymLoader, Syms};
use super::tracedat_merge::{push, set_growth_hint};
use super::tracedat_tables::{column_py, merge_tables, Column, Merged, Runs};
use super::tracedat_pages::{walk_pages, worker_count, Clock, CpuStats, PageLayout};
use super::tracedat_split::{
    backwards_seam, initial_ranges, stored_pieces, ts_span, Share, SpanRange,
};
use super::{fix_mmap_threshold, parse_kallsyms, release_pages, TypeColumns};

/// Error of a job that stopped because another one failed.
const STOPPED: &str = "stopped: another CPU's data failed";
/// Compressed input consumed before its file pages are given back (fewer, larger madvise calls).
const RELEASE_STEP: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Comp {
    Stored,
    Zstd,
    Zlib,
}

/// One CPU's data: (start, size, inflated size) spans of the file buffer, in order.
struct Job {
    cpu: i32,
    first_src: usize,
    spans: Vec<(usize, usize, usize)>,
}

/// Field specs per event id, asked of Python once per id.
struct SpecCache<'a> {
    resolver: &'a Py<PyAny>,
    unknown: &'a [FieldSpec],
    cache: Mutex<HashMap<u16, Arc<Vec<FieldSpec>>>>,
    error: Mutex<Option<PyErr>>,
}

impl SpecCache<'_> {
    fn get(&self, ty: u16) -> Arc<Vec<FieldSpec>> {
        let mut cache = self.cache.lock().unwrap();
        if let Some(s) = cache.get(&ty) {
            return s.clone();
        }
        // the GIL is taken while holding the cache lock; no thread holding the GIL waits for this lock
        let got: PyResult<Option<Vec<FieldSpec>>> =
            Python::with_gil(|py| self.resolver.call1(py, (ty,))?.extract(py));
        let specs = match got {
            Ok(Some(v)) => v,
            Ok(None) => self.unknown.to_vec(),
            Err(e) => {
                self.error.lock().unwrap().get_or_insert(e);
                self.unknown.to_vec()
            }
        };
        let specs = Arc::new(specs);
        cache.insert(ty, specs.clone());
        specs
    }
}

struct Inflater {
    comp: Comp,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    zlib: flate2::Decompress,
}

impl Inflater {
    fn new(comp: Comp) -> Result<Inflater, String> {
        let zstd = if comp == Comp::Zstd {
            Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(Inflater { comp, zstd, zlib: flate2::Decompress::new(true) })
    }

    /// Inflate `src` into `buf` (cleared first), which must come out exactly `size` bytes.
    fn inflate(&mut self, src: &[u8], size: usize, buf: &mut Vec<u8>) -> Result<(), String> {
        buf.clear();
        buf.reserve(size);
        match self.comp {
            Comp::Zstd => {
                let d = self.zstd.as_mut().expect("zstd context");
                d.decompress_to_buffer(src, buf).map_err(|e| e.to_string())?;
            }
            Comp::Zlib => {
                self.zlib.reset(true);
                let st = self.zlib.decompress_vec(src, buf, flate2::FlushDecompress::Finish)
                    .map_err(|e| e.to_string())?;
                if st != flate2::Status::StreamEnd {
                    return Err("zlib stream does not end inside the chunk's inflated size".into());
                }
            }
            Comp::Stored => unreachable!("stored data is not inflated"),
        }
        if buf.len() != size {
            return Err(format!("inflated to {} bytes, header says {}", buf.len(), size));
        }
        Ok(())
    }
}

/// Everything a job reads besides its own data.
struct Ctx<'a> {
    file: &'a [u8],
    lay: &'a PageLayout,
    clock: &'a Clock,
    specs: &'a SpecCache<'a>,
    printk: &'a HashMap<u64, Vec<u8>>,
    syms: &'a Syms,
    long_size: usize,
    release: bool,
    abort: &'a AtomicBool,
}

/// One CPU's decoded columns, per event type in order of first appearance.
struct CpuOut {
    cpu: i32,
    types: Vec<TypeColumns>,
    stats: CpuStats,
    monotonic: bool,
    short_fields: u64,
    missing_formats: u64,
}

/// Decode the chunks of `range` (a piece of job `job`, taken one at a time as long as the range has any).
fn decode_job(job: &Job, range: &SpanRange, ctx: &Ctx, comp: Comp, inf: &mut Inflater, buf: &mut Vec<u8>)
    -> Result<CpuOut, String> {
    let mut env = Env { be: ctx.lay.be, long_size: ctx.long_size, printk: ctx.printk, syms: ctx.syms,
                        short_fields: 0, missing_formats: 0 };
    let mut slot = vec![u32::MAX; 1 << 16];
    let mut types: Vec<TypeColumns> = Vec::new();
    let mut stats = CpuStats::default();
    let (mut last, mut monotonic) = (i64::MIN, true);
    let mut released = job.spans.get(range.start).map(|s| s.0).unwrap_or(0);
    let mut last_span = None;
    // inflated bytes before each chunk of the job (for the growth hint: decoded vs still to decode)
    let before: Vec<usize> = std::iter::once(0).chain(job.spans.iter().scan(0usize, |acc, s| {
        *acc += s.2.max(s.1);
        Some(*acc)
    })).collect();
    while let Some(k) = range.claim() {
        let (start, size, inflated) = job.spans[k];
        last_span = Some(job.spans[k]);
        // this chunk counted as half decoded: its columns grow while it is walked
        let done = before[k] - before[range.start] + (before[k + 1] - before[k]) / 2;
        set_growth_hint(done, before[range.end().max(k + 1)] - before[range.start] - done);
        if ctx.abort.load(Ordering::Relaxed) {
            return Err(STOPPED.into());
        }
        let src = ctx.file.get(start..start + size).ok_or("CPU data outside the file")?;
        // (the source index only names the data in an error message, of which the fallback keeps the text)
        if comp == Comp::Stored {
            walk_into_columns(job.first_src, src, ctx, &mut stats, &mut slot, &mut types, &mut env, &mut last,
                              &mut monotonic)?;
            if ctx.release {
                release_pages(src);
            }
        } else {
            inf.inflate(src, inflated, buf).map_err(|e| format!("CPU {} chunk {}: {}", job.cpu, k, e))?;
            walk_into_columns(job.first_src + k, buf, ctx, &mut stats, &mut slot, &mut types, &mut env, &mut last,
                              &mut monotonic)?;
        }
        if ctx.release && comp != Comp::Stored && start + size - released >= RELEASE_STEP {
            release_pages(&ctx.file[released..start + size]);
            released = start + size;
        }
    }
    set_growth_hint(0, 0);
    if ctx.release && comp != Comp::Stored {
        if let Some((start, size, _)) = last_span {
            release_pages(&ctx.file[released.min(start + size)..start + size]);
        }
    }
    for tc in types.iter_mut() {
        tc.flush(&mut env);
        env.short_fields += tc.short_rows;
    }
    Ok(CpuOut { cpu: job.cpu, types, stats, monotonic, short_fields: env.short_fields,
                missing_formats: env.missing_formats })
}

/// Walk the pages of `data`, pushing each record into its type's builders (created on first sight).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn walk_into_columns(si: usize, data: &[u8], ctx: &Ctx, stats: &mut CpuStats, slot: &mut [u32],
                       types: &mut Vec<TypeColumns>, env: &mut Env, last: &mut i64, monotonic: &mut bool)
    -> Result<(), String> {
    walk_pages(si, data, ctx.lay, ctx.clock, stats, |ts, ty, rec, _pos| {
        *monotonic &= ts >= *last;
        *last = ts;
        let mut s = slot[ty as usize];
        if s == u32::MAX {
            let specs = ctx.specs.get(ty);
            s = types.len() as u32;
            slot[ty as usize] = s;
            types.push(TypeColumns::new(ty, 0, specs.iter().map(|f| Builder::new(f, 0)).collect()));
        }
        let tc = &mut types[s as usize];
        push(&mut tc.ts, ts);
        tc.push(rec, env);
    }).map_err(|e| e.msg)
}

/// Result of the threaded part (no GIL).
enum Outcome {
    Done { tables: Vec<Merged>, stats: Vec<(i32, CpuStats)>, short_fields: u64, missing_formats: u64 },
    Fallback(String),
}

/// Inflate a compressed metadata section that starts with a u32 length of the rest (kallsyms) and check
/// both sizes, as the layout parser would when reading it.
fn verify_section(ctx: &Ctx, inf: &mut Inflater, buf: &mut Vec<u8>, (start, size, inflated): (usize, usize, usize))
    -> Result<(), String> {
    let src = ctx.file.get(start..start + size).ok_or("section outside the file")?;
    inf.inflate(src, inflated, buf)?;
    let n = super::tracedat_columns::rd(buf, 0, 4, ctx.lay.be).ok_or("section shorter than its length word")?;
    if 4 + n as usize > buf.len() {
        return Err("section length word beyond the section".into());
    }
    Ok(())
}

fn run(jobs: &[Job], verify: &[(usize, usize, usize)], ctx: &Ctx, comp: Comp, lazy: bool) -> Outcome {
    // decode: one job per CPU, biggest first, on min(jobs, cores) threads; then the deferred section
    // checks; then a thread with nothing left to start takes over half of the chunks a job has left
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(jobs[j].spans.iter().map(|s| s.2.max(s.1)).sum::<usize>()));
    // a thread more than there are CPUs may take over chunks (stored data is one chunk per CPU)
    let nthreads = worker_count().min(jobs.iter().map(|j| j.spans.len()).sum()).max(1);
    let initial = initial_ranges(&jobs.iter().map(|j| j.spans.len()).collect::<Vec<_>>(), &order);
    let share = Share::new(&initial);
    let next = AtomicUsize::new(0);
    // (job, first chunk, result) of every piece decoded
    let outs: Mutex<Vec<(usize, usize, Result<CpuOut, String>)>> = Mutex::new(Vec::new());
    let checks: Vec<Mutex<Option<Result<(), String>>>> = verify.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|sc| {
        for _ in 0..nthreads {
            sc.spawn(|| {
                let mut inf = match Inflater::new(comp) {
                    Ok(i) => i,
                    Err(e) => {
                        ctx.abort.store(true, Ordering::Relaxed);
                        outs.lock().unwrap().push((0, 0, Err(e)));
                        return;
                    }
                };
                let mut buf = Vec::new();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let range = if k < initial.len() {
                        share.initial(k)
                    } else if k < initial.len() + verify.len() {
                        let r = verify_section(ctx, &mut inf, &mut buf, verify[k - initial.len()]);
                        *checks[k - initial.len()].lock().unwrap() = Some(r);
                        continue;
                    } else if ctx.abort.load(Ordering::Relaxed) {
                        break;
                    } else {
                        match share.steal() {
                            Some(r) => r,
                            None => break,
                        }
                    };
                    let r = decode_job(&jobs[range.job], &range, ctx, comp, &mut inf, &mut buf);
                    if r.is_err() {
                        ctx.abort.store(true, Ordering::Relaxed);
                    }
                    outs.lock().unwrap().push((range.job, range.start, r));
                }
            });
        }
    });
    // pieces in data order: jobs in file order, each job's pieces by first chunk
    let mut pieces = outs.into_inner().unwrap();
    pieces.sort_by_key(|p| (p.0, p.1));
    let mut cpu_outs: Vec<CpuOut> = Vec::with_capacity(pieces.len());
    let mut errors: Vec<String> = Vec::new();
    for (_, _, r) in pieces {
        match r {
            Ok(o) => cpu_outs.push(o),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        // the error itself rather than a piece that stopped because of it
        let i = errors.iter().position(|e| !e.starts_with(STOPPED)).unwrap_or(0);
        return Outcome::Fallback(errors.swap_remove(i));
    }
    for (c, &(start, _, _)) in checks.into_iter().zip(verify) {
        if let Some(Err(e)) = c.into_inner().unwrap() {
            return Outcome::Fallback(format!("compressed section data at offset {start}: {e}"));
        }
    }
    if let Some(o) = cpu_outs.iter().find(|o| !o.monotonic) {
        return Outcome::Fallback(format!("CPU {} timestamps go backwards", o.cpu));
    }
    // consecutive pieces of one CPU: a later one must not start before an earlier one ends
    let spans: Vec<(i32, Option<(i64, i64)>)> = cpu_outs.iter().map(|o| (o.cpu, ts_span(&o.types))).collect();
    if let Some(cpu) = backwards_seam(&spans) {
        return Outcome::Fallback(format!("CPU {cpu} timestamps go backwards"));
    }
    // merge: per event type, its per-CPU runs in data order; types spread over the threads, biggest first
    let (mut short_fields, mut missing_formats) = (0u64, 0u64);
    let mut by_type: HashMap<u16, Runs> = HashMap::new();
    let mut stats: Vec<(i32, CpuStats)> = Vec::with_capacity(cpu_outs.len());
    for o in cpu_outs {
        short_fields += o.short_fields;
        missing_formats += o.missing_formats;
        match stats.last_mut() {
            Some((cpu, st)) if *cpu == o.cpu => st.add(&o.stats),
            _ => stats.push((o.cpu, o.stats)),
        }
        for tc in o.types {
            by_type.entry(tc.ty).or_default().push((o.cpu, tc));
        }
    }
    let tables = merge_tables(by_type, lazy);
    Outcome::Done { tables, stats, short_fields, missing_formats }
}

/// Streaming decode of a trace.dat's ring-buffer data (see the module doc).
/// file: the whole file (bytes or mmap); cpus: [(cpu, [(start, size, inflated size)])] in file order
/// (inflated size ignored when `compression` is None); compression: None, "zstd" or "zlib";
/// page / big_endian / id_field / tsc2nsec / ts_offset_ns: as tracedat_walk; resolver(id) -> [FieldSpec]
/// or None (then `unknown_fields`); printk: {address: format}; kallsyms_loader: () -> kallsyms text, or
/// None; release: `file` is a read-only mapping whose consumed pages may be given back; verify:
/// [(start, size, inflated size)] compressed metadata sections (u32 length + data, i.e. kallsyms) the
/// layout parser located without inflating: inflated and checked on a thread that is free (a failure
/// means fallback, and the full parse then reports it).
/// lazy: the numeric, Categorical and CPU columns of tables merged from several CPUs come back as
/// RunColumns (tracedat_lazy: their runs and the merge plan, for the parquet writer) instead of arrays.
/// Returns {"fallback": reason} or {"events": {id: {"ts", "__buffer_cpu", field...}}, "short_fields",
/// "missing_formats", "stats": {"lost", "lost_unknown_pages", "pages", "records"}}.
#[pyfunction]
#[pyo3(signature = (file, cpus, compression, page, big_endian, id_field, tsc2nsec, ts_offset_ns, resolver,
                    unknown_fields, long_size, printk, kallsyms_loader, release, verify=Vec::new(), lazy=false))]
#[allow(clippy::too_many_arguments)]
pub fn tracedat_fused<'py>(
    py: Python<'py>,
    file: PyBuffer<u8>,
    cpus: Vec<(i32, Vec<(usize, usize, usize)>)>,
    compression: Option<String>,
    page: (usize, usize, usize, usize, usize, usize),
    big_endian: bool,
    id_field: (usize, usize),
    tsc2nsec: Option<(u32, u32, u64)>,
    ts_offset_ns: i64,
    resolver: Py<PyAny>,
    unknown_fields: Vec<FieldSpec>,
    long_size: usize,
    printk: HashMap<u64, Vec<u8>>,
    kallsyms_loader: Option<Py<PyAny>>,
    release: bool,
    verify: Vec<(usize, usize, usize)>,
    lazy: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let comp = match compression.as_deref() {
        None => Comp::Stored,
        Some("zstd") => Comp::Zstd,
        Some("zlib") => Comp::Zlib,
        Some(other) => return Err(PyValueError::new_err(format!("unsupported compression {other:?}"))),
    };
    let lay = PageLayout {
        page_size: page.0, ts_off: page.1, ts_size: page.2, commit_off: page.3, commit_size: page.4,
        data_off: page.5, be: big_endian, id_off: id_field.0, id_size: id_field.1,
    };
    let out = PyDict::new(py);
    if lay.data_off >= lay.page_size {
        out.set_item("fallback", "page header larger than the page")?;
        return Ok(out);
    }
    fix_mmap_threshold();
    // SAFETY: read-only view of a buffer object that `file` keeps alive for this whole call.
    let data = unsafe { std::slice::from_raw_parts(file.buf_ptr() as *const u8, file.len_bytes()) };
    let clock = Clock { tsc: tsc2nsec, offset_ns: ts_offset_ns };
    let mut jobs = Vec::with_capacity(cpus.len());
    let mut src = 0usize;
    for (cpu, spans) in cpus {
        let n = spans.len();
        // stored data in whole-page pieces of about RAW_PIECE bytes, so that another thread can take
        // over part of it (compressed data comes in chunks already)
        let spans = if comp == Comp::Stored { stored_pieces(&spans, lay.page_size) } else { spans };
        jobs.push(Job { cpu, first_src: src, spans });
        src += n;
    }
    let specs = SpecCache { resolver: &resolver, unknown: &unknown_fields, cache: Mutex::new(HashMap::new()),
                            error: Mutex::new(None) };
    let loader: Option<SymLoader> = kallsyms_loader.map(|f| -> SymLoader {
        Box::new(move || {
            let text: Vec<u8> = Python::with_gil(|py| f.call0(py).and_then(|t| t.extract(py))).unwrap_or_default();
            parse_kallsyms(&text)
        })
    });
    let syms = Syms::lazy(loader);
    let abort = AtomicBool::new(false);
    let ctx = Ctx { file: data, lay: &lay, clock: &clock, specs: &specs, printk: &printk, syms: &syms,
                    long_size, release, abort: &abort };
    let outcome = py.allow_threads(|| run(&jobs, &verify, &ctx, comp, lazy));
    if let Some(e) = specs.error.lock().unwrap().take() {
        return Err(e);
    }
    let (tables, stats, short_fields, missing_formats) = match outcome {
        Outcome::Fallback(reason) => {
            out.set_item("fallback", reason)?;
            return Ok(out);
        }
        Outcome::Done { tables, stats, short_fields, missing_formats } => (tables, stats, short_fields, missing_formats),
    };
    let events = PyDict::new(py);
    let mut records = 0usize;
    for t in tables {
        records += t.ts.len();
        let cols = PyDict::new(py);
        cols.set_item("ts", numpy::IntoPyArray::into_pyarray(t.ts, py))?;
        cols.set_item("__buffer_cpu", column_py(py, t.cpu)?)?;
        for b in t.builders {
            let name = match &b {
                Column::Built(b) => b.name().to_string(),
                Column::Runs(f) => f.name().to_string(),
                Column::Cpu(_) => unreachable!("a field column"),
            };
            cols.set_item(name, column_py(py, b)?)?;
        }
        events.set_item(t.ty, cols)?;
    }
    let st = PyDict::new(py);
    let (lost, unknown) = (PyDict::new(py), PyDict::new(py));
    let mut pages = 0u64;
    for (cpu, s) in &stats {
        lost.set_item(cpu, s.lost)?;
        if s.lost_unknown_pages > 0 {
            unknown.set_item(cpu, s.lost_unknown_pages)?;
        }
        pages += s.pages;
    }
    st.set_item("lost", lost)?;
    st.set_item("lost_unknown_pages", unknown)?;
    st.set_item("pages", pages)?;
    st.set_item("records", records)?;
    out.set_item("events", events)?;
    out.set_item("short_fields", short_fields)?;
    out.set_item("missing_formats", missing_formats)?;
    out.set_item("stats", st)?;
    Ok(out)
}
