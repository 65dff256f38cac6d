//! Ordering of decoded rows by timestamp (stable: ties keep file order), done once in the decoder so
//! that the Python side receives tables already sorted by ts (and flags them sorted).
use crate::compact::{CompactSwitch, CompactWaking};
use crate::packets::Rails;
use crate::table::{Column, Data, Table};
use rustc_hash::FxHashMap;

/// Stable permutation that orders `ts` ascending, or None when it already is. (The rows come as runs
/// already in order, e.g. one per CPU bundle: the standard stable sort merges such runs in about linear
/// time.)
pub fn argsort_ts(ts: &[i64]) -> Option<Vec<u32>> {
    if ts.is_sorted() {
        return None;
    }
    let mut perm: Vec<u32> = (0..ts.len() as u32).collect();
    perm.sort_by_key(|&i| ts[i as usize]);
    Some(perm)
}

#[inline]
fn gather<T: Copy>(v: &[T], perm: &[u32]) -> Vec<T> {
    perm.iter().map(|&i| v[i as usize]).collect()
}

fn permute_column(c: &mut Column, perm: &[u32]) {
    if c.data.len() == 0 {
        return; // written by no row
    }
    match &mut c.data {
        Data::I32(v) => *v = gather(v, perm),
        Data::I64(v) => *v = gather(v, perm),
        Data::U32(v) => *v = gather(v, perm),
        Data::U64(v) => *v = gather(v, perm),
        Data::Bool(v) => *v = gather(v, perm),
        Data::F64(v) => *v = gather(v, perm),
        Data::Str(v) => *v = gather(v, perm),
    }
    if let Some(m) = &mut c.valid {
        *m = gather(m, perm);
    }
}

/// Sort a finished table (columns padded to the row count) by ts.
pub fn sort_table(t: &mut Table) {
    if let Some(perm) = argsort_ts(&t.ts) {
        t.ts = gather(&t.ts, &perm);
        t.cpu = gather(&t.cpu, &perm);
        for c in &mut t.cols {
            permute_column(c, &perm);
        }
    }
}

/// prev_* of compact sched switches, filled by `sort_compact_switch` (valid = false: first on its CPU).
#[derive(Default)]
pub struct PrevTask {
    pub pid: Vec<i32>,
    pub prio: Vec<i32>,
    pub comm: Vec<u32>,
    pub valid: Vec<bool>,
}

/// CPU number -> dense slot 0.. (direct table for ordinary CPU numbers, a map for odd ones).
#[derive(Default)]
pub struct CpuSlots {
    direct: Vec<u32>,
    far: FxHashMap<i32, u32>,
    pub len: usize,
}

impl CpuSlots {
    pub const DIRECT: i32 = 4096;

    #[inline]
    pub fn slot(&mut self, cpu: i32) -> usize {
        if (0..Self::DIRECT).contains(&cpu) {
            let c = cpu as usize;
            if self.direct.len() <= c {
                self.direct.resize(c + 1, u32::MAX);
            }
            if self.direct[c] == u32::MAX {
                self.direct[c] = self.len as u32;
                self.len += 1;
            }
            return self.direct[c] as usize;
        }
        let next = self.len as u32;
        let s = *self.far.entry(cpu).or_insert(next);
        if s == next {
            self.len += 1;
        }
        s as usize
    }
}

/// task_rename events: pid -> [(ts, newcomm string id)] in ts order (file order on ties).
#[derive(Default)]
pub struct Renames {
    by_pid: FxHashMap<i32, Vec<(i64, u32)>>,
    /// bit (pid mod 2^16) is set when some pid with those low bits was renamed: most switches skip
    /// the map lookup (one bit test per switch instead of a hash)
    filter: Vec<u64>,
}

impl Renames {
    const FILTER_BITS: u32 = 16;

