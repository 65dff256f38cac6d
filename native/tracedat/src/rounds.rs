//! Decoding in rounds, so that memory stays bounded whatever the trace length: which pieces each round
//! decodes, and which rows of its merged tables are final.
//!
//! Every CPU stream (a buffer's CPU: its pieces, consecutive in data order) gives each round its next
//! pieces, about `round_bytes` in all. After a round, the watermark W is the earliest of the last timestamps
//! decoded on the streams not finished yet: no row still to come is earlier than W, provided that each
//! stream's timestamps never go backwards (checked; otherwise the plan gives up and the caller decodes the
//! whole file). The rows of the round's tables in [previous W, W) are final. A piece holding rows at or
//! after W is decoded again in the next round (its earlier rows are not emitted twice), so that every round
//! merges whole pieces in data order and the order of ties is the whole decode's: (ts, data order).
//! A stream already ahead of the others by more than the last round's progress waits for them.

/// First and last timestamps of a decoded piece (None: no records).
pub type Span = (Option<i64>, Option<i64>);

struct Stream {
    /// its pieces: [start, end)
    end: usize,
    /// first piece decoded again next round (rows at or after the watermark)
    keep: usize,
    /// first piece never decoded
    next: usize,
    /// next value of `next` once the round is recorded
    pending: usize,
    /// last timestamp decoded on the stream
    last_ts: Option<i64>,
    /// last timestamp of the pieces dropped before `keep`
    dropped_last: Option<i64>,
}

pub struct Plan {
    streams: Vec<Stream>,
    bytes: Vec<usize>,
    spans: Vec<Span>,
    round_bytes: usize,
    /// rows before it were emitted (None: none yet)
    low: Option<i64>,
    /// progress of the last round's watermark (None: no round yet)
    step: Option<i64>,
    done: bool,
}

/// The rows a round emits: ts in [low, high) (None: unbounded).
pub type Rows = (Option<i64>, Option<i64>);

impl Plan {
    /// `streams`: per piece in data order, its stream key (buffer, CPU); `bytes`: its size.
    pub fn new(streams: &[(usize, u32)], bytes: &[usize], round_bytes: usize) -> Plan {
        let mut out: Vec<Stream> = Vec::new();
        for (i, key) in streams.iter().enumerate() {
            if i == 0 || streams[i - 1] != *key {
                out.push(Stream { end: i, keep: i, next: i, pending: i, last_ts: None, dropped_last: None });
            }
            if let Some(s) = out.last_mut() {
                s.end = i + 1;
            }
        }
        Plan {
            streams: out,
            bytes: bytes.to_vec(),
            spans: vec![(None, None); bytes.len()],
            round_bytes: round_bytes.max(1),
            low: None,
            step: None,
            done: false,
        }
    }

    /// The pieces of the next round, in data order (None: every row was emitted).
    pub fn next_round(&mut self) -> Option<Vec<usize>> {
        if self.done {
            return None;
        }
        let limit = match (self.low, self.step) {
            (Some(low), Some(step)) => Some(low.saturating_add(step)),
            _ => None,
        };
        let joins: Vec<bool> = (self.streams.iter())
            .map(|s| s.next < s.end && (limit.is_none() || s.last_ts.is_none_or(|t| Some(t) <= limit)))
            .collect();
        let budget = (self.round_bytes / joins.iter().filter(|&&j| j).count().max(1)).max(1);
        let mut sel = Vec::new();
        for (s, join) in self.streams.iter_mut().zip(joins) {
            sel.extend(s.keep..s.next);
            s.pending = s.next;
            let mut added = 0;
            while join && s.pending < s.end && (added == 0 || added < budget) {
                added += self.bytes[s.pending].max(1);
                sel.push(s.pending);
                s.pending += 1;
            }
        }
        if sel.is_empty() {
            self.done = true;
            return None;
        }
        Some(sel)
    }

    /// Records the round's decoded pieces (`sel` from next_round, `spans` and `backwards` per piece of
    /// `sel`): the rows to emit, or None when a stream's timestamps go backwards (no order can be kept).
    pub fn record(&mut self, sel: &[usize], spans: &[Span], backwards: &[u64]) -> Option<Rows> {
        for (k, &p) in sel.iter().enumerate() {
            if backwards[k] > 0 {
                return None;
            }
            self.spans[p] = spans[k];
        }
        for s in self.streams.iter_mut() {
            let mut prev = s.dropped_last;
            for p in s.keep..s.pending {
                if let (Some(first), Some(last)) = self.spans[p] {
                    if prev.is_some_and(|q| first < q) {
                        return None;
                    }
                    prev = Some(last);
                }
            }
            s.last_ts = prev;
            s.next = s.pending;
        }
        let unfinished: Vec<&Stream> = self.streams.iter().filter(|s| s.next < s.end).collect();
        let high = if unfinished.is_empty() {
            None
        } else if unfinished.iter().any(|s| s.last_ts.is_none()) {
            Some(self.low.unwrap_or(i64::MIN))
        } else {
            unfinished.iter().filter_map(|s| s.last_ts).min()
        };
        let rows = (self.low, high);
        match high {
            None => self.done = true,
            Some(h) => {
                self.step = Some(self.low.map_or(i64::MAX, |l| h.saturating_sub(l)));
                self.low = Some(h);
                for s in self.streams.iter_mut() {
                    // pieces wholly before the watermark are done; the rest is decoded again
                    while s.keep < s.next && self.spans[s.keep].1.is_none_or(|last| last < h) {
                        if let Some(last) = self.spans[s.keep].1 {
                            s.dropped_last = Some(last);
                        }
                        s.keep += 1;
                    }
                }
            }
        }
        Some(rows)
    }

