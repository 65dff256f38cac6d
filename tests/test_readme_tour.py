"""The README's tour runs as written: every `abtest trace info`, `abtest analyze`, `abtest metrics` line of its
tour block is executed (paths under ../shared/ resolved to the shared data this suite uses), and the demo
excerpt it shows is what `abtest compare` prints on the bundled store today."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TOUR = README[README.index("## A 5-minute tour") :]
TOUR = TOUR[: TOUR.index("```python")]
RUNNABLE = [
    ln.split("#")[0].strip()
    for ln in TOUR.splitlines()
    if re.match(r"abtest (trace info|analyze|metrics)\b", ln.strip())
]


def test_the_tour_has_commands():
    assert len(RUNNABLE) >= 5, RUNNABLE


@pytest.mark.parametrize("line", RUNNABLE)
def test_tour_command_runs(line, tmp_path):
    args = [a.replace("../shared/traces", str(TRACES)) for a in shlex.split(line)]
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", *args[1:]],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "ABTEST_CACHE_DIR": str(tmp_path)},
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.strip()


def test_demo_excerpt_is_current(tmp_path):
    """Each line of the README's demo excerpt (the first screen at 80 columns) is a line of today's output of the
    same command, and no line of that output is wider than 80 columns."""
    excerpt = README[README.index("Its first screen") :]
    excerpt = excerpt[excerpt.index("```") + 3 :]
    excerpt = excerpt[: excerpt.index("```")]
    rows = [ln.rstrip() for ln in excerpt.splitlines() if ln.strip()]
    assert len(rows) >= 10 and rows[1].startswith("REGRESSION cyclictest")
    import shutil

    store = tmp_path / "store"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "compare",
            "menu",
            "ladder",
            "--store",
            str(store),
            "--workload",
            "cyclictest",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "ABTEST_CACHE_DIR": str(tmp_path / "c")},
    )
    assert r.returncode == 0, r.stderr
    out = [ln.rstrip() for ln in r.stdout.splitlines()]
    assert max(len(ln) for ln in out) <= 80
    for row in rows:
        assert row in out, row


PYTHON = README[README.index("```python\n# 6. Notebooks") :]
PYTHON = PYTHON[len("```python\n") : PYTHON.index("```\n", 10)]


def test_readme_python_snippet_runs(tmp_path):
    """The README's Python snippet, exactly as written (only ../shared/traces resolved to the shared data this
    suite uses), runs on the bundled traces it names, and each expression gives a non-empty answer."""
    assert "../shared/traces/" in PYTHON and "df_misses" in PYTHON and "df_power_per_channel" in PYTHON
    src = PYTHON.replace("../shared/traces", str(TRACES))
    prog = (
        "import ast, sys\nsrc = sys.stdin.read()\nns = {}\n"
        "for node in ast.parse(src).body:\n"
        "    if isinstance(node, ast.Expr):\n"
        "        v = eval(compile(ast.Expression(node.value), 'README', 'eval'), ns)\n"
        "        assert len(v) > 0, ast.unparse(node)\n"
        "        print(ast.unparse(node), '->', type(v).__name__, len(v))\n"
        "    else:\n"
        "        exec(compile(ast.Module([node], []), 'README', 'exec'), ns)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", prog],
        input=src,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "ABTEST_CACHE_DIR": str(tmp_path)},
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "t.df('print') -> DataFrame 2" in r.stdout  # the print events, under their kernel name
    assert "p.power.df_power_per_channel() -> DataFrame" in r.stdout


def test_metrics_piped_keeps_every_key(tmp_path):
    """`abtest metrics | cat`: every declared key whole (no ellipsis), and --format json has the same keys."""
    env = {"PATH": "/usr/bin:/bin", "ABTEST_CACHE_DIR": str(tmp_path), "COLUMNS": "80"}
    table = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "metrics"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    doc = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "metrics", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert table.returncode == 0 and doc.returncode == 0
    assert "…" not in table.stdout
    import json

    keys = [m["key"] for a in json.loads(doc.stdout)["analyses"] for m in a["metrics"]]
    words = set(table.stdout.split())
    assert len(keys) > 40 and [k for k in keys if k not in words] == []


def test_no_option_is_a_prefix_of_another():
    """No command has two long options where one is a prefix of the other (`--window` vs `--windows`: a user
    typing one gets the other's error)."""
    import click

    from abtest.cli import cli

    def commands(group, path=()):
        for name, cmd in group.commands.items():
            yield path + (name,), cmd
            if isinstance(cmd, click.Group):
                yield from commands(cmd, path + (name,))

    clashes = []
    for path, cmd in commands(cli):
        opts = sorted(
            {
                o
                for p in cmd.params
                if isinstance(p, click.Option)
                for o in p.opts + p.secondary_opts
                if o.startswith("--")
            }
        )
        clashes += [(" ".join(path), a, b) for a in opts for b in opts if a != b and b.startswith(a)]
    assert clashes == []


def test_kernel_marker_names_reach_the_marker_table(tmp_path, monkeypatch):
    """`t.events` lists `print`; `t.df("print")` gives those rows of the canonical `marker` table."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path))
    from abtest import Trace

    t = Trace(TRACES / "lisa" / "trace_txt-trace.txt")
    assert t.events["print"] == 14 and "print" not in t.tables and "marker" in t.tables
    df = t.df("print")
    assert df.height == 14 and set(df["event"].cast(str)) == {"print"}
    assert t.df("marker").height == 14


def test_perfetto_extension_packets_are_named(tmp_path, monkeypatch):
    """The Pixel app trace's FrameTimelineEvent packets (TracePacket field 76, an Android extension) are named
    frame_timeline_event in the import accounting, not field_76."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path))
    from abtest import Trace

    t = Trace(TRACES / "nowinandroid" / "trace.perfetto-trace")
    assert t.meta["perfetto"]["packets_not_decoded"]["frame_timeline_event"] == 7475
    kinds = set(t.meta["import_errors"])
    assert "perfetto_packet_not_imported.frame_timeline_event" in kinds
    assert not any("field_" in k for k in kinds)


def test_analyze_groupings_head_their_tables():
    """`abtest analyze` prints a grouping's metrics as one table: rows are the group values under the grouping's
    noun ("task"), columns the metrics' titles with the spec's unit (it read `key  key sudo (%)` when the tables
    were built from summary keys)."""
    from abtest.analysis import registry, tasks
    from abtest.commands.analyze_tables import metric_grids

    values = {
        tasks.TASK_RUNNING_PCT.key: {"sudo": 5.0, "bash": 1.0},
        tasks.TASK_ACTIVATION_P95_MS.key: {"sudo": 2.5},
    }
    (g,) = metric_grids(registry.TASKS.title, registry.TASKS.metrics, values)
    assert g.headers == ["task", "task running (%)", "task activation p95 (ms)"]
    assert g.rows == [["sudo", "5.00", "2.50"], ["bash", "1.00", "-"]]
    assert not any(h.startswith("key ") for h in g.headers)


def test_demo_live_has_its_own_report(tmp_path):
    from abtest.demo import report_paths

    live, bundled = report_paths(tmp_path, True), report_paths(tmp_path, False)
    assert not set(live) & set(bundled)
    assert [p.name for p in bundled] == ["demo-report.html", "demo-report.md", "demo-compare.json"]


def test_checkpoints_are_ignored():
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_readme_links_each_doc_once_in_its_index():
    index = README[README.index("## Documentation") :]
    index = index[: index.index("Code: ")]
    links = re.findall(r"\]\((docs/[^)]+)\)", index)
    assert len(links) == len(set(links)), sorted(x for x in links if links.count(x) > 1)
