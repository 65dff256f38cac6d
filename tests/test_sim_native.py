"""The compiled passes (native/sim/src/*.rs, abtest/analysis/sim_native.py) against the readable frame
implementations they replaced (the oracles: tests/oracles/), on every shared trace with sched_switch: the same
segments, the same signals (to float rounding), the same window demand, boost requests, latency matches, task
states and placement runs."""

from __future__ import annotations

import json

import polars as pl
import pytest
from oracles import boost as boost_oracle
from oracles import latency as latency_oracle
from oracles import pelt_sim as pelt_oracle
from oracles import placement as placement_oracle
from oracles import tasks as tasks_oracle
from oracles import window_sim as window_sim_oracle
from shared_data import TRACES

from abtest import Trace
from abtest.analysis import boost, latency, load_tracking, pelt_sim, placement, registry, tasks, window_sim
from abtest.analysis.platform import load_platform

JUNO_PLAT = TRACES / "lisa" / "sched_load-plat_info.yml"
# the shared traces with sched_switch events (and those with wakeups too), by their independently counted events
_COUNTS = {k: doc.get("events") or {} for k, doc in json.loads((TRACES / "expected-counts.json").read_text()).items()}


def _with(*prefixes: str) -> list[str]:
    return sorted(
        k for k, ev in _COUNTS.items() if all(any(e.startswith(p) and n for e, n in ev.items()) for p in prefixes)
    )


SWITCH_TRACES = _with("sched_switch")
WAKEUP_TRACES = sorted(set(_with("sched_switch", "sched_wakeup")) | set(_with("sched_switch", "sched_waking")))


def _open(rel: str) -> Trace:
    t = Trace(TRACES / rel, platform=JUNO_PLAT if "sched_load" in rel else None)
    assert "sched_switch" in t.tables and not t.df("sched_switch").is_empty(), rel
    return t


def _max_gap(a: pl.DataFrame, b: pl.DataFrame, key: str) -> dict[str, float]:
    """Largest |a - b| of util and runnable, evaluated at every segment start and just before every segment
    end of both simulations (each exactly, inside its own segment)."""
    pts = pl.concat(
        [
            a.select(key, "ts"),
            b.select(key, "ts"),
            a.select(key, (pl.col("ts") + pl.col("dur") - 1).alias("ts")),
            b.select(key, (pl.col("ts") + pl.col("dur") - 1).alias("ts")),
        ]
    ).unique()
    out = {}
    for sig in ("util", "runnable"):
        x = pelt_sim.sample_signal(a, pts, key, sig).rename({f"sim_{sig}": "a"})
        y = pelt_sim.sample_signal(b, pts, key, sig).rename({f"sim_{sig}": "b"})
        j = x.join(y, on=[key, "ts"])
        assert j.filter(pl.col("a").is_null() != pl.col("b").is_null()).is_empty(), f"{sig}: spans differ"
        out[sig] = j.select((pl.col("a") - pl.col("b")).abs().max()).item() or 0.0
    return out


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_pelt_native_equals_python(traces, rel):
    t = _open(rel)
    lt = t.load_tracking
    sw = t.df("sched_switch", windowed=False)
    common = lt._sim_common()
    cpu_seeds, task_seeds, new = pelt_sim.kernel_seeds(
        sw,
        sched_pelt_cfs=lt._df("sched_pelt_cfs"),
        sched_pelt_se=lt._df("sched_pelt_se"),
        forks=lt._forks(),
        **lt._win(),
    )
    kw = dict(
        initial=cpu_seeds,
        task_initial=task_seeds,
        new_pids=new,
        sched_migrate_task=lt._df("sched_migrate_task"),
        **common,
    )
    py, nat = pelt_oracle.df_pelt_sim_cpu(sw, **kw), pelt_sim.df_pelt_sim_cpu(sw, **kw)
    # the same segments (CPU, start, length, inputs) and the same signals
    assert nat.select("cpu", "ts", "dur", "x_util", "x_runnable").equals(
        py.select("cpu", "ts", "dur", "x_util", "x_runnable")
    )
    gap = _max_gap(py, nat, "cpu")
    assert gap["util"] < 1e-6 and gap["runnable"] < 1e-6, gap
    py_t = pelt_oracle.df_pelt_sim_task(sw, initial=task_seeds, **common)
    nat_t = pelt_sim.df_pelt_sim_task(sw, initial=task_seeds, **common)
    assert set(py_t["pid"].unique()) == set(nat_t["pid"].unique())
    gap = _max_gap(py_t, nat_t, "pid")
    assert gap["util"] < 1e-6 and gap["runnable"] < 1e-6, gap