    /// From the (unsorted) task_rename table: rows with both `pid` and `newcomm`.
    pub fn from_table(t: Option<&Table>) -> Renames {
        let mut r = Renames::default();
        let Some(t) = t else { return r };
        let col = |name: &str| t.cols.iter().find(|c| c.spec.name == name);
        let (Some(pid), Some(comm)) = (col("pid"), col("newcomm")) else { return r };
        let ok = |c: &Column, i: usize| i < c.data.len() && c.valid.as_ref().is_none_or(|m| m[i]);
        let Data::Str(comm_ids) = &comm.data else { return r };
        for i in 0..t.rows() {
            if !ok(pid, i) || !ok(comm, i) {
                continue;
            }
            let p = match &pid.data {
                Data::I32(v) => v[i],
                Data::I64(v) => v[i] as i32,
                Data::U32(v) => v[i] as i32,
                Data::U64(v) => v[i] as i32,
                _ => continue,
            };
            r.by_pid.entry(p).or_default().push((t.ts[i], comm_ids[i]));
        }
        r.filter = vec![0u64; (1usize << Self::FILTER_BITS) / 64];
        for (&p, v) in r.by_pid.iter_mut() {
            v.sort_by_key(|x| x.0); // stable
            let b = Self::filter_bit(p);
            r.filter[b / 64] |= 1 << (b % 64);
        }
        r
    }

    #[inline]
    fn filter_bit(pid: i32) -> usize {
        (pid as u32 & ((1 << Self::FILTER_BITS) - 1)) as usize
    }

    /// newcomm of the last rename of `pid` with since <= ts <= until, if any.
    #[inline]
    fn comm_at(&self, pid: i32, since: i64, until: i64) -> Option<u32> {
        let b = Self::filter_bit(pid);
        if self.filter.get(b / 64).is_none_or(|w| w & (1 << (b % 64)) == 0) {
            return None;
        }
        let v = self.by_pid.get(&pid)?;
        let k = v.partition_point(|x| x.0 <= until);
        (k > 0 && v[k - 1].0 >= since).then(|| v[k - 1].1)
    }
}

/// Sort the compact switches by ts (stable), one column at a time (one sequential pass over the
/// permutation each). prev_* are derived afterwards from the sorted rows (`derive_prev`).
pub fn sort_compact_switch(s: &mut CompactSwitch) {
    if let Some(perm) = argsort_ts(&s.ts) {
        s.ts = gather(&s.ts, &perm);
        s.cpu = gather(&s.cpu, &perm);
        s.prev_state = gather(&s.prev_state, &perm);
        s.next_pid = gather(&s.next_pid, &perm);
        s.next_prio = gather(&s.next_prio, &perm);
        s.next_comm = gather(&s.next_comm, &perm);
    }
}

/// prev_* of compact switches sorted by ts: the next_* of the previous switch on the same CPU in that
/// order (the task the CPU switches away from), with the comm updated by any task_rename of that pid
/// between its switch-in and this switch (both ends included): the kernel prints the task's current
/// comm as prev_comm. One sequential pass.
pub fn derive_prev(s: &CompactSwitch, renames: &Renames) -> PrevTask {
    let n = s.ts.len();
    let mut prev = PrevTask { pid: vec![0; n], prio: vec![0; n], comm: vec![0; n], valid: vec![false; n] };
    // CPU numbers -> dense slots; ordinary CPU numbers (0..4096) index `last` directly
    let direct = s.cpu.iter().all(|&c| (0..CpuSlots::DIRECT).contains(&c));
    let mut slots = CpuSlots::default();
    let width = if direct { s.cpu.iter().max().map_or(0, |&m| m as usize + 1) } else { 0 };
    // per CPU slot: (ts, pid, prio, comm) of the last switch-in (None before the first)
    let mut last: Vec<Option<(i64, i32, i32, u32)>> = vec![None; width];
    let check_renames = !renames.by_pid.is_empty();
    for k in 0..n {
        let (ts, cpu) = (s.ts[k], s.cpu[k]);
        let c = if direct {
            cpu as usize
        } else {
            let c = slots.slot(cpu);
            if c >= last.len() {
                last.resize(c + 1, None);
            }
            c
        };
        if let Some(l) = last[c] {
            prev.pid[k] = l.1;
            prev.prio[k] = l.2;
            prev.comm[k] = if check_renames { renames.comm_at(l.1, l.0, ts).unwrap_or(l.3) } else { l.3 };
            prev.valid[k] = true;
        }
        last[c] = Some((ts, s.next_pid[k], s.next_prio[k], s.next_comm[k]));
    }
    prev
}

