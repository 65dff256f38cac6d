"""`abtest analyze` as tables, on every shared trace at 80 and 120 columns: every line fits, no "None"/"nan",
no cell or header word is cut ("…", or a number / word of a table missing from the output), every analysis that
ran has its section and every metric value of the JSON is a cell of the grid of its declared grouping. The same
for `--engine perfetto` on the shared perfetto traces. The expectations come from the traces' JSON (`--json`),
not from the renderer."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from functools import cache

import pytest
from click.testing import CliRunner
from rich.console import Console
from shared_data import TRACES

from abtest import Trace
from abtest.analysis import registry
from abtest.cli import cli
from abtest.commands import analyze as A
from abtest.commands.analyze_tables import analysis_grids, perfetto_grids
from abtest.metric_spec import Grouping
from abtest.report.fit import Grid, chunks, fmt

EXPECTED = json.loads((TRACES / "expected-counts.json").read_text())
TRACE_FILES = sorted(k for k in EXPECTED if not k.endswith(".yml"))
PERFETTO_FILES = [k for k in TRACE_FILES if k.endswith((".perfetto-trace", ".pb"))]  # protobuf traces
WIDTHS = (80, 120)


@cache
def _analysis(name: str, platform: str | None = None) -> tuple[Trace, dict]:
    if platform:
        from abtest.analysis.platform import load_platform

        t = Trace(TRACES / name, platform=load_platform(TRACES / platform))
    else:
        t = Trace(TRACES / name)
    return t, A.analyze_dict(t)


def _console(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, highlight=False), buf


def check_output(out: str, width: int, grids: list[Grid]) -> None:
    lines = out.splitlines()
    too_long = [ln for ln in lines if len(ln.rstrip()) > width]
    assert not too_long, f"{len(too_long)} lines wider than {width}: {too_long[:3]}"
    assert "…" not in out, "a cell or header was cropped"
    words = set(out.split())
    assert not words & {"None", "nan", "NaN", "inf"}, "a missing value printed as None/nan"
    for g in grids:
        for row in g.rows:
            for h, right, cell in zip(g.headers, g.right, row):
                if not cell:
                    continue
                if right:
                    assert cell in words, f"{g.title}: cell {cell!r} ({h}) not printed whole"
                else:
                    for w in chunks(cell):
                        assert w.strip() in out, f"{g.title}: text {w!r} of {cell!r} cut"
        for h in g.headers:
            for w in h.split():
                assert w in out, f"{g.title}: header word {w!r} of {h!r} cut"


def check_every_value_shown(d: dict) -> None:
    """Every metric value of the JSON is the cell of its group's row and its spec's column (units from the spec)."""
    for k, a in A.ANALYSES.items():
        if d[k] is None:
            continue
        grids = analysis_grids(a, d[k])
        for key, m in d[k]["metrics"].items():
            s = registry.spec(m["template"])
            col = s.title if s.group is Grouping.NONE else (f"{s.title} ({s.unit})" if s.unit else s.title)
            shown_by = [t for t in a.tables if m["template"] in t.shows and t.key in d[k]["tables"]]
            if shown_by:  # printed by the declared table that shows it (TableSpec.shows), not by a grid of its own
                g = next(g for g in grids if g.title == shown_by[0].title)
                row = next(r for r in g.rows if r[0] == m["group"])
                assert fmt(m["value"], s.unit) in row, key
                assert not any(col in g2.headers for g2 in grids if g2.title.endswith("per " + g2.headers[0])), key
            elif s.group is Grouping.NONE:
                g = grids[0]
                row = next(r for r in g.rows if r[0] == s.title)
                assert row[1:] == [fmt(m["value"], s.unit), s.unit], key
            else:
                g = next(
                    g for g in grids if g.headers[1:] and col in g.headers and g.title.endswith("per " + g.headers[0])
                )
                row = next(r for r in g.rows if r[0] == m["group"])
                assert row[g.headers.index(col)] == fmt(m["value"], s.unit), key
        for t in a.tables:
            if t.key not in d[k]["tables"]:
                continue
            rows = d[k]["tables"][t.key]["rows"]
            if not t.across:
                assert any(g.title == t.title and len(g.rows) == len(rows) for g in grids)
                continue
            cols = list(t.units())
            down = [c for c in cols[: t.keys] if c != t.across]
            for col in cols[t.keys :]:  # a matrix per value column: every row of the table is one of its cells
                g = next(g for g in grids if g.title.startswith(f"{t.title}: {col}"))
                for r in rows:
                    row = next(x for x in g.rows if x[: len(down)] == [str(r[c]) for c in down])
                    head = f"CPU {r[t.across]}" + (f" ({t.units()[col]})" if t.units()[col] else "")
                    assert row[g.headers.index(head)] == fmt(r[col], t.units()[col]), (t.key, col, r)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", TRACE_FILES)
def test_analyze_tables_fit_and_show_everything(name, width):
    trace, d = _analysis(name)
    con, buf = _console(width)
    A.print_report(d, con)
    out = buf.getvalue()
    ran = [k for k in A.ANALYSES if d[k] is not None]
    grids = [g for k in ran for g in analysis_grids(A.ANALYSES[k], d[k])]
    check_output(out, width, grids)
    check_every_value_shown(d)
    for k in ran:
        assert A.ANALYSES[k].title in out
    assert not out.lstrip().startswith("{")


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_tables_with_platform_energy_model(width):
    """The Juno trace with its LISA platform file: the energy-model section runs and fits as well."""
    trace, d = _analysis("lisa/sched_load-trace.dat", "lisa/sched_load-plat_info.yml")
    assert d["energy_model"] is not None and d["platform"]
    con, buf = _console(width)
    A.print_report(d, con)
    out = buf.getvalue()
    grids = [g for k in A.ANALYSES if d[k] is not None for g in analysis_grids(A.ANALYSES[k], d[k])]
    check_output(out, width, grids)
    check_every_value_shown(d)
    assert "Energy-model estimate per frequency domain" in out
    total = d["energy_model"]["metrics"]["power.estimate.all"]["value"]
    rows = d["energy_model"]["tables"]["domains"]["rows"]
    assert total == pytest.approx(sum(r["energy_j"] for r in rows) / d["duration_s"] * 1e3)
    assert re.search(rf"\ball[\s│]+{total:,.2f}\s", out)


def test_pixel_tables():
    """Pixel 7 Pro: every rail a row, highest power first; OPP residency per CPU in MHz with s = % x window;
    per-CPU frequencies; no None."""
    trace, d = _analysis("PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace")
    con, buf = _console(120)
    A.print_report(d, con)
    out = buf.getvalue()
    rails = d["power"]["tables"]["rails"]["rows"]
    assert len(rails) == 24 and [r["avg_power_mw"] for r in rails] == sorted(
        (r["avg_power_mw"] for r in rails), reverse=True
    )
    cells = [ln.replace("│", " ").split() for ln in out.splitlines()]
    rail_rows = [c[0] for c in cells if c and c[0] in {r["rail"] for r in rails}]
    assert sorted(set(rail_rows)) == sorted(r["rail"] for r in rails)
    opp = d["frequency"]["tables"]["opp_residency"]["rows"]
    assert {r["cpu"] for r in opp} == set(range(8))
    for r in opp:  # every OPP of every CPU is a row, in MHz, time = % x window
        if r["frequency_mhz"] != "unknown":
            assert r["time_s"] == pytest.approx(r["pct"] * d["duration_s"] / 100, rel=1e-6)
    r300 = next(r for r in opp if r["cpu"] == 0 and r["frequency_mhz"] == "300")
    rows300 = [ln.replace("│", " ").split() for ln in out.splitlines() if re.match(r"^[\s│]*300[\s│]", ln)]
    # a CPU x OPP matrix per quantity: time (s), % of the window, % of the active time; CPU 0 first
    assert [r[1] for r in rows300] == [f"{r300['time_s']:.3f}", f"{r300['pct']:.2f}", f"{r300['active_pct']:.2f}"]
    assert "None" not in out


def test_columns_honoured_when_piped():
    """A real pipe: rich takes the width from $COLUMNS; without it, 80 columns."""
    path = str(TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat")
    widths = {}
    for cols in ("80", "120", None):
        env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
        if cols:
            env["COLUMNS"] = cols
        p = subprocess.run(
            [sys.executable, "-m", "abtest.cli", "analyze", path], capture_output=True, text=True, env=env, timeout=600
        )
        assert p.returncode == 0, p.stderr
        widths[cols] = max(len(ln.rstrip()) for ln in p.stdout.splitlines())
    assert widths["80"] <= 80 and widths[None] <= 80
    assert 80 < widths["120"] <= 120


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PERFETTO_FILES)
def test_perfetto_engine_prints_tables(name, width):
    """`--engine perfetto` prints the same kind of tables (its JSON only with --json)."""
    from abtest.trace import perfetto_engine

    perfetto_engine.select_engine()  # make setup installs the offline engine: its absence is a failure
    d = A._perfetto_dict(str(TRACES / name))
    con, buf = _console(width)
    A.print_perfetto_report(d, con)
    out = buf.getvalue()
    grids = perfetto_grids(d)
    check_output(out, width, grids)
    assert not out.lstrip().startswith("{") and "Perfetto trace_processor" in out
    if d["cpu_frequency_residency"]:
        assert "OPP residency" in out
    if d["cpu_idle_residency"]:
        assert "Idle state residency per CPU" in out
    res = CliRunner().invoke(cli, ["analyze", "--engine", "perfetto", str(TRACES / name)], env={"COLUMNS": str(width)})
    assert res.exit_code == 0 and not res.stdout.lstrip().startswith("{")
    assert len(res.stdout.splitlines()) < len(json.dumps(d, indent=1, default=str).splitlines())


@pytest.mark.parametrize(
    "name",
    [
        "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace",
        "systing/trace.pb",
        "trappy/trace.txt",
        "x86-vm/x86-menu-hackbench-cyclictest.dat",
    ],
)
def test_trace_info_header(name):
    """`trace info` prints the format version and the clock correctly, or leaves them out."""
    res = CliRunner().invoke(cli, ["trace", "info", str(TRACES / name)], env={"COLUMNS": "120"})
    assert res.exit_code == 0
    info = json.loads(CliRunner().invoke(cli, ["trace", "info", "--json", str(TRACES / name)]).stdout)
    head = res.stdout.splitlines()[1]
    assert "None" not in head and "(N/A)" not in head and "vPerfetto" not in head
    assert (f"clock: {info['clock']}" in head) == bool(info["clock"])
    if info["format"] == "perfetto" and info["format_version"]:
        assert f"recorded by {info['format_version'].removesuffix(' (N/A)')}" in head
    if info["format"] == "trace.dat":
        assert f"trace.dat v{info['format_version']}" in head
