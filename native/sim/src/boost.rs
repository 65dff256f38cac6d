//! The boost what-if's frequency requests, compiled: abtest/analysis/boost.py's df_boost_requests (read its
//! module doc). Per CPU the signal samples hold until the next one; per frequency domain, at every instant
//! where one of its CPUs' samples changes, the request is the highest of its CPUs' requests
//! (1.25 x signal / capacity x f_max) and is clamped to the lowest OPP at or above it.

pub struct Inputs<'a> {
    /// signal samples: cpu, ts, util, runnable (NaN = null)
    pub cpu: &'a [i32],
    pub ts: &'a [i64],
    pub util: &'a [f64],
    pub runnable: &'a [f64],
    /// platform CPUs: cpu, domain, capacity
    pub plat_cpu: &'a [i32],
    pub plat_domain: &'a [i32],
    pub plat_capacity: &'a [f64],
    /// OPPs: domain, kHz
    pub opp_domain: &'a [i32],
    pub opp_khz: &'a [i64],
    pub headroom: f64,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Per domain and instant: domain, ts, dur, the raw requests (NaN = unknown) and the OPPs they clamp to
/// (i64::MIN = unknown).
#[derive(Default, Debug)]
pub struct Requests {
    pub domain: Vec<i32>,
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub util_request_khz: Vec<f64>,
    pub boost_request_khz: Vec<f64>,
    pub util_khz: Vec<i64>,
    pub boost_khz: Vec<i64>,
}

pub const UNKNOWN_KHZ: i64 = i64::MIN;

/// One CPU's intervals: (start, util request, boost request), contiguous from start_ns to end_ns.
fn cpu_intervals(inp: &Inputs, rows: &[usize], k: f64) -> Vec<(i64, f64, f64)> {
    let (start, end) = (inp.start_ns, inp.end_ns);
    let req = |r: usize| {
        let u = inp.util[r];
        let run = if inp.runnable[r].is_nan() { u } else { inp.runnable[r] };
        // max ignoring an unknown value, unknown when both are
        let b = if u.is_nan() {
            run
        } else if run.is_nan() {
            u
        } else {
            u.max(run)
        };
        (k * u, k * b)
    };
    let mut out: Vec<(i64, f64, f64)> = Vec::new();
    if !rows.iter().any(|&r| inp.ts[r] < end) {
        return out; // nothing before the window end: the CPU has no interval
    }
    // the value carried in at the window start: the last sample before it (several at one ts: the last)
    let carried = rows.iter().rev().find(|&&r| inp.ts[r] < start).copied();
    let (u0, b0) = carried.map_or((f64::NAN, f64::NAN), req);
    out.push((start, u0, b0));
    for &r in rows {
        let t = inp.ts[r];
        if t < start || t >= end {
            continue;
        }
        let (u, b) = req(r);
        match out.last_mut() {
            Some(l) if l.0 == t => *l = (t, u, b),
            _ => out.push((t, u, b)),
        }
    }
    out
}

