"""N-way compare (`abtest compare BASE B C`): one column per label against the baseline, each label's
iterations analysed once, and the two-label path unchanged.

Store: 3 iterations per label of the bundled examples/idle-governors store (real traces of the menu and ladder
cpuidle governors, recorded on an x86 VM), plus "menu2", a byte copy of menu: the same data under another name,
so every verdict of menu2 against menu must be "no change" or inconclusive, never a regression or improvement.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import ReportParser

from abtest.cli import cli
from abtest.compare import parallel
from abtest.compare.comparison import compare_labels
from abtest.compare.multi import SCHEMA, compare_many
from abtest.store.reader import load_label

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "idle-governors"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("multi") / "store"
    for label in ("menu", "ladder"):
        for it in ("1", "2", "3"):
            shutil.copytree(DEMO / label / "cyclictest" / it, root / label / "cyclictest" / it)
    shutil.copytree(root / "menu", root / "menu2")
    return root


def _run(store: Path, *args: str) -> str:
    r = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["compare", *args, "--store", str(store), "--jobs", "1"])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def doc(store) -> dict:
    return json.loads(_run(store, "menu", "ladder", "menu2", "--format", "json"))


def test_json_holds_one_pairwise_comparison_per_label(doc):
    assert doc["schema"] == SCHEMA == "abtest.compare-multi/1"
    assert doc["baseline"] == "menu" and doc["labels"] == ["menu", "ladder", "menu2"]
    assert [c["schema"] for c in doc["comparisons"]] == ["abtest.compare/1"] * 2
    assert [(c["label_a"], c["label_b"]) for c in doc["comparisons"]] == [("menu", "ladder"), ("menu", "menu2")]
    ladder, menu2 = doc["comparisons"]
    # menu2 is menu's data: same values, no difference, never a regression or an improvement
    for m in menu2["workloads"][0]["metrics"]:
        assert m["verdict"] not in ("regression", "improvement"), m["name"]
        assert m["values_a"] == m["values_b"], m["name"]
        assert m["delta_pct"] in (0.0, None), m["name"]
    # the baseline's values are the same in both pairs (one analysis of its iterations)
    va = {m["name"]: m["values_a"] for m in ladder["workloads"][0]["metrics"]}
    for m in menu2["workloads"][0]["metrics"]:
        if m["name"] in va:
            assert m["values_a"] == va[m["name"]], m["name"]
    assert any(m["verdict"] == "regression" for m in ladder["workloads"][0]["metrics"])


def test_summary_table_one_column_per_label(doc):
    summary = next(t for t in doc["tables"] if t["key"] == "summary_multi")
    assert summary["columns"] == ["workload", "metric", "menu", "ladder", "menu2"]
    ladder = {m["name"]: m for m in doc["comparisons"][0]["workloads"][0]["metrics"]}
    regressed = [r for r in summary["rows"] if r[3] and r[3][2] == "regression"]
    assert regressed, summary["rows"]
    for r in summary["rows"]:
        assert r[4][2] not in ("regression", "improvement"), r
        assert r[4][0] == r[2][0], r  # menu2's value is menu's
    # a cell is the pair's own value, perc_diff and verdict
    m = ladder["latency.waking.gmean_us"]
    row = next(r for r in summary["rows"] if r[1] == "waking latency gmean (us)")
    assert row[2][0] == pytest.approx(m["value_a"]) and row[3][0] == pytest.approx(m["value_b"])
    assert row[3][1] == pytest.approx(m["delta_pct"])


def test_text_table_and_verdicts(store, doc):
    out = _run(store, "menu", "ladder", "menu2", "--format", "text", "--width", "160")
    assert out.startswith("abtest compare: ladder, menu2 vs menu (baseline)\n")
    assert "ladder vs menu: REGRESSION cyclictest (3 vs 3 iterations)" in out
    head = next(x for x in out.splitlines() if x.startswith("| metric"))
    assert [c.strip() for c in head.strip("|").split("|")] == ["metric", "menu", "ladder", "menu2"]
    row = next(x for x in out.splitlines() if x.startswith("| waking latency gmean (us)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    m = next(m for m in doc["comparisons"][0]["workloads"][0]["metrics"] if m["name"] == "latency.waking.gmean_us")
    assert cells[1] == f"{m['value_a']:.2f}"
    assert cells[2] == f"{m['value_b']:.2f} ({m['delta_pct']:+.2f} %) regression"
    assert cells[3].startswith(f"{m['value_a']:.2f} (+0.00 %) ") and "regression" not in cells[3]
    assert max(len(x) for x in _run(store, "menu", "ladder", "menu2", "--format", "text").splitlines()) <= 80


def test_markdown_terminal_and_html(store, tmp_path):
    md = _run(store, "menu", "ladder", "menu2", "--format", "markdown")
    assert "| metric | menu | ladder | menu2 |" in md
    term = _run(store, "menu", "ladder", "menu2")
    assert "ladder vs menu: REGRESSION" in term and "menu2 vs menu:" in term
    out = tmp_path / "multi.html"
    _run(store, "menu", "ladder", "menu2", "--html", str(out), "--format", "json")
    text = out.read_text()
    p = ReportParser()
    p.feed(text)
    summary = next(t for t in p.tables if t["id"] == "table-summary_multi")
    assert summary["rows"][0] == ["workload", "metric", "menu", "ladder", "menu2"]
    assert 'class="num regression"' in text
    assert text.count("<table") == text.count('<div class="scroll"><table')


def test_baseline_analysed_once(store, monkeypatch):
    seen = []
    real = parallel.analyse_iterations

    def spy(work, **kw):
        seen.extend(str(it.path) for it, _ in work)
        return real(work, **kw)

    monkeypatch.setattr(parallel, "analyse_iterations", spy)
    labels = [load_label(store / n) for n in ("menu", "ladder", "menu2")]
    mc = compare_many(labels[0], labels[1:], use_cache=False)
    assert len(seen) == 9 and len(set(seen)) == 9, seen
    assert sum("/menu/" in p for p in seen) == 3
    assert mc.labels == ["menu", "ladder", "menu2"]


def test_two_labels_output_is_the_two_label_path(store):
    """With two labels the CLI prints exactly what the two-label library renders."""
    from abtest.report.markdown import comparison_markdown
    from abtest.report.text import comparison_text

    c = compare_labels(load_label(store / "menu"), load_label(store / "ladder"))
    assert _run(store, "menu", "ladder", "--format", "text") == comparison_text(c)
    assert _run(store, "menu", "ladder", "--format", "markdown") == comparison_markdown(c) + "\n"
    doc = json.loads(_run(store, "menu", "ladder", "--format", "json"))
    assert doc["schema"] == "abtest.compare/1" and doc["label_b"] == "ladder"
    assert "ladder vs menu:" not in _run(store, "menu", "ladder")


@pytest.mark.parametrize(
    "args, message",
    [
        (["menu"], "at least one label"),
        (["menu", "ladder", "menu"], "given before"),
        (["menu", "ladder", "menu2", "--explain"], "two labels"),
    ],
)
def test_bad_n_way_input(store, args, message):
    r = CliRunner().invoke(cli, ["compare", *args, "--store", str(store), "--jobs", "1"])
    assert r.exit_code == 2 and message in r.output, r.output
