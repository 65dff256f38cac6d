//! Compiled simulators of abtest/analysis (PELT, window demand, the boost what-if): numpy arrays in,
//! numpy arrays out, the GIL released while they run. Python wrappers: abtest/analysis/sim_native.py.
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sim::{boost, latency, pelt, placement, stats, tasks, window};

use pelt::{CpuSpec, Frequencies, Inputs, Migrations, Seeds, Segments, Switches, Wakeups, Want};

type I64<'py> = PyReadonlyArray1<'py, i64>;
type I32<'py> = PyReadonlyArray1<'py, i32>;
type F64<'py> = PyReadonlyArray1<'py, f64>;
type U32<'py> = PyReadonlyArray1<'py, u32>;

/// A dict of numpy arrays from `name => Vec` pairs (the vectors move into numpy without a copy).
macro_rules! arrays_dict {
    ($py:expr, $($name:expr => $v:expr),+ $(,)?) => {{
        let d = PyDict::new($py);
        $(d.set_item($name, $v.into_pyarray($py))?;)+
        d
    }};
}

fn segments_dict<'py>(py: Python<'py>, s: Segments, key: &str) -> PyResult<Bound<'py, PyDict>> {
    Ok(arrays_dict!(
        py,
        key => s.key,
        "ts" => s.ts,
        "dur" => s.dur,
        "x_util" => s.x_util,
        "x_runnable" => s.x_runnable,
        "util" => s.util,
        "runnable" => s.runnable,
    ))
}

type SeedArrays<'py> = (I32<'py>, I64<'py>, F64<'py>, F64<'py>);

fn seed_slices<'a>(s: &'a Option<SeedArrays<'_>>) -> PyResult<Option<Seeds<'a>>> {
    Ok(match s {
        Some(s) => {
            Some(Seeds { id: s.0.as_slice()?, ts: s.1.as_slice()?, util: s.2.as_slice()?, runnable: s.3.as_slice()? })
        }
        None => None,
    })
}

