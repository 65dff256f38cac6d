//! Task state intervals, compiled: the rules of abtest/analysis/tasks.py's df_task_state_intervals (read its
//! module doc) over sched_switch and the wakeup tables, one thread at a time:
//!
//! * a switch-out leaves the thread in its prev_state's state (given per row by the caller; `NO_STATE` =
//!   exited), a switch-in makes it `running` on that CPU, a wakeup makes it `runnable` when the thread's last
//!   switch strictly before the wakeup left it in a wakeable state (or there is none);
//! * at one timestamp the rows of a thread count in the order out, wakeup, in (then input order) and the last
//!   one wins; a thread whose first row is a switch-out was running before it (from just before the window,
//!   on that switch's CPU);
//! * the changes become intervals clipped to [start_ns, end_ns) as intervals.df_intervals makes them: the last
//!   change before the window is carried to its start, a thread first seen inside it is unknown (no state)
//!   until then, consecutive equal (state, cpu, comm) merge, empty intervals are dropped.

use rustc_hash::FxHashMap;

/// No state: exited, or unknown.
pub const NO_STATE: i8 = -1;
/// No CPU (the thread is not running).
pub const NO_CPU: i32 = i32::MIN;
/// No name.
pub const NO_COMM: u32 = u32::MAX;

pub struct Inputs<'a> {
    pub sw_ts: &'a [i64],
    pub sw_cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub next_pid: &'a [i32],
    /// the state each switch-out leaves its thread in (NO_STATE: exited)
    pub out_state: &'a [i8],
    /// task names as codes (equal names, equal codes; NO_COMM: none)
    pub prev_comm: &'a [u32],
    pub next_comm: &'a [u32],
    pub wk_ts: &'a [i64],
    pub wk_pid: &'a [i32],
    pub wk_comm: &'a [u32],
    /// state codes of running and runnable, and per state code whether a wakeup makes it runnable
    pub running: i8,
    pub runnable: i8,
    pub wakeable: &'a [bool],
    pub start_ns: i64,
    pub end_ns: i64,
}

/// One row per interval, by pid then ts. `comm_src` indexes the names in the order prev_comm rows, next_comm
/// rows, wakeup rows (NO_COMM: unknown).
#[derive(Default, Debug)]
pub struct Intervals {
    pub pid: Vec<i32>,
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub state: Vec<i8>,
    pub cpu: Vec<i32>,
    pub comm_src: Vec<u32>,
}

/// Calls a Vec method on every column of an `Intervals`.
macro_rules! each_column {
    ($s:expr, $method:ident $(, $arg:expr)?) => {{
        $s.pid.$method($($arg)?);
        $s.ts.$method($($arg)?);
        $s.dur.$method($($arg)?);
        $s.state.$method($($arg)?);
        $s.cpu.$method($($arg)?);
        $s.comm_src.$method($($arg)?);
    }};
}

impl Intervals {
    fn clear(&mut self) {
        each_column!(self, clear);
    }

    fn reserve(&mut self, n: usize) {
        each_column!(self, reserve, n);
    }
}

/// The per-name figures of the intervals (state_aggregates). Names are given by a representative
/// `comm_src` (any row of that name; NO_COMM: none).
#[derive(Default, Debug)]
pub struct Aggregates {
    /// per name and known state: the time in it (ns), sorted by (name code, state)
    pub time_src: Vec<u32>,
    pub time_state: Vec<i8>,
    pub time_ns: Vec<i64>,
    /// per running interval (a run): its name, CPU and duration (ns)
    pub run_src: Vec<u32>,
    pub run_cpu: Vec<i32>,
    pub run_dur: Vec<i64>,
    /// per thread, each name it had (unknown included) once
    pub thread_src: Vec<u32>,
    pub thread_pid: Vec<i32>,
}

#[derive(Clone, Copy)]
struct Change {
    ts: i64,
    /// 0 out, 1 wakeup, 2 in
    order: u8,
    seq: u32,
    state: i8,
    cpu: i32,
    comm: u32,
    src: u32,
}

