"""`analyze` on readable traces whose lines do not carry their event's canonical fields (issue 43, defect 5).

Before: a line such as `cpu_frequency: freq=1000 cpu=0`, `cpu_idle: foo=1`, sched_wakeup lines without pid or a
non-numeric thermal temperature killed `abtest analyze` with a polars traceback (ColumnNotFoundError,
InvalidOperationError) and lost every other analysis; a CPU number nulled (cpu_id 4294967295 or 2^64-1 does not
fit Int32) or a perfetto bundle CPU of 4294967295 (read as -1) crashed the platform check (TypeError) or made it
refuse the whole platform. Now the rows that do not fit the canonical schema are import errors (kind, count,
first examples), the tables keep their schema and every analysis that can run does.
All inputs are real shared traces, mutated here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis.clusters import trace_clusters
from abtest.commands.analyze import analyze_dict
from abtest.trace import readers
from abtest.trace.limits import current

ROOT = Path(__file__).resolve().parent.parent

# (name, shared trace, pattern, replacement, replace count (0: all), import error kind, lines, analyses that must
# run: all those that run on the unmutated trace but the one whose event lost its fields)
CASES = [
    (
        "freq_fields",
        "trappy/trace_sched.txt",
        r"cpu_frequency:(\s+)state=(\d+) cpu_id=(\d+)",
        r"cpu_frequency:\1freq=\2 cpu=\3",
        0,
        "missing_field",
        1,
        {"capacity", "load_tracking"},
    ),
    (
        "idle_foo",
        "trappy/trace_idle_unsorted.txt",
        r"cpu_idle:(\s+)state=\d+ cpu_id=\d+",
        r"cpu_idle:\1foo=1",
        0,
        "missing_field",
        8 + 1,
        {"load_tracking", "placement", "tasks"},
    ),  # + the file's own cut sched_switch
    (
        "wakeup_no_pid",
        "lisa/trace_txt-trace.txt",
        r"sched_wakeup:(\s+)comm=(\S+) pid=\d+ ",
        r"sched_wakeup:\1comm=\2 ",
        0,
        "missing_field",
        1068,
        {"frequency", "load_tracking", "overutilized", "placement", "tasks"},
    ),
    (
        "thermal_text",
        "trappy/trace.txt",
        r"(thermal_temperature:.*?) temp=\d+",
        r"\1 temp=abc",
        0,
        "bad_field_value",
        67,
        {"thermal"},
    ),
]


def _mutate(traces: Path, tmp_path: Path, name: str, rel: str, pattern: str, repl: str, count: int) -> Path:
    text, n = re.subn(pattern, repl, (traces / rel).read_text(), count=count)
    assert n, (rel, pattern)
    out = tmp_path / f"{name}.txt"
    out.write_text(text)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_lines_without_canonical_fields_are_import_errors(traces, tmp_path, case):
    name, rel, pattern, repl, count, kind, n_bad, must_run = case
    path = _mutate(traces, tmp_path, name, rel, pattern, repl, count)
    t = Trace(path, use_cache=False)
    err = t.meta["import_errors"][kind]
    assert err["count"] == n_bad and err["examples"][0]["line"] >= 1
    d = analyze_dict(t, threads=1)
    assert not d["failed"], d["failed"]
    assert must_run <= {k for k, v in d.items() if isinstance(v, dict) and k not in ("skipped", "failed")}, d["skipped"]
    # the tables keep their canonical columns and types, rows or not
    for table, cols in (
        ("cpu_frequency", {"cpu": pl.Int32, "frequency_khz": pl.Int64}),
        ("cpu_idle", {"cpu": pl.Int32, "state": pl.Int64}),
        ("sched_wakeup", {"pid": pl.Int32, "target_cpu": pl.Int32}),
    ):
        if table in t.tables:
            df = t.df(table, windowed=False)
            assert {c: df.schema[c] for c in cols} == cols, df.schema


def test_one_line_without_pid_is_counted_with_its_line(traces, tmp_path):
    path = _mutate(
        traces,
        tmp_path,
        "one",
        "lisa/trace_txt-trace.txt",
        r"sched_wakeup:(\s+)comm=(\S+) pid=\d+ ",
        r"sched_wakeup:\1comm=\2 ",
        1,
    )
    t = Trace(path, use_cache=False)
    assert t.df("sched_wakeup", windowed=False).height == 1067
    ex = t.meta["import_errors"]["missing_field"]["examples"][0]
    assert "lacks pid" in ex["detail"] and "comm=sh" in ex["text"]
    assert (path.read_text().splitlines()[ex["line"] - 1]).split("sched_wakeup:")[1].split()[0] == "comm=sh"


def test_analyze_cli_runs_the_other_analyses(traces, tmp_path):
    """As a user runs it: exit 0, the JSON holds the analyses that apply, a warning names the import errors."""
    for name, rel, pattern, repl, count, _kind, _n, must_run in CASES[:2] + CASES[3:]:
        path = _mutate(traces, tmp_path, name, rel, pattern, repl, count)
        r = subprocess.run(
            [sys.executable, "-m", "abtest.cli", "analyze", "--json", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
        d = json.loads(r.stdout)
        assert must_run <= {k for k in d if isinstance(d[k], dict) and k not in ("skipped", "failed")}
        assert "WARNING" in r.stderr


def _mutated_binary(traces: Path, rel: str, table: str, col: str, value: int, rows: int = 3):
    """The decoder's raw tables of a real binary trace, `rows` values of one column replaced, then canonicalised
    as read_trace does (a stand-in for a trace whose CPU field holds (u32)-1 or 2^64-1)."""
    path = traces / rel
    data = path.read_bytes()
    fmt = "trace.dat" if rel.endswith(".dat") else "perfetto"
    raw, meta = readers._decode(str(path), data, fmt, current())
    df = raw[table]
    first = pl.int_range(pl.len()) < rows
    raw[table] = df.with_columns(
        pl.when(first).then(pl.lit(value)).otherwise(pl.col(col)).cast(df.schema[col]).alias(col)
    )
    ingest = readers.Ingest(fmt=fmt, path=path, size=len(data))
    return ingest.finish(ingest.add(raw), meta)


@pytest.mark.parametrize(
    "table, col, value",
    [("cpu_idle", "cpu_id", 4294967295), ("cpu_frequency", "cpu_id", 4294967295), ("sched_switch", "cpu", -1)],
)
def test_cpu_that_does_not_fit_is_a_bad_row_not_a_crash(traces, table, col, value):
    """Juno trace.dat with its platform: before, a nulled cpu_id crashed the platform check (TypeError) and the
    cluster names; a CPU of -1 made the platform check refuse the platform for six analyses."""
    data = _mutated_binary(traces, "lisa/sched_load-trace.dat", table, col, value)
    assert data.meta["import_errors"]["value_out_of_range"]["count"] == 3
    assert "0..2^31-1" in data.meta["import_errors"]["value_out_of_range"]["examples"][0]["detail"]
    t = Trace(
        traces / "lisa/sched_load-trace.dat",
        use_cache=False,
        platform=traces / "lisa/sched_load-plat_info.yml",
        _data=data,
    )
    cpu = t.df(table, windowed=False)["cpu"]
    assert cpu.null_count() == 0 and cpu.min() >= 0
    assert set(trace_clusters(t)["cluster"]) == {"cpu0,3-5", "cpu1-2"}
    d = analyze_dict(t, threads=1)
    assert not d["failed"] and d["idle"] is not None and d["frequency"] is not None and d["energy_model"] is not None


def test_perfetto_bundle_cpu_minus_one_is_counted(traces):
    data = _mutated_binary(traces, "systing/trace.pb", "sched_switch", "cpu", -1, rows=5)
    assert data.meta["import_errors"]["value_out_of_range"]["count"] == 5
    assert data.tables["sched_switch"]["cpu"].min() >= 0


def test_an_analysis_that_fails_is_noted_and_the_others_run(traces, monkeypatch, capsys):
    """Deliverable 3 for analyze: an unexpected error in one analysis (fault injected: its metric function raises) is
    listed under "failed", the others print, and the exit status is 2."""
    import dataclasses

    from abtest.cli import run
    from abtest.commands import analyze as cmd

    def boom(trace, options):
        raise KeyError("injected")

    monkeypatch.setitem(cmd.ANALYSES, "latency", dataclasses.replace(cmd.ANALYSES["latency"], compute=boom))
    code = run(["analyze", "--json", str(traces / "lisa/trace_txt-trace.txt")])
    out = capsys.readouterr()
    assert code == 2
    d = json.loads(out.out)
    assert d["failed"] == {"latency": "KeyError: 'injected'"} and d["latency"] is None
    assert d["placement"] is not None and d["tasks"] is not None
    assert "error: analysis latency failed" in out.err
