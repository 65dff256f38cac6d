//! Wakeup latency matching, compiled: the rules of abtest/analysis/latency.py's df_wakeup_latency (read its
//! module doc) replayed over sched_switch and the wakeup tables in time order, one state per task:
//!
//! * a wakeup counts only if the task was not running: its last sched_switch strictly before the wakeup
//!   switched it out (or it has none);
//! * it matches the task's next sched_switch at or after it, which must switch the task in (several rows
//!   of one task at one timestamp: a switch-in among them wins, else the last switch-out);
//! * of several wakeups before one switch-in, the earliest counts;
//! * `while_on_cpu` (the "waking" definition): a wakeup of a task still running counts when the task's next
//!   switch is a switch-out in a sleeping state (prev_state low byte != 0), the one after it is its
//!   switch-in and no other wakeup of the task (of any table, in the window or not) lies strictly between
//!   the switch-out and the switch-in.
use crate::events::{max_of, DenseIds, Merger};

/// prev_state of a sched_switch row whose state is unknown (never a sleeping switch-out).
pub const STATE_UNKNOWN: i64 = i64::MIN;

pub struct Inputs<'a> {
    pub sw_ts: &'a [i64],
    pub sw_cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub next_pid: &'a [i32],
    /// prev_state per switch (STATE_UNKNOWN when not recorded); read only when `while_on_cpu`
    pub prev_state: &'a [i64],
    /// wakeup tables: (ts, pid); every wakeup of the trace (those outside [start_ns, end_ns) only end a
    /// while-on-CPU candidate)
    pub wakeups: Vec<(&'a [i64], &'a [i32])>,
    pub start_ns: i64,
    pub end_ns: i64,
    /// also count wakeups that fired while the task was switching out (rule "waking")
    pub while_on_cpu: bool,
}

/// One row per matched wakeup, in wakeup time order: its table and row, the switch-in time and CPU, and
/// whether it fired while the task was still on its CPU.
#[derive(Default, Debug)]
pub struct Matches {
    pub table: Vec<u8>,
    pub row: Vec<u32>,
    pub switch_in_ts: Vec<i64>,
    pub cpu: Vec<i32>,
    pub while_on_cpu: Vec<bool>,
    wakeup_ts: Vec<i64>,
}

type Wakeup = (u8, u32, i64);

#[derive(Clone, Copy, Default)]
struct Task {
    /// last switch before the current time: 0 none, 1 out, 2 in
    state: u8,
    /// the earliest wakeup still waiting for the task's next switch: (table, row, ts)
    pending: Option<Wakeup>,
    /// the earliest wakeup that fired while the task ran, waiting for its next switch (a sleeping out)
    on_cpu: Option<Wakeup>,
    /// a while-on-CPU wakeup whose sleeping switch-out came: waits for the switch after it (an in), and
    /// the earliest other wakeup of the task seen since that switch-out
    after_out: Option<Wakeup>,
    other_since_out: Option<i64>,
    /// this timestamp's switch rows of the task: 0 none, 1 out, 2 in (with the in's CPU, the out's state)
    now: u8,
    now_cpu: i32,
    now_state: i64,
    stamp: u32,
}