/// A switch row as one thread's move, packed in 8 bytes so that sorting the moves groups them by pid
/// (pid in the high half, `seq` in the low one). `seq` < n is row `seq`'s switch-out, n + r row r's
/// switch-in; a thread's moves are put in (ts, seq) order when it is walked, which also puts a
/// timestamp's outs before its ins.
#[derive(Clone, Copy)]
struct Move(i64);

impl Move {
    fn new(pid: i32, seq: u32) -> Self {
        Move(((pid as i64) << 32) | seq as i64)
    }
    fn pid(self) -> i32 {
        (self.0 >> 32) as i32
    }
    fn seq(self) -> u32 {
        self.0 as u32
    }
}

/// The change a move makes (`n`: the number of switch rows).
fn change_of(inp: &Inputs, n: u32, m: Move) -> Change {
    let seq = m.seq();
    if seq < n {
        let r = seq as usize;
        let comm = inp.prev_comm[r];
        let src = if comm == NO_COMM { NO_COMM } else { seq };
        Change { ts: inp.sw_ts[r], order: 0, seq, state: inp.out_state[r], cpu: NO_CPU, comm, src }
    } else {
        let r = (seq - n) as usize;
        let comm = inp.next_comm[r];
        let src = if comm == NO_COMM { NO_COMM } else { seq };
        Change { ts: inp.sw_ts[r], order: 2, seq, state: inp.running, cpu: inp.sw_cpu[r], comm, src }
    }
}

/// Every thread's intervals, by pid then ts (see the module doc).
pub fn state_intervals(inp: &Inputs) -> Intervals {
    walk(inp, &mut |_: &mut Intervals| {})
}

/// What the per-name figures need, without keeping the intervals: each thread's intervals are folded into
/// `Aggregates` as soon as they are made.
pub fn state_aggregates(inp: &Inputs) -> Aggregates {
    let n = inp.sw_ts.len() as u32;
    let mut times: FxHashMap<(u32, i8), (u32, i64)> = FxHashMap::default();
    let mut agg = Aggregates::default();
    let mut names: Vec<u32> = Vec::new();
    walk(inp, &mut |out: &mut Intervals| {
        names.clear();
        for r in 0..out.ts.len() {
            let (src, state, dur) = (out.comm_src[r], out.state[r], out.dur[r]);
            let code = name_code(inp, n, src);
            if state >= 0 {
                times.entry((code, state)).or_insert((src, 0)).1 += dur;
            }
            if state == inp.running {
                agg.run_src.push(src);
                agg.run_cpu.push(out.cpu[r]);
                agg.run_dur.push(dur);
            }
            if !names.contains(&code) {
                names.push(code);
                agg.thread_src.push(src);
                agg.thread_pid.push(out.pid[r]);
            }
        }
        out.clear();
    });
    let mut times: Vec<((u32, i8), (u32, i64))> = times.into_iter().collect();
    times.sort_unstable_by_key(|&(key, _)| key);
    for ((_, state), (src, ns)) in times {
        agg.time_src.push(src);
        agg.time_state.push(state);
        agg.time_ns.push(ns);
    }
    agg
}

/// The name code of a `comm_src` (NO_COMM for none).
fn name_code(inp: &Inputs, n: u32, src: u32) -> u32 {
    match src {
        NO_COMM => NO_COMM,
        s if s < n => inp.prev_comm[s as usize],
        s if s < 2 * n => inp.next_comm[(s - n) as usize],
        s => inp.wk_comm[(s - 2 * n) as usize],
    }
}

