//! Event-stream plumbing shared by the simulators: several time-sorted tables walked together in
//! timestamp order, one group of equal timestamps at a time, and dense indices for pids and CPUs.
use std::collections::HashMap;

/// One table's timestamps, walked in time order (stable: rows of equal timestamps keep their order).
/// A table that is not sorted by `ts` is walked through a stable argsort.
pub struct Stream<'a> {
    ts: &'a [i64],
    order: Option<Vec<u32>>,
    pos: usize,
}

impl<'a> Stream<'a> {
    pub fn new(ts: &'a [i64]) -> Self {
        let sorted = ts.windows(2).all(|w| w[0] <= w[1]);
        let order = if sorted {
            None
        } else {
            let mut o: Vec<u32> = (0..ts.len() as u32).collect();
            o.sort_by_key(|&i| ts[i as usize]);
            Some(o)
        };
        Stream { ts, order, pos: 0 }
    }

    fn row(&self, pos: usize) -> usize {
        match &self.order {
            None => pos,
            Some(o) => o[pos] as usize,
        }
    }

    fn peek(&self) -> Option<i64> {
        (self.pos < self.ts.len()).then(|| self.ts[self.row(self.pos)])
    }
}

/// Walks several streams in timestamp order: `next_group` yields every row (stream index, row) of the
/// smallest pending timestamp, streams in the order they were given, rows in stream order.
pub struct Merger<'a> {
    streams: Vec<Stream<'a>>,
    /// each stream's next timestamp (i64::MAX when it is done)
    heads: Vec<i64>,
}

impl<'a> Merger<'a> {
    pub fn new(ts: Vec<&'a [i64]>) -> Self {
        let streams: Vec<Stream> = ts.into_iter().map(Stream::new).collect();
        let heads = streams.iter().map(|s| s.peek().unwrap_or(i64::MAX)).collect();
        Merger { streams, heads }
    }

    /// Fills `group` with (stream, row) of the next timestamp; None when every stream is done.
    #[inline]
    pub fn next_group(&mut self, group: &mut Vec<(u8, u32)>) -> Option<i64> {
        group.clear();
        let mut t = i64::MAX;
        for &h in &self.heads {
            t = t.min(h);
        }
        if t == i64::MAX {
            return None;
        }
        for (k, s) in self.streams.iter_mut().enumerate() {
            if self.heads[k] != t {
                continue;
            }
            let n = s.ts.len();
            loop {
                group.push((k as u8, s.row(s.pos) as u32));
                s.pos += 1;
                if s.pos >= n {
                    self.heads[k] = i64::MAX;
                    break;
                }
                let next = s.ts[s.row(s.pos)];
                if next != t {
                    self.heads[k] = next;
                    break;
                }
            }
        }
        Some(t)
    }
}

/// Dense indices 0.. for non-negative integer ids (pids, CPUs), in order of first use. Ids up to a
/// limit go through a table, larger ones (garbage in a damaged trace) through a hash map.
pub struct DenseIds {
    slot: Vec<u32>,
    big: HashMap<i32, u32>,
    pub ids: Vec<i32>,
}

const NONE: u32 = u32::MAX;
/// Ids below this are mapped through a table (pid_max is at most 4 M on Linux).
const TABLE_LIMIT: i32 = 1 << 23;

impl DenseIds {
    /// `max_id`: the largest id expected (sizes the table).
    pub fn new(max_id: i32) -> Self {
        DenseIds {
            slot: vec![NONE; (max_id.clamp(-1, TABLE_LIMIT - 1) + 1) as usize],
            big: HashMap::new(),
            ids: Vec::new(),
        }
    }

    #[inline]
    pub fn get(&self, id: i32) -> Option<usize> {
        if id < 0 {
            return None;
        }
        match self.slot.get(id as usize) {
            Some(&s) if s != NONE => Some(s as usize),
            Some(_) => None,
            None => self.big.get(&id).map(|&s| s as usize),
        }
    }

    /// The index of `id` (>= 0), assigned on first use; None for negative ids.
    pub fn get_or_insert(&mut self, id: i32) -> Option<usize> {
        if id < 0 {
            return None;
        }
        let next = self.ids.len() as u32;
        let s = match self.slot.get_mut(id as usize) {
            Some(s) => s,
            None => self.big.entry(id).or_insert(NONE),
        };
        if *s == NONE {
            *s = next;
            self.ids.push(id);
        }
        Some(*s as usize)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Largest value of some i32 columns (-1 when all are empty).
pub fn max_of(cols: &[&[i32]]) -> i32 {
    cols.iter().flat_map(|c| c.iter().copied()).max().unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merger_groups_equal_timestamps_in_stream_order() {
        let a = [1i64, 3, 3, 7];
        let b = [3i64, 2, 9]; // unsorted: walked as 2, 3, 9
        let mut m = Merger::new(vec![&a, &b]);
        let mut g = Vec::new();
        let mut seen = Vec::new();
        while let Some(t) = m.next_group(&mut g) {
            seen.push((t, g.clone()));
        }
        assert_eq!(
            seen,
            vec![
                (1, vec![(0, 0)]),
                (2, vec![(1, 1)]),
                (3, vec![(0, 1), (0, 2), (1, 0)]),
                (7, vec![(0, 3)]),
                (9, vec![(1, 2)]),
            ]
        );
    }

    #[test]
    fn dense_ids() {
        let mut d = DenseIds::new(10);
        assert_eq!(d.get_or_insert(7), Some(0));
        assert_eq!(d.get_or_insert(3), Some(1));
        assert_eq!(d.get_or_insert(7), Some(0));
        assert_eq!(d.get_or_insert(1 << 30), Some(2));
        assert_eq!(d.get_or_insert(-1), None);
        assert_eq!(d.get(3), Some(1));
        assert_eq!(d.get(4), None);
        assert_eq!(d.get(1 << 30), Some(2));
        assert_eq!(d.ids, vec![7, 3, 1 << 30]);
    }
}
