"""Long traces in bounded memory (abtest.analysis.windowed, `abtest analyze --windows`): per-window metrics combined
as each metric declares, checked against the whole-trace analysis of real traces."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import polars as pl
import pytest

from abtest.analysis import registry
from abtest.analysis.windowed import df_combine, df_window_metrics, window_edges, windowed_metrics
from abtest.metric_spec import WindowCombine
from abtest.session import Trace
from abtest.trace import cache

# (trace, whether every TIME value is exact too): on langraph and the x86 trace the signals are known from their
# first events on; on the LISA Juno trace (0.43 s) the frequency is unknown for up to 46 % of the span at its
# start and frequency means do not report their known time (docs/analysis-speed.md, Bounded memory)
REAL = [
    ("langraph/trace.dat", True),
    ("x86-vm/x86-menu-hackbench-cyclictest.dat", True),
    ("lisa/sched_load-trace.dat", False),
]


def _compare(whole: pl.DataFrame, combined: pl.DataFrame) -> pl.DataFrame:
    j = whole.select("key", "value").join(
        combined.select("key", pl.col("value").alias("windowed"), "exact"), on="key", how="inner"
    )
    return j.with_columns(
        ((pl.col("windowed") - pl.col("value")).abs() / pl.col("value").abs().clip(lower_bound=1e-9)).alias("rel")
    )


def test_every_trace_metric_declares_how_windows_combine():
    for a, s in registry.all_specs():
        if a.source in (registry.TRACE, registry.POWER_SAMPLES) and a.compute is not None:
            assert s.window is not None, s.key
            if s.window_weight:
                w = registry.spec(s.window_weight)
                assert w.group is s.group and w.window is WindowCombine.RATE, (s.key, s.window_weight)
                assert registry.analysis_of(w) is a, s.key


def test_window_edges_cover_the_span():
    assert window_edges(10, 35, 10) == [(10, 20), (20, 30), (30, 35)]
    assert window_edges(5, 5, 10) == []
    with pytest.raises(ValueError):
        window_edges(0, 10, 0)


@pytest.mark.parametrize("rel,with_time", REAL)
def test_exact_combinations_equal_the_whole_trace(traces, rel, with_time):
    """With a history that reaches the trace's start, every value whose combination is exact equals the whole
    trace's (every key of the whole trace that the windows give; per-task keys need the same minimum count)."""
    path = traces / rel
    whole = Trace(path).metrics(options=registry.MetricOptions(top_tasks=1 << 30))
    t = Trace(path)
    span_s = (t.end_ns - t.start_ns) / 1e9
    combined = windowed_metrics(t, span_s / 3.5, history_s=span_s + 1)
    assert combined["windows"].max() >= 3
    j = _compare(whole, combined)
    # TIME values (flagged approximate: a window's known time is not reported) are exact on these traces, whose
    # signals are known from their first events on
    timed = {s.key for _, s in registry.all_specs() if s.window is WindowCombine.TIME} if with_time else set()
    j = j.join(combined.select("key", "key_template"), on="key")
    exact = j.filter(pl.col("exact") | pl.col("key_template").is_in(list(timed)))
    assert exact.height >= 10, exact
    bad = exact.filter(pl.col("rel") > 1e-6)
    assert bad.is_empty(), bad
    # every scalar key of the whole trace comes out of the windows too
    scalar = {k for k in whole["key"] if registry.resolve(k) and registry.resolve(k)[1] is None}
    assert scalar <= set(combined["key"]), scalar - set(combined["key"])


def test_default_history_on_a_real_trace_stays_close(traces):
    """With the default 2 s history the exact combinations stay within 1e-3 of the whole trace (state older than
    the history is what can differ) on the x86 hackbench + cyclictest trace."""
    path = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    whole = Trace(path).metrics(options=registry.MetricOptions(top_tasks=1 << 30))
    t = Trace(path)
    combined = windowed_metrics(t, max((t.end_ns - t.start_ns) / 1e9 / 4, 0.5))
    j = _compare(whole, combined).filter(pl.col("exact"))
    assert j.height >= 5
    assert j["rel"].max() < 1e-3, j.sort("rel", descending=True).head(5)


