//! trace-cmd trace.dat (file versions 6 and 7) -> one Arrow table per kernel event, plus metadata.
//!
//! The decoder owns the whole format: file layout and options (layout), event formats (format, events),
//! printk formats and kallsyms (text; bprint formatting in printf), the ring-buffer pages (pages), v7
//! compression (inflate), the decode on all cores (decode), time order (merge) and the metadata (meta).
//! Nothing is asked of the caller during the decode.
//!
//! Tables: `ts` (Int64, ns on the trace clock after trace-cmd's TSC2NSEC / OFFSET / DATE corrections),
//! `cpu` (Int32, the ring buffer that held the event; `buffer_cpu` when the event has its own `cpu`
//! field), then every field of the event's format under its kernel name and width, common_pid first
//! and common_type dropped; `instance` (Utf8, null for the top buffer) when the file has named
//! instances. Rows are in timestamp order, ties in file order (buffers, CPUs, pages): a stable sort
//! of all records, also when a CPU's timestamps go backwards. Events whose id has no usable format go
//! to `unknown_event_<id>` with the whole record as `payload`.
//!
//! Bad input is an `Error` naming the byte offset; content that cannot be used while the rest can is
//! skipped, counted in `Meta::import_errors` and warned about.

mod bytes;
mod columns;
mod decode;
mod error;
mod events;
mod format;
mod inflate;
mod layout;
mod merge;
mod meta;
mod pages;
mod printf;
mod rounds;
mod text;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use arrow_array::{ArrayRef, Int32Array, Int64Array, LargeStringArray, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field, Schema};

pub use error::{Error, Example, ImportLog, Skipped};
pub use inflate::Limits;
pub use layout::{CpuPages, Layout};
pub use merge::{keep_freed_memory, release_freed_memory};
pub use meta::{InstanceBuffer, Kernel, Meta};

use columns::{Builder, Data, Syms};
use merge::Table;
use pages::{Clock, PageLayout};

/// How to decode.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub limits: Limits,
    /// decode threads (0: one per core, at most 16)
    pub threads: usize,
    /// `data` is a read-only file mapping: its pages are given back to the kernel once decoded (they
    /// would fault back in from the file), so that they do not count in the peak RSS of the merge
    pub release_input: bool,
    /// the tables whose fields are decoded (None: every table's); the records of any other table keep only
    /// their `ts` and `cpu` (so the trace's span, its event counts and the time order are the whole file's),
    /// for a caller that reads a known set of tables (a comparison's analyses)
    pub fields_of: Option<Arc<std::collections::HashSet<String>>>,
}

/// A decoded trace: (table name, columns) sorted by name, and the metadata.
pub struct Decoded {
    pub tables: Vec<(String, RecordBatch)>,
    pub meta: Meta,
}

fn worker_count(n: usize) -> usize {
    if n > 0 {
        return n;
    }
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 16)
}

/// The layout of the file in `data` (no event decoding): for tools and tests.
pub fn layout(data: &[u8], limits: Limits) -> Result<Layout, Error> {
    layout::parse(data, limits)
}

/// printk formats: {address: format bytes}.
pub type Printk = HashMap<u64, Vec<u8>>;

/// The printk formats ({address: format}) and kallsyms text of the file in `data`.
pub fn printk_and_kallsyms(data: &[u8], limits: Limits) -> Result<(Printk, Vec<u8>), Error> {
    let lay = layout::parse(data, limits)?;
    Ok((text::parse_printk_formats(&lay.printk), layout::kallsyms_text(data, &lay)?))
}

/// Decode the trace.dat in `data`.
pub fn decode(data: &[u8], opts: &Options) -> Result<Decoded, Error> {
    let mut tables = Vec::new();
    let meta = run(data, opts, None, &mut |t, _| {
        tables = t;
        Ok(())
    })?;
    Ok(Decoded { tables, meta: meta.ok_or_else(|| Error::nowhere("internal error: the whole decode gave up"))? })
}