impl Matches {
    /// Room for `n` matches at once: the columns are not regrown (and copied) as they fill; room never
    /// used is never touched, so it costs no memory.
    fn with_capacity(n: usize) -> Self {
        Matches {
            table: Vec::with_capacity(n),
            row: Vec::with_capacity(n),
            switch_in_ts: Vec::with_capacity(n),
            cpu: Vec::with_capacity(n),
            while_on_cpu: Vec::with_capacity(n),
            wakeup_ts: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, w: Wakeup, switch_in_ts: i64, cpu: i32, while_on_cpu: bool) {
        self.table.push(w.0);
        self.row.push(w.1);
        self.switch_in_ts.push(switch_in_ts);
        self.cpu.push(cpu);
        self.while_on_cpu.push(while_on_cpu);
        self.wakeup_ts.push(w.2);
    }
}

pub fn match_wakeups(inp: &Inputs) -> Matches {
    let mut cols: Vec<&[i32]> = vec![inp.prev_pid, inp.next_pid];
    cols.extend(inp.wakeups.iter().map(|w| w.1));
    let mut ids = DenseIds::new(max_of(&cols));
    for c in &cols {
        for &p in c.iter() {
            if p != 0 {
                ids.get_or_insert(p);
            }
        }
    }
    let mut tasks = vec![Task::default(); ids.len()];
    let mut ts_list: Vec<&[i64]> = vec![inp.sw_ts];
    ts_list.extend(inp.wakeups.iter().map(|w| w.0));
    let mut m = Merger::new(ts_list);
    let mut g = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    // at most one match per wakeup in the window
    let in_window = inp.wakeups.iter().map(|w| w.0.iter().filter(|t| (inp.start_ns..inp.end_ns).contains(t)).count());
    let mut out = Matches::with_capacity(in_window.sum());
    let mut stamp = 0u32;
    while let Some(t) = m.next_group(&mut g) {
        stamp += 1;
        touched.clear();
        // wakeups see the state left by the switches strictly before them
        for &(s, r) in &g {
            if s == 0 {
                continue;
            }
            let pid = inp.wakeups[s as usize - 1].1[r as usize];
            let Some(i) = (pid != 0).then(|| ids.get(pid)).flatten() else {
                continue;
            };
            let k = &mut tasks[i];
            if k.after_out.is_some() && k.other_since_out.is_none() {
                k.other_since_out = Some(t);
            }
            if !(inp.start_ns..inp.end_ns).contains(&t) {
                continue;
            }
            let w = (s - 1, r, t);
            if k.state != 2 {
                if k.pending.is_none() {
                    k.pending = Some(w);
                }
            } else if inp.while_on_cpu && k.on_cpu.is_none() {
                k.on_cpu = Some(w);
            }
        }
        // this timestamp's switches: per task, a switch-in wins over a switch-out (the last of a kind wins)
        for &(s, r) in &g {
            if s != 0 {
                continue;
            }
            let r = r as usize;
            for (pid, what) in [(inp.prev_pid[r], 1u8), (inp.next_pid[r], 2u8)] {
                let Some(i) = (pid != 0).then(|| ids.get(pid)).flatten() else {
                    continue;
                };
                let k = &mut tasks[i];
                if k.stamp != stamp {
                    k.stamp = stamp;
                    k.now = 0;
                    touched.push(i);
                }
                if what >= k.now {
                    k.now = what;
                    if what == 2 {
                        k.now_cpu = inp.sw_cpu[r];
                    } else if inp.while_on_cpu {
                        k.now_state = inp.prev_state[r];
                    }
                }
            }
        }
        for &i in &touched {
            let k = &mut tasks[i];
            let switched_in = k.now == 2;
            let race = k.after_out.take().filter(|_| switched_in && k.other_since_out.is_none_or(|o| o >= t));
            k.other_since_out = None;
            let normal = k.pending.take().filter(|_| switched_in);
            // of several wakeups for one switch-in, the earliest (a while-on-CPU one is before any other)
            if let Some(w) = race {
                out.push(w, t, k.now_cpu, true);
            } else if let Some(w) = normal {
                out.push(w, t, k.now_cpu, false);
            }
            if let Some(w) = k.on_cpu.take() {
                if k.now == 1 && k.now_state != STATE_UNKNOWN && k.now_state & 0xFF != 0 {
                    k.after_out = Some(w);
                }
            }
            k.state = k.now;
        }
    }
    out.in_wakeup_order()
}

/// `column` in the order of `perm`.
fn permuted<T: Copy>(column: Vec<T>, perm: &[u32]) -> Vec<T> {
    perm.iter().map(|&i| column[i as usize]).collect()
}

impl Matches {
    /// The matches (made in switch-in order) in wakeup time order, ties in switch-in order. One column
    /// is reordered at a time and its old order dropped, so about one column more than the matches is
    /// held at once.
    fn in_wakeup_order(self) -> Matches {
        let Matches { table, row, switch_in_ts, cpu, while_on_cpu, wakeup_ts } = self;
        let mut perm: Vec<u32> = (0..row.len() as u32).collect();
        perm.sort_by_key(|&i| wakeup_ts[i as usize]);
        drop(wakeup_ts);
        Matches {
            table: permuted(table, &perm),
            row: permuted(row, &perm),
            switch_in_ts: permuted(switch_in_ts, &perm),
            cpu: permuted(cpu, &perm),
            while_on_cpu: permuted(while_on_cpu, &perm),
            wakeup_ts: Vec::new(),
        }
    }
}

/// Preemptions matched with the task's next switch-in, in switch-out time order: the switch-out's row and
/// the switch-in's time and CPU.
#[derive(Default, Debug)]
pub struct Preemptions {
    pub row: Vec<u32>,
    pub switch_in_ts: Vec<i64>,
    pub cpu: Vec<i32>,
}

/// Preemption latency (latency.df_preemption_latency's rules): a switch-out in [start_ns, end_ns) of a task
/// still runnable (prev_state low byte 0, known) -> the task's next switch strictly after it, which must be
/// a switch-in (several rows of the task at one timestamp: a switch-in among them wins).
pub fn match_preemptions(inp: &Inputs) -> Preemptions {
    let mut ids = DenseIds::new(max_of(&[inp.prev_pid, inp.next_pid]));
    for c in [inp.prev_pid, inp.next_pid] {
        for &p in c {
            if p != 0 {
                ids.get_or_insert(p);
            }
        }
    }
    let n = ids.len();
    let (mut now, mut now_cpu, mut stamps) = (vec![0u8; n], vec![0i32; n], vec![0u32; n]);
    let mut pending: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut m = Merger::new(vec![inp.sw_ts]);
    let (mut g, mut touched) = (Vec::new(), Vec::new());
    let mut hits: Vec<(u32, i64, i32)> = Vec::new();
    let mut stamp = 0u32;
    while let Some(t) = m.next_group(&mut g) {
        stamp += 1;
        touched.clear();
        for &(_, r) in &g {
            let r = r as usize;
            for (pid, what) in [(inp.prev_pid[r], 1u8), (inp.next_pid[r], 2u8)] {
                let Some(i) = (pid != 0).then(|| ids.get(pid)).flatten() else {
                    continue;
                };
                if stamps[i] != stamp {
                    stamps[i] = stamp;
                    now[i] = 0;
                    touched.push(i);
                }
                if what >= now[i] {
                    now[i] = what;
                    if what == 2 {
                        now_cpu[i] = inp.sw_cpu[r];
                    }
                }
            }
        }
        for &i in &touched {
            if now[i] == 2 {
                hits.extend(pending[i].iter().map(|&row| (row, t, now_cpu[i])));
            }
            pending[i].clear();
        }
        // this timestamp's preemptions wait for the task's next move, strictly later
        if (inp.start_ns..inp.end_ns).contains(&t) {
            for &(_, r) in &g {
                let (pid, state) = (inp.prev_pid[r as usize], inp.prev_state[r as usize]);
                if state != STATE_UNKNOWN && state & 0xFF == 0 {
                    if let Some(i) = (pid != 0).then(|| ids.get(pid)).flatten() {
                        pending[i].push(r);
                    }
                }
            }
        }
    }
    hits.sort_by_key(|&(row, _, _)| (inp.sw_ts[row as usize], row));
    Preemptions {
        row: hits.iter().map(|h| h.0).collect(),
        switch_in_ts: hits.iter().map(|h| h.1).collect(),
        cpu: hits.iter().map(|h| h.2).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ts, cpu, prev_pid, next_pid, prev_state)
    type Switches<'a> = (&'a [i64], &'a [i32], &'a [i32], &'a [i32], &'a [i64]);

