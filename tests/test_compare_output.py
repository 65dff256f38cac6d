"""What `abtest compare` prints: verdicts and the summary first, tables that fit 80 and 120 columns without
cutting words, a plain-text form for mail, the HTML report's order (verdicts, summary, ... folded all-metrics and
conditions), and figure files. Stores: the bundled demo store (real traces, examples/idle-governors) and the
constructed seed store of test_seed_tables.py (values chosen by the test)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import ReportParser
from test_seed_tables import build_seed_store

from abtest.cli import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("demo") / "store"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    return store


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory):
    return build_seed_store(tmp_path_factory.mktemp("seed") / "results")


def _compare(store, *args, columns=None, a="menu", b="ladder"):
    env = {"COLUMNS": str(columns)} if columns else {}
    r = CliRunner(env=env).invoke(cli, ["compare", a, b, "--store", str(store), "--jobs", "1", *args])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("columns", [80, 120])
def test_first_screen_is_the_verdict_and_summary(demo_store, columns):
    out = _compare(demo_store, columns=columns)
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= columns, [x for x in lines if len(x) > columns]
    first = "\n".join(lines[:30])  # what a 30-line terminal shows before scrolling
    assert lines[1].startswith("REGRESSION cyclictest (8 vs 8 iterations)")
    assert re.search(r"wakeup latency gmean \(us\) +\+13\.93 %  CI \[[-+.\d]+, [-+.\d]+\] % +CV [\d.]+/[\d.]+ %", first)
    assert "Summary: ladder vs menu (baseline)" in first
    row = next(x for x in lines if "12.47" in x and "14.20" in x)
    assert "+13.93 %" in row and "regression" in row
    # no summary row wraps: each summary metric is one line holding its label, both values, diff and verdict
    doc = json.loads(_compare(demo_store, "--format", "json"))
    summary = next(t for t in doc["tables"] if t["key"] == "summary")
    for r in summary["rows"]:
        label = re.sub(r" \[[^]]+\]", "", r[1])  # a task's metrics sit under a header row of the task
        a, b, verdict = r[2][0], r[3][0], r[4]
        hits = [x for x in lines if x.strip().startswith(label) and verdict.split()[0] in x]
        assert len(hits) == 1, (r, hits)
        assert (f"{a:,.2f}" if a else "0") in hits[0] and (f"{b:,.2f}" if b else "0") in hits[0], (r, hits)
    assert "All metrics" not in out and "boot_id" not in out  # folded: --all / --conditions
    assert "governors.cpuidle: menu -> ladder" in out


def test_all_and_conditions_flags(demo_store):
    out = _compare(demo_store, "--all", "--conditions", columns=200)
    assert "All metrics: ladder vs menu" in out and "boot_id" in out and "timings.workload_s" in out


def test_text_format_pastes_into_a_mail(seed_store):
    out = _compare(seed_store, "--format", "text", "--workload", "uclamp_mix", "--no-trace", a="A", b="B")
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 80
    assert all(ord(ch) < 128 for ch in out.replace("—", "-")), "plain ASCII apart from the title dash"
    assert "+------" in out and "| channel" in out  # the seeds' box tables
    # the "Average power" table in the seeds' shape: channel, tag, value, perc_diff
    start = lines.index(next(x for x in lines if x.startswith("Average power")))
    block = "\n".join(lines[start : start + 20])
    assert re.search(r"\| CPU-Big\s+\| B\s+\|\s+330\.00 \|\s+-17\.50 % \| improvement", block), block
    assert "| Total" in block


def test_json_carries_summary_and_headlines(demo_store):
    doc = json.loads(_compare(demo_store, "--format", "json"))
    assert doc["headlines"][0].startswith("REGRESSION cyclictest (8 vs 8 iterations): 5 regressions")
    assert "changed (significant, on a metric with no better direction)" in doc["headlines"][0]
    keys = [t["key"] for t in doc["tables"]]
    assert keys[0] == "summary" and "all_metrics" in keys  # JSON always has everything


def test_html_puts_verdicts_first_and_folds_the_rest(demo_store, tmp_path):
    out = tmp_path / "r.html"
    _compare(demo_store, "--html", str(out), "--format", "json")
    html = out.read_text()
    order = [
        html.index(x)
        for x in (
            'class="verdicts"',
            'id="table-summary"',
            'class="identity"',
            'id="table-idle"',
            "<h2>Figures</h2>",
            'id="all-metrics"',
            'id="conditions"',
        )
    ]
    assert order == sorted(order)
    assert re.search(r'<details id="all-metrics"><summary>All metrics \(\d+\)', html)
    assert "REGRESSION wakeup latency gmean (us) +13.93 %" in html and "REGRESSION cyclictest (8 vs 8" in html
    p = ReportParser()
    p.feed(html)
    assert p.external == []


def test_plots_are_written_as_files(demo_store, tmp_path):
    _compare(demo_store, "--plots", str(tmp_path / "figs"))
    names = sorted(x.name for x in (tmp_path / "figs").iterdir())
    assert names == [
        "cyclictest-idle_residency.png",
        "cyclictest-idle_residency.svg",
        "cyclictest-metrics.png",
        "cyclictest-metrics.svg",
    ]
    assert (tmp_path / "figs" / "cyclictest-metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "figs" / "cyclictest-metrics.svg").read_bytes()[:500]


@pytest.fixture(scope="module")
def pixel_store(tmp_path_factory):
    """A/A store of the real Pixel 7 Pro trace (24 power rails), 3 + 3 iterations linking it."""
    from shared_data import TRACES

    root = tmp_path_factory.mktemp("pixel") / "store"
    for label in ("A", "B"):
        for i in range(3):
            d = root / label / "idle" / str(i)
            d.mkdir(parents=True)
            (d / "trace.perfetto-trace").symlink_to(
                TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"
            )
            (d / ".complete").touch()
    return root


@pytest.mark.parametrize("columns", [80, 120])
def test_first_screen_on_the_pixel_rails_store(pixel_store, columns):
    out = _compare(pixel_store, columns=columns, a="A", b="B")
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= columns
    first = " ".join("\n".join(lines[:40]).split())
    assert "Summary: B vs A (baseline)" in first and "no change" in first
    for ch in ("power CPU (mW)", "power CPU-Little (mW)", "power Total (mW)"):
        assert ch in first or ch.replace(" (mW)", "") in first, ch
    assert lines[1] == "NO CHANGE idle (3 vs 3 iterations)"  # A/A
    total = next(x for x in lines if x.startswith("power Total (mW)"))
    assert total.split()[3:] == ["469.43", "469.43", "+0.00", "%", "no", "change"]  # the real rails, A/A
