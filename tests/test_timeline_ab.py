"""`abtest timeline --store STORE A B`: kernel A's and B's iterations side by side in one perfetto trace, under
groups named by label, B aligned at A's start; read back with trace_processor (wasm) and checked against
abtest's own tables of each iteration. Store: the bundled example (examples/idle-governors: ladder vs menu)."""

from __future__ import annotations

import re

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis.placement import df_task_intervals
from abtest.cli import run
from abtest.store.layout import bundled_store
from abtest.trace import perfetto_engine as pe

STORE = bundled_store()


@pytest.fixture(scope="module")
def ab(tmp_path_factory):
    try:
        pe.select_engine("wasm")
    except pe.EngineUnavailableError as e:  # `make setup` installs the perfetto package that bundles it
        pytest.fail(f"the wasm trace_processor engine is missing, an install step failed: {e}")
    if STORE is None:  # examples/ is part of the repository
        pytest.fail("the bundled example store (examples/idle-governors) is missing from this checkout")
    mp = pytest.MonkeyPatch()
    mp.setenv("ABTEST_METRICS_CACHE", "user")  # the example store stays as checked in
    out = tmp_path_factory.mktemp("ab") / "ab.perfetto-trace"
    assert run(["timeline", "--store", str(STORE), "ladder", "menu", "--iteration", "3", "-o", str(out)]) == 0
    s = pe.open_session(out, "wasm")
    yield s
    s.close()
    mp.undo()


def _trace(label: str) -> Trace:
    return Trace(STORE / label / "cyclictest" / "3" / "trace.dat")


def test_groups_named_by_label(ab):
    roots = ab.query("select name from track where parent_id is null and name like '%cyclictest iteration 3'")
    assert sorted(roots["name"].to_list()) == ["ladder: cyclictest iteration 3", "menu: cyclictest iteration 3"]


def test_both_sides_running_tasks_aligned_at_start(ab):
    ta, tb = _trace("ladder"), _trace("menu")
    for label, t, shift in (("ladder", ta, 0), ("menu", tb, ta.start_ns - tb.start_ns)):
        iv = df_task_intervals(t.df("sched_switch", windowed=False), start_ns=t.start_ns, end_ns=t.end_ns)
        iv = iv.filter(pl.col("dur") > 0)
        got = ab.query(
            "select s.ts, s.dur, s.name from slice s join track t on s.track_id = t.id "
            f"where t.name like '{label} CPU % running' order by s.ts, s.dur"
        )
        assert got.height == iv.height
        exp = iv.select((pl.col("ts") + shift).alias("ts"), "dur", pl.col("comm").cast(pl.Utf8).alias("name"))
        assert got.equals(exp.sort("ts", "dur"))


def test_both_sides_have_derived_tracks(ab):
    for label in ("ladder", "menu"):
        t = _trace(label)
        n = ab.query(
            "select count(*) n from slice s join track t on s.track_id = t.id "
            f"where t.name like '{label} CPU % idle misses'"
        )["n"][0]
        assert n == t.df("cpu_idle_miss").height > 0
        util = ab.query(f"select count(*) n from track where name like '{label} CPU % util (simulated)'")["n"][0]
        assert util == t.cpus


def test_default_picks_the_median_iteration(tmp_path, monkeypatch, capsys):
    if STORE is None:  # examples/ is part of the repository
        pytest.fail("the bundled example store (examples/idle-governors) is missing from this checkout")
    monkeypatch.setenv("ABTEST_METRICS_CACHE", "user")
    out = tmp_path / "ab.perfetto-trace"
    assert run(["timeline", "--store", str(STORE), "ladder", "menu", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    hit = re.search(r"ladder iteration (\S+) vs menu iteration (\S+) \(nearest the median of (.+)\)", said)
    assert hit, said
    assert out.stat().st_size > 0


def test_reports_lead_to_the_timeline(tmp_path, monkeypatch):
    """compare's text and HTML outlier notes and explain's lines name the trace, its time range and the
    `abtest timeline` command; the HTML report writes the flagged iterations' timelines and links them."""
    if STORE is None:  # examples/ is part of the repository
        pytest.fail("the bundled example store (examples/idle-governors) is missing from this checkout")
    monkeypatch.setenv("ABTEST_METRICS_CACHE", "user")
    from abtest.commands.compare import _run_comparison
    from abtest.compare.outliers import outlier_lines
    from abtest.report.html import write_html
    from abtest.report.text import comparison_text
    from abtest.report.timeline_links import explanation_timeline_lines

    c = _run_comparison("ladder", "menu", str(STORE), None, 0.05, 1.0, False, False)
    flagged = outlier_lines(c)
    assert flagged, "the example store has flagged iterations"
    text = " ".join(comparison_text(c, width=400).split())  # wrapped lines joined
    for line in flagged:
        it_dir = line.split(" (", 1)[1].split(")", 1)[0]
        assert f"timeline: {it_dir}/trace.dat 0.000-" in text
        assert f"abtest timeline {it_dir}/trace.dat -o " in text
    report = write_html(c, tmp_path / "report.html")
    html = report.read_text()
    files = sorted((tmp_path / "report.timelines").glob("*.perfetto-trace"))
    assert files and all(f'href="report.timelines/{f.name}"' in html for f in files)
    lines = explanation_timeline_lines(c, STORE)
    assert len(lines) == 1 and "abtest timeline --store" in lines[0] and "nearest the median of" in lines[0]
    assert "ladder iteration" in lines[0] and "menu iteration" in lines[0] and ".dat 0.000-" in lines[0]