pub fn requests(inp: &Inputs) -> Requests {
    let end = inp.end_ns;
    // domains in order, with their CPUs, f_max and sorted OPPs
    let mut domains: Vec<i32> = inp.plat_domain.to_vec();
    domains.sort_unstable();
    domains.dedup();
    // signal rows per CPU, in time order (stable)
    let mut order: Vec<usize> = (0..inp.ts.len()).collect();
    if !order.windows(2).all(|w| (inp.cpu[w[0]], inp.ts[w[0]]) <= (inp.cpu[w[1]], inp.ts[w[1]])) {
        order.sort_by_key(|&r| (inp.cpu[r], inp.ts[r]));
    }
    let mut out = Requests::default();
    for &d in &domains {
        let mut opps: Vec<i64> =
            (0..inp.opp_domain.len()).filter(|&i| inp.opp_domain[i] == d).map(|i| inp.opp_khz[i]).collect();
        opps.sort_unstable();
        let Some(&fmax) = opps.last() else { continue };
        // each CPU of the domain: its intervals (none when it has no sample at all)
        let mut cpus: Vec<Vec<(i64, f64, f64)>> = Vec::new();
        for p in 0..inp.plat_cpu.len() {
            if inp.plat_domain[p] != d {
                continue;
            }
            let c = inp.plat_cpu[p];
            let lo = order.partition_point(|&r| inp.cpu[r] < c);
            let hi = order.partition_point(|&r| inp.cpu[r] <= c);
            if lo == hi {
                cpus.push(Vec::new());
                continue;
            }
            let k = inp.headroom * fmax as f64 / inp.plat_capacity[p];
            cpus.push(cpu_intervals(inp, &order[lo..hi], k));
        }
        // every cut of any CPU of the domain, in time order
        let mut pos = vec![0usize; cpus.len()];
        let first = out.ts.len();
        loop {
            let t = cpus.iter().zip(&pos).filter_map(|(iv, &p)| iv.get(p).map(|x| x.0)).min();
            let Some(t) = t else { break };
            let (mut u, mut b) = (f64::NAN, f64::NAN);
            for (iv, p) in cpus.iter().zip(pos.iter_mut()) {
                if iv.get(*p).map(|x| x.0) == Some(t) {
                    *p += 1;
                }
                if *p > 0 {
                    let x = iv[*p - 1];
                    u = max_known(u, x.1);
                    b = max_known(b, x.2);
                }
            }
            out.domain.push(d);
            out.ts.push(t);
            out.dur.push(0);
            out.util_request_khz.push(u);
            out.boost_request_khz.push(b);
            out.util_khz.push(clamp(&opps, u));
            out.boost_khz.push(clamp(&opps, b));
        }
        let n = out.ts.len();
        for i in first..n {
            out.dur[i] = if i + 1 < n { out.ts[i + 1] } else { end } - out.ts[i];
        }
    }
    // intervals of length 0 (a cut at the window end) are dropped
    let keep: Vec<bool> = out.dur.iter().map(|&d| d > 0).collect();
    if keep.iter().any(|k| !k) {
        let f = |v: &mut Vec<i64>| {
            let mut it = keep.iter();
            v.retain(|_| *it.next().unwrap());
        };
        let g = |v: &mut Vec<f64>| {
            let mut it = keep.iter();
            v.retain(|_| *it.next().unwrap());
        };
        let mut it = keep.iter();
        out.domain.retain(|_| *it.next().unwrap());
        f(&mut out.ts);
        f(&mut out.dur);
        g(&mut out.util_request_khz);
        g(&mut out.boost_request_khz);
        f(&mut out.util_khz);
        f(&mut out.boost_khz);
    }
    out
}

fn max_known(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else {
        a.max(b)
    }
}

/// The lowest OPP at or above `req` (the highest when above all; unknown when `req` is).
fn clamp(opps: &[i64], req: f64) -> i64 {
    if req.is_nan() {
        return UNKNOWN_KHZ;
    }
    let i = opps.partition_point(|&o| (o as f64) < req);
    *opps.get(i).unwrap_or(opps.last().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_request_is_the_highest_cpu_request_clamped_up() {
        // domain 0 = cpus 0, 1 (capacity 1024), OPPs 500/1000/2000 MHz
        let inp = Inputs {
            cpu: &[0, 0, 1],
            ts: &[0, 10, 5],
            util: &[256.0, 100.0, 600.0],
            runnable: &[512.0, f64::NAN, 600.0],
            plat_cpu: &[0, 1],
            plat_domain: &[0, 0],
            plat_capacity: &[1024.0, 1024.0],
            opp_domain: &[0, 0, 0],
            opp_khz: &[500_000, 1_000_000, 2_000_000],
            headroom: 1.25,
            start_ns: 0,
            end_ns: 20,
        };
        let r = requests(&inp);
        let k = 1.25 * 2_000_000.0 / 1024.0;
        assert_eq!(r.ts, vec![0, 5, 10]);
        assert_eq!(r.dur, vec![5, 5, 10]);
        assert_eq!(r.util_request_khz, vec![256.0 * k, 600.0 * k, 600.0 * k]);
        assert_eq!(r.boost_request_khz, vec![512.0 * k, 600.0 * k, 600.0 * k]);
        assert_eq!(r.util_khz, vec![1_000_000, 2_000_000, 2_000_000]);
        assert_eq!(r.boost_khz, vec![2_000_000, 2_000_000, 2_000_000]);
    }
}