def _switch(rows):
    """rows: (ts, cpu, prev_pid, prev_state, next_pid) -> canonical sched_switch (all CFS, prio 120)."""
    ts, cpu, pp, ps, np_ = zip(*rows)
    n = len(rows)
    return pl.DataFrame(
        {
            "ts": ts,
            "cpu": cpu,
            "prev_comm": ["t"] * n,
            "prev_pid": pp,
            "prev_prio": [120] * n,
            "prev_state": ps,
            "next_comm": ["t"] * n,
            "next_pid": np_,
            "next_prio": [120] * n,
        },
        schema_overrides={"cpu": pl.Int32, "prev_state": pl.Int64},
    )


def test_waiting_rules():
    ms = 1_000_000
    # task 5 on cpu0 0-10 ms, woken at 4 ms while running (no wait), preempted at 10 ms, back at 12 ms;
    # asleep at 15 ms, woken at 20 ms, next seen switched out at 25 ms (switch-in missed): no wait
    sw = _switch(
        [(0, 0, 0, 0, 5), (10 * ms, 0, 5, 0, 6), (12 * ms, 0, 6, 1, 5), (15 * ms, 0, 5, 1, 0), (25 * ms, 0, 5, 1, 0)]
    )
    wk = pl.DataFrame({"ts": [4 * ms, 20 * ms], "pid": [5, 5], "target_cpu": [0, 0], "prio": [120, 120]})
    assert pelt_oracle.df_waiting(sw, [wk]).rows() == [(5, 0, 10 * ms, 2 * ms, 120)]
    for impl in (pelt_oracle, pelt_sim):
        sim = impl.df_pelt_sim_cpu(sw, wakeups=[wk], start_ns=0, end_ns=40 * ms)
        waiting = sim.filter(pl.col("x_runnable") > pl.col("x_util"))
        assert waiting.select("ts", "dur").rows() == [(10 * ms, 2 * ms)], impl.__name__


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_window_demand_native_equals_python(traces, rel):
    t = _open(rel)
    lt = t.load_tracking
    kw = dict(cpu_frequency=lt._df("cpu_frequency"), platform=lt._sim_common()["platform"], **lt._win())
    sw = t.df("sched_switch", windowed=False)
    py, nat = window_sim_oracle.df_window_demand(sw, **kw), window_sim.df_window_demand(sw, **kw)
    key = ["pid", "window", "window_start_ns", "window_end_ns", "running_ns"]
    assert nat.select(key).equals(py.select(key))
    for c in ("window_load", "demand"):
        assert (nat[c] - py[c]).abs().max() < 1e-9, c
    # a few pids only
    pids = py["pid"].unique().sort().head(3).to_list()
    sub = window_sim.df_window_demand(sw, pids=pids, **kw)
    assert sub.select(key).equals(py.filter(pl.col("pid").is_in(pids)).select(key))


