//! Which task ran on each CPU, compiled: abtest/analysis/placement.py df_task_intervals (the rules of
//! intervals.py df_intervals keyed by CPU, the next task of each sched_switch as the value, a CPU's first
//! prev task before its first switch), and the folds over those runs that placement's summary and metrics
//! read (time per task and CPU, a task's last name, CPUs used and CPU changes, time and switch-ins per
//! name), so that no per-run frame has to be grouped in Python.

use rustc_hash::FxHashMap;

/// sched_switch rows in time order (rows of one timestamp in table order). Names are codes (equal names,
/// equal codes); `*_src` of the results index the names as `[next_comm rows..., prev_comm rows...]`.
pub struct Switches<'a> {
    pub ts: &'a [i64],
    pub cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub next_pid: &'a [i32],
    pub prev_comm: &'a [u32],
    pub next_comm: &'a [u32],
}

/// Runs of tasks on CPUs over [start_ns, end_ns), sorted by CPU then start (df_task_intervals' rows).
#[derive(Default, Debug, PartialEq)]
pub struct Runs {
    pub cpu: Vec<i32>,
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub pid: Vec<i32>,
    /// the run's name code, and where it comes from (see Switches)
    pub comm: Vec<u32>,
    pub comm_src: Vec<u32>,
}

/// A change of task on a CPU after df_intervals' filtering: its time, task and name (None: unknown,
/// the row df_intervals adds at the window start of a CPU whose first switch comes later).
#[derive(Clone, Copy, PartialEq)]
struct Change {
    ts: i64,
    task: Option<(i32, u32)>,
    src: u32,
}

/// The rows of each CPU in time order, CPUs ascending (a stable counting sort by CPU).
fn rows_by_cpu(cpu: &[i32]) -> Vec<(i32, Vec<u32>)> {
    let mut rows: Vec<(i32, Vec<u32>)> = Vec::new();
    for (r, &c) in cpu.iter().enumerate() {
        let k = match rows.binary_search_by_key(&c, |e| e.0) {
            Ok(k) => k,
            Err(k) => {
                rows.insert(k, (c, Vec::new()));
                k
            }
        };
        rows[k].1.push(r as u32);
    }
    rows
}

/// df_task_intervals: for each CPU, the task of its last switch at each timestamp, carried in from before
/// `start_ns` (the last switch before it, unless one comes exactly at it), unknown from `start_ns` to the
/// first switch of a CPU that has none before (then taken to be the prev task of that first switch);
/// switches at or after `end_ns` ignored; consecutive equal tasks merged (the unknown start compared as
/// unknown); runs of idle (pid 0) dropped unless `include_idle`; the last run of a CPU ends at `end_ns`.
pub fn task_runs(sw: &Switches, start_ns: i64, end_ns: i64, include_idle: bool) -> Runs {
    let n = sw.ts.len() as u32;
    // at most one run per switch and CPU: room never used is never touched (no memory), and the columns
    // are not regrown and copied as they fill
    let room = sw.ts.len() + 64;
    let mut out = Runs {
        cpu: Vec::with_capacity(room),
        ts: Vec::with_capacity(room),
        dur: Vec::with_capacity(room),
        pid: Vec::with_capacity(room),
        comm: Vec::with_capacity(room),
        comm_src: Vec::with_capacity(room),
    };
    let mut changes: Vec<Change> = Vec::new();
    for (cpu, rows) in rows_by_cpu(sw.cpu) {
        changes.clear();
        // the last switch of each timestamp, before end_ns
        let kept: Vec<u32> = (0..rows.len())
            .filter(|&i| {
                let r = rows[i] as usize;
                let last_of_ts = rows.get(i + 1).is_none_or(|&q| sw.ts[q as usize] != sw.ts[r]);
                last_of_ts && sw.ts[r] < end_ns
            })
            .map(|i| rows[i])
            .collect();
        for (i, &r) in kept.iter().enumerate() {
            let r = r as usize;
            let ts = sw.ts[r];
            if ts < start_ns {
                // carried in: only the last one before start_ns, unless a switch comes exactly at it
                let next = kept.get(i + 1).map(|&q| sw.ts[q as usize]);
                if next.is_some_and(|t| t <= start_ns) {
                    continue;
                }
            }
            let task = Some((sw.next_pid[r], sw.next_comm[r]));
            changes.push(Change { ts: ts.max(start_ns), task, src: r as u32 });
        }
        if changes.first().is_some_and(|c| c.ts > start_ns) {
            changes.insert(0, Change { ts: start_ns, task: None, src: 0 });
        }
        // consecutive equal tasks merged, then each change lasts until the next one (the last to end_ns)
        let mut prev: Option<Option<(i32, u32)>> = None;
        changes.retain(|c| {
            let keep = prev != Some(c.task);
            prev = Some(c.task);
            keep
        });
        let first_switch = rows[0] as usize;
        for (i, c) in changes.iter().enumerate() {
            let end = changes.get(i + 1).map_or(end_ns, |d| d.ts);
            if end <= c.ts {
                continue;
            }
            let (pid, comm, src) = match c.task {
                Some((pid, comm)) => (pid, comm, c.src),
                // before the CPU's first switch: the task it switched out
                None => (sw.prev_pid[first_switch], sw.prev_comm[first_switch], n + first_switch as u32),
            };
            if pid == 0 && !include_idle {
                continue;
            }
            out.cpu.push(cpu);
            out.ts.push(c.ts);
            out.dur.push(end - c.ts);
            out.pid.push(pid);
            out.comm.push(comm);
            out.comm_src.push(src);
        }
    }
    out
}

