"""Workload metric parsers: Jankbench DB, Geekbench JSON, SurfaceFlinger --latency, gfxinfo framestats,
and frame slices from real atrace markers.

tests/data holds SYNTHETIC files in the real formats (see tests/data/README.md). Every expected value
here is computed independently of abtest: with SQL in sqlite, the json module, csv, or a plain-Python
pass over the text -- never with the code under test.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import statistics
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from abtest.analysis import frames as workload_frames
from abtest.results import benchmarks as workload
from abtest.results import frames_text
from abtest.trace.errors import TraceFormatError

DATA = Path(__file__).resolve().parent / "data"
INT64_MAX = 9223372036854775807


# -- Jankbench -----------------------------------------------------------------------------------
def test_jankbench_jank_pct_and_mean_frame_time_match_sql():
    db = DATA / "jankbench_results.db"
    con = sqlite3.connect(db)
    expected = {
        name: (n, 100.0 * jank / n, mean)
        for name, n, jank, mean in con.execute(
            "SELECT name, COUNT(*), SUM(jank_frame), AVG(total_duration) FROM ui_results GROUP BY name"
        )
    }
    durs = {}
    for name, d in con.execute("SELECT name, total_duration FROM ui_results"):
        durs.setdefault(name, []).append(d)
    all_n, all_jank, all_mean = con.execute(
        "SELECT COUNT(*), SUM(jank_frame), AVG(total_duration) FROM ui_results"
    ).fetchone()
    con.close()

    m = workload.jankbench_metrics(db)
    assert m["kind"] == "jankbench"
    assert set(m["benchmarks"]) == set(expected) == {"list_view", "image_list_view", "shadow_grid"}
    for name, (n, jank_pct, mean) in expected.items():
        b = m["benchmarks"][name]
        assert b["frames"] == n == 240
        assert b["iterations"] == 3
        assert b["jank_pct"] == pytest.approx(jank_pct, abs=1e-9)
        assert b["mean_frame_ms"] == pytest.approx(mean, rel=1e-12)
        assert b["p95_frame_ms"] == pytest.approx(float(np.percentile(durs[name], 95)), rel=1e-12)
    assert m["frames"] == all_n
    assert m["jank_pct"] == pytest.approx(100.0 * all_jank / all_n)
    assert m["mean_frame_ms"] == pytest.approx(all_mean)
    # the heavier benchmark janks more in this file (sanity of the synthetic data, not of the parser)
    assert m["benchmarks"]["shadow_grid"]["jank_pct"] > m["benchmarks"]["list_view"]["jank_pct"]


def test_jankbench_per_iteration_rows():
    frames = workload.read_jankbench_db(DATA / "jankbench_results.db")
    per = workload.df_jankbench(frames, per_iteration=True)
    con = sqlite3.connect(DATA / "jankbench_results.db")
    exp = {
        (n, i): 100.0 * j / c
        for n, i, j, c in con.execute(
            "SELECT name, iteration, SUM(jank_frame), COUNT(*) FROM ui_results GROUP BY name, iteration"
        )
    }
    con.close()
    got = {(r["name"], r["iteration"]): r["jank_pct"] for r in per.iter_rows(named=True)}
    assert got.keys() == exp.keys()
    for k in exp:
        assert got[k] == pytest.approx(exp[k])


def test_jankbench_bad_inputs(tmp_path):
    not_db = tmp_path / "x.db"
    not_db.write_bytes(b"PK\x03\x04 not sqlite at all")
    with pytest.raises(TraceFormatError, match="not an sqlite database"):
        workload.read_jankbench_db(not_db)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE results (a INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="no table 'ui_results'"):
        workload.read_jankbench_db(other)
    partial = tmp_path / "partial.db"
    con = sqlite3.connect(partial)
    con.execute("CREATE TABLE ui_results (_id INTEGER, name TEXT, iteration INTEGER, total_duration REAL)")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="lacks columns \\['jank_frame'\\]"):
        workload.read_jankbench_db(partial)


# -- Geekbench -----------------------------------------------------------------------------------
def test_geekbench_scores():
    doc = json.loads((DATA / "geekbench5_result.json").read_text())
    g = workload.read_geekbench_json(DATA / "geekbench5_result.json")
    assert g["single_core_score"] == doc["score"] == 1043
    assert g["multi_core_score"] == doc["multicore_score"] == 3317
    assert g["sections"] == {s["name"]: s["score"] for s in doc["sections"]}
    assert g["workloads"]["Multi-Core/AES-XTS"] == 5801


def test_geekbench_bad_inputs(tmp_path):
    bad = tmp_path / "gb.json"
    bad.write_text('{"score": 10,\n "sections": [\n')
    with pytest.raises(TraceFormatError, match="line 3"):
        workload.read_geekbench_json(bad)
    noscore = tmp_path / "gb2.json"
    noscore.write_text('{"version": 5}')
    with pytest.raises(TraceFormatError, match="no 'score' or 'multicore_score'"):
        workload.read_geekbench_json(noscore)


# -- SurfaceFlinger --latency --------------------------------------------------------------------
def _sf_expected(path: Path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    period = int(lines[0])
    presents = []
    for ln in lines[1:]:
        desired, actual, ready = (int(x) for x in ln.split())
        if desired == 0 or actual == 0 or actual == INT64_MAX:
            continue
        presents.append(actual)
    presents.sort()
    gaps = [b - a for a, b in zip(presents, presents[1:])]
    return {
        "period": period,
        "frames": len(presents),
        "fps": (len(presents) - 1) / ((presents[-1] - presents[0]) / 1e9),
        "missed": sum(g > 1.5 * period for g in gaps),
        "mean_ms": statistics.fmean(gaps) / 1e6,
    }


def test_surfaceflinger_latency_fps():
    path = DATA / "surfaceflinger_latency.txt"
    exp = _sf_expected(path)
    m = frames_text.surfaceflinger_metrics(path)
    assert m["refresh_period_ns"] == exp["period"] == 16_666_666
    assert m["refresh_rate_hz"] == pytest.approx(60.0, abs=1e-3)
    assert m["frames"] == exp["frames"] == 106  # 127 lines - 20 empty - 1 pending
    assert m["fps"] == pytest.approx(exp["fps"], rel=1e-12)
    assert m["missed_vsync_frames"] == exp["missed"]
    assert m["missed_vsync_pct"] == pytest.approx(100.0 * exp["missed"] / (exp["frames"] - 1))
    assert m["mean_frame_interval_ms"] == pytest.approx(exp["mean_ms"])
    assert 50 < m["fps"] < 60  # ~8 % of frames skip a vsync in this file


def test_surfaceflinger_latency_errors(tmp_path):
    bad = tmp_path / "sf.txt"
    bad.write_text("16666666\n1\t2\t3\n4\t5\n")
    with pytest.raises(TraceFormatError, match="line 3") as ei:
        frames_text.parse_surfaceflinger_latency(bad)
    assert ei.value.line == 3
    nohead = tmp_path / "sf2.txt"
    nohead.write_text("refresh\n1\t2\t3\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        frames_text.parse_surfaceflinger_latency(nohead)


# -- gfxinfo framestats -------------------------------------------------------------------------------
def _gfx_expected(path: Path) -> dict:
    lines = path.read_text().splitlines()
    start = lines.index("---PROFILEDATA---")
    end = lines.index("---PROFILEDATA---", start + 1)
    rows = list(csv.reader(lines[start + 1 : end]))
    header = [h for h in rows[0] if h]
    frames = [dict(zip(header, (int(v) for v in r if v != ""))) for r in rows[1:]]
    valid = [f for f in frames if f["Flags"] == 0]
    ms = [(f["FrameCompleted"] - f["IntendedVsync"]) / 1e6 for f in valid]
    if "FrameDeadline" in header:
        janky = sum(f["FrameCompleted"] > f["FrameDeadline"] for f in valid)
    else:
        janky = sum(x > 1000 / 60 for x in ms)
    done = sorted(f["FrameCompleted"] for f in valid)
    return {
        "frames": len(valid),
        "flagged": len(frames) - len(valid),
        "mean_ms": statistics.fmean(ms),
        "p95_ms": float(np.percentile(ms, 95)),
        "janky": janky,
        "fps": (len(done) - 1) / ((done[-1] - done[0]) / 1e9),
    }


@pytest.mark.parametrize("name", ["gfxinfo_framestats.txt", "gfxinfo_framestats_legacy.txt"])
def test_gfxinfo_framestats(name):
    path = DATA / name
    exp = _gfx_expected(path)
    m = frames_text.gfxinfo_metrics(path)
    assert m["frames"] == exp["frames"] == 118
    assert m["flagged_frames"] == exp["flagged"] == 2
    assert m["mean_frame_ms"] == pytest.approx(exp["mean_ms"])
    assert m["p95_frame_ms"] == pytest.approx(exp["p95_ms"])
    assert m["janky_frames"] == exp["janky"] > 0
    assert m["jank_pct"] == pytest.approx(100.0 * exp["janky"] / exp["frames"])
    assert m["fps"] == pytest.approx(exp["fps"])
    assert m["windows"] == [
        "com.example.synthetic/com.example.synthetic.MainActivity/android.view.ViewRootImpl@8f8b7a (visibility=0)"
    ]


def test_gfxinfo_errors(tmp_path):
    text = (DATA / "gfxinfo_framestats.txt").read_text().splitlines()
    start = text.index("---PROFILEDATA---")
    broken = list(text)
    broken[start + 5] = ",".join(broken[start + 5].split(",")[:10])  # truncated row
    p = tmp_path / "g.txt"
    p.write_text("\n".join(broken))
    with pytest.raises(TraceFormatError) as ei:
        frames_text.parse_gfxinfo_framestats(p)
    assert ei.value.line == start + 6
    p.write_text("no profile data here\n")
    with pytest.raises(TraceFormatError, match="PROFILEDATA"):
        frames_text.parse_gfxinfo_framestats(p)


def test_dispatch_by_content():
    assert workload.read_workload_metrics(DATA / "jankbench_results.db")["kind"] == "jankbench"
    assert workload.read_workload_metrics(DATA / "geekbench5_result.json")["kind"] == "geekbench"
    assert workload.read_workload_metrics(DATA / "surfaceflinger_latency.txt")["kind"] == "surfaceflinger_latency"
    assert workload.read_workload_metrics(DATA / "gfxinfo_framestats.txt")["kind"] == "gfxinfo_framestats"
    with pytest.raises(TraceFormatError, match="unrecognised workload result"):
        workload.read_workload_metrics(DATA / "README.md")


# -- frames from real atrace markers ---------------------------------------------------------------
_MARK = re.compile(r"-(\d+)\s+\(.*?\)\s+\[\d+\]\s+\S+\s+(\d+)\.(\d+): tracing_mark_write: (.*)$")


def test_frames_from_real_atrace_markers(traces):
    """catapult/decompressed_atrace_data.txt (real Android systrace): Choreographer#doFrame slices."""
    from abtest import Trace

    path = traces / "catapult" / "decompressed_atrace_data.txt"
    stacks: dict[int, list[tuple[int, str]]] = {}
    frames = []  # (tgid, begin_ns, dur_ns)
    for line in path.read_text().splitlines():
        m = _MARK.search(line)
        if not m:
            continue
        tid, ts = int(m.group(1)), int(m.group(2)) * 10**9 + int(m.group(3).ljust(9, "0"))
        text = m.group(4).strip()
        if text.startswith("B|"):
            stacks.setdefault(tid, []).append((ts, text))
        elif text == "E" or text.startswith("E|"):
            if stacks.get(tid):
                b_ts, b_text = stacks[tid].pop()
                _, tgid, name = b_text.split("|", 2)
                if name.startswith("Choreographer#doFrame"):
                    frames.append((int(tgid), b_ts, ts - b_ts))
    assert len(frames) == 15
    begins = sorted(b for _, b, _ in frames)
    exp_fps = (len(begins) - 1) / ((begins[-1] - begins[0]) / 1e9)
    exp_mean_ms = statistics.fmean(d for _, _, d in frames) / 1e6

    per = workload_frames.df_frames_from_markers(Trace(path).df("marker"))
    row = per.row(0, named=True)
    assert row["tgid"] == 18926 and row["frames"] == 15
    assert row["fps"] == pytest.approx(exp_fps, rel=1e-9)
    assert row["mean_frame_ms"] == pytest.approx(exp_mean_ms, rel=1e-9)
    assert 55 < row["fps"] < 65  # a 60 Hz device