/// The sizes of a decode in rounds (decode_rounds).
#[derive(Debug, Clone, Copy)]
pub struct RoundSizes {
    /// ring-buffer bytes (inflated) of a piece: the unit of work, and what a round decodes again
    pub piece_bytes: usize,
    /// ring-buffer bytes (inflated) a round decodes
    pub round_bytes: usize,
}

/// A round's tables: (table name, rows), sorted by name.
pub type RoundTables = Vec<(String, RecordBatch)>;

/// What `decode_rounds` gives after each round: its tables, and the ring-buffer bytes decoded so far and in
/// all (for a progress bar).
pub type EmitRound<'e> = dyn FnMut(RoundTables, (usize, usize)) -> Result<(), Error> + 'e;

/// Decode the trace.dat in `data` in rounds of about `sizes.round_bytes` (rounds.rs), so that memory stays
/// bounded whatever the trace length: `emit` receives each round's rows, every table's rows later than the
/// previous round's and in the whole decode's order (concatenated, the rounds are `decode`'s tables).
/// Returns the metadata, or None when a CPU's timestamps go backwards (rounds cannot keep the order: decode
/// the whole file instead; rounds may have been emitted already).
pub fn decode_rounds(
    data: &[u8],
    opts: &Options,
    sizes: RoundSizes,
    emit: &mut EmitRound,
) -> Result<Option<Meta>, Error> {
    run(data, opts, Some(sizes), emit)
}

