//! Even decode work for the streaming trace.dat decode (tracedat_fused): idle threads take over the
//! back half of a busy CPU's remaining chunks.
//!
//! One decode job per CPU leaves a core idle whenever one job takes longer than the others: on the
//! benchmark trace (2 CPUs, 58 and 64 MB inflated) the two jobs ended 1-43 ms apart, and cutting the data
//! into equal-sized parts up front did not help (the same work takes 115-230 ms from run to run on the
//! VM). So the work is shared out as it goes: a job takes its CPU's chunks (v7 compressed chunks, or
//! 1 MiB runs of stored pages) one at a time from the front of a range (`SpanRange`); a thread with
//! nothing left to start splits the range with the most chunks left and takes its back half as a new
//! range (`Share::steal`), which may be split again in turn. Each range is decoded into a *piece* of its
//! CPU. Afterwards the consecutive pieces of a CPU are joined back into one run per event type
//! (`join_pieces`: the longest piece is grown in place and the others copied in, in data order), so the
//! merge by timestamp still sees one run per CPU and the tables are exactly those of one job per CPU.
use std::sync::{Arc, Mutex};

use super::tracedat_columns::Builder;
use super::tracedat_merge::{gather_builder, merge_vec, Plan, Seg};
use super::TypeColumns;

/// Stored (uncompressed) CPU data is walked in pieces of this many bytes (rounded down to whole pages),
/// so that a file mapping's pages can be given back as the walk passes them, and so that another thread
/// can take over part of a CPU's data.
const RAW_PIECE: usize = 1 << 20;
/// A range is split only while it has at least this many chunks left (a v7 chunk inflates to ~40 KB; a
/// stored chunk is 1 MiB).
const MIN_STEAL: usize = 8;

/// Chunks [start, end) of job `job` (a CPU); `claim` = (next chunk to take, end), end lowered by a steal.
pub struct SpanRange {
    pub job: usize,
    pub start: usize,
    claim: Mutex<(usize, usize)>,
}

impl SpanRange {
    /// The next chunk of this range to decode, if any is left.
    pub fn claim(&self) -> Option<usize> {
        let mut c = self.claim.lock().unwrap_or_else(|e| e.into_inner());
        if c.0 < c.1 {
            c.0 += 1;
            return Some(c.0 - 1);
        }
        None
    }

