//! Wakeup latency matching, compiled: the rules of abtest/analysis/latency.py's df_wakeup_latency (read its
//! module doc) replayed over sched_switch and the wakeup tables in time order, one state per task:
//!
//! * a wakeup counts only if the task was not running: its last sched_switch strictly before the wakeup
//!   switched it out (or it has none);
//! * it matches the task's next sched_switch at or after it, which must switch the task in (several rows
//!   of one task at one timestamp: a switch-in among them wins, else a switch-out);
//! * of several wakeups before one switch-in, the earliest counts.
use super::events::{max_of, DenseIds, Merger};

pub struct Inputs<'a> {
    pub sw_ts: &'a [i64],
    pub sw_cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub next_pid: &'a [i32],
    /// wakeup tables: (ts, pid)
    pub wakeups: Vec<(&'a [i64], &'a [i32])>,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// One row per matched wakeup, in wakeup time order: its table and row, the switch-in time and CPU.
#[derive(Default, Debug)]
pub struct Matches {
    pub table: Vec<u8>,
    pub row: Vec<u32>,
    pub switch_in_ts: Vec<i64>,
    pub cpu: Vec<i32>,
    wakeup_ts: Vec<i64>,
}

#[derive(Clone, Copy, Default)]
struct Task {
    /// last switch before the current time: 0 none, 1 out, 2 in
    state: u8,
    /// the earliest wakeup still waiting for the task's next switch: (table, row, ts)
    pending: Option<(u8, u32, i64)>,
    /// this timestamp's switch rows of the task: 0 none, 1 out, 2 in (with the in's CPU)
    now: u8,
    now_cpu: i32,
    stamp: u32,
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
    let mut out = Matches::default();
    let mut stamp = 0u32;
    while let Some(t) = m.next_group(&mut g) {
        stamp += 1;
        touched.clear();
        // wakeups see the state left by the switches strictly before them
        for &(s, r) in &g {
            if s == 0 || !(inp.start_ns..inp.end_ns).contains(&t) {
                continue;
            }
            let pid = inp.wakeups[s as usize - 1].1[r as usize];
            let Some(i) = (pid != 0).then(|| ids.get(pid)).flatten() else {
                continue;
            };
            let k = &mut tasks[i];
            if k.state != 2 && k.pending.is_none() {
                k.pending = Some((s - 1, r, t));
            }
        }
        // this timestamp's switches: per task, a switch-in wins over a switch-out
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
                    }
                }
            }
        }
        for &i in &touched {
            let k = &mut tasks[i];
            if let Some((tab, row, wts)) = k.pending.take() {
                if k.now == 2 {
                    out.table.push(tab);
                    out.row.push(row);
                    out.switch_in_ts.push(t);
                    out.cpu.push(k.now_cpu);
                    out.wakeup_ts.push(wts);
                }
            }
            k.state = k.now;
        }
    }
    // in wakeup time order (ties: switch-in order)
    let n = out.row.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| out.wakeup_ts[i]);
    Matches {
        table: order.iter().map(|&i| out.table[i]).collect(),
        row: order.iter().map(|&i| out.row[i]).collect(),
        switch_in_ts: order.iter().map(|&i| out.switch_in_ts[i]).collect(),
        cpu: order.iter().map(|&i| out.cpu[i]).collect(),
        wakeup_ts: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        // task 5: runs 0-10, woken at 5 while running (dropped), woken at 12 and 13 (earliest counts),
        // in at 20 on cpu 1; woken at 30 (asleep), out again at 35 without a switch-in (dropped);
        // woken at 40, in at 40 (a switch at the wakeup's timestamp is after it)
        let sw_ts = [0i64, 10, 20, 25, 35, 40];
        let sw_cpu = [0, 0, 1, 1, 1, 0];
        let prev = [0, 5, 0, 5, 5, 0];
        let next = [5, 0, 5, 0, 0, 5];
        let wts = [5i64, 12, 13, 30, 40];
        let wpid = [5, 5, 5, 5, 5];
        let inp = Inputs {
            sw_ts: &sw_ts,
            sw_cpu: &sw_cpu,
            prev_pid: &prev,
            next_pid: &next,
            wakeups: vec![(&wts, &wpid)],
            start_ns: 0,
            end_ns: 100,
        };
        let m = match_wakeups(&inp);
        assert_eq!(m.row, vec![1, 4]);
        assert_eq!(m.switch_in_ts, vec![20, 40]);
        assert_eq!(m.cpu, vec![1, 0]);
    }
}