fn run(data: &[u8], opts: &Options, sizes: Option<RoundSizes>, emit: &mut EmitRound) -> Result<Option<Meta>, Error> {
    let mut lay = layout::parse(data, opts.limits)?;
    let mut skipped = std::mem::take(&mut lay.skipped);
    let lay = lay;
    let threads = worker_count(opts.threads);
    let header = format::parse_header_page(&lay.header_page, lay.long_size);
    let events = events::Events::new(lay.formats.clone(), header.commit_size);
    let pages = PageLayout {
        page_size: lay.page_size,
        header,
        be: lay.big_endian,
        id_off: events.id_field.0,
        id_size: events.id_field.1,
    };
    let tsc = lay.tsc2nsec.filter(|t| t.0 != 0);
    let clock = Clock { tsc, offset_ns: lay.ts_offset_ns.saturating_add(lay.date_offset_ns) };
    let printk = text::parse_printk_formats(&lay.printk);
    let kallsyms: OnceLock<Result<Vec<u8>, Error>> = OnceLock::new();
    let load_kallsyms = || kallsyms.get_or_init(|| layout::kallsyms_text(data, &lay));
    let syms = Syms::new(Box::new(|| text::parse_kallsyms(load_kallsyms().as_deref().unwrap_or(&[]))));
    let pieces = decode::pieces(&lay, sizes.map_or(decode::PIECE_BYTES, |s| s.piece_bytes));
    let ctx = decode::Ctx {
        data,
        lay: &lay,
        pages,
        clock,
        events: &events,
        printk: &printk,
        syms: &syms,
        long_size: header.commit_size,
        release: opts.release_input.then_some(release_pages),
        fields_of: opts.fields_of.as_deref(),
    };
    // a compressed kallsyms section is checked even when no record needs it (a corrupt file is an error)
    let check = || match lay.kallsyms {
        layout::Kallsyms::Compressed { .. } => load_kallsyms().clone().map(|_| ()),
        _ => Ok(()),
    };
    let mut acc = Accounting::new(&lay);
    let has_instances = lay.buffers.iter().any(|b| b.name.is_some());
    let nbuffers = lay.buffers.len();
    // a round's (or the whole decode's) merged tables, the rows of ts in `rows` kept, as batches by name
    let batches = |tables: Vec<Table>, rows: rounds::Rows, acc: &mut Accounting| -> RoundTables {
        let mut out: RoundTables = Vec::new();
        for t in tables {
            let lo = rows.0.map_or(0, |l| t.ts.partition_point(|&x| x < l));
            let hi = rows.1.map_or(t.ts.len(), |h| t.ts.partition_point(|&x| x < h));
            if hi <= lo {
                continue;
            }
            let mut per_buffer = vec![0u64; nbuffers];
            if t.buffer.is_empty() {
                per_buffer[0] = (hi - lo) as u64;
            } else {
                for &b in &t.buffer[lo..hi] {
                    per_buffer[b as usize] += 1;
                }
            }
            acc.add_rows(&t.ty, &per_buffer);
            let name = t.ty.table.clone();
            if !decode::fields_decoded(opts.fields_of.as_deref(), &name) {
                acc.fields_not_decoded.insert(name.clone());
            }
            let whole = hi - lo == t.ts.len();
            let batch = record_batch(t, &lay, has_instances, &printk);
            out.push((name, if whole { batch } else { batch.slice(lo, hi - lo) }));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    };
    match sizes {
        None => {
            let outs = decode::decode_all(&ctx, &pieces, threads, &check)?;
            merge::release_freed_memory(); // the decode threads' scratch (inflate buffers, staging blocks)
            acc.add_pieces(pieces.iter().zip(&outs));
            let tables = merge::merge(&pieces, outs, nbuffers, threads);
            let bytes = pieces.iter().map(|p| p.bytes()).sum();
            emit(batches(tables, (None, None), &mut acc), (bytes, bytes))?;
        }
        Some(s) => {
            let keys: Vec<(usize, u32)> = pieces.iter().map(|p| (p.buffer, p.cpu)).collect();
            let bytes: Vec<usize> = pieces.iter().map(|p| p.bytes()).collect();
            let mut plan = rounds::Plan::new(&keys, &bytes, s.round_bytes);
            while let Some(sel) = plan.next_round() {
                let round: Vec<decode::Piece> = sel.iter().map(|&p| pieces[p].clone()).collect();
                let new: Vec<bool> = sel.iter().map(|&p| plan.is_new(p)).collect();
                let outs = decode::decode_all(&ctx, &round, threads, &check)?;
                merge::release_freed_memory();
                let spans: Vec<rounds::Span> = outs.iter().map(|o| (o.first_ts, o.last_ts)).collect();
                let back: Vec<u64> = outs.iter().map(|o| o.backwards).collect();
                let Some(rows) = plan.record(&sel, &spans, &back) else {
                    return Ok(None);
                };
                acc.add_pieces(round.iter().zip(&outs).zip(&new).filter(|(_, &n)| n).map(|(po, _)| po));
                let tables = merge::merge(&round, outs, nbuffers, threads);
                emit(batches(tables, rows, &mut acc), plan.progress())?;
            }
        }
    }
    let mut meta = acc.meta(&lay, &header, events.count);
    meta.fields_not_decoded = opts.fields_of.as_ref().map(|_| acc.fields_not_decoded.iter().cloned().collect());
    skipped.merge(acc.skipped);
    meta.import_errors = skipped.0;
    Ok(Some(meta))
}

/// MADV_DONTNEED over the whole pages inside `data` (a read-only file mapping: the pages fault back in
/// from the file if read again).
fn release_pages(data: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = data.as_ptr() as usize;
        let (lo, hi) = (start.div_ceil(page) * page, (start + data.len()) / page * page);
        if hi > lo {
            // SAFETY: [lo, hi) lies inside `data`, a read-only file mapping (the caller says so): its
            // contents do not change, the kernel reads them back from the file when touched again.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
        }
    }
}