/// PELT simulation (abtest.analysis.pelt_sim's model; see native/sim/src/pelt.rs).
///
/// switches: (ts, cpu, prev_pid, prev_prio, prev_state, next_pid, next_prio); wakeups: [(ts, pid,
/// target_cpu, prio)]; migrations: (ts, pid, dest_cpu) | None; frequencies: (ts, cpu, khz) | None; cpus:
/// (cpu, capacity, fmax_khz, fill_khz) (NaN = unknown); cpu_seeds / task_seeds: (id, ts, util, runnable) |
/// None; new_pids; want_tasks: None (no task output), empty (all tasks) or pids.
/// Returns (cpu segments: a list of one dict of arrays per CPU; task segments: a dict of arrays; contention):
/// cpu|pid, ts, dur, x_util, x_runnable, util, runnable; with `contention_margin`, no CPU segments but per CPU: cpu, known_ns,
/// contended_ns, util_ns, runnable_ns, ratio_ns, ratio_weight_ns, max_runnable (see sim_pelt.rs Contention), of the
/// time from `aggregate_from_ns` on (None: all of it).
#[pyfunction]
#[pyo3(signature = (switches, wakeups, migrations, frequencies, cpus, cpu_seeds, task_seeds, new_pids,
                    start_ns, end_ns, want_cpus, attach, want_tasks, contention_margin=None, aggregate_from_ns=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn pelt_simulate<'py>(
    py: Python<'py>,
    switches: (I64<'py>, I32<'py>, I32<'py>, I32<'py>, I64<'py>, I32<'py>, I32<'py>),
    wakeups: Vec<(I64<'py>, I32<'py>, I32<'py>, I32<'py>)>,
    migrations: Option<(I64<'py>, I32<'py>, I32<'py>)>,
    frequencies: Option<(I64<'py>, I32<'py>, F64<'py>)>,
    cpus: (I32<'py>, F64<'py>, F64<'py>, F64<'py>),
    cpu_seeds: Option<SeedArrays<'py>>,
    task_seeds: Option<SeedArrays<'py>>,
    new_pids: I32<'py>,
    start_ns: i64,
    end_ns: i64,
    want_cpus: bool,
    attach: bool,
    want_tasks: Option<I32<'py>>,
    contention_margin: Option<f64>,
    aggregate_from_ns: Option<i64>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let sw = Switches {
        ts: switches.0.as_slice()?,
        cpu: switches.1.as_slice()?,
        prev_pid: switches.2.as_slice()?,
        prev_prio: switches.3.as_slice()?,
        prev_state: switches.4.as_slice()?,
        next_pid: switches.5.as_slice()?,
        next_prio: switches.6.as_slice()?,
    };
    let mut wk = Vec::new();
    for w in &wakeups {
        wk.push(Wakeups { ts: w.0.as_slice()?, pid: w.1.as_slice()?, cpu: w.2.as_slice()?, prio: w.3.as_slice()? });
    }
    let mig = match &migrations {
        Some(m) => Some(Migrations { ts: m.0.as_slice()?, pid: m.1.as_slice()?, dest: m.2.as_slice()? }),
        None => None,
    };
    let freq = match &frequencies {
        Some(f) => Some(Frequencies { ts: f.0.as_slice()?, cpu: f.1.as_slice()?, khz: f.2.as_slice()? }),
        None => None,
    };
    let cs = seed_slices(&cpu_seeds)?;
    let ts_ = seed_slices(&task_seeds)?;
    let inp = Inputs {
        switches: sw,
        wakeups: wk,
        migrations: mig,
        frequencies: freq,
        cpus: CpuSpec {
            cpu: cpus.0.as_slice()?,
            capacity: cpus.1.as_slice()?,
            fmax_khz: cpus.2.as_slice()?,
            fill_khz: cpus.3.as_slice()?,
        },
        cpu_seeds: cs,
        task_seeds: ts_,
        new_pids: new_pids.as_slice()?,
        start_ns,
        end_ns,
    };
    let sel = match &want_tasks {
        Some(p) => Some(p.as_slice()?),
        None => None,
    };
    let aggregate_from_ns = aggregate_from_ns.unwrap_or(i64::MIN);
    let want = Want { cpus: want_cpus, contention_margin, aggregate_from_ns, attach, tasks: sel };
    let (c, t, agg) = py.detach(|| pelt::simulate(&inp, &want));
    let a = PyDict::new(py);
    macro_rules! col {
        ($name:literal, $f:ident) => {
            a.set_item($name, agg.iter().map(|x| x.$f).collect::<Vec<_>>().into_pyarray(py))?;
        };
    }
    col!("cpu", cpu);
    col!("known_ns", known_ns);
    col!("contended_ns", contended_ns);
    col!("util_ns", util_ns);
    col!("runnable_ns", runnable_ns);
    col!("ratio_ns", ratio_ns);
    col!("ratio_weight_ns", ratio_weight_ns);
    col!("max_runnable", max_runnable);
    let parts = PyList::empty(py);
    for part in c {
        parts.append(segments_dict(py, part, "cpu")?)?;
    }
    Ok((parts, segments_dict(py, t, "pid")?, a))
}

/// Window demand (abtest.analysis.window_sim's model; see native/sim/src/window.rs).
///
/// switches: (ts, cpu, prev_pid, next_pid); frequencies: (ts, cpu, khz); cpus: (cpu, capacity, fmax_khz,
/// fill_khz); pids: None (every task) or pids. Returns a dict of arrays: pid, window, running_ns,
/// window_load, demand.
#[pyfunction]
#[pyo3(signature = (switches, frequencies, cpus, start_ns, end_ns, window_ns, n_windows, pids))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn window_demand<'py>(
    py: Python<'py>,
    switches: (I64<'py>, I32<'py>, I32<'py>, I32<'py>),
    frequencies: (I64<'py>, I32<'py>, F64<'py>),
    cpus: (I32<'py>, F64<'py>, F64<'py>, F64<'py>),
    start_ns: i64,
    end_ns: i64,
    window_ns: i64,
    n_windows: usize,
    pids: Option<I32<'py>>,
) -> PyResult<Bound<'py, PyDict>> {
    if window_ns <= 0 {
        return Err(pyo3::exceptions::PyValueError::new_err("window_ns must be > 0"));
    }
    let inp = window::Inputs {
        sw_ts: switches.0.as_slice()?,
        sw_cpu: switches.1.as_slice()?,
        prev_pid: switches.2.as_slice()?,
        next_pid: switches.3.as_slice()?,
        freq_ts: frequencies.0.as_slice()?,
        freq_cpu: frequencies.1.as_slice()?,
        freq_khz: frequencies.2.as_slice()?,
        cpus: cpus.0.as_slice()?,
        capacity: cpus.1.as_slice()?,
        fmax_khz: cpus.2.as_slice()?,
        fill_khz: cpus.3.as_slice()?,
        start_ns,
        end_ns,
        window_ns,
        n_windows,
        pids: match &pids {
            Some(p) => Some(p.as_slice()?),
            None => None,
        },
    };
    let d = py.detach(|| window::window_demand(&inp));
    Ok(arrays_dict!(
        py,
        "pid" => d.pid,
        "window" => d.window,
        "running_ns" => d.running_ns,
        "window_load" => d.window_load,
        "demand" => d.demand,
    ))
}

/// The boost what-if's per-domain requests (abtest.analysis.boost.df_boost_requests; native/sim/src/boost.rs).
///
/// signals: (cpu, ts, util, runnable) with NaN = null; platform: (cpu, domain, capacity); opps: (domain,
/// khz). Returns a dict of arrays: domain, ts, dur, util_request_khz, boost_request_khz (NaN = unknown),
/// util_khz, boost_khz (i64 min = unknown).
#[pyfunction]
#[pyo3(signature = (signals, platform, opps, headroom, start_ns, end_ns))]
#[allow(clippy::type_complexity)]
fn boost_requests<'py>(
    py: Python<'py>,
    signals: (I32<'py>, I64<'py>, F64<'py>, F64<'py>),
    platform: (I32<'py>, I32<'py>, F64<'py>),
    opps: (I32<'py>, I64<'py>),
    headroom: f64,
    start_ns: i64,
    end_ns: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let inp = boost::Inputs {
        cpu: signals.0.as_slice()?,
        ts: signals.1.as_slice()?,
        util: signals.2.as_slice()?,
        runnable: signals.3.as_slice()?,
        plat_cpu: platform.0.as_slice()?,
        plat_domain: platform.1.as_slice()?,
        plat_capacity: platform.2.as_slice()?,
        opp_domain: opps.0.as_slice()?,
        opp_khz: opps.1.as_slice()?,
        headroom,
        start_ns,
        end_ns,
    };
    let r = py.detach(|| boost::requests(&inp));
    Ok(arrays_dict!(
        py,
        "domain" => r.domain,
        "ts" => r.ts,
        "dur" => r.dur,
        "util_request_khz" => r.util_request_khz,
        "boost_request_khz" => r.boost_request_khz,
        "util_khz" => r.util_khz,
        "boost_khz" => r.boost_khz,
    ))
}

/// sched_switch for the latency matchers: (ts, cpu, prev_pid, next_pid, prev_state (i64::MIN = unknown)).
type LatencySwitches<'py> = (I64<'py>, I32<'py>, I32<'py>, I32<'py>, I64<'py>);

