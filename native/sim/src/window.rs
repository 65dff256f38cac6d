//! Window-based demand (WALT-style), compiled: the model of abtest/analysis/window_sim.py (read its module
//! doc). One pass over sched_switch and cpu_frequency in time order accumulates each task's scaled running
//! time per window; the rollover policy max(mean of the last N windows, most recent) runs per task after.
use crate::events::{max_of, DenseIds, Merger};

pub struct Inputs<'a> {
    pub sw_ts: &'a [i64],
    pub sw_cpu: &'a [i32],
    pub prev_pid: &'a [i32],
    pub next_pid: &'a [i32],
    pub freq_ts: &'a [i64],
    pub freq_cpu: &'a [i32],
    pub freq_khz: &'a [f64],
    /// simulated CPUs: capacity, f_max (NaN: no frequency invariance), frequency before the first event
    /// (NaN: f_max)
    pub cpus: &'a [i32],
    pub capacity: &'a [f64],
    pub fmax_khz: &'a [f64],
    pub fill_khz: &'a [f64],
    pub start_ns: i64,
    pub end_ns: i64,
    pub window_ns: i64,
    pub n_windows: usize,
    /// only these pids (None: every task)
    pub pids: Option<&'a [i32]>,
}

/// Per task and window from the task's first running window to the last window: pid, window index,
/// running ns, window load (0..1024) and the demand in force after the window's rollover.
#[derive(Default, Debug)]
pub struct Demand {
    pub pid: Vec<i32>,
    pub window: Vec<i64>,
    pub running_ns: Vec<i64>,
    pub window_load: Vec<f64>,
    pub demand: Vec<f64>,
}

#[derive(Clone, Copy)]
struct Acc {
    window: i64,
    running: i64,
    scaled: f64,
}

struct Cpu {
    pid: i32,
    khz: f64,
    capacity: f64,
    fmax: f64,
    fill: f64,
    since: i64,
}

impl Cpu {
    fn scale(&self) -> f64 {
        let f = if !self.khz.is_nan() {
            self.khz
        } else if !self.fill.is_nan() {
            self.fill
        } else {
            self.fmax
        };
        if self.fmax.is_nan() {
            self.capacity
        } else {
            self.capacity * (f / self.fmax).min(1.0)
        }
    }
}

/// Add `[a, b)` of running at `scale` to a task's windows.
fn add(accs: &mut Vec<Acc>, start: i64, win: i64, a: i64, b: i64, scale: f64) {
    let mut t = a;
    while t < b {
        let w = (t - start).div_euclid(win);
        let w_end = start + (w + 1) * win;
        let e = b.min(w_end);
        let ov = e - t;
        match accs.last_mut() {
            Some(l) if l.window == w => {
                l.running += ov;
                l.scaled += ov as f64 * scale;
            }
            Some(l) if l.window > w => {
                // out of order (a task seen on two CPUs at once): find its place
                match accs.binary_search_by_key(&w, |x| x.window) {
                    Ok(i) => {
                        accs[i].running += ov;
                        accs[i].scaled += ov as f64 * scale;
                    }
                    Err(i) => accs.insert(i, Acc { window: w, running: ov, scaled: ov as f64 * scale }),
                }
            }
            _ => accs.push(Acc { window: w, running: ov, scaled: ov as f64 * scale }),
        }
        t = e;
    }
}