/// A table's columns as an Arrow record batch.
fn record_batch(t: Table, lay: &Layout, has_instances: bool, printk: &HashMap<u64, Vec<u8>>) -> RecordBatch {
    // an event's own `cpu` field (absent when its fields were not decoded: Options::fields_of)
    let own_cpu = t.cols.iter().any(|b| b.spec.name == "cpu");
    let mut fields = vec![
        Field::new("ts", DataType::Int64, false),
        Field::new(if own_cpu { "buffer_cpu" } else { "cpu" }, DataType::Int32, false),
    ];
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::new(ScalarBuffer::from(t.ts), None)),
        Arc::new(Int32Array::new(ScalarBuffer::from(t.cpu), None)),
    ];
    for (b, &char_pointer) in t.cols.into_iter().zip(&t.ty.char_pointer) {
        let name = b.spec.name.clone();
        let array = constant_strings(&b, char_pointer && t.ty.known, printk).unwrap_or_else(|| b.into_arrow());
        fields.push(Field::new(name, array.data_type().clone(), array.null_count() > 0));
        arrays.push(array);
    }
    if has_instances {
        let names: Vec<Option<&str>> = lay.buffers.iter().map(|b| b.name.as_deref()).collect();
        let array: LargeStringArray = if t.buffer.is_empty() {
            std::iter::repeat_n(names[0], arrays[0].len()).collect()
        } else {
            t.buffer.iter().map(|&b| names[b as usize]).collect()
        };
        fields.push(Field::new("instance", DataType::LargeUtf8, true));
        arrays.push(Arc::new(array));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("columns of the table's length")
}

/// A `char *` field whose every non-zero value is the address of a string of the printk formats (where
/// tracepoint_string() puts constant strings: rcu_utilization `s`, bprint `fmt`): those strings, null
/// for NULL, as trace-cmd prints them. Any other address (a user or heap pointer) keeps its integers.
fn constant_strings(b: &Builder, char_pointer: bool, printk: &HashMap<u64, Vec<u8>>) -> Option<ArrayRef> {
    let Data::Int(ints) = &b.data else { return None };
    if !char_pointer || printk.is_empty() {
        return None;
    }
    let n = ints.len();
    let pointed: BTreeSet<u64> = (0..n).map(|i| ints.get(i)).filter(|&v| v != 0).collect();
    if pointed.is_empty() || !pointed.iter().all(|a| printk.contains_key(a)) {
        return None;
    }
    let texts: HashMap<u64, String> =
        pointed.iter().map(|a| (*a, String::from_utf8_lossy(&printk[a]).into_owned())).collect();
    let array: LargeStringArray = (0..n).map(|i| texts.get(&ints.get(i)).map(String::as_str)).collect();
    Some(Arc::new(array))
}

/// Counts per buffer, for the metadata.
#[derive(Default, Clone)]
struct BufferCounts {
    lost: BTreeMap<u32, u64>,
    uncounted: BTreeMap<u32, u64>,
    pages: u64,
    records: u64,
    short_fields: u64,
    missing_formats: u64,
    bad_ts: u64,
    /// records earlier than the one before them, per CPU
    backwards: BTreeMap<u32, u64>,
    cpus: BTreeSet<u32>,
    /// rows per table, and the event types met
    events: BTreeMap<String, u64>,
    types: BTreeMap<u16, Arc<events::EventType>>,
}

struct Accounting {
    /// the top buffer first (empty when the file has none), then the named instances in file order
    buffers: Vec<BufferCounts>,
    /// layout buffer index -> index in `buffers`
    slot: Vec<usize>,
    skipped: ImportLog,
    /// tables whose fields were not decoded (Options::fields_of)
    fields_not_decoded: BTreeSet<String>,
}

impl Accounting {
    fn new(lay: &Layout) -> Accounting {
        let top_present = lay.buffers.first().is_some_and(|b| b.name.is_none());
        let offset = if top_present { 0 } else { 1 };
        Accounting {
            buffers: vec![BufferCounts::default(); lay.buffers.len() + offset],
            slot: (0..lay.buffers.len()).map(|b| b + offset).collect(),
            skipped: ImportLog::default(),
            fields_not_decoded: BTreeSet::new(),
        }
    }