fn latency_inputs<'a>(
    sw: &'a LatencySwitches<'_>,
    wakeups: Vec<(&'a [i64], &'a [i32])>,
    (start_ns, end_ns): (i64, i64),
    while_on_cpu: bool,
) -> PyResult<latency::Inputs<'a>> {
    Ok(latency::Inputs {
        sw_ts: sw.0.as_slice()?,
        sw_cpu: sw.1.as_slice()?,
        prev_pid: sw.2.as_slice()?,
        next_pid: sw.3.as_slice()?,
        prev_state: sw.4.as_slice()?,
        wakeups,
        start_ns,
        end_ns,
        while_on_cpu,
    })
}

/// Wakeup latency matching (abtest.analysis.latency.df_wakeup_latency's rules; native/sim/src/latency.rs).
///
/// switches: (ts, cpu, prev_pid, next_pid, prev_state (i64::MIN = unknown)); wakeups: [(ts, pid)], every
/// wakeup of the trace (those in [start_ns, end_ns) are matched); while_on_cpu: also match wakeups that fired
/// while the task was switching out (rule "waking"). Returns a dict of arrays, one row per matched wakeup in
/// wakeup time order: table (index into wakeups), row, switch_in_ts, cpu, while_on_cpu.
#[pyfunction]
#[pyo3(signature = (switches, wakeups, start_ns, end_ns, while_on_cpu))]
fn wakeup_latency<'py>(
    py: Python<'py>,
    switches: LatencySwitches<'py>,
    wakeups: Vec<(I64<'py>, I32<'py>)>,
    start_ns: i64,
    end_ns: i64,
    while_on_cpu: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let mut wk = Vec::new();
    for w in &wakeups {
        wk.push((w.0.as_slice()?, w.1.as_slice()?));
    }
    let inp = latency_inputs(&switches, wk, (start_ns, end_ns), while_on_cpu)?;
    let r = py.detach(|| latency::match_wakeups(&inp));
    Ok(arrays_dict!(
        py,
        "table" => r.table,
        "row" => r.row,
        "switch_in_ts" => r.switch_in_ts,
        "cpu" => r.cpu,
        "while_on_cpu" => r.while_on_cpu,
    ))
}

