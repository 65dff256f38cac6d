//! PELT simulated from scheduler events, compiled: the model of abtest/analysis/pelt_sim.py (read its module
//! doc for the model and its approximations), computed in two passes over the events in timestamp order
//! instead of with frames. Same inputs, same segments, same values (tests/test_pelt_native.py compares them).
//!
//! Pass 1 decides which waits count (a wait counts only when the task's next sched_switch switches it in).
//! Pass 2 replays the events: per CPU the task on it, its frequency, the number of CFS tasks waiting on its
//! runqueue and the jumps of tasks' signals moving between runqueues; per task the time it runs or waits;
//! both signals follow the PELT geometric series over every segment where their input is constant.
use crate::events::{max_of, DenseIds, Merger};

/// One PELT period: 1024 us of 1024 ns.
pub const PELT_PERIOD_NS: f64 = 1024.0 * 1024.0;
/// y^32 = 1/2 per period: decay rate per ns.
pub const DECAY_PER_NS: f64 = std::f64::consts::LN_2 / (32.0 * PELT_PERIOD_NS);
/// prev_state bits of a task that will not run again (pelt_sim._DEAD_BITS).
const DEAD_BITS: i64 = 0x70;
/// A missing CPU value (null in the frame).
pub const NULL_CPU: i32 = i32::MIN;

pub struct Switches<'a> {
    pub ts: &'a [i64],
    pub cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub prev_prio: &'a [i32],
    pub prev_state: &'a [i64],
    pub next_pid: &'a [i32],
    pub next_prio: &'a [i32],
}

/// A wakeup table (sched_waking, sched_wakeup or sched_wakeup_new): cpu = target_cpu.
pub struct Wakeups<'a> {
    pub ts: &'a [i64],
    pub pid: &'a [i32],
    pub cpu: &'a [i32],
    pub prio: &'a [i32],
}

pub struct Migrations<'a> {
    pub ts: &'a [i64],
    pub pid: &'a [i32],
    pub dest: &'a [i32],
}

pub struct Frequencies<'a> {
    pub ts: &'a [i64],
    pub cpu: &'a [i32],
    pub khz: &'a [f64],
}

/// Known values at known times: (id = cpu or pid, ts, util, runnable).
pub struct Seeds<'a> {
    pub id: &'a [i32],
    pub ts: &'a [i64],
    pub util: &'a [f64],
    pub runnable: &'a [f64],
}

/// The simulated CPUs: capacity, f_max (NaN = unknown: no frequency invariance) and the frequency assumed
/// before the first cpu_frequency event (NaN: f_max).
pub struct CpuSpec<'a> {
    pub cpu: &'a [i32],
    pub capacity: &'a [f64],
    pub fmax_khz: &'a [f64],
    pub fill_khz: &'a [f64],
}

pub struct Inputs<'a> {
    pub switches: Switches<'a>,
    pub wakeups: Vec<Wakeups<'a>>,
    pub migrations: Option<Migrations<'a>>,
    pub frequencies: Option<Frequencies<'a>>,
    pub cpus: CpuSpec<'a>,
    pub cpu_seeds: Option<Seeds<'a>>,
    pub task_seeds: Option<Seeds<'a>>,
    pub new_pids: &'a [i32],
    pub start_ns: i64,
    pub end_ns: i64,
}

/// What to compute: per-CPU signals (with tasks' jumps when `attach`), and per-task signals of all tasks
/// (`tasks` = Some(empty)) or of some pids.
pub struct Want<'a> {
    pub cpus: bool,
    /// aggregate each CPU's segments into contention figures (with this margin) instead of returning them
    pub contention_margin: Option<f64>,
    /// aggregate only the time from here on (the analysed window of a simulation started earlier, to warm
    /// the signals up): a segment open at this time counts from it with its values; i64::MIN: all of it
    pub aggregate_from_ns: i64,
    pub attach: bool,
    pub tasks: Option<&'a [i32]>,
}

/// Segments: key (cpu or pid), ts, dur (ns), input levels and the signals at each segment start.
#[derive(Default, Debug)]
pub struct Segments {
    pub key: Vec<i32>,
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub x_util: Vec<f64>,
    pub x_runnable: Vec<f64>,
    pub util: Vec<f64>,
    pub runnable: Vec<f64>,
}

impl Segments {
    fn reserve(&mut self, n: usize) {
        self.key.reserve(n);
        self.ts.reserve(n);
        self.dur.reserve(n);
        self.x_util.reserve(n);
        self.x_runnable.reserve(n);
        self.util.reserve(n);
        self.runnable.reserve(n);
    }

    fn push(&mut self, key: i32, ts: i64, x: [f64; 2], u: [f64; 2]) {
        self.key.push(key);
        self.ts.push(ts);
        self.dur.push(0);
        self.x_util.push(x[0]);
        self.x_runnable.push(x[1]);
        // a runqueue signal never goes below 0 (kernel: sub_positive); the recurrence stays linear
        self.util.push(u[0].max(0.0));
        self.runnable.push(u[1].max(0.0));
    }

    /// Moves `o`'s rows to the end of these and frees `o`'s memory.
    fn append(&mut self, o: &mut Segments) {
        let o = std::mem::take(o);
        self.key.extend_from_slice(&o.key);
        self.ts.extend_from_slice(&o.ts);
        self.dur.extend_from_slice(&o.dur);
        self.x_util.extend_from_slice(&o.x_util);
        self.x_runnable.extend_from_slice(&o.x_runnable);
        self.util.extend_from_slice(&o.util);
        self.runnable.extend_from_slice(&o.runnable);
    }

    /// The rows of `parts` in order, in vectors allocated once.
    fn concat(parts: Vec<&mut Segments>) -> Segments {
        let mut out = Segments::default();
        out.reserve(parts.iter().map(|p| p.len()).sum());
        for p in parts {
            out.append(p);
        }
        out
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }
}

