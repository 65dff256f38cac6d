"""`abtest analyze` as tables, on every shared trace at 80 and 120 columns: every line fits, no JSON key
of the summaries shows up flattened ("per_cpu.0.opp_residency_pct.450000") or raw ("too_deep_pct"), no
"None"/"nan", no cell or header word is cut ("…", or a number / word of a table missing from the output),
and every analysis that ran has its section. The same for `--engine perfetto` on the shared perfetto traces
and for the generic renderer fed with every real summary (what an analysis without a dedicated table
prints). The expectations come from the traces' JSON (`--json`), not from the renderer."""

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
from abtest.cli import cli
from abtest.commands import analyze as A
from abtest.commands.analyze_tables import blocks_for, generic_blocks, perfetto_blocks
from abtest.commands.text_grid import Grid, _chunks, print_grid

EXPECTED = json.loads((TRACES / "expected-counts.json").read_text())
TRACE_FILES = sorted(k for k in EXPECTED if not k.endswith(".yml"))
PERFETTO_FILES = [k for k in TRACE_FILES if k.endswith((".perfetto-trace", ".pb"))]  # protobuf traces
WIDTHS = (80, 120)
UNIT_KEY = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*_(?:pct|us|ms|ns|s|per_s|khz|mhz|mw|j|uws)$")


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


def _keys(x, out: set[str] | None = None) -> set[str]:
    out = set() if out is None else out
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(str(k))
            _keys(v, out)
    elif isinstance(x, list):
        for v in x:
            _keys(v, out)
    return out


def _grids(blocks) -> list[Grid]:
    out = []
    for b in blocks:
        if isinstance(b, Grid):
            out.append(b)
    return out


def check_output(out: str, width: int, summary: dict, grids: list[Grid]) -> None:
    lines = out.splitlines()
    too_long = [ln for ln in lines if len(ln.rstrip()) > width]
    assert not too_long, f"{len(too_long)} lines wider than {width}: {too_long[:3]}"
    assert "…" not in out, "a cell or header was cropped"
    words = set(out.split())
    assert not words & {"None", "nan", "NaN", "inf"}, "a missing value printed as None/nan"
    keys = _keys(summary)
    for tok in re.split(r"[\s(),;\[\]]+", out):
        parts = tok.split(".")
        if len(parts) > 1 and not all(p.replace(",", "").lstrip("<>-").isdigit() for p in parts):  # not a number
            assert sum(p in keys for p in parts) < 2, f"flattened key in the output: {tok!r}"
    raw = sorted(k for k in keys if UNIT_KEY.match(k) and k in words)
    assert not raw, f"raw summary keys in the output: {raw}"
    for g in grids:
        for row in g.rows:
            for col, cell in zip(g.columns, row):
                if not cell:
                    continue
                if col.numeric:
                    assert cell in words, f"{g.title}: cell {cell!r} ({col.header}) not printed whole"
                else:
                    for chunk in _chunks(cell):
                        assert chunk.strip() in out, f"{g.title}: text {chunk!r} of {cell!r} cut"
        if not g.alternatives:
            for col in g.columns:
                for w in col.header.split():
                    assert w in words, f"{g.title}: header word {w!r} of {col.header!r} cut"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", TRACE_FILES)
def test_analyze_tables_fit_and_show_everything(name, width):
    trace, d = _analysis(name)
    con, buf = _console(width)
    A.print_report(d, trace, con)
    out = buf.getvalue()
    ran = [k for k in A.ANALYSES if d[k] is not None]
    ctx = A._context(trace, d)
    grids = [g for k in ran for g in _grids(blocks_for(k, d[k], ctx))]
    check_output(out, width, d, grids)
    for k in ran:
        assert A.ANALYSES[k].title in out
    assert not out.lstrip().startswith("{")


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_tables_with_platform_energy_model(width):
    """The Juno trace with its LISA platform file: the energy-model section runs and fits as well."""
    trace, d = _analysis("lisa/sched_load-trace.dat", "lisa/sched_load-plat_info.yml")
    assert d["energy_model"] is not None and d["platform"]
    con, buf = _console(width)
    A.print_report(d, trace, con)
    out = buf.getvalue()
    ctx = A._context(trace, d)
    grids = [g for k in A.ANALYSES if d[k] is not None for g in _grids(blocks_for(k, d[k], ctx))]
    check_output(out, width, d, grids)
    assert "Energy-model estimate per frequency domain" in out
    total = d["energy_model"]["total_energy_j"]
    assert re.search(rf"^all\s+{total:.3f}\s", out, re.M)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", TRACE_FILES)
def test_generic_renderer_on_every_real_summary(name, width):
    """What an analysis without a dedicated renderer prints: every real summary through generic_blocks."""
    _, d = _analysis(name)
    for k in A.ANALYSES:
        if d[k] is None:
            continue
        blocks = generic_blocks(d[k], path=k)
        con, buf = _console(width)
        for b in blocks:
            print_grid(con, b) if isinstance(b, Grid) else con.print(b)
        check_output(buf.getvalue(), width, d[k], _grids(blocks))


def test_pixel_tables():
    """Pixel 7 Pro: OPP matrices per frequency domain in MHz with s = % x window, zero rails folded by name,
    placement without None, the full frequency section (no "... more values")."""
    trace, d = _analysis("PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace")
    con, buf = _console(120)
    A.print_report(d, trace, con)
    out = buf.getvalue()
    zero = sorted(r for r, v in d["power"]["rails"].items() if v["avg_power_mw"] == 0)
    assert len(zero) == 4
    assert f"{len(zero)} rails at 0 mW not shown: {', '.join(zero)}" in out.replace("\n  ", " ")
    rail_rows = [ln.split()[0] for ln in out.splitlines() if ln and ln.split()[0] in d["power"]["rails"]]
    assert sorted(rail_rows) == sorted(set(d["power"]["rails"]) - set(zero))
    for title in ("OPP residency, CPUs 0-3", "OPP residency, CPUs 4-5", "OPP residency, CPUs 6-7"):
        assert title in out
    per = d["frequency"]["per_cpu"]
    for cpu in per:  # every OPP of every CPU is a row, in MHz
        for khz in per[cpu]["opp_residency_pct"]:
            assert re.search(rf"^\s*{int(khz) // 1000:,}\s", out, re.M), khz
    pct = per["0"]["opp_residency_pct"]["300000"]
    row = next(ln for ln in out.splitlines() if re.match(r"^\s*300\s", ln))
    assert row.split()[1:3] == [f"{pct * d['duration_s'] / 100:.3f}", f"{pct:.2f}"]
    assert "more values" not in out and "None" not in out


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
    grids = [g for _, blocks in perfetto_blocks(d) for g in _grids(blocks)]
    check_output(out, width, d, grids)
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