/// Preemption latency matching (abtest.analysis.latency.df_preemption_latency's rules; native/sim/src/latency.rs).
///
/// switches: (ts, cpu, prev_pid, next_pid, prev_state (i64::MIN = unknown)); preemptions in [start_ns, end_ns)
/// count. Returns a dict of arrays, one row per matched preemption in switch-out time order: row (of the
/// switch-out), switch_in_ts, cpu (where the task ran again).
#[pyfunction]
#[pyo3(signature = (switches, start_ns, end_ns))]
fn preemption_latency<'py>(
    py: Python<'py>,
    switches: LatencySwitches<'py>,
    start_ns: i64,
    end_ns: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let inp = latency_inputs(&switches, Vec::new(), (start_ns, end_ns), false)?;
    let r = py.detach(|| latency::match_preemptions(&inp));
    Ok(arrays_dict!(
        py,
        "row" => r.row,
        "switch_in_ts" => r.switch_in_ts,
        "cpu" => r.cpu,
    ))
}

type TaskSwitches<'py> = (I64<'py>, I32<'py>, I32<'py>, I32<'py>, PyReadonlyArray1<'py, i8>, U32<'py>, U32<'py>);
type TaskWakeups<'py> = (I64<'py>, I32<'py>, U32<'py>);
type TaskStates<'py> = (i8, i8, PyReadonlyArray1<'py, bool>);

fn task_inputs<'a>(
    switches: &'a TaskSwitches<'_>,
    wakeups: &'a TaskWakeups<'_>,
    states: &'a TaskStates<'_>,
    start_ns: i64,
    end_ns: i64,
) -> PyResult<tasks::Inputs<'a>> {
    Ok(tasks::Inputs {
        sw_ts: switches.0.as_slice()?,
        sw_cpu: switches.1.as_slice()?,
        prev_pid: switches.2.as_slice()?,
        next_pid: switches.3.as_slice()?,
        out_state: switches.4.as_slice()?,
        prev_comm: switches.5.as_slice()?,
        next_comm: switches.6.as_slice()?,
        wk_ts: wakeups.0.as_slice()?,
        wk_pid: wakeups.1.as_slice()?,
        wk_comm: wakeups.2.as_slice()?,
        running: states.0,
        runnable: states.1,
        wakeable: states.2.as_slice()?,
        start_ns,
        end_ns,
    })
}