/// Builds each thread's intervals into `out` (pid by pid) and calls `sink` after each thread; returns `out`.
fn walk(inp: &Inputs, sink: &mut dyn FnMut(&mut Intervals)) -> Intervals {
    let n = inp.sw_ts.len() as u32;
    let outs = (0..n).filter(|&r| inp.prev_pid[r as usize] != 0);
    let ins = (0..n).filter(|&r| inp.next_pid[r as usize] != 0);
    let mut moves: Vec<Move> = Vec::with_capacity(outs.clone().count() + ins.clone().count());
    moves.extend(outs.map(|r| Move::new(inp.prev_pid[r as usize], r)));
    moves.extend(ins.map(|r| Move::new(inp.next_pid[r as usize], n + r)));
    moves.sort_unstable_by_key(|m| m.0);
    // the wakeups by (pid, ts, row), sorted on their keys (not through the rows: no loads per comparison)
    let mut wk_keys: Vec<(i32, i64, u32)> = (0..inp.wk_ts.len() as u32)
        .filter(|&r| inp.wk_pid[r as usize] != 0)
        .map(|r| (inp.wk_pid[r as usize], inp.wk_ts[r as usize], r))
        .collect();
    wk_keys.sort_unstable();
    let wk: Vec<u32> = wk_keys.into_iter().map(|k| k.2).collect();

    let mut out = Intervals::default();
    // at most one interval per change, plus an unknown start and a seed per thread: reserved once (pages
    // never written cost nothing), so the columns are not copied as they grow
    out.reserve(moves.len() + wk.len() + 4096);
    let (mut i, mut j) = (0usize, 0usize);
    let mut mv: Vec<Change> = Vec::new();
    let mut changes: Vec<Change> = Vec::new();
    let mut woken: Vec<Change> = Vec::new();
    while i < moves.len() || j < wk.len() {
        let pid = match (moves.get(i), wk.get(j)) {
            (Some(m), Some(&w)) => m.pid().min(inp.wk_pid[w as usize]),
            (Some(m), None) => m.pid(),
            (None, Some(&w)) => inp.wk_pid[w as usize],
            (None, None) => unreachable!(),
        };
        let i0 = i;
        while i < moves.len() && moves[i].pid() == pid {
            i += 1;
        }
        mv.clear();
        mv.extend(moves[i0..i].iter().map(|&m| change_of(inp, n, m)));
        // a thread's outs then its ins, each in row order: two runs in time order when the rows are, which the
        // stable sort merges in one pass (the keys are unique: the same order as any sort)
        mv.sort_by_key(|c| (c.ts, c.seq));
        // wakeups of a thread whose last switch strictly before them left it wakeable (or that has none)
        woken.clear();
        let mut k = 0usize;
        while j < wk.len() && inp.wk_pid[wk[j] as usize] == pid {
            let (r, seq) = (wk[j] as usize, 2 * n + j as u32);
            let ts = inp.wk_ts[r];
            while k < mv.len() && mv[k].ts < ts {
                k += 1;
            }
            let wakes = k == 0 || (mv[k - 1].state >= 0 && inp.wakeable[mv[k - 1].state as usize]);
            if wakes {
                let src = if inp.wk_comm[r] == NO_COMM { NO_COMM } else { 2 * n + r as u32 };
                let (state, cpu, comm) = (inp.runnable, NO_CPU, inp.wk_comm[r]);
                woken.push(Change { ts, order: 1, seq, state, cpu, comm, src });
            }
            j += 1;
        }
        // the thread's changes in (ts, order, input order)
        changes.clear();
        let (mut a, mut b) = (0usize, 0usize);
        while a < mv.len() || b < woken.len() {
            let take_move = b == woken.len()
                || (a < mv.len() && (mv[a].ts, mv[a].order, mv[a].seq) < (woken[b].ts, 1, woken[b].seq));
            if take_move {
                changes.push(mv[a]);
                a += 1;
            } else {
                changes.push(woken[b]);
                b += 1;
            }
        }
        if let Some(first) = changes.first().copied() {
            if first.order == 0 {
                // running before its first switch-out, on that switch's CPU
                let seed = Change {
                    ts: first.ts.min(inp.start_ns) - 1,
                    order: 0,
                    seq: 0,
                    state: inp.running,
                    cpu: inp.sw_cpu[first.seq as usize],
                    comm: first.comm,
                    src: first.src,
                };
                changes.insert(0, seed);
            }
        }
        emit(pid, &changes, inp.start_ns, inp.end_ns, &mut out);
        sink(&mut out);
    }
    out
}

