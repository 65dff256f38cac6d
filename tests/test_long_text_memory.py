"""Long ftrace text traces in bounded memory (issue 43, deliverable 5), and reader/analysis bugs the fuzz campaign
with `abtest analyze` found (deliverable 6).

A text longer than ftrace_text.TEXT_BLOCK_BYTES is read block by block: the result must be the whole read's
(tables, dtypes, line numbers in import_errors, metadata), whatever the block size. A text that cannot be read
within the process' address-space limit is refused before reading, with a message naming the size and the
limit (exit 2), never a SIGABRT from an allocation that fails half-way; any MemoryError in the CLI is a clear
exit-2 message. The 10 M-event measurement itself is in docs/robustness.md ("Long text traces").
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from shared_data import TRACES

from abtest import cli
from abtest.commands.analyze import analyze_dict
from abtest.session import Trace
from abtest.trace import ftrace_text
from abtest.trace.readers import read_trace
from abtest.trace.tp_result import CELL_STRING, _batch_columns

ROOT = Path(__file__).resolve().parent.parent
LISA_TEXT = TRACES / "lisa" / "trace_txt-trace.txt"  # 448 KB, sched events, trace-cmd report text
ATRACE_TEXT = TRACES / "catapult" / "decompressed_atrace_data.txt"  # entries-in-buffer header, markers


def _same(a, b) -> None:
    assert a.tables.keys() == b.tables.keys()
    for name in a.tables:
        assert a.tables[name].schema == b.tables[name].schema, name
        assert a.tables[name].equals(b.tables[name]), name
    assert a.meta == b.meta


def _read_in_blocks(path: Path, block: int, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(ftrace_text, "TEXT_BLOCK_BYTES", block)
        return read_trace(path)


@pytest.mark.parametrize("block", [4096, 20_000, 100_000])
def test_blocks_read_as_the_whole_text(tmp_path, block, monkeypatch):
    """The shared sched text, damaged in places (a bad line, a stack after an event), read in blocks of 4 KB to
    100 KB: the same tables, dtypes and metadata (import_errors with their line numbers) as read whole."""
    lines = LISA_TEXT.read_bytes().splitlines(keepends=True)
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        if i % 997 == 500:
            out.append(b" => __schedule+0x1c/0x2a0\n => schedule+0x4c/0xa0\n")
        if i % 1499 == 700:
            out.append(b"this line is not an event\n")
    path = tmp_path / "trace.txt"
    path.write_bytes(b"".join(out))
    whole = read_trace(path)
    assert whole.meta["import_errors"], "the damaged lines are counted"
    assert whole.tables["sched_switch"]["stack"].drop_nulls().len() > 0
    _same(whole, _read_in_blocks(path, block, monkeypatch))


def test_blocks_keep_the_entries_in_buffer_check(monkeypatch, tmp_path):
    """The header's entries-in-buffer is checked against the whole text's events, not the first block's."""
    whole = read_trace(ATRACE_TEXT)
    assert not any("ring buffer held" in w for w in whole.meta["warnings"])
    _same(whole, _read_in_blocks(ATRACE_TEXT, 8192, monkeypatch))
    # the same text cut short: the warning, once
    data = ATRACE_TEXT.read_bytes()
    cut = tmp_path / "cut.txt"
    cut.write_bytes(data[: data.index(b"\n", len(data) // 2) + 1])
    blocks = _read_in_blocks(cut, 8192, monkeypatch)
    assert [w for w in blocks.meta["warnings"] if "ring buffer held" in w] == [
        w for w in read_trace(cut).meta["warnings"] if "ring buffer held" in w
    ]
    assert sum("ring buffer held" in w for w in blocks.meta["warnings"]) == 1


def _long_sparse_text(tmp_path: Path) -> Path:
    """A 2 GiB "text trace" that takes no disk: a real trace's head, then a sparse tail (NUL padding)."""
    path = tmp_path / "long.txt"
    with open(path, "wb") as f:
        f.write(LISA_TEXT.read_bytes()[:65536].rsplit(b"\n", 1)[0] + b"\n")
        f.truncate(2 << 30)
    return path


@pytest.mark.parametrize("command", [["trace", "info", "--json", "--no-cache"], ["analyze", "--json"]])
def test_text_too_large_for_the_address_space_limit_is_refused_clearly(tmp_path, command):
    """Under a 4 GiB address-space limit (ulimit -v 4194304), a text of 2 GiB is refused before reading: exit 2,
    a message naming the size and the limit, no signal (before: SIGABRT, `memory allocation ... failed`)."""
    path = _long_sparse_text(tmp_path)
    limit = 4 << 30

    def child():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", *command, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        preexec_fn=child,
        env={**__import__("os").environ, "ABTEST_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert str(path) in r.stderr and "2,147,483,648 bytes" in r.stderr
    assert re.search(r"address-space limit \(ulimit -v / RLIMIT_AS\) of 4\.0 GiB", r.stderr), r.stderr


def test_memory_error_in_the_cli_is_a_clear_exit_2(monkeypatch, capsys):
    """An allocation that fails anywhere in a command: exit 2 and one line naming the limits, no traceback."""

    def boom(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(ftrace_text, "read", boom)
    code = cli.run(["trace", "info", "--no-cache", str(LISA_TEXT)])
    err = capsys.readouterr().err
    assert code == 2
    assert "ran out of memory" in err and "RLIMIT_AS" in err and "available memory" in err
    assert "Traceback" not in err


# -- bugs found by `bench/fuzz.py --analyze` (seed 43): each reproduced from a real trace, mutated here ------------


def test_thermal_cpu_limit_lines_without_their_fields_are_import_errors(tmp_path):
    """fuzz ftrace-text:4:1000007 / :1000025: thermal_power_cpu_limit lines whose `cpus=` or `freq=` was damaged
    made the thermal analysis fail (polars ColumnNotFoundError). Now such lines are import errors (missing_field)
    and the analysis runs on the others."""
    text = (TRACES / "trappy" / "trace.txt").read_text()
    lines = text.splitlines(keepends=True)
    hit = [i for i, line in enumerate(lines) if "thermal_power_cpu_limit:" in line]
    assert len(hit) > 4
    for i in hit[:2]:
        lines[i] = lines[i].replace("cpus=", "cpXs=")
    lines[hit[2]] = lines[hit[2]].replace("freq=", "frXq=")
    path = tmp_path / "trace.txt"
    path.write_text("".join(lines))
    data = read_trace(path)
    assert data.meta["import_errors"]["missing_field"]["count"] == 3
    assert data.tables["thermal_power_cpu_limit"].height == len(hit) - 3
    d = analyze_dict(Trace(path, _data=data), threads=1)
    assert "thermal" not in d["failed"], d["failed"]
    assert d["thermal"]


def test_query_result_with_invalid_utf8_strings():
    """fuzz perfetto:1:43000166: a trace whose strings are not UTF-8 makes trace_processor's QueryResult carry
    string_cells as bytes; the frames analysis failed (TypeError: a bytes-like object is required)."""
    batch = SimpleNamespace(
        cells=[CELL_STRING, CELL_STRING],
        varint_cells=[],
        float64_cells=[],
        string_cells=b"ok\0bad \xff name\0",
        blob_cells=[],
    )
    (col,) = _batch_columns(batch, 1)
    assert col[4][:2] == ["ok", "bad \ufffd name"]
    assert pl.Series(col[4][:2]).dtype == pl.String


def test_pelt_and_switch_lines_with_damaged_fields_are_import_errors(tmp_path):
    """fuzz ftrace-text:4:4343013078 (`load_avg=253 ut...`: a PELT value that is not a number) and
    systrace-html:1:4343013046 (`ppev_state=` for `prev_state=`): load_tracking and tasks failed (polars
    InvalidOperationError / ColumnNotFoundError). Now such lines are import errors (bad_field_value /
    missing_field) and every analysis runs on the other lines."""
    text = (TRACES / "trappy" / "trace_failed_to_parse.txt").read_text()
    text = text.replace("load_avg=253 util_avg=1007", "load_avg=253 ut util_avg=1007x", 1)
    sched = (TRACES / "lisa" / "trace_txt-trace.txt").read_text().replace("prev_state=", "ppev_state=", 2)
    for name, body in (("pelt.txt", text), ("switch.txt", sched)):
        path = tmp_path / name
        path.write_text(body)
        data = read_trace(path)
        assert data.meta["import_errors"], name
        d = analyze_dict(Trace(path, _data=data), threads=1)
        assert not d["failed"], (name, d["failed"])
    errors = read_trace(tmp_path / "switch.txt").meta["import_errors"]
    assert errors["missing_field"]["count"] == 2


def test_thermal_allocator_value_that_is_not_a_number_is_an_import_error(tmp_path):
    """fuzz ftrace-text:4:43000151: a thermal_power_allocator line whose delta_temperature is not a number
    (`-455s_update:`, two lines run together) failed the thermal analysis (InvalidOperationError: str to f64).
    Now the line is an import error (bad_field_value) and the analysis runs on the others."""
    text = (TRACES / "trappy" / "trace.txt").read_text()
    text = re.sub(r"delta_temperature=(-?\d+)", r"delta_temperature=\1s_update:", text, count=1)
    path = tmp_path / "trace.txt"
    path.write_text(text)
    data = read_trace(path)
    assert data.meta["import_errors"]["bad_field_value"]["count"] == 1
    d = analyze_dict(Trace(path, _data=data), threads=1)
    assert "thermal" not in d["failed"], d["failed"]


def test_pelt_task_pid_that_is_not_a_number_is_an_import_error(tmp_path):
    """fuzz systrace-html:1:43000522: a sched_load_avg_task line whose pid is not a number left a string pid
    column, and load_tracking failed (ComputeError: cannot compare string with numeric type). Now the line is an
    import error (bad_field_value) and the pid column stays an integer."""
    text = (TRACES / "trappy" / "trace_failed_to_parse.txt").read_text()
    text = text.replace("comm=big-max5 pid=5274", "comm=big-max5 pid=52x4", 1)
    path = tmp_path / "trace.txt"
    path.write_text(text)
    data = read_trace(path)
    assert data.meta["import_errors"]["bad_field_value"]["count"] == 1
    assert data.tables["sched_pelt_se"]["pid"].dtype.is_integer()
    d = analyze_dict(Trace(path, _data=data), threads=1)
    assert "load_tracking" not in d["failed"], d["failed"]