/// Task state intervals (abtest.analysis.tasks.df_task_state_intervals' rules; native/sim/src/tasks.rs).
///
/// switches: (ts, cpu, prev_pid, next_pid, out_state (i8, -1 = exited), prev_comm, next_comm (u32 name codes,
/// u32::MAX = none)); wakeups: (ts, pid, comm); states: (running code, runnable code, wakeable per code).
/// Returns a dict of arrays, one row per interval by pid then ts: pid, ts, dur, state (-1 = unknown), cpu
/// (i32::MIN = none), comm_src (index into prev_comm, next_comm, wakeup comm rows; u32::MAX = none).
/// With `aggregate`, the per-name figures instead, folded as the intervals are made (tasks.rs
/// state_aggregates; none is kept): time_src, time_state, time_ns (per name and known state), run_src,
/// run_cpu, run_dur (per run), thread_src, thread_pid (per thread and name); *_src index the names as comm_src.
#[pyfunction]
#[pyo3(signature = (switches, wakeups, states, start_ns, end_ns, aggregate=false))]
fn task_state_intervals<'py>(
    py: Python<'py>,
    switches: TaskSwitches<'py>,
    wakeups: TaskWakeups<'py>,
    states: TaskStates<'py>,
    start_ns: i64,
    end_ns: i64,
    aggregate: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let inp = task_inputs(&switches, &wakeups, &states, start_ns, end_ns)?;
    if aggregate {
        let a = py.detach(|| tasks::state_aggregates(&inp));
        return Ok(arrays_dict!(
            py,
            "time_src" => a.time_src,
            "time_state" => a.time_state,
            "time_ns" => a.time_ns,
            "run_src" => a.run_src,
            "run_cpu" => a.run_cpu,
            "run_dur" => a.run_dur,
            "thread_src" => a.thread_src,
            "thread_pid" => a.thread_pid,
        ));
    }
    let r = py.detach(|| tasks::state_intervals(&inp));
    Ok(arrays_dict!(
        py,
        "pid" => r.pid,
        "ts" => r.ts,
        "dur" => r.dur,
        "state" => r.state,
        "cpu" => r.cpu,
        "comm_src" => r.comm_src,
    ))
}

/// sched_switch for placement: (ts, cpu, prev_pid, next_pid, prev_comm codes, next_comm codes), time order.
type PlacementSwitches<'py> = (I64<'py>, I32<'py>, I32<'py>, I32<'py>, U32<'py>, U32<'py>);

fn placement_inputs<'a>(s: &'a PlacementSwitches<'_>) -> PyResult<placement::Switches<'a>> {
    let sw = placement::Switches {
        ts: s.0.as_slice()?,
        cpu: s.1.as_slice()?,
        prev_pid: s.2.as_slice()?,
        next_pid: s.3.as_slice()?,
        prev_comm: s.4.as_slice()?,
        next_comm: s.5.as_slice()?,
    };
    let n = sw.ts.len();
    if [sw.cpu.len(), sw.prev_pid.len(), sw.next_pid.len(), sw.prev_comm.len(), sw.next_comm.len()]
        .iter()
        .any(|&l| l != n)
    {
        return Err(pyo3::exceptions::PyValueError::new_err("placement: switch columns of different lengths"));
    }
    Ok(sw)
}