def _toy_platform(cpus: list[int]) -> dict:
    half = cpus[: max(1, len(cpus) // 2)]
    doms = [{"cpus": half, "capacity": 446, "opps": [[450_000, 1.0], [800_000, 2.0], [1_200_000, 4.0]]}]
    if cpus[len(half) :]:
        doms.append({"cpus": cpus[len(half) :], "capacity": 1024, "opps": [[600_000, 3.0], [2_000_000, 9.0]]})
    return load_platform({"domains": doms})


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_boost_requests_native_equals_python(traces, rel):
    t = _open(rel)
    plat = t.platform if "sched_load" in rel else _toy_platform(sorted(t.df("sched_switch")["cpu"].unique().to_list()))
    sig = t.load_tracking.df_cpu_signals()
    py = boost_oracle.df_boost_requests(sig, plat, start_ns=t.start_ns, end_ns=t.end_ns)
    nat = boost.df_boost_requests(sig, plat, start_ns=t.start_ns, end_ns=t.end_ns)
    assert nat.equals(py)
    assert nat.height > 0


@pytest.mark.parametrize("rel", WAKEUP_TRACES)
def test_wakeup_latency_native_equals_python(traces, rel):
    """Both definitions (sched_wakeup -> switch-in; sched_waking -> switch-in, which also counts wakings that
    fired while the task was switching out): the compiled matching gives the as-of joins' rows."""
    t = _open(rel)
    defs = [d for d, ev in latency.DEFINITIONS.items() if t.has_events(ev)]
    assert defs, rel
    sw = t.df("sched_switch", windowed=False)
    key = ["wakeup_ts", "pid", "kind", "switch_in_ts"]
    for d in defs:
        wk = t.latency.df_wakeups(d)
        py, nat = (
            impl.df_wakeup_latency(wk, sw, start_ns=t.start_ns, end_ns=t.end_ns, rule=d).sort(key)
            for impl in (latency_oracle, latency)
        )
        assert nat.equals(py), d
        assert nat.height > 0, d
        # a window that cuts the trace: wakeups outside it are not matched
        mid = (t.start_ns + t.end_ns) // 2
        py, nat = (
            impl.df_wakeup_latency(wk, sw, start_ns=mid, end_ns=t.end_ns, rule=d).sort(key)
            for impl in (latency_oracle, latency)
        )
        assert nat.equals(py), d


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_preemption_latency_native_equals_python(traces, rel):
    """The compiled preemption matching gives the as-of join's rows (whole trace and a half-trace window)."""
    t = _open(rel)
    sw = t.df("sched_switch", windowed=False)
    key = ["preempt_ts", "pid", "from_cpu", "switch_in_ts"]
    for lo in (t.start_ns, (t.start_ns + t.end_ns) // 2):
        py, nat = (
            impl.df_preemption_latency(sw, start_ns=lo, end_ns=t.end_ns).sort(key) for impl in (latency_oracle, latency)
        )
        assert nat.equals(py), lo


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_task_state_intervals_native_equals_python(traces, rel):
    """The compiled task-state pass gives the frames' intervals (whole trace and a half-trace window)."""
    t = _open(rel)
    sw, wk = t.df("sched_switch", windowed=False), tasks.TasksAnalysis(t)._wakeups()
    for lo in (t.start_ns, (t.start_ns + t.end_ns) // 2):
        py, nat = (impl.df_task_state_intervals(sw, wk, start_ns=lo, end_ns=t.end_ns) for impl in (tasks_oracle, tasks))
        assert nat.equals(py), lo
        assert nat.height > 0


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_task_state_aggregates_fold_the_intervals(traces, rel):
    """The compiled pass folding each thread's intervals as it makes them (what the tasks summary and metrics
    read) = the frames' intervals folded afterwards (whole trace and a half-trace window)."""
    t = _open(rel)
    sw, wk = t.df("sched_switch", windowed=False), tasks.TasksAnalysis(t)._wakeups()
    for lo in (t.start_ns, (t.start_ns + t.end_ns) // 2):
        kw = dict(start_ns=lo, end_ns=t.end_ns)
        nat = tasks.df_task_state_aggregates(sw, wk, **kw)
        ref = tasks_oracle.aggregates_of_intervals(tasks_oracle.df_task_state_intervals(sw, wk, **kw))
        for got, want, key in zip(nat, ref, (["comm", "state"], ["comm", "cpu", "dur"], ["comm", "pid"])):
            order = [pl.col(k).cast(pl.Utf8) if k in ("comm", "state") else pl.col(k) for k in key]
            assert got.sort(order).equals(want.select(got.columns).sort(order)), (lo, key)
        if lo == t.start_ns:
            assert nat[0].height > 0 and nat[1].height > 0


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_contention_aggregated_while_simulating(traces, rel):
    """load_tracking's contention figures from the simulation: aggregated in Rust without keeping segments
    = load_tracking.df_contention on the segments of the frame-written simulation (tests/oracles/pelt_sim.py)."""
    t = _open(rel)
    lt = t.load_tracking
    sw = t.df("sched_switch", windowed=False)
    args = lt._sim_cpu_args(lt._df("sched_pelt_cfs"))
    nat = pelt_sim.df_cpu_contention(sw, **args)
    sig = pelt_oracle.df_pelt_sim_cpu(sw, **args).select("cpu", "ts", "util", "runnable")
    ref = load_tracking.df_contention(sig, **lt._win())
    assert nat["cpu"].to_list() == ref["cpu"].to_list()
    assert nat.select("known_ns", "contended_ns").equals(ref.select("known_ns", "contended_ns"))
    for c in ("mean_util", "mean_runnable", "runnable_util_ratio", "max_runnable", "contended_pct"):
        a, b = nat[c].to_list(), ref[c].to_list()
        assert all((x != x and y != y) or abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a, b)), c


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_placement_runs_native_equals_python(traces, rel):
    """The compiled placement pass gives the frames' runs (idle kept and dropped; whole trace, a window that
    cuts the trace in the middle, one that starts before the first switch)."""
    t = _open(rel)
    sw = t.df("sched_switch", windowed=False)
    first = sw["ts"].min()
    for lo, hi in (
        (None, None),
        (t.start_ns, t.end_ns),
        ((t.start_ns + t.end_ns) // 2, t.end_ns),
        (first - 1000, (first + t.end_ns) // 2),
    ):
        for idle in (False, True):
            py, nat = (
                impl.df_task_intervals(sw, start_ns=lo, end_ns=hi, include_idle=idle)
                for impl in (placement_oracle, placement)
            )
            assert nat.equals(py), (lo, hi, idle)
            if (lo, idle) == (t.start_ns, True) and t.end_ns > t.start_ns:
                assert nat.height > 0  # some CPU ran something (idle at least) over the trace


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_placement_fold_equals_the_runs_grouped(traces, rel, monkeypatch):
    """placement's metrics and declared tables from the compiled fold = from the frames' runs grouped afterwards:
    the whole trace, and windows with a history (the metrics count switch-ins and CPU changes from the window
    start, the time of a run carried in)."""

    def both(fold: bool):
        t = _open(rel)
        mid = (t.start_ns + t.end_ns) // 2
        views = [
            t,
            t.window(mid, t.end_ns, history_ns=(mid - t.start_ns) // 2),
            t.window(t.start_ns, mid, history_ns=0),
        ]
        with monkeypatch.context() as m:
            if not fold:
                m.setattr(placement, "_folded", placement_oracle.folded)
            return [registry.evaluate(registry.PLACEMENT, v) for v in views]

    got, want = both(True), both(False)
    for g, w in zip(got, want):
        assert set(g.tables) == set(w.tables)
        for k in g.tables:
            assert g.tables[k].equals(w.tables[k]), k
        assert [(v.spec.key, v.group) for v in g.values] == [(v.spec.key, v.group) for v in w.values]
        assert all(a.value == pytest.approx(b.value, rel=1e-12, abs=1e-12) for a, b in zip(g.values, w.values))
    assert got[0].tables["counts"]["count"][0] > 0  # tasks that ran


def test_placement_switches_with_nulls():
    """Switches the shared traces hold with nulls (perfetto's compact sched: no prev task before a CPU's first
    switch) and those they do not (a null next task, name, CPU or time) go through the compiled pass and fold
    too: the oracle's runs and folds."""
    sw = pl.DataFrame(
        {
            "ts": [5, 8, 10, 12, 20, 20, 25, 30, 35, None, 40],
            "cpu": [0, 1, 0, 1, 0, 1, None, 0, 1, 0, 1],
            "prev_pid": [None, None, 7, 3, None, 8, 4, 9, 8, 1, 0],
            "prev_comm": [None, None, "a", "c", "x", "b", "d", "e", "b", "y", "idle"],
            "next_pid": [7, 3, None, 8, 9, 0, 4, 7, None, 2, 7],
            "next_comm": ["a", "c", "n", "b", "e", "idle", "d", None, "m", "z", "a"],
        },
        schema_overrides={"cpu": pl.Int32, "prev_pid": pl.Int32, "next_pid": pl.Int32},
    ).with_columns(pl.col("prev_comm", "next_comm").cast(pl.Categorical))

    class View:  # what placement._folded reads of a trace
        start_ns, end_ns = 15, 50

        def df(self, name, windowed=True):
            return sw

    for lo, hi in ((0, 50), (15, 50), (9, 33)):
        for idle in (False, True):
            want = placement_oracle.df_task_intervals(sw, start_ns=lo, end_ns=hi, include_idle=idle)
            got = placement.df_task_intervals(sw, start_ns=lo, end_ns=hi, include_idle=idle)
            assert got.equals(want), (lo, hi, idle)
    for runs_from in (0, 15):
        got, want = placement._folded(View(), runs_from), placement_oracle.folded(View(), runs_from)
        for k, key in (("residency", ["pid", "cpu"]), ("tasks", ["pid"]), ("names", ["comm"])):
            g, w = got[k].sort(key), want[k].select(got[k].columns).sort(key)
            assert g.equals(w), (runs_from, k, g, w)
        assert got["names"]["comm"].null_count() == 1  # the null name of pid 7's run from 30 on cpu 0


def test_the_equivalence_tests_compare_real_traces(traces):
    """The per-trace tests above run on the shared traces with switches (idle-only, power-only, frames-only
    captures are left out by their counted events); this keeps that selection from shrinking unnoticed."""
    assert len(SWITCH_TRACES) >= 15 and len(WAKEUP_TRACES) >= 15, (SWITCH_TRACES, WAKEUP_TRACES)


def _polars_stats(df: pl.DataFrame, by: str | None, value: str, qs: tuple[float, ...]) -> pl.DataFrame:
    """The reference: count, mean, linear quantiles, max, sum, geometric mean of the positive values, by polars."""
    c = pl.col(value)
    aggs = [
        pl.len().alias("count"),
        c.mean().alias("mean"),
        *[c.quantile(q, "linear").alias(f"q{i}") for i, q in enumerate(qs)],
        c.max().alias("max"),
        c.sum().alias("sum"),
        c.filter(c > 0).log().mean().exp().alias("gmean"),
    ]
    return df.select(aggs) if by is None else df.group_by(by).agg(aggs)


def _native_stats_frame(df: pl.DataFrame, by: str | None, value: str, qs: tuple[float, ...]) -> pl.DataFrame:
    from abtest.analysis import sim_native

    g = sim_native.group_stats(df, by, value, qs)
    cols = {} if by is None else {by: g["key"]}
    cols |= {
        "count": g["count"],
        "mean": g["mean"],
        **{f"q{i}": s for i, s in enumerate(g["quantiles"])},
        "max": g["max"],
        "sum": g["sum"],
        "gmean": g["gmean"],
    }
    return pl.DataFrame(cols)


@pytest.mark.parametrize("rel", SWITCH_TRACES)
def test_group_stats_equal_polars(traces, rel):
    """The compiled statistics (native/sim/src/stats.rs) against a polars group_by over the same rows, on the
    matched wakeup latencies (per name, per cluster with unknown ones, overall) and the task runs (per name):
    counts, quantiles and maxima equal, sums and means to 1e-12 (they add in another order)."""
    t = _open(rel)
    qs = (0.5, 0.9, 0.95, 0.99)
    frames = []
    if t.latency.definitions():
        lat = t.latency.df_latency_clusters(t.latency.definitions()[0], columns=latency._STAT_COLUMNS)
        frames += [(lat, by, "latency_us") for by in (None, "comm", "cluster", "target_cluster")]
    runs = t.tasks.df_aggregates()[1].with_columns((pl.col("dur") / 1e6).alias("ms"))
    frames.append((runs, "comm", "ms"))
    for df, by, value in frames:
        if df.is_empty():
            continue
        got = _native_stats_frame(df, by, value, qs)
        want = _polars_stats(df, by, value, qs)
        if by is not None:
            got, want = (f.sort(by, nulls_last=True) for f in (got, want))
            assert got[by].equals(want[by]), (by, got[by], want[by])
        exact = ["count", "max", *[f"q{i}" for i in range(len(qs))]]
        assert got.select(exact).equals(want.select(pl.col(c).cast(got[c].dtype) for c in exact)), (by, got, want)
        for c in ("mean", "sum", "gmean"):
            a, b = got[c].to_list(), want[c].to_list()
            assert [x is None for x in a] == [y is None for y in b], (by, c)
            assert all(x == pytest.approx(y, rel=1e-12) for x, y in zip(a, b) if x is not None), (by, c)


def test_group_stats_refuse_what_they_do_not_take():
    """Nulls or NaN among the values, keys that are not categorical, an empty frame: None (polars groups)."""
    from abtest.analysis import sim_native

    df = pl.DataFrame({"k": ["a", "b", None, "a"], "v": [1.0, -2.0, 3.0, 0.0]}).with_columns(
        pl.col("k").cast(pl.Categorical)
    )
    g = sim_native.group_stats(df, "k", "v", (0.5,))
    by_key = dict(zip(g["key"].to_list(), zip(g["count"].to_list(), g["gmean"].to_list())))
    assert set(by_key) == {"a", "b", None}  # null is a group of its own
    assert by_key["a"] == (2, 1.0) and by_key["b"] == (1, None)  # no positive value: no geometric mean
    assert by_key[None][0] == 1 and by_key[None][1] == pytest.approx(3.0, rel=1e-15)
    assert sim_native.group_stats(df.with_columns(pl.col("v").replace(3.0, float("nan"))), "k", "v", (0.5,)) is None
    assert sim_native.group_stats(df.with_columns(pl.col("v").replace(3.0, None)), "k", "v", (0.5,)) is None
    assert sim_native.group_stats(df.with_columns(pl.col("k").cast(pl.Utf8)), "k", "v", (0.5,)) is None
    assert sim_native.group_stats(df.clear(), None, "v", (0.5,)) is None