    /// End of the range now (lowered when another thread takes over its back half).
    pub fn end(&self) -> usize {
        self.claim.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// Every range being decoded or waiting to be.
pub struct Share {
    ranges: Mutex<Vec<Arc<SpanRange>>>,
}

impl Share {
    /// The ranges to start with: (job, first chunk, end chunk), in the order threads take them.
    pub fn new(initial: &[(usize, usize, usize)]) -> Share {
        let ranges = initial.iter()
            .map(|&(job, start, end)| Arc::new(SpanRange { job, start, claim: Mutex::new((start, end)) })).collect();
        Share { ranges: Mutex::new(ranges) }
    }

    /// Initial range `k` (as given to `new`).
    pub fn initial(&self, k: usize) -> Arc<SpanRange> {
        self.ranges.lock().unwrap_or_else(|e| e.into_inner())[k].clone()
    }

    /// Split the range with the most chunks left (at least MIN_STEAL): its owner keeps the front half,
    /// the caller gets the back half as a new range.
    pub fn steal(&self) -> Option<Arc<SpanRange>> {
        let mut ranges = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        let (victim, left) = ranges.iter().enumerate()
            .map(|(i, r)| {
                let c = r.claim.lock().unwrap_or_else(|e| e.into_inner());
                (i, c.1 - c.0)
            })
            .max_by_key(|&(i, left)| (left, std::cmp::Reverse(i)))?;
        if left < MIN_STEAL {
            return None;
        }
        let (job, mid, end) = {
            let mut c = ranges[victim].claim.lock().unwrap_or_else(|e| e.into_inner());
            let (mid, end) = (c.0 + (c.1 - c.0) / 2, c.1);
            c.1 = mid;
            (ranges[victim].job, mid, end)
        };
        let r = Arc::new(SpanRange { job, start: mid, claim: Mutex::new((mid, end)) });
        ranges.push(r.clone());
        Some(r)
    }
}

/// Pieces per job forced by ABTEST_FUSED_PIECES (tests only: makes the joins deterministic).
fn forced_pieces() -> Option<usize> {
    std::env::var("ABTEST_FUSED_PIECES").ok().and_then(|v| v.trim().parse::<usize>().ok()).map(|n| n.max(1))
}

/// Stored spans cut into pieces of RAW_PIECE bytes (rounded down to whole pages; the last piece of a span
/// holds the rest); of one page each when pieces are forced (so that even a small CPU's data is split).
pub fn stored_pieces(spans: &[(usize, usize, usize)], page_size: usize) -> Vec<(usize, usize, usize)> {
    let piece = if forced_pieces().is_some() { 1 } else { RAW_PIECE };
    stored_pieces_of(spans, page_size, piece)
}

fn stored_pieces_of(spans: &[(usize, usize, usize)], page_size: usize, piece: usize) -> Vec<(usize, usize, usize)> {
    let step = (piece / page_size.max(1)).max(1) * page_size.max(1);
    let mut out = Vec::new();
    for &(start, size, _) in spans {
        for at in (0..size).step_by(step) {
            let n = step.min(size - at);
            out.push((start + at, n, n));
        }
    }
    out
}

/// Initial ranges for jobs of `spans[j]` chunks taken in `order`: each job whole, or cut into the forced
/// number of ranges of about equal chunk counts.
pub fn initial_ranges(spans: &[usize], order: &[usize]) -> Vec<(usize, usize, usize)> {
    let pieces = forced_pieces().unwrap_or(1);
    let mut out = Vec::with_capacity(order.len() * pieces);
    for &j in order {
        let n = spans[j];
        for p in 0..pieces {
            let (a, b) = (n * p / pieces, n * (p + 1) / pieces);
            // a job without chunks keeps one empty range: its CPU still gets its (empty) statistics
            if b > a || (p == 0 && n == 0) {
                out.push((j, a, b));
            }
        }
    }
    out
}

/// Earliest and latest timestamp of a piece's records (None: no records). Within a piece whose
/// timestamps never go backwards these are its first and last record's.
pub fn ts_span(types: &[TypeColumns]) -> Option<(i64, i64)> {
    let first = types.iter().filter_map(|t| t.ts.first()).min()?;
    let last = types.iter().filter_map(|t| t.ts.last()).max()?;
    Some((*first, *last))
}

/// The first CPU whose consecutive pieces go backwards in time (a piece starting before the previous
/// piece of its CPU ends), given each piece's (cpu, ts_span) in data order.
pub fn backwards_seam(pieces: &[(i32, Option<(i64, i64)>)]) -> Option<i32> {
    let mut end: Option<(i32, i64)> = None;
    for &(cpu, span) in pieces {
        let Some((first, last)) = span else { continue };
        if matches!(end, Some((c, t)) if c == cpu && first < t) {
            return Some(cpu);
        }
        end = Some((cpu, last));
    }
    None
}

/// One event type's runs in data order ([(cpu, columns)]), with the consecutive pieces of each CPU
/// joined into one run.
pub fn join_pieces(parts: Vec<(i32, TypeColumns)>) -> Vec<(i32, TypeColumns)> {
    let mut out: Vec<(i32, TypeColumns)> = Vec::with_capacity(parts.len());
    let mut same: Vec<TypeColumns> = Vec::new();
    let mut cpu = None;
    for (c, tc) in parts {
        if cpu != Some(c) && !same.is_empty() {
            out.push((cpu.unwrap(), concat(std::mem::take(&mut same))));
        }
        cpu = Some(c);
        same.push(tc);
    }
    if let Some(c) = cpu {
        out.push((c, concat(same)));
    }
    out
}

/// Concatenate one CPU's pieces of an event type (in data order) into one run.
fn concat(mut parts: Vec<TypeColumns>) -> TypeColumns {
    if parts.len() == 1 {
        return parts.pop().unwrap();
    }
    let segs: Vec<Seg> = parts.iter().enumerate().map(|(k, p)| (k as u32, 0, p.ts.len() as u32)).collect();
    let rows = parts.iter().map(|p| p.ts.len()).sum();
    let base = (0..parts.len()).max_by_key(|&k| (parts[k].ts.len(), std::cmp::Reverse(k))).unwrap_or(0);
    let plan = Plan { rows, base, lens: parts.iter().map(|p| p.ts.len()).collect(), sel: Vec::new(), segs };
    let (ty, short_rows) = (parts[0].ty, parts.iter().map(|p| p.short_rows).sum());
    let nfields = parts[0].builders.len();
    let mut fields: Vec<Vec<Builder>> = (0..nfields).map(|_| Vec::with_capacity(parts.len())).collect();
    let mut ts_runs = Vec::with_capacity(parts.len());
    for tc in parts {
        assert!(tc.builders.len() == nfields, "same fields in every piece of a type");
        ts_runs.push(tc.ts);
        for (f, b) in fields.iter_mut().zip(tc.builders) {
            f.push(b);
        }
    }
    let segs = &plan.segs;
    let ts = merge_vec(ts_runs, base, segs.len(), |k| (segs[k].0 as usize, 0, segs[k].2 as usize));
    let builders = fields.into_iter().map(|f| gather_builder(f, &plan)).collect();
    TypeColumns { ty, ts, cpu: Vec::new(), builders, var: Vec::new(), stride: None, block: Vec::new(), pending: 0,
                  short_rows }
}

#[cfg(test)]
mod tests {
    use super::{backwards_seam, initial_ranges, stored_pieces_of, Share, RAW_PIECE};

    #[test]
    fn steals_cover_every_chunk_once() {
        let share = Share::new(&[(0, 0, 40), (1, 0, 3)]);
        let (a, b) = (share.initial(0), share.initial(1));
        let mut seen = vec![Vec::new(); 2];
        for _ in 0..5 {
            seen[0].push(a.claim().unwrap());
        }
        while let Some(k) = b.claim() {
            seen[1].push(k);
        }
        let c = share.steal().expect("35 chunks left in job 0");
        assert_eq!((c.job, c.start), (0, 22));
        // [5, 22) has 17 chunks left, [22, 40) 18: the latter is split
        let d = share.steal().expect("18 chunks left in job 0's back range");
        assert_eq!((d.job, d.start), (0, 31));
        for r in [&a, &c, &d] {
            while let Some(k) = r.claim() {
                seen[r.job].push(k);
            }
        }
        assert!(share.steal().is_none());
        seen[0].sort();
        assert_eq!(seen[0], (0..40).collect::<Vec<_>>());
        assert_eq!(seen[1], vec![0, 1, 2]);
    }

    #[test]
    fn initial_ranges_cover_each_job() {
        assert_eq!(initial_ranges(&[5, 0, 2], &[0, 2, 1]), vec![(0, 0, 5), (2, 0, 2), (1, 0, 0)]);
    }

    #[test]
    fn seams_in_time_order() {
        let ok = [(0, Some((1, 5))), (0, None), (0, Some((5, 9))), (1, Some((2, 3))), (1, Some((3, 4)))];
        assert_eq!(backwards_seam(&ok), None);
        let bad = [(0, Some((1, 5))), (1, Some((0, 1))), (1, Some((2, 3))), (1, Some((2, 2))), (1, Some((1, 9)))];
        assert_eq!(backwards_seam(&bad), Some(1));
    }

    #[test]
    fn stored_data_in_whole_page_pieces() {
        let mib = 1 << 20;
        let got = stored_pieces_of(&[(100, 2 * mib + 5 * 4096, 0), (9, 0, 0), (7, 4096, 0)], 4096, RAW_PIECE);
        assert_eq!(got, vec![(100, mib, mib), (100 + mib, mib, mib), (100 + 2 * mib, 5 * 4096, 5 * 4096),
                             (7, 4096, 4096)]);
        // pages larger than a piece: one page per piece
        assert_eq!(stored_pieces_of(&[(0, 3 * 4 * mib, 0)], 4 * mib, RAW_PIECE).len(), 3);
        // forced pieces (tests): one page each
        assert_eq!(stored_pieces_of(&[(0, 5 * 4096, 0)], 4096, 1).len(), 5);
    }
}
