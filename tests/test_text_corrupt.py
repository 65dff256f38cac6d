"""Bad input for the ftrace text family. Damaged lines inside a real trace are counted in meta["import_errors"]
(kind, count, first examples with their line numbers) and every good event is kept; a file that is not a trace
(no event line, or more unparseable lines than events) and a broken compressed stream are clear errors (file,
line or offset, what was expected) with CLI exit code 2, never a partial trace presented as complete. Inputs
are built in tmp_path from the real shared traces."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _cli_info(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _counts(path: Path) -> dict[str, int]:
    return read_trace(path).meta["events"]


def _error_lines(meta: dict) -> dict[int, str]:
    """{line: import_errors kind} of the examples."""
    return {ex["line"]: kind for kind, e in meta["import_errors"].items() for ex in e["examples"] if "line" in ex}


def test_garbage_line_is_counted_and_the_events_kept(traces, tmp_path):
    clean = _counts(traces / "tracecompass/trace-critical-path")
    lines = _lines(traces / "tracecompass/trace-critical-path")
    lines.insert(40, "this is not an ftrace line at all")
    path = tmp_path / "garbage.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["events"] == clean
    err = data.meta["import_errors"]
    assert list(err) == ["unrecognised_line"] and err["unrecognised_line"]["count"] == 1
    assert err["unrecognised_line"]["examples"][0]["line"] == 41
    assert err["unrecognised_line"]["examples"][0]["text"] == "this is not an ftrace line at all"
    cli = _cli_info(path)
    assert (
        cli.returncode == 0 and "line 41" in cli.stdout + cli.stderr and "unrecognised_line" in cli.stdout + cli.stderr
    )


def test_truncated_event_line(traces, tmp_path):
    clean = _counts(traces / "trappy/trace.txt")
    lines = _lines(traces / "trappy/trace.txt")
    cut_event = lines[20].split(": ")[1]
    lines[20] = lines[20][:30]  # "     kworker/4:1-51    [004]  1" : cut inside the timestamp
    path = tmp_path / "cut.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["events"] == clean | {cut_event: clean[cut_event] - 1}
    ex = data.meta["import_errors"]["malformed_event_line"]["examples"][0]
    assert ex["line"] == 21 and ex["text"] == lines[20]


def test_binary_junk_in_the_middle(traces, tmp_path):
    clean = _counts(traces / "lisa/trace_txt-trace.txt")
    raw = (traces / "lisa/trace_txt-trace.txt").read_bytes()
    lines = raw.split(b"\n")
    junk = bytes(range(256)) * 4
    path = tmp_path / "junk.txt"
    path.write_bytes(b"\n".join(lines[:100]) + b"\n" + lines[100][:50] + junk + b"\n" + b"\n".join(lines[101:]))
    data = read_trace(path)
    damaged = lines[100].split(b": ")[1].decode()
    assert data.meta["events"] == clean | {damaged: clean[damaged] - 1}
    errors = data.meta["import_errors"]
    assert errors["binary_line"]["examples"][0]["line"] == 101
    # the junk holds 4 LF and 4 CR bytes (both line ends): 9 damaged lines, all counted
    assert sum(e["count"] for e in errors.values()) == 9
    assert _cli_info(path).returncode == 0


def test_not_a_trace_is_refused(traces, tmp_path):
    """A text with no event line (a README), or with more unparseable lines than events, is refused with the
    file, the first bad line and what was expected."""
    readme = tmp_path / "README.txt"
    readme.write_text((ROOT / "README.md").read_text())
    with pytest.raises(TraceFormatError) as e:
        read_trace(readme)
    first_text = next(
        i for i, ln in enumerate(readme.read_text().splitlines(), 1) if ln.strip() and not ln.startswith("#")
    )
    assert "not a trace" in str(e.value) and "no ftrace event line" in str(e.value) and e.value.line == first_text
    assert _cli_info(readme).returncode == 2
    lines = _lines(traces / "trappy/trace_sched.txt")
    events = [ln for ln in lines if re.search(r"\[\d+\]", ln)]
    mostly_bad = tmp_path / "mostly_bad.txt"
    mostly_bad.write_text("\n".join(events[:3] + [f"garbage line {i}" for i in range(4)]) + "\n")
    with pytest.raises(TraceFormatError) as e:
        read_trace(mostly_bad)
    assert "4 of 7 lines do not parse" in str(e.value) and e.value.line == 4


def test_truncated_atrace_z_stream(traces, tmp_path):
    raw = (traces / "catapult/compressed_atrace_data.txt").read_bytes()
    inflater = zlib.decompressobj()
    inflater.decompress(raw[len(b"TRACE:\n") :])
    stream_end = len(raw) - len(inflater.unused_data)  # the file has junk after its 7592-byte stream
    cut = len(b"TRACE:\n") + (stream_end - len(b"TRACE:\n")) // 2
    path = tmp_path / "cut_atrace.txt"
    path.write_bytes(raw[:cut])
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "truncated" in str(e.value) and e.value.offset == cut
    cli = _cli_info(path)
    assert cli.returncode == 2 and "truncated" in cli.stderr and "tracing_mark_write" not in cli.stdout


def test_corrupt_atrace_z_stream(traces, tmp_path):
    raw = bytearray((traces / "catapult/compressed_atrace_data.txt").read_bytes())
    raw[200:400] = bytes(200)  # zero a stretch inside the deflate data
    path = tmp_path / "bad_atrace.txt"
    path.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "zlib" in str(e.value) or "truncated" in str(e.value)


def test_systrace_html_without_trace_block(traces, tmp_path):
    html = (traces / "trappy/trace_systrace.html").read_text()
    start = html.index("<!-- BEGIN TRACE -->")
    end = html.index("<!-- END TRACE -->") + len("<!-- END TRACE -->")
    path = tmp_path / "empty.html"
    path.write_text(html[:start] + html[end:])
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "no trace block" in str(e.value)
    assert _cli_info(path).returncode == 2


def test_systrace_html_json_block_skipped_loudly(traces, tmp_path):
    html = (traces / "trappy/trace_systrace.html").read_text()
    json_block = (
        '  <script class="trace-data" type="application/text">\n'
        '{"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}\n'
        "  </script>\n"
    )
    only_json = tmp_path / "json_only.html"
    start = html.index('  <script class="trace-data"')
    end = html.index("<!-- END TRACE -->")
    only_json.write_text(html[:start] + json_block + html[end:])
    with pytest.raises(TraceFormatError) as e:
        read_trace(only_json)
    assert "JSON" in str(e.value) and "none with ftrace" in str(e.value)
    mixed = tmp_path / "mixed.html"
    mixed.write_text(html[:start] + json_block + html[start:])
    data = read_trace(mixed)
    assert data.meta["events"] == {"sched_switch": 4, "sched_wakeup": 4, "tracing_mark_write": 2}
    assert data.meta["import_errors"]["json_trace_events"]["count"] == 1  # the "X" event is not imported
    assert data.meta["html_blocks"] == {"ftrace": 1, "skipped": 1}


def test_zip_without_trace(tmp_path):
    path = tmp_path / "notrace.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes.bin", bytes(range(256)) * 8)
        zf.writestr("empty/", "")
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "holds no trace" in str(e.value) and "notes.bin" in str(e.value)
    assert _cli_info(path).returncode == 2


def test_headers_only_is_an_empty_trace_not_an_error(traces, tmp_path):
    header = [ln for ln in _lines(traces / "catapult/atrace_data") if ln.startswith("#")]
    path = tmp_path / "quiet.txt"
    path.write_text("\n".join(header) + "\n")
    data = read_trace(path)
    assert data.tables == {} and data.meta["events"] == {}
    assert data.meta["cpus"] == 1 and any("no events" in w for w in data.meta["warnings"])


def test_blank_only_text_is_an_error(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("\n   \n\n")
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "no trace lines" in str(e.value)


def test_atrace_without_trace_body_lines(tmp_path):
    path = tmp_path / "atrace_empty.txt"
    path.write_bytes(b"TRACE:\n")
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert "no trace lines" in str(e.value)


def test_orphan_stack_line(traces, tmp_path):
    lines = _lines(traces / "trappy/trace_sched.txt")
    path = tmp_path / "stack.txt"
    path.write_text("\n".join(lines[:2] + [" => schedule+0x4c/0x90"] + lines[2:]) + "\n")
    data = read_trace(path)
    assert data.meta["events"] == _counts(traces / "trappy/trace_sched.txt")
    assert data.meta["import_errors"]["orphan_stack_line"]["examples"][0]["line"] == 3


def test_garbage_inside_html_block_names_html_line(traces, tmp_path):
    clean = _counts(traces / "trappy/trace_systrace.html")
    lines = (traces / "trappy/trace_systrace.html").read_text().splitlines()
    target = next(i for i, ln in enumerate(lines) if "514769.086283" in ln)
    event = lines[target].split(": ")[1]
    lines[target] = "  <div>not a trace line</div>"
    path = tmp_path / "bad.html"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["events"] == clean | {event: clean[event] - 1}
    assert target + 1 in _error_lines(data.meta)  # unrecognised, or joined to a marker above it: counted either way
    assert any(
        "<div>not a trace line" in ex["text"] for e in data.meta["import_errors"].values() for ex in e["examples"]
    )


def test_garbage_inside_atrace_z_names_inflated_line(traces, tmp_path):
    clean = _counts(traces / "catapult/decompressed_atrace_data.txt")
    body = (traces / "catapult/decompressed_atrace_data.txt").read_bytes().split(b"\n")
    event = body[30].split(b": ")[1].decode()
    body[30] = b"garbage in the middle of the stream"
    path = tmp_path / "bad_z.txt"
    path.write_bytes(b"TRACE:\n" + zlib.compress(b"\n".join(body)))
    data = read_trace(path)
    assert data.meta["events"] == clean | {event: clean[event] - 1}
    ((kind, entry),) = data.meta["import_errors"].items()  # after a marker: joined to it, and counted
    assert kind == "continuation_line" and entry["count"] == 1
    assert entry["examples"][0]["line"] == 31 and entry["examples"][0]["source"] == "inflated atrace -z stream"


def test_utf8_bom_is_tolerated(traces, tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf" + (traces / "trappy/trace_no_trailing_line.txt").read_bytes())
    assert read_trace(path).meta["events"] == {"cpu_idle": 9, "sched_switch": 1}


def test_report_of_several_input_files_is_refused_clearly(traces, tmp_path):
    """`trace-cmd report -i A -i B` (real trace-cmd on two shared trace.dat files): each line carries its
    file's name and each file a 'FILE: cpus=N' header; refused with a message saying what to do."""
    x86 = traces / "x86-vm"
    out = subprocess.run(
        [
            "trace-cmd",
            "report",
            "-i",
            str(x86 / "x86-menu-hackbench-cyclictest.dat"),
            "-i",
            str(x86 / "x86-ladder-hackbench-cyclictest.dat"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = tmp_path / "two-files.txt"
    path.write_text(out)
    with pytest.raises(TraceFormatError) as e:
        read_trace(path)
    assert e.value.line == 1 and "several input files" in str(e.value)
    assert _cli_info(path).returncode == 2