pub fn window_demand(inp: &Inputs) -> Demand {
    let (start, end, win) = (inp.start_ns, inp.end_ns, inp.window_ns);
    let mut pids = DenseIds::new(max_of(&[inp.prev_pid, inp.next_pid]));
    let mut accs: Vec<Vec<Acc>> = Vec::new();
    let wanted: Option<DenseIds> = inp.pids.map(|p| {
        let mut d = DenseIds::new(max_of(&[p]));
        for &x in p {
            d.get_or_insert(x);
        }
        d
    });
    let mut cpu_ids = DenseIds::new(max_of(&[inp.sw_cpu, inp.freq_cpu, inp.cpus]).min(1 << 20));
    let mut cpus: Vec<Cpu> = Vec::new();
    let mut get_cpu = |id: i32, cpus: &mut Vec<Cpu>| -> Option<usize> {
        let c = cpu_ids.get_or_insert(id)?;
        if c == cpus.len() {
            cpus.push(Cpu {
                pid: i32::MIN,
                khz: f64::NAN,
                capacity: 1024.0,
                fmax: f64::NAN,
                fill: f64::NAN,
                since: start,
            });
        }
        Some(c)
    };
    for k in 0..inp.cpus.len() {
        if let Some(c) = get_cpu(inp.cpus[k], &mut cpus) {
            cpus[c].capacity = inp.capacity[k];
            cpus[c].fmax = inp.fmax_khz[k];
            cpus[c].fill = inp.fill_khz[k];
        }
    }
    // before a CPU's first switch, its prev task runs
    let mut m = Merger::new(vec![inp.sw_ts]);
    let mut g = Vec::new();
    while m.next_group(&mut g).is_some() {
        for &(_, r) in &g {
            let r = r as usize;
            if let Some(c) = get_cpu(inp.sw_cpu[r], &mut cpus) {
                if cpus[c].pid == i32::MIN {
                    cpus[c].pid = inp.prev_pid[r];
                }
            }
        }
    }
    let close = |c: &Cpu, t: i64, accs: &mut Vec<Vec<Acc>>, pids: &mut DenseIds| {
        let (a, b) = (c.since.max(start), t.min(end));
        if c.pid <= 0 || b <= a {
            return;
        }
        if let Some(w) = &wanted {
            if w.get(c.pid).is_none() {
                return;
            }
        }
        let i = pids.get_or_insert(c.pid).unwrap();
        if i == accs.len() {
            accs.push(Vec::new());
        }
        add(&mut accs[i], start, win, a, b, c.scale());
    };
    let mut m = Merger::new(vec![inp.sw_ts, inp.freq_ts]);
    let mut touched: Vec<(usize, i32, f64)> = Vec::new();
    while let Some(t) = m.next_group(&mut g) {
        if t >= end {
            break;
        }
        touched.clear();
        for &(s, r) in &g {
            let r = r as usize;
            let id = if s == 0 { inp.sw_cpu[r] } else { inp.freq_cpu[r] };
            let Some(c) = get_cpu(id, &mut cpus) else {
                continue;
            };
            if !touched.iter().any(|x| x.0 == c) {
                touched.push((c, cpus[c].pid, cpus[c].khz));
            }
            if s == 0 {
                cpus[c].pid = inp.next_pid[r];
            } else {
                cpus[c].khz = inp.freq_khz[r];
            }
        }
        for &(c, pid, khz) in &touched {
            let (new_pid, new_khz) = (cpus[c].pid, cpus[c].khz);
            let same_khz = khz == new_khz || (khz.is_nan() && new_khz.is_nan());
            if pid == new_pid && same_khz {
                continue;
            }
            // the piece that ends here ran with the previous state
            let mut before = Cpu { pid, khz, ..cpus[c] };
            before.since = cpus[c].since;
            close(&before, t, &mut accs, &mut pids);
            cpus[c].since = t;
        }
    }
    for c in &cpus {
        close(c, end, &mut accs, &mut pids);
    }

    let n_win = ((end - start + win - 1) / win).max(1);
    let mut order: Vec<usize> = (0..accs.len()).filter(|&i| !accs[i].is_empty()).collect();
    order.sort_by_key(|&i| pids.ids[i]);
    let mut out = Demand::default();
    let n = inp.n_windows.max(1);
    for i in order {
        let pid = pids.ids[i];
        let a = &accs[i];
        let first = a[0].window;
        let mut k = 0;
        let mut last: Vec<f64> = Vec::with_capacity(n);
        for w in first..n_win {
            let (running, scaled) = if k < a.len() && a[k].window == w {
                k += 1;
                (a[k - 1].running, a[k - 1].scaled)
            } else {
                (0, 0.0)
            };
            let load = scaled / win as f64;
            if last.len() == n {
                last.remove(0);
            }
            last.push(load);
            let mean = last.iter().sum::<f64>() / last.len() as f64;
            out.pid.push(pid);
            out.window.push(w);
            out.running_ns.push(running);
            out.window_load.push(load);
            out.demand.push(mean.max(load));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_max_of_recent_and_mean() {
        // a task running 10 ms of every 20 ms window for 3 windows (capacity 1024), then sleeping
        let ms = 1_000_000i64;
        let mut ts = vec![];
        let (mut cpu, mut prev, mut next) = (vec![], vec![], vec![]);
        for w in 0..3 {
            ts.extend([w * 20 * ms, w * 20 * ms + 10 * ms]);
            cpu.extend([0, 0]);
            prev.extend([0, 5]);
            next.extend([5, 0]);
        }
        let inp = Inputs {
            sw_ts: &ts,
            sw_cpu: &cpu,
            prev_pid: &prev,
            next_pid: &next,
            freq_ts: &[],
            freq_cpu: &[],
            freq_khz: &[],
            cpus: &[0],
            capacity: &[1024.0],
            fmax_khz: &[f64::NAN],
            fill_khz: &[f64::NAN],
            start_ns: 0,
            end_ns: 140 * ms,
            window_ns: 20 * ms,
            n_windows: 5,
            pids: None,
        };
        let d = window_demand(&inp);
        assert_eq!(d.window, (0..7).collect::<Vec<_>>());
        assert_eq!(d.window_load, vec![512.0, 512.0, 512.0, 0.0, 0.0, 0.0, 0.0]);
        let want = [512.0, 512.0, 512.0, 384.0, 307.2, 204.8, 102.4];
        for (a, b) in d.demand.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }
}
