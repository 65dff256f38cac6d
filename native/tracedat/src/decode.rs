//! The decode: every buffer's per-CPU ring-buffer data cut into pieces (about PIECE_BYTES of pages:
//! v7 compressed chunks, or stored pages), decoded on all cores. A piece inflates its chunks one by
//! one into a reused buffer and walks their pages at once, pushing every record into that piece's
//! columns of its event type. The pieces, in data order, are then merged per table (merge.rs).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::columns::{Builder, Env, Filler, Syms};
use crate::error::Error;
use crate::events::{EventType, Events};
use crate::inflate::{Codec, Inflater};
use crate::layout::{Chunk, CpuPages, Layout};
use crate::pages::{walk, Clock, PageLayout, PageStats};

/// Data a piece holds (inflated bytes for compressed chunks), by default.
pub const PIECE_BYTES: usize = 8 << 20;

/// One place of ring-buffer pages: stored in the file, or chunk `index` of its CPU's compressed chunks.
#[derive(Debug, Clone, Copy)]
enum Block {
    Stored { offset: usize, size: usize },
    Chunk { chunk: Chunk, index: usize },
}

/// Consecutive pages of one CPU of one buffer.
#[derive(Debug, Clone)]
pub struct Piece {
    pub buffer: usize,
    pub cpu: u32,
    blocks: Vec<Block>,
}

impl Piece {
    /// The ring-buffer bytes it holds (inflated).
    pub fn bytes(&self) -> usize {
        (self.blocks.iter())
            .map(|b| match b {
                Block::Stored { size, .. } => *size,
                Block::Chunk { chunk, .. } => chunk.inflated,
            })
            .sum()
    }
}

/// The pieces of every buffer's CPU data, in data order (buffers, their CPUs in file order, pages), of
/// about `piece_bytes` each (at least a page or a chunk).
pub fn pieces(lay: &Layout, piece_bytes: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    for (b, buf) in lay.buffers.iter().enumerate() {
        for cd in buf.cpus.iter().filter(|c| c.has_data()) {
            let mut cur = Piece { buffer: b, cpu: cd.cpu, blocks: Vec::new() };
            let mut bytes = 0;
            let mut add = |blk: Block, n: usize, out: &mut Vec<Piece>| {
                if bytes + n > piece_bytes && !cur.blocks.is_empty() {
                    out.push(std::mem::replace(&mut cur, Piece { buffer: b, cpu: cd.cpu, blocks: Vec::new() }));
                    bytes = 0;
                }
                cur.blocks.push(blk);
                bytes += n;
            };
            match &cd.pages {
                CpuPages::Stored { offset, size } => {
                    let step = (piece_bytes / lay.page_size).max(1) * lay.page_size;
                    for at in (0..*size).step_by(step) {
                        let n = step.min(size - at);
                        add(Block::Stored { offset: offset + at, size: n }, n, &mut out);
                    }
                }
                CpuPages::Chunks(chunks) => {
                    for (index, &chunk) in chunks.iter().enumerate() {
                        add(Block::Chunk { chunk, index }, chunk.inflated, &mut out);
                    }
                }
            }
            if !cur.blocks.is_empty() {
                out.push(cur);
            }
        }
    }
    out
}

/// The records of one event type in one piece.
pub struct TypeCols {
    pub ty: Arc<EventType>,
    pub ts: Vec<i64>,
    pub cols: Vec<Builder>,
}

/// A type's columns while its piece is decoded.
struct Filling {
    ty: Arc<EventType>,
    ts: Vec<i64>,
    fill: Filler,
}

/// A decoded piece.
#[derive(Default)]
pub struct PieceOut {
    pub types: Vec<TypeCols>,
    pub stats: PageStats,
    pub short_fields: u64,
    pub missing_formats: u64,
    /// timestamps of its first and last record (None: no records)
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// records earlier than the record before them (the merge orders such a piece first)
    pub backwards: u64,
}

/// Whether the records of `table` get their fields decoded under Options::fields_of (`keep`; None: every
/// table's). A table named `system:name` (two systems share the name) or `system:name#id` (a damaged file
/// with two ids for one name) is kept by its event name too.
pub fn fields_decoded(keep: Option<&std::collections::HashSet<String>>, table: &str) -> bool {
    let event = table.rsplit(':').next().unwrap_or(table);
    let event = event.split('#').next().unwrap_or(event);
    keep.is_none_or(|keep| keep.contains(table) || keep.contains(event))
}