    /// (ring-buffer bytes decoded so far, in all): how far the decode is, for a progress bar.
    pub fn progress(&self) -> (usize, usize) {
        let mut done = 0;
        let mut start = 0;
        for s in &self.streams {
            done += self.bytes[start..s.next].iter().sum::<usize>();
            start = s.end;
        }
        (done, self.bytes.iter().sum())
    }

    /// Whether piece `p` is decoded for the first time in the round being planned (its counts go in once).
    pub fn is_new(&self, p: usize) -> bool {
        self.streams.iter().any(|s| (s.next..s.pending).contains(&p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a plan over pieces whose records are `ts` lists; returns the rows emitted in order.
    fn run(streams: &[(usize, u32)], pieces: &[Vec<i64>], round_bytes: usize) -> Option<Vec<i64>> {
        let bytes: Vec<usize> = pieces.iter().map(|p| p.len().max(1)).collect();
        let mut plan = Plan::new(streams, &bytes, round_bytes);
        let mut out = Vec::new();
        let mut rounds = 0;
        while let Some(sel) = plan.next_round() {
            rounds += 1;
            assert!(rounds < 1000, "the plan does not progress");
            let spans: Vec<Span> =
                sel.iter().map(|&p| (pieces[p].first().copied(), pieces[p].last().copied())).collect();
            let back: Vec<u64> =
                sel.iter().map(|&p| pieces[p].windows(2).filter(|w| w[1] < w[0]).count() as u64).collect();
            let mut rows: Vec<i64> = sel.iter().flat_map(|&p| pieces[p].iter().copied()).collect();
            let (lo, hi) = plan.record(&sel, &spans, &back)?;
            rows.retain(|&t| lo.is_none_or(|l| t >= l) && hi.is_none_or(|h| t < h));
            rows.sort();
            out.extend(rows);
        }
        Some(out)
    }

    #[test]
    fn every_row_once_in_order() {
        let streams = [(0, 0), (0, 0), (0, 0), (0, 1), (0, 1), (0, 2)];
        let pieces = vec![vec![1, 4, 9], vec![9, 12], vec![20, 31], vec![2, 3], vec![5, 40], vec![7, 8, 9, 50]];
        let mut all: Vec<i64> = pieces.iter().flatten().copied().collect();
        all.sort();
        for round_bytes in [1, 2, 3, 5, 100] {
            assert_eq!(run(&streams, &pieces, round_bytes), Some(all.clone()), "round_bytes {round_bytes}");
        }
    }

    #[test]
    fn progress_counts_each_piece_once() {
        let streams = [(0, 0), (0, 0), (0, 1), (0, 1)];
        let mut plan = Plan::new(&streams, &[10, 20, 30, 40], 1);
        assert_eq!(plan.progress(), (0, 100));
        let mut last = 0;
        while let Some(sel) = plan.next_round() {
            let spans: Vec<Span> = sel.iter().map(|&p| (Some(p as i64), Some(p as i64))).collect();
            plan.record(&sel, &spans, &vec![0; sel.len()]).expect("in order");
            let (done, total) = plan.progress();
            assert!(done >= last && total == 100);
            last = done;
        }
        assert_eq!(last, 100);
    }

    #[test]
    fn empty_pieces_and_streams() {
        let streams = [(0, 0), (0, 0), (0, 1), (1, 0)];
        let pieces = vec![vec![], vec![3, 4], vec![], vec![1, 10]];
        assert_eq!(run(&streams, &pieces, 1), Some(vec![1, 3, 4, 10]));
        assert_eq!(run(&[], &[], 1), Some(vec![]));
    }

    #[test]
    fn backwards_gives_up() {
        let streams = [(0, 0), (0, 0), (0, 1)];
        assert_eq!(run(&streams, &[vec![5, 6], vec![4, 7], vec![1, 9]], 1), None);
        assert_eq!(run(&streams, &[vec![5, 3], vec![7], vec![1, 9]], 100), None);
    }

    #[test]
    fn a_stream_far_ahead_waits() {
        // stream 1 covers the whole span in its first piece; stream 0 advances piece by piece
        let streams = [(0, 0), (0, 0), (0, 0), (0, 0), (0, 1), (0, 1)];
        let pieces = vec![vec![1, 2], vec![3, 4], vec![5, 6], vec![7, 8], vec![1, 100], vec![200]];
        let mut all: Vec<i64> = pieces.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(run(&streams, &pieces, 2), Some(all));
    }
}