def test_window_views_read_only_their_rows(traces, tmp_path, monkeypatch):
    """A view with a history holds only [start - history, end + history) of each table, read as a range of the
    IPC cache (equal to filtering the whole table)."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path))
    path = traces / "langraph/trace.dat"
    Trace(path)
    t = Trace(path)  # served from the cache
    assert "sched_switch" in cache._ts_sorted(t._entry)
    full = t.df("sched_switch")
    lo, hi = t.start_ns + (t.end_ns - t.start_ns) // 3, t.start_ns + 2 * (t.end_ns - t.start_ns) // 3
    h = (hi - lo) // 4
    view = t.window(lo, hi, history_ns=h)
    got = view.df("sched_switch", windowed=False)
    want = full.filter((pl.col("ts") >= lo - h) & (pl.col("ts") < hi + h))
    assert got.equals(want) and 0 < got.height < full.height
    assert view.df("sched_switch").equals(full.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi)))
    assert view.reach_start_ns == lo - h


def test_combine_rules():
    """RATE counts 0 where its analysis ran without the key; EVENTS_GEO weighs by the declared rate; SUM, MAX;
    a per-task event-weighted key under the minimum count is dropped."""

    def row(w, key, value, group=None, analysis="latency", dur=1_000_000_000):
        tmpl = registry.resolve(key)[0].key
        return {
            "window": w,
            "start_ns": w * dur,
            "end_ns": (w + 1) * dur,
            "analysis": analysis,
            "key": key,
            "key_template": tmpl,
            "group": group,
            "value": value,
        }

    rows = [
        row(0, "latency.wakeups_per_s", 100.0),
        row(1, "latency.wakeups_per_s", 300.0),
        row(0, "latency.gmean_us", 10.0),
        row(1, "latency.gmean_us", 1000.0),
        row(0, "latency.max_us", 5.0),
        row(1, "latency.max_us", 50.0),
        row(0, "latency.task.a.wakeups_per_s", 20.0, "a"),  # task a: only in window 0
        row(0, "latency.task.a.gmean_us", 7.0, "a"),
        row(1, "latency.task.b.wakeups_per_s", 3.0, "b"),
        row(1, "latency.task.b.gmean_us", 9.0, "b"),
        row(0, "overutilized.time_s", 0.25, analysis="overutilized"),
        row(1, "overutilized.time_s", 0.5, analysis="overutilized"),
    ]
    per = pl.DataFrame(
        rows,
        schema={
            "window": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "analysis": pl.Utf8,
            "key": pl.Utf8,
            "key_template": pl.Utf8,
            "group": pl.Utf8,
            "value": pl.Float64,
        },
    )
    out = {r["key"]: r for r in df_combine(per, min_task_wakeups=10).iter_rows(named=True)}
    assert out["latency.wakeups_per_s"]["value"] == pytest.approx(200.0)
    assert out["latency.gmean_us"]["value"] == pytest.approx(
        math.exp((100 * math.log(10) + 300 * math.log(1000)) / 400)
    )
    assert out["latency.max_us"]["value"] == 50.0
    assert out["latency.task.a.wakeups_per_s"]["value"] == pytest.approx(10.0)  # 20/s for 1 s of 2 s
    assert out["latency.task.a.gmean_us"]["value"] == pytest.approx(7.0)
    assert "latency.task.b.gmean_us" not in out  # 3 wakeups < 10
    assert out["overutilized.time_s"]["value"] == pytest.approx(0.75)
    assert out["latency.gmean_us"]["exact"] and not out.get("latency.p95_us", {"exact": False})["exact"]


def test_cli_windows_json_and_table(traces, tmp_path):
    path = traces / "langraph/trace.dat"
    env_py = sys.executable
    res = subprocess.run(
        [env_py, "-m", "abtest.cli", "analyze", str(path), "--windows", "0.5", "--jobs", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["windows"] >= 2 and d["history_s"] == 2.0
    keys = {m["key"]: m for m in d["metrics"]}
    assert keys["latency.waking.gmean_us"]["exact"] is True and keys["latency.waking.p95_us"]["exact"] is False
    assert keys["latency.waking.gmean_us"]["unit"] == "us"
    res = subprocess.run(
        [env_py, "-m", "abtest.cli", "analyze", str(path), "--windows", "0.5", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    assert "windows of 0.5 s" in res.stdout and "≈" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 100


def test_jobs_give_the_same_values(traces):
    path = traces / "langraph/trace.dat"
    t = Trace(path)
    one = df_window_metrics(t, 0.5).sort("window", "key")
    two = df_window_metrics(Trace(path), 0.5, jobs=2).sort("window", "key")
    assert one.equals(two)


def test_cli_windows_on_a_trace_without_metrics_exits_2(traces):
    res = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "analyze", str(traces / "trappy/trace_empty.txt"), "--windows", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and "no declared metric" in res.stderr


def test_windows_on_a_perfetto_trace_with_power_rails(traces):
    """Perfetto tables (some not in time order: read whole and filtered per window) and the Pixel rails: each
    rail's power combines by its covered time (exact); a channel whose rails share their coverage too, the
    others (Memory, Total here) are flagged approximate."""
    path = traces / "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
    whole = Trace(path).metrics(analyses=["power"])
    t = Trace(path)
    combined = windowed_metrics(t, (t.end_ns - t.start_ns) / 1e9 / 3, analyses=["power"])
    j = _compare(whole, combined)
    assert j.height == whole.height > 0
    j = j.filter(pl.col("value") != 0)
    assert j.filter(pl.col("exact"))["rel"].max() < 1e-9, j.sort("rel", descending=True).head(5)
    assert j.filter(pl.col("exact")).height >= 20 and j.filter(~pl.col("exact")).height >= 1
    assert j["rel"].max() < 3e-3


def test_analyze_suggests_windows_for_a_long_trace(traces, monkeypatch):
    """Above LONG_TRACE_EVENTS (30 M) `abtest analyze` says how to analyse in bounded memory; here with the
    threshold lowered to the langraph trace's size."""
    from click.testing import CliRunner

    from abtest.commands import analyze as analyze_cmd

    monkeypatch.setattr(analyze_cmd, "LONG_TRACE_EVENTS", 1000)
    res = CliRunner().invoke(analyze_cmd.analyze, [str(traces / "langraph/trace.dat"), "--only", "idle", "--json"])
    assert res.exit_code in (0, 2), res.output
    assert "--windows 30" in res.stderr and "events" in res.stderr