/// Which task ran on each CPU over [start_ns, end_ns) (abtest.analysis.placement.df_task_intervals' rules;
/// native/sim/src/placement.rs). Returns a dict of arrays, one row per run, by CPU then start: cpu, ts, dur,
/// pid, comm_src (index into [next_comm rows..., prev_comm rows...]).
#[pyfunction]
#[pyo3(signature = (switches, start_ns, end_ns, include_idle=false))]
fn placement_runs<'py>(
    py: Python<'py>,
    switches: PlacementSwitches<'py>,
    start_ns: i64,
    end_ns: i64,
    include_idle: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let sw = placement_inputs(&switches)?;
    let r = py.detach(|| placement::task_runs(&sw, start_ns, end_ns, include_idle));
    Ok(arrays_dict!(py, "cpu" => r.cpu, "ts" => r.ts, "dur" => r.dur, "pid" => r.pid, "comm_src" => r.comm_src))
}

/// The runs of placement_runs (idle left out) folded from `from_ns` on (placement::fold): a dict of arrays
/// res_pid, res_cpu, res_ns (per task and CPU); task_pid, task_comm_src, task_cpus, task_changes (per task);
/// name_src, name_ns, name_runs (per name).
#[pyfunction]
#[pyo3(signature = (switches, start_ns, end_ns, from_ns))]
fn placement_fold<'py>(
    py: Python<'py>,
    switches: PlacementSwitches<'py>,
    start_ns: i64,
    end_ns: i64,
    from_ns: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let sw = placement_inputs(&switches)?;
    let f = py.detach(|| placement::fold(&placement::task_runs(&sw, start_ns, end_ns, false), from_ns));
    Ok(arrays_dict!(
        py,
        "res_pid" => f.res_pid,
        "res_cpu" => f.res_cpu,
        "res_ns" => f.res_ns,
        "task_pid" => f.task_pid,
        "task_comm_src" => f.task_comm_src,
        "task_cpus" => f.task_cpus,
        "task_changes" => f.task_changes,
        "name_src" => f.name_src,
        "name_ns" => f.name_ns,
        "name_runs" => f.name_runs,
    ))
}

/// Statistics of `values` per group (sim::stats::group_stats; `groups[i]` < `n_groups`), the GIL released.
/// Returns group, first_row, count, mean, quantiles (a list: one array per requested q), max, sum, gmean
/// (NaN: no positive value), one row per group that has values, by group code.
#[pyfunction]
fn group_stats<'py>(
    py: Python<'py>,
    values: F64<'py>,
    groups: U32<'py>,
    n_groups: usize,
    quantiles: Vec<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (v, g) = (values.as_slice()?, groups.as_slice()?);
    if v.len() != g.len() || g.iter().any(|&c| c as usize >= n_groups) {
        return Err(pyo3::exceptions::PyValueError::new_err("one group code below n_groups per value"));
    }
    let s = py.detach(|| stats::group_stats(v, g, n_groups, &quantiles));
    let qs = PyList::empty(py);
    for q in s.quantiles {
        qs.append(q.into_pyarray(py))?;
    }
    let d = arrays_dict!(
        py,
        "group" => s.group,
        "first_row" => s.first_row,
        "count" => s.count,
        "mean" => s.mean,
        "max" => s.max,
        "sum" => s.sum,
        "gmean" => s.gmean,
    );
    d.set_item("quantiles", qs)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(group_stats, m)?)?;
    m.add_function(wrap_pyfunction!(wakeup_latency, m)?)?;
    m.add_function(wrap_pyfunction!(preemption_latency, m)?)?;
    m.add_function(wrap_pyfunction!(task_state_intervals, m)?)?;
    m.add_function(wrap_pyfunction!(pelt_simulate, m)?)?;
    m.add_function(wrap_pyfunction!(window_demand, m)?)?;
    m.add_function(wrap_pyfunction!(boost_requests, m)?)?;
    m.add_function(wrap_pyfunction!(placement_runs, m)?)?;
    m.add_function(wrap_pyfunction!(placement_fold, m)?)?;
    Ok(())
}