/// Everything the decode of a piece reads.
pub struct Ctx<'a> {
    pub data: &'a [u8],
    pub lay: &'a Layout,
    pub pages: PageLayout,
    pub clock: Clock,
    pub events: &'a Events,
    pub printk: &'a std::collections::HashMap<u64, Vec<u8>>,
    pub syms: &'a Syms<'a>,
    pub long_size: usize,
    /// gives the pages of a decoded piece's file bytes back to the kernel (a read-only file mapping)
    pub release: Option<fn(&[u8])>,
    /// the tables whose fields are decoded (None: all; the others keep ts and cpu only)
    pub fields_of: Option<&'a std::collections::HashSet<String>>,
}

/// Per-thread scratch: inflate buffer and context, event id -> slot in the piece's types, and the records
/// per byte of pages of each type in the thread's previous piece (to size the next piece's columns).
struct Scratch {
    inflater: Option<Inflater>,
    buf: Vec<u8>,
    slot: Vec<u32>,
    per_byte: std::collections::HashMap<u16, f64>,
}

fn label(ctx: &Ctx, p: &Piece) -> String {
    match &ctx.lay.buffers[p.buffer].name {
        Some(n) => format!("instance {} CPU {}", crate::bytes::repr(n), p.cpu),
        None => format!("CPU {}", p.cpu),
    }
}

fn decode_piece(ctx: &Ctx, p: &Piece, sc: &mut Scratch) -> Result<PieceOut, Error> {
    let mut env = Env {
        be: ctx.lay.big_endian,
        long_size: ctx.long_size,
        printk: ctx.printk,
        syms: ctx.syms,
        short_fields: 0,
        missing_formats: 0,
    };
    let mut out = PieceOut::default();
    let mut last = i64::MIN;
    let mut first = None;
    let piece_bytes = p.bytes();
    let mut types: Vec<Filling> = Vec::new();
    for blk in &p.blocks {
        let (data, where_): (&[u8], Block) = match *blk {
            Block::Stored { offset, size } => (&ctx.data[offset..offset + size], *blk),
            Block::Chunk { chunk, index } => {
                if sc.inflater.is_none() {
                    let codec = ctx.lay.codec.unwrap_or(Codec::Zstd);
                    sc.inflater = Some(Inflater::new(codec).map_err(Error::nowhere)?);
                }
                let inf = sc.inflater.as_mut().expect("created above");
                let src = &ctx.data[chunk.offset..chunk.offset + chunk.size];
                inf.inflate(src, chunk.inflated, &mut sc.buf).map_err(|e| {
                    Error::at(chunk.offset as u64 - 8, format!("{} chunk {index}: {e}", label(ctx, p)))
                        .expected(format!("a valid {} stream", ctx.lay.codec.map_or("", Codec::name)))
                })?;
                (&sc.buf[..], *blk)
            }
        };
        let types = &mut types;
        let slot = &mut sc.slot;
        let per_byte = &sc.per_byte;
        let mut st = PageStats::default();
        let res = walk(data, &ctx.pages, &ctx.clock, &mut st, |ts, id, rec| {
            out.backwards += (ts < last) as u64;
            last = ts;
            first.get_or_insert(ts);
            let mut s = slot[id as usize];
            if s == u32::MAX {
                let ty = ctx.events.get(id);
                s = types.len() as u32;
                slot[id as usize] = s;
                // room for as many records as the previous piece of this thread suggests (+5 %)
                let cap = per_byte.get(&id).map_or(0, |r| (r * piece_bytes as f64 * 1.05) as usize + 16);
                let specs: &[crate::columns::Spec] =
                    if fields_decoded(ctx.fields_of, &ty.table) { &ty.specs } else { &[] };
                types.push(Filling { fill: Filler::new(specs, cap), ty, ts: Vec::with_capacity(cap) });
            }
            let tc = &mut types[s as usize];
            tc.ts.push(ts);
            tc.fill.push(rec, &mut env);
        });
        if let Err(e) = res {
            let what = label(ctx, p);
            return Err(match where_ {
                Block::Stored { offset, .. } => {
                    Error::at((offset + e.pos) as u64, format!("{what} ring buffer: {}", e.msg))
                }
                Block::Chunk { chunk, index } => Error::at(
                    chunk.offset as u64 - 8,
                    format!(
                        "{what} ring buffer, compressed chunk {index}, byte {} (page {}) of the inflated chunk: {}",
                        e.pos,
                        e.pos / ctx.lay.page_size,
                        e.msg
                    ),
                ),
            }
            .expected("a well-formed ring-buffer page"));
        }
        if let (Some(pos), Block::Stored { offset, .. } | Block::Chunk { chunk: Chunk { offset, .. }, .. }) =
            (st.first_bad_ts, where_)
        {
            out.stats.first_bad_ts.get_or_insert(offset + pos);
        }
        out.stats.pages += st.pages;
        out.stats.lost += st.lost;
        out.stats.lost_unknown_pages += st.lost_unknown_pages;
        out.stats.bad_ts += st.bad_ts;
    }
    if let Some(release) = ctx.release {
        let span = |b: &Block| match *b {
            Block::Stored { offset, size } => (offset, offset + size),
            Block::Chunk { chunk, .. } => (chunk.offset, chunk.offset + chunk.size),
        };
        let lo = p.blocks.iter().map(|b| span(b).0).min().unwrap_or(0);
        let hi = p.blocks.iter().map(|b| span(b).1).max().unwrap_or(0);
        release(&ctx.data[lo..hi]);
    }
    sc.per_byte.clear();
    for mut t in types {
        sc.slot[t.ty.id as usize] = u32::MAX;
        sc.per_byte.insert(t.ty.id, t.ts.len() as f64 / piece_bytes.max(1) as f64);
        t.fill.flush(&mut env);
        out.types.push(TypeCols { ty: t.ty, ts: t.ts, cols: t.fill.cols });
    }
    out.first_ts = first;
    out.last_ts = (first.is_some()).then_some(last);
    out.short_fields = env.short_fields;
    out.missing_formats = env.missing_formats;
    Ok(out)
}