    /// Counts of decoded pieces, each given once, in data order.
    fn add_pieces<'p>(&mut self, pieces: impl Iterator<Item = (&'p decode::Piece, &'p decode::PieceOut)>) {
        let mut prev: Option<(usize, u32, i64)> = None;
        for (p, o) in pieces {
            let b = &mut self.buffers[self.slot[p.buffer]];
            b.cpus.insert(p.cpu);
            *b.lost.entry(p.cpu).or_insert(0) += o.stats.lost;
            if o.stats.lost_unknown_pages > 0 {
                *b.uncounted.entry(p.cpu).or_insert(0) += o.stats.lost_unknown_pages;
            }
            b.pages += o.stats.pages;
            b.short_fields += o.short_fields;
            b.missing_formats += o.missing_formats;
            b.bad_ts += o.stats.bad_ts;
            b.records += o.types.iter().map(|t| t.ts.len() as u64).sum::<u64>();
            let mut back = o.backwards;
            if let (Some((pb, pc, last)), Some(first)) = (prev, o.first_ts) {
                back += (pb == p.buffer && pc == p.cpu && first < last) as u64;
            }
            if back > 0 {
                *b.backwards.entry(p.cpu).or_insert(0) += back;
            }
            if let Some(last) = o.last_ts {
                prev = Some((p.buffer, p.cpu, last));
            }
            if let Some(at) = o.stats.first_bad_ts {
                self.skipped.add(
                    "tracedat_timestamp_out_of_range",
                    o.stats.bad_ts,
                    at as u64,
                    "record timestamp beyond the signed 64-bit ns range",
                );
            }
        }
    }

    /// Rows of a table (per layout buffer).
    fn add_rows(&mut self, ty: &Arc<events::EventType>, rows_per_buffer: &[u64]) {
        for (lb, &rows) in rows_per_buffer.iter().enumerate() {
            if rows > 0 {
                let b = &mut self.buffers[self.slot[lb]];
                *b.events.entry(ty.table.clone()).or_insert(0) += rows;
                b.types.insert(ty.id, ty.clone());
            }
        }
    }

    /// One buffer's warnings (as the file's own if `top`) and lost events.
    fn buffer_warnings(
        b: &BufferCounts,
        lay: &Layout,
        top: bool,
        cpustats: &BTreeMap<u32, String>,
    ) -> (Vec<String>, meta::LostEvents) {
        let mut w = if top { lay.warnings.clone() } else { Vec::new() };
        w.extend(b.types.values().filter_map(|t| t.warning.clone()));
        for t in b.types.values().filter(|t| !t.known) {
            w.push(format!(
                "{} events with id {} have no usable format in the file (table {}, raw bytes in `payload`)",
                b.events.get(&t.table).copied().unwrap_or(0),
                t.id,
                t.table
            ));
        }
        let lost = meta::lost_events(&b.lost, &b.uncounted, cpustats);
        if lost.total() > 0 {
            w.push(format!(
                "{} events lost in the ring buffer (per CPU: {})",
                lost.total(),
                meta::per_cpu_text(&lost.per_cpu)
            ));
        }
        w.extend(lost.warnings.iter().cloned());
        if b.short_fields > 0 {
            w.push(format!("{} field values lay beyond their record's end and read as 0", b.short_fields));
        }
        if b.missing_formats > 0 {
            w.push(format!("{} bprint/bputs events reference printk formats missing from the file", b.missing_formats));
        }
        if b.bad_ts > 0 {
            w.push(format!(
                "{} records have timestamps beyond the signed 64-bit ns range (corrupt ring-buffer \
                            page timestamps): not imported",
                b.bad_ts
            ));
        }
        for (cpu, n) in &b.backwards {
            w.push(format!(
                "CPU {cpu}: {n} records are earlier than the record before them on that CPU (ring-buffer \
                            pages out of time order); every table is ordered by timestamp"
            ));
        }
        if lay.has_time_shift || !lay.guests.is_empty() {
            w.push("host/guest time synchronisation data present but not applied".into());
        }
        (w, lost)
    }

    fn meta(&self, lay: &Layout, header: &format::PageHeader, event_formats: usize) -> Meta {
        let uname = text::parse_uname(lay.uname.as_deref());
        let top_buf = lay.buffers.first().filter(|b| b.name.is_none());
        let empty = BTreeMap::new();
        let top = &self.buffers[0];
        let (mut warnings, top_lost) = Self::buffer_warnings(top, lay, true, top_buf.map_or(&empty, |b| &b.cpustats));
        let top_has_data = top_buf.is_some_and(|b| b.cpus.iter().any(|c| c.has_data()));
        let mut lost_per_cpu = top_lost.per_cpu.clone();
        let mut exact = top_lost.exact;
        let mut instance_buffers = Vec::new();
        for (lb, buf) in lay.buffers.iter().enumerate().filter(|(_, b)| b.name.is_some()) {
            let name = buf.name.clone().unwrap_or_default();
            let counts = &self.buffers[self.slot[lb]];
            let (w, lost) = Self::buffer_warnings(counts, lay, false, &buf.cpustats);
            warnings.extend(w.into_iter().map(|w| format!("instance {}: {w}", bytes::repr(&name))));
            let clock = buf.clock.clone().or_else(|| lay.clock.clone());
            if top_has_data && clock != lay.clock {
                warnings.push(format!(
                    "instance {} records on the {} clock, the top buffer on {}: their timestamps \
                                       are not comparable",
                    bytes::repr(&name),
                    py_opt(&clock),
                    py_opt(&lay.clock)
                ));
            }
            for (c, n) in &lost.per_cpu {
                *lost_per_cpu.entry(*c).or_insert(0) += n;
            }
            exact &= lost.exact;
            instance_buffers.push((
                name,
                InstanceBuffer {
                    clock,
                    events: counts.events.clone(),
                    lost_events: lost.total(),
                    lost_events_per_cpu: meta::str_keys(&lost.per_cpu),
                    lost_events_exact: lost.exact,
                },
            ));
        }
        let clock = if top_has_data || instance_buffers.is_empty() {
            lay.clock.clone()
        } else {
            instance_buffers[0].1.clock.clone()
        };
        let mut instances: Vec<String> = instance_buffers.iter().map(|(n, _)| n.clone()).collect();
        instances.sort();
        let cpus_with_data: BTreeSet<u32> = self.buffers.iter().flat_map(|b| b.cpus.iter().copied()).collect();
        Meta {
            format_version: lay.version.to_string(),
            compression: lay.codec.map(|c| c.name().to_string()),
            clock,
            cpus: lay.cpus as u64,
            page_size: lay.page_size as u64,
            kernel: Kernel {
                release: uname.release,
                version: uname.version,
                arch: uname.arch,
                uname: uname.uname,
                long_size: lay.long_size as u64,
                kernel_long_size: header.commit_size as u64,
                endian: if lay.big_endian { "big" } else { "little" }.into(),
            },
            tracer_version: lay.tracer_version.clone(),
            ts_offset_ns: lay.ts_offset_ns.saturating_add(lay.date_offset_ns),
            tsc2nsec: lay.tsc2nsec.map(|(m, s, o)| vec![m as u64, s as u64, o]),
            lost_events: lost_per_cpu.values().sum(),
            lost_events_per_cpu: meta::str_keys(&lost_per_cpu),
            lost_events_exact: exact,
            lost_pages_without_count_per_cpu: meta::str_keys(&top.uncounted),
            saved_cmdlines: lay.cmdlines.lines().filter(|l| !l.trim().is_empty()).count() as u64,
            ring_buffer_pages: self.buffers.iter().map(|b| b.pages).sum(),
            records: self.buffers.iter().map(|b| b.records).sum(),
            instances,
            instance_buffers,
            event_formats: event_formats as u64,
            cpus_with_data: cpus_with_data.into_iter().map(u64::from).collect(),
            undecoded_bytes_per_cpu: meta::str_keys(&lay.undecoded_bytes),
            warnings,
            import_errors: BTreeMap::new(),
            fields_not_decoded: None,
        }
    }
}

/// Python's repr of an optional str (`'boot'` or `None`).
fn py_opt(s: &Option<String>) -> String {
    s.as_deref().map_or("None".into(), bytes::repr)
}