/// What placement's summary and metrics read from the runs, counting from `from_ns` (runs are clipped
/// to start there; a run that starts before it is not a switch-in and its CPU change is not counted).
#[derive(Default, Debug, PartialEq)]
pub struct Fold {
    /// per task and CPU (by pid, then CPU): run time from from_ns (ns), tasks with none left out
    pub res_pid: Vec<i32>,
    pub res_cpu: Vec<i32>,
    pub res_ns: Vec<i64>,
    /// per task that ran after from_ns (by pid): the name of its latest run (the first such run in the runs' order), where it
    /// comes from, the CPUs it ran on, and its CPU changes (consecutive runs by start on other CPUs, the
    /// later one starting at or after from_ns)
    pub task_pid: Vec<i32>,
    pub task_comm_src: Vec<u32>,
    pub task_cpus: Vec<i64>,
    pub task_changes: Vec<i64>,
    /// per name (codes ascending): run time from from_ns (ns), runs starting at or after from_ns, and
    /// where the name comes from
    pub name_code: Vec<u32>,
    pub name_src: Vec<u32>,
    pub name_ns: Vec<i64>,
    pub name_runs: Vec<i64>,
}

/// The folds of `runs` (task_runs' order). Tasks and names come in ascending order.
pub fn fold(runs: &Runs, from_ns: i64) -> Fold {
    let n = runs.ts.len();
    let mut f = Fold::default();
    let clipped = |i: usize| -> Option<(i64, i64)> {
        let end = runs.ts[i] + runs.dur[i];
        (end > from_ns).then(|| {
            let lo = runs.ts[i].max(from_ns);
            (lo, end - lo)
        })
    };
    // per task: runs by (pid, start), ties in the runs' order (CPU ascending)
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&i| (runs.pid[i as usize], runs.ts[i as usize]));
    let mut k = 0;
    while k < n {
        let pid = runs.pid[order[k] as usize];
        let mut end = k;
        while end < n && runs.pid[order[end] as usize] == pid {
            end += 1;
        }
        let group = &order[k..end];
        let mut cpus: Vec<i32> = group.iter().map(|&i| runs.cpu[i as usize]).collect();
        cpus.sort_unstable();
        cpus.dedup();
        let changes = group
            .windows(2)
            .filter(|w| runs.cpu[w[0] as usize] != runs.cpu[w[1] as usize] && runs.ts[w[1] as usize] >= from_ns)
            .count();
        // the latest clipped start, the first such run in the runs' order
        let mut latest: Option<(i64, u32)> = None;
        for &i in group {
            if let Some((lo, _)) = clipped(i as usize) {
                if latest.is_none_or(|(t, j)| lo > t || (lo == t && i < j)) {
                    latest = Some((lo, i));
                }
            }
        }
        if let Some((_, i)) = latest {
            for &cpu in &cpus {
                let on_cpu = group.iter().filter(|&&j| runs.cpu[j as usize] == cpu);
                let spans: Vec<i64> = on_cpu.filter_map(|&j| clipped(j as usize).map(|(_, d)| d)).collect();
                if !spans.is_empty() {
                    f.res_pid.push(pid);
                    f.res_cpu.push(cpu);
                    f.res_ns.push(spans.iter().sum());
                }
            }
            f.task_pid.push(pid);
            f.task_comm_src.push(runs.comm_src[i as usize]);
            f.task_cpus.push(cpus.len() as i64);
            f.task_changes.push(changes as i64);
        }
        k = end;
    }
    // per name
    // code -> (where its first run's name comes from, run time from from_ns, runs from from_ns, ran after
    // from_ns at all): a few hundred names, not one entry per run
    let mut per_name: FxHashMap<u32, (u32, i64, i64, bool)> = FxHashMap::default();
    for i in 0..n {
        let e = per_name.entry(runs.comm[i]).or_insert((runs.comm_src[i], 0, 0, false));
        if let Some((_, d)) = clipped(i) {
            e.1 += d;
            e.3 = true;
        }
        if runs.ts[i] >= from_ns {
            e.2 += 1;
        }
    }
    let mut names: Vec<(u32, (u32, i64, i64, bool))> = per_name.into_iter().collect();
    names.sort_unstable_by_key(|&(code, _)| code);
    for (code, (src, ns, count, ran)) in names {
        if ran {
            f.name_code.push(code);
            f.name_src.push(src);
            f.name_ns.push(ns);
            f.name_runs.push(count);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sw {
        ts: Vec<i64>,
        cpu: Vec<i32>,
        prev_pid: Vec<i32>,
        next_pid: Vec<i32>,
    }

    impl Sw {
        fn new(rows: &[(i64, i32, i32, i32)]) -> Self {
            Sw {
                ts: rows.iter().map(|r| r.0).collect(),
                cpu: rows.iter().map(|r| r.1).collect(),
                prev_pid: rows.iter().map(|r| r.2).collect(),
                next_pid: rows.iter().map(|r| r.3).collect(),
            }
        }
        fn runs(&self, start: i64, end: i64, idle: bool) -> Runs {
            // names: the pid as its code
            let prev: Vec<u32> = self.prev_pid.iter().map(|&p| p as u32).collect();
            let next: Vec<u32> = self.next_pid.iter().map(|&p| p as u32).collect();
            let sw = Switches {
                ts: &self.ts,
                cpu: &self.cpu,
                prev_pid: &self.prev_pid,
                next_pid: &self.next_pid,
                prev_comm: &prev,
                next_comm: &next,
            };
            task_runs(&sw, start, end, idle)
        }
    }

    fn rows(r: &Runs) -> Vec<(i32, i64, i64, i32)> {
        (0..r.ts.len()).map(|i| (r.cpu[i], r.ts[i], r.dur[i], r.pid[i])).collect()
    }

    #[test]
    fn carries_the_task_in_and_ends_at_the_window_end() {
        // cpu 0: 1 -> 7 at 5, 7 -> 8 at 20, 8 -> 7 at 40; window [10, 50)
        let sw = Sw::new(&[(5, 0, 1, 7), (20, 0, 7, 8), (40, 0, 8, 7)]);
        assert_eq!(rows(&sw.runs(10, 50, false)), [(0, 10, 10, 7), (0, 20, 20, 8), (0, 40, 10, 7)]);
    }

    #[test]
    fn before_the_first_switch_the_prev_task_runs() {
        // cpu 1's first switch (3 -> 0) comes after the window start; idle dropped
        let sw = Sw::new(&[(30, 1, 3, 0), (35, 1, 0, 4)]);
        assert_eq!(rows(&sw.runs(10, 50, false)), [(1, 10, 20, 3), (1, 35, 15, 4)]);
        assert_eq!(rows(&sw.runs(10, 50, true)), [(1, 10, 20, 3), (1, 30, 5, 0), (1, 35, 15, 4)]);
    }

    #[test]
    fn last_switch_of_a_timestamp_and_equal_tasks_merged() {
        // two switches at 20 on cpu 0 (the last wins), a switch to the same task merges, one at the start
        // replaces the carried one, one at the end is ignored
        let sw = Sw::new(&[(5, 0, 1, 2), (10, 0, 2, 5), (20, 0, 5, 6), (20, 0, 6, 5), (30, 0, 5, 5), (50, 0, 5, 9)]);
        assert_eq!(rows(&sw.runs(10, 50, false)), [(0, 10, 40, 5)]);
    }

    #[test]
    fn folds_per_task_and_name() {
        // task 7 runs on cpu 0 then 1 then 0; window counted from 15
        let sw = Sw::new(&[(0, 0, 9, 7), (10, 0, 7, 8), (12, 1, 9, 7), (20, 1, 7, 8), (25, 0, 8, 7)]);
        let runs = sw.runs(0, 30, false);
        assert_eq!(
            rows(&runs),
            [(0, 0, 10, 7), (0, 10, 15, 8), (0, 25, 5, 7), (1, 0, 12, 9), (1, 12, 8, 7), (1, 20, 10, 8)]
        );
        let f = fold(&runs, 15);
        // 9 ran only before 15: left out
        assert_eq!(f.task_pid, [7, 8]);
        assert_eq!(f.task_cpus, [2, 2]);
        // 7: runs at 0 (cpu 0), 12 (cpu 1), 25 (cpu 0): the change at 12 is before 15, the one at 25 counts;
        // 8: runs at 10 (cpu 0), 20 (cpu 1)
        assert_eq!(f.task_changes, [1, 1]);
        assert_eq!((f.res_pid, f.res_cpu, f.res_ns), (vec![7, 7, 8, 8], vec![0, 1, 0, 1], vec![5, 5, 10, 10]));
        // names are the pids here: 9 ran only before 15
        assert_eq!((f.name_code, f.name_ns, f.name_runs), (vec![7, 8], vec![10, 20], vec![1, 1]));
    }
}