/// Per CPU, over its simulated segments (each holding its start values): the time, the time where
/// runnable exceeds util by more than the margin, the time-weighted sums of util, runnable and (where
/// util >= 1) runnable / util, and the highest runnable (load_tracking.df_contention's figures).
#[derive(Default, Debug, Clone)]
pub struct Contention {
    pub cpu: i32,
    pub known_ns: i64,
    pub contended_ns: i64,
    pub util_ns: f64,
    pub runnable_ns: f64,
    pub ratio_ns: f64,
    pub ratio_weight_ns: i64,
    pub max_runnable: f64,
}

impl Contention {
    fn add(&mut self, dur: i64, util: f64, runnable: f64, margin: f64) {
        let w = dur as f64;
        self.known_ns += dur;
        if runnable > util + margin {
            self.contended_ns += dur;
        }
        self.util_ns += util * w;
        self.runnable_ns += runnable * w;
        if util >= 1.0 {
            self.ratio_ns += runnable / util * w;
            self.ratio_weight_ns += dur;
        }
        if self.known_ns == dur || runnable > self.max_runnable {
            self.max_runnable = runnable;
        }
    }
}

/// Signals after `d` ns at constant input `x` from `u`.
#[inline]
fn decay(u: [f64; 2], x: [f64; 2], d: i64) -> [f64; 2] {
    if d <= 0 {
        return u;
    }
    let a = (-DECAY_PER_NS * d as f64).exp();
    [u[0] * a + x[0] * (1.0 - a), u[1] * a + x[1] * (1.0 - a)]
}

// stream numbers inside the merger
const S_SWITCH: u8 = 0;

fn is_runnable(state: i64) -> bool {
    state & 0xFF == 0
}

// ------------------------------------------------------------------------------------------------
// pass 1: which waits count
// ------------------------------------------------------------------------------------------------
/// Per switch row: its switch-out starts a wait that counts; per wakeup table and row: same for the wakeup.
struct Waits {
    from_switch: Vec<bool>,
    from_wakeup: Vec<Vec<bool>>,
}

/// The task each CPU's first sched_switch switches out (on that CPU from the start), with its prio:
/// (cpu, pid, prio) per CPU in order of first switch.
fn first_prev(sw: &Switches, order: &[u32]) -> Vec<(i32, i32, i32)> {
    let mut cpus = DenseIds::new(max_of(&[sw.cpu]).min(1 << 16));
    let mut seen: Vec<(i32, i32, i32)> = Vec::new();
    for &r in order {
        let r = r as usize;
        if let Some(c) = cpus.get_or_insert(sw.cpu[r]) {
            if c == seen.len() {
                seen.push((sw.cpu[r], sw.prev_pid[r], sw.prev_prio[r]));
            }
        }
    }
    seen
}

fn switch_order(ts: &[i64]) -> Vec<u32> {
    let mut o: Vec<u32> = (0..ts.len() as u32).collect();
    if !ts.windows(2).all(|w| w[0] <= w[1]) {
        o.sort_by_key(|&i| ts[i as usize]);
    }
    o
}