pub fn sort_compact_waking(w: &mut CompactWaking) {
    if let Some(perm) = argsort_ts(&w.ts) {
        w.ts = gather(&w.ts, &perm);
        w.cpu = gather(&w.cpu, &perm);
        w.pid = gather(&w.pid, &perm);
        w.target_cpu = gather(&w.target_cpu, &perm);
        w.prio = gather(&w.prio, &perm);
        w.comm = gather(&w.comm, &perm);
        w.common_flags = gather(&w.common_flags, &perm);
        w.flags_valid = gather(&w.flags_valid, &perm);
        w.waker_pid.clear();
        w.waker_valid.clear();
    }
}

pub fn sort_rails(r: &mut Rails) {
    if let Some(perm) = argsort_ts(&r.ts) {
        r.ts = gather(&r.ts, &perm);
        r.index = gather(&r.index, &perm);
        r.packet_ts = gather(&r.packet_ts, &perm);
        r.energy_uws = gather(&r.energy_uws, &perm);
    }
}

/// Switches sorted by ts: (ts, cpu, next_pid, valid rows or None for all).
pub type Switches<'a> = (&'a [i64], &'a [i32], &'a [i32], Option<&'a [bool]>);

/// The waker of each compact sched_waking (sorted by ts): the task running on the waking's CPU, i.e.
/// next_pid of the last sched_switch on that CPU before it (compact and full ftrace switches, both
/// sorted by ts). Unknown (valid = false) before the CPU's first switch, and when switches on that CPU
/// carry the same ts as the waking and would give a different task (the order of a waking and a
/// switch with equal ts is not recorded).
pub fn waker_pids(wake_ts: &[i64], wake_cpu: &[i32], switches: &[Switches]) -> (Vec<i32>, Vec<bool>) {
    let mut slots = CpuSlots::default();
    // (ts, next_pid) of the last switch per CPU slot (None before the CPU's first switch); one cursor
    // per sorted source
    let mut current: Vec<Option<(i64, i32)>> = Vec::new();
    let mut cursor = vec![0usize; switches.len()];
    let n = wake_ts.len();
    let (mut pid, mut valid) = (vec![0i32; n], vec![false; n]);
    for k in 0..n {
        let t = wake_ts[k];
        // apply every switch before t, source by source (a later switch of another source wins)
        for (s, &(ts, cpu, next_pid, ok)) in switches.iter().enumerate() {
            let mut j = cursor[s];
            while j < ts.len() && ts[j] < t {
                if ok.is_none_or(|v| v[j]) {
                    let c = slots.slot(cpu[j]);
                    if c >= current.len() {
                        current.resize(c + 1, None);
                    }
                    if current[c].is_none_or(|(t0, _)| ts[j] >= t0) {
                        current[c] = Some((ts[j], next_pid[j]));
                    }
                }
                j += 1;
            }
            cursor[s] = j;
        }
        let c = slots.slot(wake_cpu[k]);
        let Some(Some((_, running))) = current.get(c).copied() else { continue };
        // a switch on this CPU at exactly t: the waking may come before or after it
        let tie_elsewhere = switches.iter().enumerate().any(|(s, &(ts, cpu, next_pid, ok))| {
            (cursor[s]..ts.len())
                .take_while(|&j| ts[j] == t)
                .any(|j| cpu[j] == wake_cpu[k] && ok.is_none_or(|v| v[j]) && next_pid[j] != running)
        });
        if !tie_elsewhere {
            pid[k] = running;
            valid[k] = true;
        }
    }
    (pid, valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_order_and_prev_tasks_per_cpu() {
        assert_eq!(argsort_ts(&[1, 2, 2]), None);
        assert_eq!(argsort_ts(&[5, 1, 5, 0]), Some(vec![3, 1, 0, 2]));
        let s = CompactSwitch {
            ts: vec![10, 11, 12, 13],
            cpu: vec![0, 1, 0, 0],
            prev_state: vec![0; 4],
            next_pid: vec![100, 200, 101, 102],
            next_prio: vec![120; 4],
            next_comm: vec![0, 1, 2, 3],
        };
        let p = derive_prev(&s, &Renames::default());
        assert_eq!(p.valid, vec![false, false, true, true]);
        assert_eq!((p.pid[2], p.pid[3], p.comm[3]), (100, 101, 2));
        // the waker: the task switched in last on the waking's CPU; unknown before its first switch
        let (pid, valid) = waker_pids(&[9, 12, 14], &[0, 1, 0], &[(&s.ts, &s.cpu, &s.next_pid, None)]);
        assert_eq!(valid, vec![false, true, true]);
        assert_eq!((pid[1], pid[2]), (200, 102));
    }
}