@pytest.mark.parametrize(
    "rel", ["langraph/trace.dat", "x86-vm/x86-menu-hackbench-cyclictest.dat", "lisa/trace_txt-trace.txt"]
)
def test_window_pelt_aggregated_equals_the_segments(traces, rel):
    """A window view with a history: the simulated CPU signals start at the history's start and are aggregated
    over the window only while simulated (no segment kept); the figures equal those computed on the segments
    clipped to the window (df_signal_means, df_contention)."""
    from abtest.analysis import load_tracking as lt

    t = Trace(traces / rel)
    span = t.end_ns - t.start_ns
    checked = warmed = 0
    for k in range(3):
        v = t.window(t.start_ns + span * k // 3, t.start_ns + span * (k + 1) // 3, history_ns=int(span // 5))
        la = v.load_tracking
        assert la._all_simulated("auto")
        warmed += la._reach() != la._win()  # the first window's history starts before the trace
        agg = la.df_cpu_stats("auto")
        sig, win = la.df_cpu_signals("auto"), la._win()
        segs = (
            lt.df_signal_means(sig, **win)
            .join(lt.df_contention(sig, **win).drop("mean_util", "mean_runnable"), on="cpu")
            .filter(pl.col("known_ns").is_not_null())
            .sort("cpu")
        )
        assert agg["cpu"].to_list() == segs["cpu"].to_list() and agg.height > 0
        for col in ("known_ns", "contended_ns", "max_runnable"):
            assert agg[col].to_list() == segs[col].to_list(), col
        for col in ("mean_util", "mean_runnable", "contended_pct", "runnable_util_ratio"):
            for a, b in zip(agg[col].to_list(), segs[col].to_list()):
                assert (
                    (a is None and b is None) or (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9)
                ), col
        checked += agg.height
    assert checked >= 3 and warmed == 2