fn decide_waits(inp: &Inputs, pids: &DenseIds, firsts: &[(i32, i32, i32)]) -> Waits {
    let sw = &inp.switches;
    #[derive(Clone, Copy)]
    struct St {
        on_cpu: bool,
        pending: Option<(u8, u32)>,
    }
    let mut st = vec![St { on_cpu: false, pending: None }; pids.len()];
    for &(_, pid, _) in firsts {
        if let Some(i) = pids.get(pid) {
            st[i].on_cpu = true;
        }
    }
    let mut out = Waits {
        from_switch: vec![false; sw.ts.len()],
        from_wakeup: inp.wakeups.iter().map(|w| vec![false; w.ts.len()]).collect(),
    };
    let mut ts_list: Vec<&[i64]> = vec![sw.ts];
    ts_list.extend(inp.wakeups.iter().map(|w| w.ts));
    let mut m = Merger::new(ts_list);
    let mut g = Vec::new();
    while m.next_group(&mut g).is_some() {
        // one task's events at one timestamp: switch-outs, then wakeups, then switch-ins
        for &(s, r) in &g {
            let r = r as usize;
            if s != S_SWITCH || sw.prev_pid[r] <= 0 {
                continue;
            }
            let t = &mut st[pids.get(sw.prev_pid[r]).unwrap()];
            t.on_cpu = false;
            t.pending = is_runnable(sw.prev_state[r]).then_some((S_SWITCH, r as u32));
        }
        for &(s, r) in &g {
            if s == S_SWITCH {
                continue;
            }
            let w = &inp.wakeups[s as usize - 1];
            let pid = w.pid[r as usize];
            if pid <= 0 {
                continue;
            }
            let t = &mut st[pids.get(pid).unwrap()];
            if !t.on_cpu && t.pending.is_none() {
                t.pending = Some((s, r));
            }
        }
        for &(s, r) in &g {
            let r = r as usize;
            if s != S_SWITCH || sw.next_pid[r] <= 0 {
                continue;
            }
            let t = &mut st[pids.get(sw.next_pid[r]).unwrap()];
            match t.pending.take() {
                Some((S_SWITCH, q)) => out.from_switch[q as usize] = true,
                Some((k, q)) => out.from_wakeup[k as usize - 1][q as usize] = true,
                None => {}
            }
            t.on_cpu = true;
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------
// pass 2: the simulation
// ------------------------------------------------------------------------------------------------
#[derive(Clone, Copy, Debug)]
enum Claim {
    /// running on this CPU (index)
    Run(u32),
    /// waiting on this CPU (index, u32::MAX = not simulated), runnable input frozen at the wait start
    /// (NaN until the window opens for a wait that started before it), counted in that CPU's n_wait
    Wait(u32, f64, bool),
}

#[derive(Default)]
struct Task {
    pid: i32,
    claims: Vec<Claim>,
    started: bool,
    t_b: i64,
    u: [f64; 2],
    x: [f64; 2],
    // runqueue membership (attach): the CPU it belongs to (NULL_CPU = none)
    rq: i32,
    seen: bool,
    after_exit: bool,
    is_new: bool,
    stamp: u32,
    out: Option<Segments>,
}

struct Cpu {
    id: i32,
    capacity: f64,
    fmax: f64,
    fill: f64,
    pid: i32,
    prio: i32,
    khz: f64,
    scale: f64,
    n_wait: i32,
    // state before the current group
    stamp: u32,
    was: (i32, i32, f64, i32),
    jump: [f64; 2],
    jumped: bool,
    // filter
    simulated: bool,
    started: bool,
    t0: i64,
    seed: [f64; 2],
    seg_ts: i64,
    u: [f64; 2],
    x: [f64; 2],
    out: Segments,
    /// aggregate mode: the open segment's start values (clamped) and the figures so far
    open_vals: [f64; 2],
    agg: Contention,
}

const NO_PID: i32 = i32::MIN;

impl Cpu {
    fn compute_scale(&mut self) {
        let f = if !self.khz.is_nan() {
            self.khz
        } else if !self.fill.is_nan() {
            self.fill
        } else {
            self.fmax
        };
        let ratio = if self.fmax.is_nan() { 1.0 } else { (f / self.fmax).min(1.0) };
        self.scale = self.capacity * ratio;
    }

    /// A segment starts at `t` with the current values: stored, or opened for aggregation.
    fn open_segment(&mut self, t: i64, margin: Option<f64>) {
        if margin.is_some() {
            self.open_vals = [self.u[0].max(0.0), self.u[1].max(0.0)];
        } else {
            self.out.push(self.id, t, self.x, self.u);
        }
    }

    /// Aggregate mode: the open segment ends at `t`; only its time from `from` on counts.
    fn close_segment(&mut self, t: i64, margin: f64, from: i64) {
        let [u, r] = self.open_vals;
        if from == i64::MIN {
            self.agg.add(t - self.seg_ts, u, r, margin);
        } else if t > from {
            self.agg.add(t - self.seg_ts.max(from), u, r, margin);
        }
    }

    fn cfs(&self) -> bool {
        self.pid > 0 && self.prio >= 100
    }

    fn inputs(&self) -> [f64; 2] {
        let cfs = if self.cfs() { 1.0 } else { 0.0 };
        [cfs * self.scale, (cfs + self.n_wait as f64) * self.scale]
    }
}

struct Sim<'a> {
    inp: &'a Inputs<'a>,
    want: &'a Want<'a>,
    pids: DenseIds,
    tasks: Vec<Task>,
    cpu_ids: DenseIds,
    cpus: Vec<Cpu>,
    stamp: u32,
    touched_tasks: Vec<usize>,
    touched_cpus: Vec<usize>,
    open: bool,
}

impl<'a> Sim<'a> {
    fn task(&mut self, pid: i32) -> Option<usize> {
        if pid <= 0 {
            return None;
        }
        self.pids.get(pid)
    }

    fn touch_task(&mut self, i: usize) {
        if self.tasks[i].stamp != self.stamp {
            self.tasks[i].stamp = self.stamp;
            self.touched_tasks.push(i);
        }
    }

    fn touch_cpu(&mut self, c: usize) {
        let cpu = &mut self.cpus[c];
        if cpu.stamp != self.stamp {
            cpu.stamp = self.stamp;
            cpu.was = (cpu.pid, cpu.prio, cpu.khz, cpu.n_wait);
            cpu.jump = [0.0; 2];
            cpu.jumped = false;
            self.touched_cpus.push(c);
        }
    }

    fn cpu_index(&self, cpu: i32) -> Option<usize> {
        self.cpu_ids.get(cpu)
    }

    fn claim_inputs(&self, t: &Task) -> [f64; 2] {
        match t.claims.first() {
            Some(Claim::Run(c)) => {
                let s = self.cpus[*c as usize].scale;
                [s, s]
            }
            Some(Claim::Wait(_, s, _)) => [0.0, *s],
            None => [0.0, 0.0],
        }
    }

    /// A task's value at `t` (>= its last boundary): 0 when it has not started (outside its span).
    fn task_value_at(&self, i: usize, t: i64) -> [f64; 2] {
        let k = &self.tasks[i];
        if !k.started || t < k.t_b {
            return [0.0; 2];
        }
        let v = decay(k.u, k.x, t - k.t_b);
        [v[0].max(0.0), v[1].max(0.0)]
    }

    /// Move a task's filter to `t` with its current inputs and record a boundary there.
    fn task_boundary(&mut self, i: usize, t: i64) {
        let x = self.claim_inputs(&self.tasks[i]);
        let k = &mut self.tasks[i];
        if !k.started {
            if k.claims.is_empty() || !self.open {
                return;
            }
            k.started = true;
            k.u = [0.0; 2];
        } else {
            k.u = decay(k.u, k.x, t - k.t_b);
        }
        k.t_b = t;
        k.x = x;
        if let Some(o) = k.out.as_mut() {
            if o.ts.last() == Some(&t) {
                let n = o.len() - 1;
                o.x_util[n] = x[0];
                o.x_runnable[n] = x[1];
                o.util[n] = k.u[0].max(0.0);
                o.runnable[n] = k.u[1].max(0.0);
            } else {
                o.push(k.pid, t, x, k.u);
            }
        }
    }

    fn task_seed(&mut self, i: usize, t: i64, u: [f64; 2]) {
        let k = &mut self.tasks[i];
        k.started = true;
        k.t_b = t;
        k.u = u;
        let x = self.claim_inputs(&self.tasks[i]);
        let k = &mut self.tasks[i];
        k.x = x;
        if let Some(o) = k.out.as_mut() {
            if o.ts.last() == Some(&t) {
                let n = o.len() - 1;
                o.x_util[n] = x[0];
                o.x_runnable[n] = x[1];
                o.util[n] = u[0].max(0.0);
                o.runnable[n] = u[1].max(0.0);
            } else {
                o.push(k.pid, t, x, u);
            }
        }
    }

    fn remove_claim(&mut self, i: usize, pred: impl Fn(&Claim) -> bool) -> Option<Claim> {
        let claims = &mut self.tasks[i].claims;
        let pos = claims.iter().position(pred)?;
        Some(claims.remove(pos))
    }

    /// The window opens at start_ns: tasks with a claim start at 0, waits that began before freeze their
    /// input, CPUs whose simulation starts at the window start start.
    fn open_window(&mut self) {
        self.open = true;
        let start = self.inp.start_ns;
        for i in 0..self.tasks.len() {
            for c in self.tasks[i].claims.iter_mut() {
                if let Claim::Wait(cpu, s, _) = c {
                    if s.is_nan() {
                        *s = if (*cpu as usize) < self.cpus.len() { self.cpus[*cpu as usize].scale } else { 1024.0 };
                    }
                }
            }
            if !self.tasks[i].claims.is_empty() {
                self.task_boundary(i, start);
            }
        }
        for c in 0..self.cpus.len() {
            if self.cpus[c].simulated && self.cpus[c].t0 == start {
                self.start_cpu(c, start);
            }
        }
    }

    fn start_cpu(&mut self, c: usize, t: i64) {
        let margin = self.want.contention_margin;
        let cpu = &mut self.cpus[c];
        cpu.started = true;
        cpu.seg_ts = t;
        cpu.u = cpu.seed;
        cpu.x = cpu.inputs();
        cpu.open_segment(t, margin);
    }

    fn cpu_boundary(&mut self, c: usize, t: i64) {
        let margin = self.want.contention_margin;
        let cpu = &mut self.cpus[c];
        if let Some(m) = margin {
            cpu.close_segment(t, m, self.want.aggregate_from_ns);
        }
        let u = decay(cpu.u, cpu.x, t - cpu.seg_ts);
        cpu.u = [u[0] + cpu.jump[0], u[1] + cpu.jump[1]];
        cpu.seg_ts = t;
        cpu.x = cpu.inputs();
        cpu.open_segment(t, margin);
    }

    fn run(&mut self, waits: &Waits, firsts: &[(i32, i32, i32)]) {
        let inp = self.inp;
        let sw = &inp.switches;
        let (start, end) = (inp.start_ns, inp.end_ns);
        // the CPU timeline before each CPU's first switch: that switch's prev task
        for &(cpu, pid, prio) in firsts {
            if let Some(c) = self.cpu_index(cpu) {
                self.cpus[c].pid = pid;
                self.cpus[c].prio = prio;
                if let Some(i) = self.task(pid) {
                    self.tasks[i].claims.push(Claim::Run(c as u32));
                }
            }
        }
        let nw = inp.wakeups.len() as u8;
        let (s_mig, s_freq, s_tseed, s_cseed) = (nw + 1, nw + 2, nw + 3, nw + 4);
        let empty: &[i64] = &[];
        let mut ts_list: Vec<&[i64]> = vec![sw.ts];
        ts_list.extend(inp.wakeups.iter().map(|w| w.ts));
        ts_list.push(inp.migrations.as_ref().map_or(empty, |m| m.ts));
        ts_list.push(inp.frequencies.as_ref().map_or(empty, |f| f.ts));
        // seeds act at max(ts, start)
        let tseed_ts: Vec<i64> =
            inp.task_seeds.as_ref().map_or(vec![], |s| s.ts.iter().map(|&t| t.max(start)).collect());
        ts_list.push(&tseed_ts);
        let cseed_ts: Vec<i64> = self.cpus.iter().filter(|c| c.simulated && c.t0 > start).map(|c| c.t0).collect();
        let cseed_idx: Vec<usize> =
            (0..self.cpus.len()).filter(|&c| self.cpus[c].simulated && self.cpus[c].t0 > start).collect();
        ts_list.push(&cseed_ts);
        let mut m = Merger::new(ts_list);
        let mut g: Vec<(u8, u32)> = Vec::new();
        // (task, from_cpu, to_cpu, value): moves of this group
        let mut moves: Vec<(usize, i32, i32, [f64; 2])> = Vec::new();
        let mut born: Vec<(usize, i32)> = Vec::new();
        while let Some(t) = m.next_group(&mut g) {
            if t >= end {
                break;
            }
            if !self.open && t > start {
                self.open_window();
            }
            self.stamp += 1;
            self.touched_tasks.clear();
            self.touched_cpus.clear();
            moves.clear();
            born.clear();
            let jumps_apply = self.want.attach && self.open && t > start;
            // runqueue membership: switch-ins, wakeups, migrations, exits (in this order)
            if self.want.attach {
                for phase in 0..4u8 {
                    for &(s, r) in &g {
                        let r = r as usize;
                        let (pid, to, exit) = match phase {
                            0 if s == S_SWITCH && sw.next_pid[r] > 0 => (sw.next_pid[r], sw.cpu[r], false),
                            1 if s >= 1 && s <= nw => {
                                let w = &inp.wakeups[s as usize - 1];
                                (w.pid[r], w.cpu[r], false)
                            }
                            2 if s == s_mig => {
                                let mg = inp.migrations.as_ref().unwrap();
                                (mg.pid[r], mg.dest[r], false)
                            }
                            3 if s == S_SWITCH && sw.prev_pid[r] > 0 && sw.prev_state[r] & DEAD_BITS != 0 => {
                                (sw.prev_pid[r], NULL_CPU, true)
                            }
                            _ => continue,
                        };
                        let Some(i) = self.task(pid) else { continue };
                        let k = &mut self.tasks[i];
                        let from = k.rq;
                        let first = !k.seen;
                        let after_exit = k.after_exit;
                        let is_new = k.is_new;
                        k.seen = true;
                        k.rq = to;
                        k.after_exit = exit;
                        if !jumps_apply {
                            continue;
                        }
                        if from != NULL_CPU && ((to != NULL_CPU && from != to) || exit) {
                            // the value just before the move (1 ns earlier: before this group's changes)
                            let v = self.task_value_at(i, t - 1);
                            moves.push((i, from, to, v));
                        } else if to != NULL_CPU && ((first && is_new) || after_exit) {
                            born.push((i, to));
                        }
                    }
                }
            }
            // frequencies
            if let Some(f) = inp.frequencies.as_ref() {
                for &(s, r) in &g {
                    if s != s_freq {
                        continue;
                    }
                    let r = r as usize;
                    if let Some(c) = self.cpu_index(f.cpu[r]) {
                        self.touch_cpu(c);
                        self.cpus[c].khz = f.khz[r];
                        self.cpus[c].compute_scale();
                    }
                }
            }
            // waits start (switch-outs, wakeups), then switch-ins end them and move the CPU timeline
            for phase in 0..2u8 {
                for &(s, r) in &g {
                    let r = r as usize;
                    let (pid, cpu, prio) = match phase {
                        0 if s == S_SWITCH && waits.from_switch[r] => (sw.prev_pid[r], sw.cpu[r], sw.prev_prio[r]),
                        1 if s >= 1 && s <= nw && waits.from_wakeup[s as usize - 1][r] => {
                            let w = &inp.wakeups[s as usize - 1];
                            (w.pid[r], w.cpu[r], w.prio[r])
                        }
                        _ => continue,
                    };
                    let Some(i) = self.task(pid) else { continue };
                    let c = self.cpu_index(cpu);
                    let counted = prio >= 100 && c.is_some();
                    let scale = match c {
                        _ if !self.open => f64::NAN,
                        Some(c) => self.cpus[c].scale,
                        None => 1024.0,
                    };
                    if counted {
                        let c = c.unwrap();
                        self.touch_cpu(c);
                        self.cpus[c].n_wait += 1;
                    }
                    let ci = c.map_or(u32::MAX, |c| c as u32);
                    self.tasks[i].claims.push(Claim::Wait(ci, scale, counted));
                    self.touch_task(i);
                }
            }
            for &(s, r) in &g {
                let r = r as usize;
                if s != S_SWITCH {
                    continue;
                }
                if let Some(i) = self.task(sw.next_pid[r]) {
                    if let Some(Claim::Wait(c, _, counted)) = self.remove_claim(i, |c| matches!(c, Claim::Wait(..))) {
                        if counted {
                            let c = c as usize;
                            self.touch_cpu(c);
                            self.cpus[c].n_wait -= 1;
                        }
                        self.touch_task(i);
                    }
                }
                if let Some(c) = self.cpu_index(sw.cpu[r]) {
                    self.touch_cpu(c);
                    self.cpus[c].pid = sw.next_pid[r];
                    self.cpus[c].prio = sw.next_prio[r];
                }
            }
            // the CPU timelines: a task runs from the switch that leaves it on a CPU
            for n in 0..self.touched_cpus.len() {
                let c = self.touched_cpus[n];
                let (old_pid, _, old_khz, _) = self.cpus[c].was;
                let new_pid = self.cpus[c].pid;
                if old_pid != new_pid {
                    if let Some(i) = self.task(old_pid) {
                        let cu = c as u32;
                        self.remove_claim(i, |k| matches!(k, Claim::Run(x) if *x == cu));
                        self.touch_task(i);
                    }
                    if let Some(i) = self.task(new_pid) {
                        self.tasks[i].claims.push(Claim::Run(c as u32));
                        self.touch_task(i);
                    }
                }
                if !same(old_khz, self.cpus[c].khz) && self.cpus[c].pid > 0 {
                    if let Some(i) = self.task(self.cpus[c].pid) {
                        self.touch_task(i);
                    }
                }
            }
            // a group at the window start: the window opens with its changes applied
            if !self.open && t == start {
                self.open_window();
            }
            // seeds of tasks act after this group's changes
            if let Some(ts) = inp.task_seeds.as_ref() {
                for &(s, r) in &g {
                    if s != s_tseed {
                        continue;
                    }
                    let r = r as usize;
                    if let Some(i) = self.task(ts.id[r]) {
                        self.touch_task(i);
                    }
                }
            }
            if self.open {
                for n in 0..self.touched_tasks.len() {
                    let i = self.touched_tasks[n];
                    self.task_boundary(i, t);
                }
            }
            if let Some(ts) = inp.task_seeds.as_ref() {
                for &(s, r) in &g {
                    if s != s_tseed || !self.open {
                        continue;
                    }
                    let r = r as usize;
                    if let Some(i) = self.task(ts.id[r]) {
                        self.task_seed(i, t, [ts.util[r], ts.runnable[r]]);
                    }
                }
            }
            // jumps: a moving task's value leaves one runqueue and joins another
            for &(_, from, to, v) in moves.iter() {
                self.add_jump(from, t, [-v[0], -v[1]]);
                if to != NULL_CPU {
                    self.add_jump(to, t, v);
                }
            }
            for &(i, to) in born.iter() {
                let v = self.task_value_at(i, t);
                self.add_jump(to, t, v);
            }
            // CPU seeds (their simulation starts there)
            for &(s, r) in &g {
                if s == s_cseed {
                    let c = cseed_idx[r as usize];
                    self.touch_cpu(c);
                }
            }
            if !self.open {
                continue;
            }
            for n in 0..self.touched_cpus.len() {
                let c = self.touched_cpus[n];
                let cpu = &self.cpus[c];
                if !cpu.simulated {
                    continue;
                }
                if !cpu.started {
                    if t == cpu.t0 {
                        self.start_cpu(c, t);
                    }
                    continue;
                }
                let (p, pr, khz, nwait) = cpu.was;
                let changed = p != cpu.pid || pr != cpu.prio || !same(khz, cpu.khz) || nwait != cpu.n_wait;
                if (changed || cpu.jumped) && t > cpu.seg_ts {
                    self.cpu_boundary(c, t);
                }
            }
        }
        if !self.open {
            self.open_window();
        }
    }

    fn add_jump(&mut self, cpu: i32, t: i64, v: [f64; 2]) {
        let Some(c) = self.cpu_index(cpu) else { return };
        if !self.cpus[c].simulated || t <= self.cpus[c].t0 {
            return;
        }
        self.touch_cpu(c);
        let k = &mut self.cpus[c];
        k.jump[0] += v[0];
        k.jump[1] += v[1];
        k.jumped = true;
    }
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn finish(segs: &mut Segments, end: i64) {
    let n = segs.len();
    for k in 0..n {
        let next = if k + 1 < n && segs.key[k + 1] == segs.key[k] { segs.ts[k + 1] } else { end };
        segs.dur[k] = next - segs.ts[k];
    }
}

/// Per-CPU and per-task simulated signals (see the module doc). Returns (cpu segments: one part per CPU in
/// CPU order, none in aggregate mode; task segments; per-CPU contention in aggregate mode), segments sorted
/// by key then time, contiguous per key from its start to end_ns.
pub fn simulate(inp: &Inputs, want: &Want) -> (Vec<Segments>, Segments, Vec<Contention>) {
    let sw = &inp.switches;
    let mut pid_cols: Vec<&[i32]> = vec![sw.prev_pid, sw.next_pid, inp.new_pids];
    pid_cols.extend(inp.wakeups.iter().map(|w| w.pid));
    if let Some(m) = &inp.migrations {
        pid_cols.push(m.pid);
    }
    if let Some(s) = &inp.task_seeds {
        pid_cols.push(s.id);
    }
    if let Some(p) = want.tasks {
        pid_cols.push(p);
    }
    let mut pids = DenseIds::new(max_of(&pid_cols));
    // dense pid indices in order of first appearance in the switch table, then the others
    for col in &pid_cols {
        for &p in col.iter() {
            if p > 0 {
                pids.get_or_insert(p);
            }
        }
    }
    let order = switch_order(sw.ts);
    let firsts = first_prev(sw, &order);
    let waits = decide_waits(inp, &pids, &firsts);

    let mut cpu_cols: Vec<&[i32]> = vec![sw.cpu, inp.cpus.cpu];
    cpu_cols.extend(inp.wakeups.iter().map(|w| w.cpu));
    if let Some(m) = &inp.migrations {
        cpu_cols.push(m.dest);
    }
    if let Some(f) = &inp.frequencies {
        cpu_cols.push(f.cpu);
    }
    let max_cpu = max_of(&cpu_cols).min(1 << 20);
    let mut cpu_ids = DenseIds::new(max_cpu);
    let mut cpus: Vec<Cpu> = Vec::new();
    let new_cpu = |id: i32| Cpu {
        id,
        capacity: 1024.0,
        fmax: f64::NAN,
        fill: f64::NAN,
        pid: NO_PID,
        prio: NO_PID,
        khz: f64::NAN,
        scale: 1024.0,
        n_wait: 0,
        stamp: 0,
        was: (NO_PID, NO_PID, f64::NAN, 0),
        jump: [0.0; 2],
        jumped: false,
        simulated: false,
        started: false,
        t0: inp.start_ns,
        seed: [0.0; 2],
        seg_ts: 0,
        u: [0.0; 2],
        x: [0.0; 2],
        out: Segments::default(),
        open_vals: [0.0; 2],
        agg: Contention { cpu: id, ..Default::default() },
    };
    // simulated CPUs first, in the given order
    let spec = &inp.cpus;
    for k in 0..spec.cpu.len() {
        if let Some(c) = cpu_ids.get_or_insert(spec.cpu[k]) {
            if c == cpus.len() {
                cpus.push(new_cpu(spec.cpu[k]));
            }
            let cpu = &mut cpus[c];
            cpu.simulated = want.cpus;
            cpu.capacity = spec.capacity[k];
            cpu.fmax = spec.fmax_khz[k];
            cpu.fill = spec.fill_khz[k];
            cpu.compute_scale();
        }
    }
    for col in &cpu_cols {
        for &c in col.iter() {
            if let Some(i) = cpu_ids.get_or_insert(c) {
                if i == cpus.len() {
                    cpus.push(new_cpu(c));
                }
            }
        }
    }
    let n_sim = cpus.iter().filter(|c| c.simulated).count().max(1);
    let per_cpu = (2 * sw.ts.len() + inp.wakeups.iter().map(|w| w.ts.len()).sum::<usize>()) / n_sim;
    for c in cpus.iter_mut().filter(|c| c.simulated) {
        if want.contention_margin.is_none() {
            c.out.reserve(per_cpu);
        }
    }
    if let Some(s) = &inp.cpu_seeds {
        // each CPU's simulation starts at its seed (the first one given)
        for k in (0..s.id.len()).rev() {
            if let Some(c) = cpu_ids.get(s.id[k]) {
                cpus[c].t0 = s.ts[k].max(inp.start_ns);
                cpus[c].seed = [s.util[k], s.runnable[k]];
            }
        }
    }
    let mut tasks: Vec<Task> = pids.ids.iter().map(|&pid| Task { pid, rq: NULL_CPU, ..Default::default() }).collect();
    for &p in inp.new_pids {
        if let Some(i) = pids.get(p) {
            tasks[i].is_new = true;
        }
    }
    match want.tasks {
        Some(sel) if !sel.is_empty() => {
            for &p in sel {
                if let Some(i) = pids.get(p) {
                    tasks[i].out = Some(Segments::default());
                }
            }
        }
        Some(_) => tasks.iter_mut().for_each(|t| t.out = Some(Segments::default())),
        None => {}
    }
    let mut sim = Sim {
        inp,
        want,
        pids,
        tasks,
        cpu_ids,
        cpus,
        stamp: 0,
        touched_tasks: Vec::new(),
        touched_cpus: Vec::new(),
        open: false,
    };
    sim.run(&waits, &firsts);

    let end = inp.end_ns;
    let mut order: Vec<usize> = (0..sim.cpus.len()).filter(|&c| sim.cpus[c].simulated).collect();
    order.sort_by_key(|&c| sim.cpus[c].id);
    let mut contention = Vec::new();
    for &c in &order {
        if let (Some(m), true) = (want.contention_margin, sim.cpus[c].started) {
            sim.cpus[c].close_segment(end, m, want.aggregate_from_ns);
            contention.push(sim.cpus[c].agg.clone());
        }
    }
    // one part per CPU, in CPU order: handed over as they are (no copy into one set of columns)
    let mut by_id: Vec<&mut Cpu> = sim.cpus.iter_mut().filter(|c| c.simulated && !c.out.is_empty()).collect();
    by_id.sort_by_key(|c| c.id);
    let cpu_out: Vec<Segments> = by_id
        .into_iter()
        .map(|c| {
            let mut part = std::mem::take(&mut c.out);
            finish(&mut part, end);
            part
        })
        .collect();
    let mut by_pid: Vec<&mut Task> = sim.tasks.iter_mut().filter(|t| t.out.is_some()).collect();
    by_pid.sort_by_key(|t| t.pid);
    let mut task_out = Segments::concat(by_pid.into_iter().filter_map(|t| t.out.as_mut()).collect());
    finish(&mut task_out, end);
    (cpu_out, task_out, contention)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// rows: (ts, cpu, prev_pid, prev_state, next_pid), all CFS (prio 120).
    struct Sw {
        ts: Vec<i64>,
        cpu: Vec<i32>,
        prev: Vec<i32>,
        state: Vec<i64>,
        next: Vec<i32>,
        prio: Vec<i32>,
    }

    fn switches(rows: &[(i64, i32, i32, i64, i32)]) -> Sw {
        Sw {
            ts: rows.iter().map(|r| r.0).collect(),
            cpu: rows.iter().map(|r| r.1).collect(),
            prev: rows.iter().map(|r| r.2).collect(),
            state: rows.iter().map(|r| r.3).collect(),
            next: rows.iter().map(|r| r.4).collect(),
            prio: vec![120; rows.len()],
        }
    }

    fn run(
        sw: &Sw,
        wakeups: Vec<Wakeups>,
        migrations: Option<Migrations>,
        cpus: &[i32],
        cap: &[f64],
        end: i64,
        tasks: Option<&[i32]>,
    ) -> (Segments, Segments) {
        let nan = vec![f64::NAN; cpus.len()];
        let inp = Inputs {
            switches: Switches {
                ts: &sw.ts,
                cpu: &sw.cpu,
                prev_pid: &sw.prev,
                prev_prio: &sw.prio,
                prev_state: &sw.state,
                next_pid: &sw.next,
                next_prio: &sw.prio,
            },
            wakeups,
            migrations,
            frequencies: None,
            cpus: CpuSpec { cpu: cpus, capacity: cap, fmax_khz: &nan, fill_khz: &nan },
            cpu_seeds: None,
            task_seeds: None,
            new_pids: &[],
            start_ns: 0,
            end_ns: end,
        };
        let want = Want { cpus: true, contention_margin: None, aggregate_from_ns: i64::MIN, attach: true, tasks };
        let (mut c, t, _) = simulate(&inp, &want);
        (Segments::concat(c.iter_mut().collect()), t)
    }

    /// The value of key `k`'s signal at `t` (evaluated inside its segment).
    fn at(s: &Segments, k: i32, t: i64, util: bool) -> f64 {
        let i = (0..s.len()).rfind(|&i| s.key[i] == k && s.ts[i] <= t).unwrap();
        let (u, x) = if util { (s.util[i], s.x_util[i]) } else { (s.runnable[i], s.x_runnable[i]) };
        decay([u, u], [x, x], t - s.ts[i])[0]
    }

    #[test]
    fn half_life_and_steady_state_follow_capacity() {
        // task 10 runs on cpu0 (capacity 1024), task 11 on cpu1 (capacity 446), from t = 0
        let sw = switches(&[(0, 0, 0, 0, 10), (0, 1, 0, 0, 11)]);
        let half = (32.0 * PELT_PERIOD_NS) as i64;
        let (c, t) = run(&sw, vec![], None, &[0, 1], &[1024.0, 446.0], 2000 * MS, Some(&[]));
        assert!((at(&t, 10, half, true) - 512.0).abs() < 0.01);
        assert!((at(&t, 10, 1999 * MS, true) - 1024.0).abs() < 0.01);
        assert!((at(&t, 11, 1999 * MS, true) - 446.0).abs() < 0.01);
        assert!((at(&c, 1, 1999 * MS, true) - 446.0).abs() < 0.01);
        // one segment per CPU: nothing changes after t = 0
        assert_eq!(c.key, vec![0, 1]);
        assert_eq!(c.dur, vec![2000 * MS, 2000 * MS]);
    }

    #[test]
    fn a_preempted_task_waits_until_its_switch_in() {
        // cpu0: task 1 runs 0-10 ms, is preempted by task 2 (10-20 ms), runs again 20-30 ms, then idle
        let sw = switches(&[(0, 0, 0, 0, 1), (10 * MS, 0, 1, 0, 2), (20 * MS, 0, 2, 1, 1), (30 * MS, 0, 1, 1, 0)]);
        let (c, t) = run(&sw, vec![], None, &[0], &[1024.0], 60 * MS, Some(&[1]));
        // cpu0's runnable input: 1 task running, +1 waiting during 10-20 ms
        let seg: Vec<(i64, f64, f64)> = (0..c.len()).map(|i| (c.ts[i], c.x_util[i], c.x_runnable[i])).collect();
        assert_eq!(
            seg,
            vec![(0, 1024.0, 1024.0), (10 * MS, 1024.0, 2048.0), (20 * MS, 1024.0, 1024.0), (30 * MS, 0.0, 0.0)]
        );
        // task 1 waits 10-20 ms: util decays, runnable keeps rising
        assert!(at(&t, 1, 20 * MS, true) < at(&t, 1, 10 * MS, true));
        assert!(at(&t, 1, 20 * MS, false) > at(&t, 1, 10 * MS, false));
    }

    #[test]
    fn waits_count_only_when_a_switch_in_follows_and_not_while_running() {
        // task 5 runs on cpu0 0-10 ms; woken at 4 ms while running (ignored), preempted at 10 ms, back at 12 ms;
        // then asleep, woken at 20 ms but the trace next shows it switched out at 25 ms (its switch-in was
        // missed): that wait does not count
        let sw = switches(&[
            (0, 0, 0, 0, 5),
            (10 * MS, 0, 5, 0, 6),
            (12 * MS, 0, 6, 1, 5),
            (15 * MS, 0, 5, 1, 0),
            (25 * MS, 0, 5, 1, 0),
        ]);
        let (ts, pid, cpu, prio) = (vec![4 * MS, 20 * MS], vec![5, 5], vec![0, 0], vec![120, 120]);
        let wk = Wakeups { ts: &ts, pid: &pid, cpu: &cpu, prio: &prio };
        let (c, _) = run(&sw, vec![wk], None, &[0], &[1024.0], 40 * MS, None);
        let waiting: Vec<(i64, f64)> =
            (0..c.len()).filter(|&i| c.x_runnable[i] > c.x_util[i]).map(|i| (c.ts[i], c.x_runnable[i])).collect();
        assert_eq!(waiting, vec![(10 * MS, 2048.0)]);
        assert_eq!(c.dur[1], 2 * MS);
    }

    #[test]
    fn a_migrating_task_takes_its_signal_along() {
        // task 7 runs on cpu0 for 100 ms, sleeps, is woken onto cpu1 at 150 ms (runs there 1 ms)
        let sw = switches(&[(0, 0, 0, 0, 7), (100 * MS, 0, 7, 1, 0), (150 * MS, 1, 0, 0, 7), (151 * MS, 1, 7, 1, 0)]);
        let (ts, pid, cpu, prio) = (vec![150 * MS], vec![7], vec![1], vec![120]);
        let wk = Wakeups { ts: &ts, pid: &pid, cpu: &cpu, prio: &prio };
        let (c, t) = run(&sw, vec![wk], None, &[0, 1], &[1024.0, 1024.0], 200 * MS, Some(&[7]));
        let v = at(&t, 7, 150 * MS - 1, true);
        assert!(v > 100.0);
        // cpu0 loses the task's util at 150 ms, cpu1 gains it
        let before0 = at(&c, 0, 150 * MS - 1, true);
        let after0 = at(&c, 0, 150 * MS, true);
        assert!((before0 - after0 - v).abs() < 1e-6);
        assert!((at(&c, 1, 150 * MS, true) - v).abs() < 1e-6);
    }

    #[test]
    fn contention_aggregates_equal_the_segments() {
        let sw = switches(&[(0, 0, 0, 0, 1), (10 * MS, 0, 1, 0, 2), (20 * MS, 0, 2, 1, 1), (30 * MS, 0, 1, 1, 0)]);
        let (c, _) = run(&sw, vec![], None, &[0], &[1024.0], 60 * MS, None);
        let nan = [f64::NAN];
        let inp = Inputs {
            switches: Switches {
                ts: &sw.ts,
                cpu: &sw.cpu,
                prev_pid: &sw.prev,
                prev_prio: &sw.prio,
                prev_state: &sw.state,
                next_pid: &sw.next,
                next_prio: &sw.prio,
            },
            wakeups: vec![],
            migrations: None,
            frequencies: None,
            cpus: CpuSpec { cpu: &[0], capacity: &[1024.0], fmax_khz: &nan, fill_khz: &nan },
            cpu_seeds: None,
            task_seeds: None,
            new_pids: &[],
            start_ns: 0,
            end_ns: 60 * MS,
        };
        let want =
            Want { cpus: true, contention_margin: Some(1.0), aggregate_from_ns: i64::MIN, attach: true, tasks: None };
        let (none, _, agg) = simulate(&inp, &want);
        assert!(none.is_empty());
        let mut want_agg = Contention { cpu: 0, ..Default::default() };
        for i in 0..c.len() {
            want_agg.add(c.dur[i], c.util[i], c.runnable[i], 1.0);
        }
        assert_eq!(agg.len(), 1);
        assert_eq!(format!("{:?}", agg[0]), format!("{want_agg:?}"));
        assert!(agg[0].contended_ns > 10 * MS && agg[0].known_ns == 60 * MS);
        // from a time inside a segment (and from a segment's start): the segments clipped there, the one open
        // at that time counted from it with its values
        for from in [15 * MS, 20 * MS] {
            let (_, _, agg) = simulate(&inp, &Want { aggregate_from_ns: from, ..want });
            let mut clipped = Contention { cpu: 0, ..Default::default() };
            for i in 0..c.len() {
                let end = c.ts[i] + c.dur[i];
                if end > from {
                    clipped.add(end - c.ts[i].max(from), c.util[i], c.runnable[i], 1.0);
                }
            }
            assert_eq!(format!("{:?}", agg[0]), format!("{clipped:?}"));
            assert_eq!(agg[0].known_ns, 60 * MS - from);
        }
    }
}