/// intervals.df_intervals over one thread's changes (sorted by ts; the last of a timestamp wins).
fn emit(pid: i32, changes: &[Change], start_ns: i64, end_ns: i64, out: &mut Intervals) {
    let mut kept: Vec<Change> = Vec::with_capacity(changes.len() + 1);
    for (x, c) in changes.iter().enumerate() {
        let superseded = changes.get(x + 1).is_some_and(|d| d.ts == c.ts);
        if superseded || c.ts >= end_ns {
            continue;
        }
        if c.ts < start_ns {
            // only the last change before the window is carried in, and not when one at start_ns replaces it
            let next = changes[x + 1..].iter().find(|d| d.ts < end_ns);
            if next.is_some_and(|d| d.ts <= start_ns) {
                continue;
            }
            kept.push(Change { ts: start_ns, ..*c });
        } else {
            kept.push(*c);
        }
    }
    let Some(first) = kept.first() else {
        return;
    };
    if first.ts > start_ns {
        let unknown =
            Change { ts: start_ns, order: 0, seq: 0, state: NO_STATE, cpu: NO_CPU, comm: NO_COMM, src: NO_COMM };
        kept.insert(0, unknown);
    }
    let mut last: Option<Change> = None;
    let begin = out.ts.len();
    for c in kept {
        if last.is_some_and(|l| l.state == c.state && l.cpu == c.cpu && l.comm == c.comm) {
            continue;
        }
        out.pid.push(pid);
        out.ts.push(c.ts);
        out.state.push(c.state);
        out.cpu.push(c.cpu);
        out.comm_src.push(c.src);
        last = Some(c);
    }
    // durations: to the next kept change, the last one to end_ns; empty intervals dropped
    let end = out.ts.len();
    let mut w = begin;
    for r in begin..end {
        let next = if r + 1 < end { out.ts[r + 1] } else { end_ns };
        let dur = next - out.ts[r];
        if dur > 0 {
            out.pid[w] = out.pid[r];
            out.ts[w] = out.ts[r];
            out.state[w] = out.state[r];
            out.cpu[w] = out.cpu[r];
            out.comm_src[w] = out.comm_src[r];
            out.dur.push(dur);
            w += 1;
        }
    }
    out.pid.truncate(w);
    out.ts.truncate(w);
    out.state.truncate(w);
    out.cpu.truncate(w);
    out.comm_src.truncate(w);
}

#[cfg(test)]
mod tests {
    use super::*;

    // state codes as tasks.py's STATES: running, runnable, sleeping, uninterruptible, other
    const WAKEABLE: [bool; 5] = [false, false, true, true, true];

    #[test]
    fn one_thread_through_its_states() {
        // pid 5 (name 7) runs until 10 on cpu 1 (its first row is a switch-out: running before it), sleeps,
        // is woken at 15 (runnable), in at 20 on cpu 0, preempted at 30 (runnable), in at 40 on cpu 0; window
        // [5, 50): carried in at 5 as running on cpu 1
        let sw_ts = [10i64, 20, 30, 40];
        let sw_cpu = [1, 0, 0, 0];
        let prev = [5, 0, 5, 0];
        let next = [0, 5, 0, 5];
        let out_state = [2i8, -1, 1, -1];
        let comm = [7u32; 4];
        let inp = Inputs {
            sw_ts: &sw_ts,
            sw_cpu: &sw_cpu,
            prev_pid: &prev,
            next_pid: &next,
            out_state: &out_state,
            prev_comm: &comm,
            next_comm: &comm,
            wk_ts: &[15, 35],
            wk_pid: &[5, 5],
            wk_comm: &[7, 7],
            running: 0,
            runnable: 1,
            wakeable: &WAKEABLE,
            start_ns: 5,
            end_ns: 50,
        };
        let r = state_intervals(&inp);
        // the wakeup at 35 finds it runnable (preempted): no change
        assert_eq!(r.ts, vec![5, 10, 15, 20, 30, 40]);
        assert_eq!(r.dur, vec![5, 5, 5, 10, 10, 10]);
        assert_eq!(r.state, vec![0, 2, 1, 0, 1, 0]);
        assert_eq!(r.cpu, vec![1, NO_CPU, NO_CPU, 0, NO_CPU, 0]);
        assert!(r.pid.iter().all(|&p| p == 5));
    }