    fn run(sw: Switches, wts: &[i64], wpid: &[i32], on_cpu: bool) -> Matches {
        let inp = Inputs {
            sw_ts: sw.0,
            sw_cpu: sw.1,
            prev_pid: sw.2,
            next_pid: sw.3,
            prev_state: sw.4,
            wakeups: vec![(wts, wpid)],
            start_ns: 0,
            end_ns: 100,
            while_on_cpu: on_cpu,
        };
        match_wakeups(&inp)
    }

    #[test]
    fn rules() {
        // task 5: runs 0-10, woken at 5 while running (dropped: its switch-out at 10 is runnable), woken at
        // 12 and 13 (earliest counts), in at 20 on cpu 1; woken at 30 (asleep), out again at 35 without a
        // switch-in (dropped); woken at 40, in at 40 (a switch at the wakeup's timestamp is after it)
        let sw_ts = [0i64, 10, 20, 25, 35, 40];
        let sw_cpu = [0, 0, 1, 1, 1, 0];
        let prev = [0, 5, 0, 5, 5, 0];
        let next = [5, 0, 5, 0, 0, 5];
        let state = [0i64, 0, 0, 1, 1, 0];
        for on_cpu in [false, true] {
            let m = run((&sw_ts, &sw_cpu, &prev, &next, &state), &[5, 12, 13, 30, 40], &[5; 5], on_cpu);
            assert_eq!(m.row, vec![1, 4]);
            assert_eq!(m.switch_in_ts, vec![20, 40]);
            assert_eq!(m.cpu, vec![1, 0]);
            assert_eq!(m.while_on_cpu, vec![false, false]);
        }
    }