/// Decode `pieces` on up to `threads` threads; the outputs in the pieces' order. On errors, the error of
/// the earliest piece in data order (the pieces after it may not have been decoded). `extra`: a check
/// run on one of the threads alongside (the compressed kallsyms section).
pub fn decode_all(
    ctx: &Ctx,
    pieces: &[Piece],
    threads: usize,
    extra: &(dyn Fn() -> Result<(), Error> + Sync),
) -> Result<Vec<PieceOut>, Error> {
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let results: Vec<Mutex<Option<Result<PieceOut, Error>>>> = pieces.iter().map(|_| Mutex::new(None)).collect();
    let extra_result: OnceLock<Result<(), Error>> = OnceLock::new();
    let threads = threads.clamp(1, pieces.len().max(1));
    std::thread::scope(|sc| {
        for t in 0..threads {
            let (next, abort, results, extra_result) = (&next, &abort, &results, &extra_result);
            sc.spawn(move || {
                if t == threads - 1 {
                    let _ = extra_result.set(extra());
                }
                let mut scratch = Scratch {
                    inflater: None,
                    buf: Vec::new(),
                    slot: vec![u32::MAX; 1 << 16],
                    per_byte: Default::default(),
                };
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= pieces.len() || abort.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = decode_piece(ctx, &pieces[k], &mut scratch);
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(pieces.len());
    for r in results {
        match r.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(p)) => out.push(p),
            Some(Err(e)) => return Err(e),
            // pieces are taken in order: one left undecoded follows a piece that failed
            None => return Err(Error::nowhere("internal error: a piece was not decoded")),
        }
    }
    extra_result.into_inner().unwrap_or(Ok(()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::fields_decoded;
    use std::collections::HashSet;

    #[test]
    fn fields_of_keeps_a_table_by_its_name_or_its_event_name() {
        let keep: HashSet<String> = ["sched_switch", "cpu_idle"].iter().map(|s| s.to_string()).collect();
        assert!(fields_decoded(None, "anything"));
        assert!(fields_decoded(Some(&keep), "sched_switch"));
        assert!(fields_decoded(Some(&keep), "sched:sched_switch")); // two systems share the name
        assert!(fields_decoded(Some(&keep), "power:cpu_idle#27")); // a damaged file's second id
        assert!(!fields_decoded(Some(&keep), "sched_stat_runtime"));
        assert!(!fields_decoded(Some(&keep), "sched:sched_switch_x#3"));
    }
}