    #[test]
    fn aggregates_fold_the_intervals() {
        // two threads sharing name 7 (pid 5 and 6), one renamed (pid 6: 7 then 8); window [0, 100)
        let sw_ts = [10i64, 20, 30, 40, 50];
        let sw_cpu = [0, 0, 1, 1, 0];
        let prev = [5, 6, 0, 6, 0];
        let next = [6, 0, 6, 0, 5];
        let out_state = [2i8, 1, -1, 3, -1];
        let prev_comm = [7u32, 7, NO_COMM, 8, NO_COMM];
        let next_comm = [7u32, NO_COMM, 8, NO_COMM, 7];
        let inp = Inputs {
            sw_ts: &sw_ts,
            sw_cpu: &sw_cpu,
            prev_pid: &prev,
            next_pid: &next,
            out_state: &out_state,
            prev_comm: &prev_comm,
            next_comm: &next_comm,
            wk_ts: &[45],
            wk_pid: &[5],
            wk_comm: &[7],
            running: 0,
            runnable: 1,
            wakeable: &WAKEABLE,
            start_ns: 0,
            end_ns: 100,
        };
        let iv = state_intervals(&inp);
        let agg = state_aggregates(&inp);
        let n = sw_ts.len() as u32;
        let code = |src: u32| name_code(&inp, n, src);
        // time per (name, state): the intervals' sums
        let mut want: Vec<(u32, i8, i64)> = Vec::new();
        for r in 0..iv.ts.len() {
            if iv.state[r] < 0 {
                continue;
            }
            let key = (code(iv.comm_src[r]), iv.state[r]);
            match want.iter_mut().find(|w| (w.0, w.1) == key) {
                Some(w) => w.2 += iv.dur[r],
                None => want.push((key.0, key.1, iv.dur[r])),
            }
        }
        want.sort_unstable();
        let got: Vec<(u32, i8, i64)> =
            (0..agg.time_ns.len()).map(|k| (code(agg.time_src[k]), agg.time_state[k], agg.time_ns[k])).collect();
        assert_eq!(got, want);
        assert!(got.iter().any(|g| g.0 == 8), "the renamed thread's second name has its own time");
        // runs: the running intervals
        let runs: Vec<(u32, i32, i64)> = (0..iv.ts.len())
            .filter(|&r| iv.state[r] == 0)
            .map(|r| (code(iv.comm_src[r]), iv.cpu[r], iv.dur[r]))
            .collect();
        let got_runs: Vec<(u32, i32, i64)> =
            (0..agg.run_dur.len()).map(|k| (code(agg.run_src[k]), agg.run_cpu[k], agg.run_dur[k])).collect();
        assert_eq!(got_runs, runs);
        // threads: (name, pid) once each
        let mut pairs: Vec<(u32, i32)> =
            (0..agg.thread_pid.len()).map(|k| (code(agg.thread_src[k]), agg.thread_pid[k])).collect();
        pairs.sort_unstable();
        let mut want_pairs: Vec<(u32, i32)> = (0..iv.ts.len()).map(|r| (code(iv.comm_src[r]), iv.pid[r])).collect();
        want_pairs.sort_unstable();
        want_pairs.dedup();
        assert_eq!(pairs, want_pairs);
    }

    #[test]
    fn first_seen_inside_the_window_is_unknown_until_then() {
        // pid 9 first appears switching in at 20 (window [0, 30)): unknown 0-20, running 20-30
        let inp = Inputs {
            sw_ts: &[20],
            sw_cpu: &[3],
            prev_pid: &[0],
            next_pid: &[9],
            out_state: &[-1],
            prev_comm: &[NO_COMM],
            next_comm: &[4],
            wk_ts: &[],
            wk_pid: &[],
            wk_comm: &[],
            running: 0,
            runnable: 1,
            wakeable: &WAKEABLE,
            start_ns: 0,
            end_ns: 30,
        };
        let r = state_intervals(&inp);
        assert_eq!((r.ts, r.dur, r.state), (vec![0, 20], vec![20, 10], vec![NO_STATE, 0]));
        assert_eq!(r.comm_src, vec![NO_COMM, 1]);
    }
}