    #[test]
    fn woken_while_switching_out() {
        // task 5 runs from 0; waking at 8 while on CPU, sleeping switch-out at 10, switch-in at 20: counts from
        // 8 under the waking rule only. Then waking at 28, sleeping out at 30, another wakeup at 33, in at 40:
        // the one at 33 counts (normal), not the one at 28. Waking at 45, sleeping out at 50, wakeup exactly
        // at the switch-in (60): the waking at 45 counts (earliest).
        let sw_ts = [0i64, 10, 20, 30, 40, 50, 60];
        let sw_cpu = [0, 0, 1, 1, 0, 0, 1];
        let prev = [0, 5, 0, 5, 0, 5, 0];
        let next = [5, 0, 5, 0, 5, 0, 5];
        let state = [0i64, 1, 0, 2, 0, 1, 0];
        let (wts, wpid) = ([8i64, 28, 33, 45, 60], [5; 5]);
        let m = run((&sw_ts, &sw_cpu, &prev, &next, &state), &wts, &wpid, true);
        assert_eq!(m.row, vec![0, 2, 3]);
        assert_eq!(m.switch_in_ts, vec![20, 40, 60]);
        assert_eq!(m.while_on_cpu, vec![true, false, true]);
        // without the rule, the wakeup at 60 (task asleep since 50) matches the switch-in at 60
        let m = run((&sw_ts, &sw_cpu, &prev, &next, &state), &wts, &wpid, false);
        assert_eq!(m.row, vec![2, 4]);
        // an unknown state is never a sleeping switch-out
        let unknown = [STATE_UNKNOWN; 7];
        assert_eq!(run((&sw_ts, &sw_cpu, &prev, &next, &unknown), &wts, &wpid, true).row, vec![2, 4]);
    }

    #[test]
    fn preemptions() {
        // task 5 preempted at 10 (state 0) on cpu 0, back in at 20 on cpu 1; preempted at 30, switched out again
        // at 35 without a switch-in (its in was lost): dropped; the one at 35 matches the in at 40 (out and in
        // of the task at 40: the in wins); preempted at 40, next move the sleeping out at 45: dropped. Task 6
        // sleeps at 10 (state 1): not a preemption.
        let sw_ts = [0i64, 10, 20, 30, 35, 40, 40, 45];
        let sw_cpu = [0, 0, 1, 1, 1, 0, 1, 1];
        let prev = [0, 5, 6, 5, 5, 5, 0, 5];
        let next = [5, 6, 5, 0, 0, 0, 5, 0];
        let state = [0i64, 0, 1, 0, 0, 0, 0, 1];
        let inp = Inputs {
            sw_ts: &sw_ts,
            sw_cpu: &sw_cpu,
            prev_pid: &prev,
            next_pid: &next,
            prev_state: &state,
            wakeups: vec![],
            start_ns: 0,
            end_ns: 100,
            while_on_cpu: false,
        };
        let p = match_preemptions(&inp);
        assert_eq!(p.row, vec![1, 4]);
        assert_eq!(p.switch_in_ts, vec![20, 40]);
        assert_eq!(p.cpu, vec![1, 1]);
    }
}