# -- perfetto frame timeline (real trace, through Perfetto's own engine) -----------------------------
def test_frame_timeline_nowinandroid(traces):
    """nowinandroid/trace.perfetto-trace (Pixel 7 Pro, Android 13) carries SurfaceFlinger FrameTimeline
    events. Expected values: plain Python over the raw slice rows (a different query than the parser's)."""
    from abtest.trace import perfetto_engine

    perfetto_engine.select_engine()  # make setup installs the offline engine: its absence is a failure
    path = traces / "nowinandroid" / "trace.perfetto-trace"
    raw = perfetto_engine.query(path, "select ts, dur, jank_type, layer_name from actual_frame_timeline_slice")
    by_layer: dict = {}
    for ts, dur, jank, layer in raw.iter_rows():
        by_layer.setdefault(layer or "<display>", []).append((ts, dur, jank))
    stats = workload_frames.df_frame_timeline_stats(workload_frames.read_frame_timeline(path))
    assert int(stats["frames"].sum()) == raw.height == 1869
    app = [k for k in by_layer if k.startswith("TX - com.google.samples.apps.nowinandroid.demo/")]
    assert len(app) == 1
    rows = by_layer[app[0]]
    starts = sorted(r[0] for r in rows)
    got = stats.filter(pl.col("layer") == app[0]).row(0, named=True)
    assert got["frames"] == len(rows) == 739
    assert got["janky_frames"] == sum(r[2] != "None" for r in rows) == 61
    assert got["app_deadline_missed"] == sum("App Deadline Missed" in r[2] for r in rows)
    assert got["fps"] == pytest.approx((len(rows) - 1) / ((starts[-1] - starts[0]) / 1e9))
    assert got["mean_frame_ms"] == pytest.approx(statistics.fmean(r[1] for r in rows) / 1e6)
    from abtest import Trace
    from abtest.analysis import registry

    ev = registry.evaluate(registry.FRAMES, Trace(path))  # what `abtest analyze` prints
    assert set(ev.tables) == {"layers"}  # from the perfetto frame timeline; no atrace doFrame markers
    layer = ev.tables["layers"].filter((pl.col("pid") == 9305) & (pl.col("layer") == app[0]))
    assert layer["frames"].to_list() == [739]
