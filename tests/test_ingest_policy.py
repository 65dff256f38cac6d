"""The ingestion policy (docs/ingest-policy.md) on real files: unparseable content is counted per kind with
examples and line numbers in meta["import_errors"] and every good event is kept; recognised non-event
content (preambles, ps listings, systrace PROCESS DUMP / JSON blocks, padding) is accounted in
meta["non_event_content"] and used where it carries data (table `process`); CRLF and mixed line ends;
several trace blocks in one HTML; function_graph text; data-quality checks on every format; the
accounting of the binary readers. Mutated inputs are made in tmp_path from real traces
(../shared/traces, tests/data/ingest: see its MANIFEST.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from tracedat_ref import events as report_events

from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "ingest"


def _error_lines(meta: dict) -> dict[int, str]:
    """{line: import_errors kind} over the examples."""
    return {ex["line"]: kind for kind, e in meta["import_errors"].items() for ex in e["examples"] if "line" in ex}


def _event_name(line: str) -> str:
    return re.search(r"\d+\.\d+: ([\w.]+):", line).group(1)


# -- corrupted lines: counted, the good events kept ---------------------------------------------------------


def test_corrupted_lines_are_counted_and_every_good_event_kept(traces, tmp_path):
    """A real tracefs text (LISA's Juno trace) with six lines damaged in six ways: each damage is counted
    under its kind with the line number, and the tables hold exactly the clean file's rows minus the six
    damaged events."""
    src = traces / "lisa/trace_txt-trace.txt"
    clean = read_trace(src)
    lines = src.read_text().splitlines()
    switch_rows = [i for i, ln in enumerate(lines) if ": sched_switch:" in ln]
    wakeup_rows = [i for i, ln in enumerate(lines) if ": sched_wakeup:" in ln]
    damage = {  # 0-based index -> (kind expected, damaged text)
        switch_rows[10]: ("malformed_event_line", lines[switch_rows[10]][:40]),  # cut inside the head
        switch_rows[200]: ("bad_field_value", lines[switch_rows[200]].replace("prev_pid=", "prev_pid=x", 1)),
        switch_rows[400]: ("value_out_of_range", re.sub(r"\[\d+\]", "[4294967296]", lines[switch_rows[400]], count=1)),
        wakeup_rows[50]: ("binary_line", lines[wakeup_rows[50]][:30] + "\x00\x01\x02\x7f junk"),
        wakeup_rows[300]: ("value_out_of_range", lines[wakeup_rows[300]].replace("pid=", "pid=99999999999", 1)),
        switch_rows[600]: (
            "malformed_event_line",
            lines[switch_rows[600]].replace(": sched_switch:", " sched_switch", 1),
        ),
    }
    assert not any(": print:" in lines[i - 1] for i in damage)  # none right after a marker (would be joined)
    for i, (_kind, text) in damage.items():
        lines[i] = text
    path = tmp_path / "corrupt.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    expected_kinds: dict[str, list[int]] = {}
    for i, (kind, _text) in damage.items():
        expected_kinds.setdefault(kind, []).append(i + 1)
    errors = data.meta["import_errors"]
    assert {k: e["count"] for k, e in errors.items()} == {k: len(v) for k, v in expected_kinds.items()}
    assert {ln: k for k, lns in expected_kinds.items() for ln in lns} == _error_lines(data.meta)
    # the good events: the clean tables minus the damaged rows, identical row for row
    damaged_ts = {}
    for i in damage:
        original = src.read_text().splitlines()[i]
        sec, frac = re.search(r" (\d+)\.(\d+):", original).groups()
        damaged_ts.setdefault(_event_name(original), set()).add(int(sec) * 10**9 + int(frac.ljust(9, "0")))
    for name, table in clean.tables.items():
        if name == "marker":
            assert data.tables[name].equals(table)
            continue
        kept = table.filter(~pl.col("ts").is_in(sorted(damaged_ts.get(name, ()))))
        assert data.tables[name].equals(kept), name
    cli = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0
    for kind in expected_kinds:
        assert f"x {kind}" in cli.stderr


# -- issue 27, items 1-4: hostile numbers, names and shapes in real lines --------------------------------


@pytest.mark.parametrize("comm", ["bash-é", "日本語", "ẞtest-1", "Ωμέγα"])
def test_non_ascii_comm_keeps_pid_and_fields(traces, tmp_path, comm):
    """A comm with multi-byte characters (UTF-8) must not shift the parsed columns (byte vs character
    offsets): tracefs text and trace-cmd report's plugin form."""
    src = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    i = next(k for k, ln in enumerate(src) if ": sched_switch:" in ln)
    old_comm, pid = re.match(r"\s*(\S+)-(\d+) ", src[i]).groups()
    src[i] = (
        src[i]
        .replace(f"{old_comm}-{pid} ", f"{comm}-{pid} ", 1)
        .replace(f"prev_comm={old_comm} ", f"prev_comm={comm} ")
    )
    path = tmp_path / "utf8.txt"
    path.write_text("\n".join(src) + "\n")
    row = read_trace(path).tables["sched_switch"].filter(pl.col("common_comm") == comm).row(0, named=True)
    assert (row["common_pid"], row["prev_pid"], str(row["prev_comm"])) == (int(pid), int(pid), comm)
    report = subprocess.run(
        ["trace-cmd", "report", str(traces / "lisa/sched_load-trace.dat")], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    j = next(k for k, ln in enumerate(report) if ": sched_switch:" in ln and "swapper" not in ln.split(":")[0])
    m = re.search(r"sched_switch:\s+(.+?):(\d+) \[", report[j])
    report[j] = report[j].replace(f"{m.group(1)}:{m.group(2)} [", f"{comm}:{m.group(2)} [", 1)
    rpath = tmp_path / "utf8-report.txt"
    rpath.write_text("\n".join(report) + "\n")
    switch = read_trace(rpath).tables["sched_switch"]
    row = switch.filter(pl.col("prev_comm") == comm).row(0, named=True)
    assert row["prev_pid"] == int(m.group(2)) and row["prev_prio"] is not None


@pytest.mark.parametrize(
    "mutation",
    [
        (r"\[(\d+)\]", "[2147483648]"),  # CPU beyond Int32
        (r"-(\d+) ", "-2147483648 "),  # pid beyond Int32
        (r" (\d+)\.(\d+):", " 18446744073.000001:"),  # seconds whose ns overflow Int64 (wrapped before)
        (r" (\d+)\.(\d+):", " 12345678901234567890.5:"),  # 20-digit seconds
        (r"next_pid=\d+", "next_pid=2147483648"),  # a canonical pid field beyond Int32
    ],
)
def test_out_of_range_numbers_are_counted_not_wrapped(traces, tmp_path, mutation):
    src = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    clean = read_trace(traces / "tracecompass/trace-android-sched").meta
    i = next(k for k, ln in enumerate(src) if ": sched_switch:" in ln)
    src[i] = re.sub(mutation[0], mutation[1], src[i], count=1)
    path = tmp_path / "range.txt"
    path.write_text("\n".join(src) + "\n")
    meta = read_trace(path).meta
    assert meta["import_errors"]["value_out_of_range"]["count"] == 1
    assert _error_lines(meta) == {i + 1: "value_out_of_range"}
    assert meta["events"] == clean["events"] | {"sched_switch": clean["events"]["sched_switch"] - 1}
    assert meta["start_ns"] == clean["start_ns"] and meta["end_ns"] == clean["end_ns"]


@pytest.mark.parametrize("fields", [2000, 20000])
def test_many_fields_on_one_line_is_linear_and_bounded(traces, tmp_path, fields):
    """20,000 key=value fields on one line (an 80 KB line) did not finish in 10 minutes before: the line is
    read in bounded time, its payload kept whole (more than the 512-field limit) and counted once."""
    src = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    i = next(k for k, ln in enumerate(src) if ": sched_wakeup:" in ln)
    src[i] += " " + " ".join(f"k{n}={n}" for n in range(fields))
    path = tmp_path / "wide.txt"
    path.write_text("\n".join(src) + "\n")
    t0 = time.monotonic()
    meta = read_trace(path).meta
    assert time.monotonic() - t0 < 10
    assert meta["import_errors"]["too_many_fields"]["count"] == 1
    # counted once: a sched_wakeup needs its pid, which is not read from a payload kept whole, so it is left out
    assert set(meta["import_errors"]) == {"too_many_fields"}
    clean = read_trace(traces / "tracecompass/trace-android-sched").meta["events"]
    assert meta["events"] == clean | {"sched_wakeup": clean["sched_wakeup"] - 1}


def test_wide_payloads_under_the_limit_are_split_in_linear_time(traces, tmp_path):
    """500 fields with a value holding spaces (the regex path backtracked for minutes), on 200 lines."""
    src = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    i = next(k for k, ln in enumerate(src) if ": sched_switch:" in ln)
    wide = src[i].replace(": sched_switch:", ": wide_event:") + " " + " ".join(f"k{n}={n}" for n in range(500))
    path = tmp_path / "wide500.txt"
    path.write_text("\n".join(src[:i] + [wide] * 200 + src[i + 1 :]) + "\n")
    t0 = time.monotonic()
    table = read_trace(path).tables["wide_event"]
    assert time.monotonic() - t0 < 20
    assert table.height == 200 and table["k499"].to_list() == [499] * 200
    assert table["prev_state"].to_list() == ["S ==>"] * 200  # the value runs to the next key


def test_file_truncated_mid_line_reports_the_partial_line(traces, tmp_path):
    """A text cut inside its last line (no line end): the partial line is an import error, not an event with
    a shorter number (`next_pid=1` of `next_pid=1642 next_prio=120`)."""
    text = (traces / "tracecompass/trace-android-sched").read_text()
    lines = text.splitlines()
    k = [i for i, ln in enumerate(lines) if ": sched_switch:" in ln][20]
    cut_at = text.index(lines[k]) + lines[k].index("next_pid=") + len("next_pid=") + 1
    path = tmp_path / "cut.txt"
    path.write_text(text[:cut_at])
    meta = read_trace(path).meta
    assert _error_lines(meta) == {k + 1: "truncated_line"}
    whole = tmp_path / "whole.txt"
    whole.write_text("\n".join(lines[:k]) + "\n")
    assert meta["events"] == read_trace(whole).meta["events"]
    # a real file whose complete last line has no line end still reads every event
    assert read_trace(traces / "trappy/trace_no_trailing_line.txt").meta["events"] == {"cpu_idle": 9, "sched_switch": 1}


# -- atrace / adb captures: preambles, CRLF, mixed line ends ---------------------------------------------


@pytest.mark.parametrize("ending", [b"\r\n", b"\r\r\n"])
def test_adb_capture_with_crlf_and_preamble(traces, tmp_path, ending):
    """`adb shell atrace` through a pty: `capturing trace... done`, `TRACE:` and every line end CRLF (CR CR
    LF with adb on Windows): the same tables as the clean text."""
    clean = read_trace(traces / "catapult/atrace_data")
    body = (traces / "catapult/atrace_data").read_bytes()
    path = tmp_path / "adb.txt"
    path.write_bytes((b"capturing trace... done\nTRACE:\n" + body).replace(b"\n", ending))
    data = read_trace(path)
    assert data.meta["format"] == "atrace"
    for name, table in clean.tables.items():
        assert data.tables[name].equals(table), name
    assert data.meta["non_event_content"]["atrace_preamble"]["count"] == 2
    assert data.meta["import_errors"] == {}
    assert any("CRLF" in q for q in data.meta["text_quirks"])


def test_preamble_before_the_tracer_header(traces, tmp_path):
    """A terminal capture: the prompt and command before `# tracer:` are preamble, not errors."""
    path = tmp_path / "capture.txt"
    path.write_bytes(
        b"root@generic:/ # cat /sys/kernel/debug/tracing/trace\n" + (traces / "catapult/atrace_data").read_bytes()
    )
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "catapult/atrace_data").meta["events"]
    assert data.meta["import_errors"] == {} and data.meta["non_event_content"]["preamble"]["count"] == 1


def test_mixed_line_ends(traces, tmp_path):
    clean = read_trace(traces / "trappy/trace_thermal.txt")
    lines = (traces / "trappy/trace_thermal.txt").read_bytes().split(b"\n")
    ends = [b"\n", b"\r\n", b"\r"]
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"".join(ln + ends[i % 3] for i, ln in enumerate(lines[:-1])) + lines[-1])
    data = read_trace(path)
    assert data.meta["events"] == clean.meta["events"] and data.meta["import_errors"] == {}
    assert data.tables["sched_switch" if "sched_switch" in clean.tables else "thermal_temperature"].equals(
        clean.tables["sched_switch" if "sched_switch" in clean.tables else "thermal_temperature"]
    )


def test_nul_padding_is_skipped(traces, tmp_path):
    raw = (traces / "trappy/trace_sched.txt").read_bytes()
    path = tmp_path / "padded.txt"
    path.write_bytes(raw + b"\x00" * 4096)
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "trappy/trace_sched.txt").meta["events"]
    assert data.meta["non_event_content"]["nul_padding"]["count"] == 4096 and data.meta["import_errors"] == {}


# -- ps listings: table process, task names and thread groups filled ------------------------------------


def test_atrace_followed_by_ps_listings(traces, tmp_path):
    """`atrace ...; ps` output: the ftrace text of a real capture, then real toybox process and thread
    listings (tests/data/ingest/ps): every listing row becomes a row of `process` (threads: the thread
    listing's TID/PID), nothing is counted as unparseable and the events are those of the trace alone."""
    trace = (traces / "catapult/atrace_data").read_bytes()
    proc = (DATA / "ps/toybox-process-listing.txt").read_bytes().rstrip(b"\n") + b"\n"  # saved without the last \n
    threads = (DATA / "ps/toybox-thread-listing.txt").read_bytes().rstrip(b"\n") + b"\n"
    path = tmp_path / "atrace_ps.txt"
    path.write_bytes(b"capturing trace... done\nTRACE:\n" + trace + proc + threads)
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "catapult/atrace_data").meta["events"]
    assert data.meta["import_errors"] == {}
    thread_rows = [ln.split(None, 3) for ln in threads.decode().splitlines()[1:] if ln.strip()]
    process_rows = [ln.split() for ln in proc.decode().splitlines()[1:] if ln.strip()]
    # a process row (pid, its NAME) unless the later thread listing lists that thread (tgid, thread name)
    expected = {int(r[1]): (int(r[1]), r[8]) for r in process_rows}
    expected |= {int(r[2]): (int(r[1]), r[3].strip()) for r in thread_rows}
    process = data.tables["process"]
    assert {row["pid"]: (row["tgid"], row["name"]) for row in process.iter_rows(named=True)} == expected
    ppid = {int(r[1]): int(r[2]) for r in process_rows}
    assert process.filter(pl.col("pid") == pl.col("tgid")).select("pid", "ppid").rows() == [
        (p, ppid.get(p)) for p in process.filter(pl.col("pid") == pl.col("tgid"))["pid"].to_list()
    ]
    counted = data.meta["non_event_content"]["process_listing"]["count"]
    assert counted == len(proc.decode().splitlines()) + len(threads.decode().splitlines())


def test_systrace_html_android7_layout(traces, tmp_path):
    """The layout systrace.py writes on Android 7+: a PROCESS DUMP block, the ftrace text, then a JSON
    metadata block (assembled from real parts: trappy's systrace HTML, the toybox listings of
    tests/data/ingest/ps, and systrace's metadata block shape); the ftrace text split over two blocks too."""
    html = (traces / "trappy/trace_systrace.html").read_text()
    start = html.index('  <script class="trace-data"')
    end = html.index("<!-- END TRACE -->")
    body = re.search(r'<script class="trace-data" type="application/text">(.*?)</script>', html, re.S).group(1)
    ev = body.splitlines()
    half = len(ev) // 2
    dump = (
        "PROCESS DUMP\n"
        + (DATA / "ps/toybox-process-listing.txt").read_text().rstrip("\n")
        + "\n"
        + (DATA / "ps/toybox-thread-listing.txt").read_text().rstrip("\n")
    )
    metadata = json.dumps(
        {
            "traceEvents": [
                {
                    "category": "process_argv",
                    "name": "process_argv",
                    "args": {"argv": ["systrace.py", "-t", "5", "sched"]},
                    "pid": 4242,
                    "ts": 1037300940509.7991,
                    "tid": 4243,
                    "ph": "M",
                },
                {
                    "category": "python",
                    "name": "clock_sync",
                    "args": {"issue_ts": 1037307346185.212, "sync_id": "9a7e4fe3"},
                    "pid": 4242,
                    "ts": 1037307351643.906,
                    "tid": 4244,
                    "ph": "c",
                },
            ],
            "metadata": {"clock-domain": "SYSTRACE"},
        }
    )

    def block(text: str) -> str:
        return f'  <script class="trace-data" type="application/text">\n{text}\n  </script>\n'

    path = tmp_path / "systrace7.html"
    path.write_text(
        html[:start]
        + block(dump)
        + block("\n".join(ev[:half]))
        + block("\n".join(ev[half:]))
        + block(metadata)
        + html[end:]
    )
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "trappy/trace_systrace.html").meta["events"]
    assert data.meta["import_errors"] == {}
    assert data.meta["html_block_kinds"] == {"process_dump": 1, "ftrace": 2, "json": 1}
    assert data.meta["non_event_content"]["json_metadata"]["count"] == 2
    assert data.meta["systrace_metadata"] == {"clock-domain": "SYSTRACE"}
    assert data.tables["process"].height > 1000


def test_live_unknown_comms_filled_from_a_ps_listing(tracefs_lock, tmp_path):
    """Recorded here: tracefs text of sched events printed after the kernel's comm cache was emptied (by
    resizing it: every task prints as `<...>`), then `ps -A -T -o user,pid,tid,comm` (procps) of the same
    moment, as `atrace; ps` captures do. Every `<...>` task the listing names gets its name from it, with its
    thread group."""
    fs = tracefs_lock
    saved = {f: (fs / f).read_text().strip() for f in ("saved_cmdlines_size", "tracing_on")}
    saved_events = {
        e: (fs / "events/sched" / e / "enable").read_text().strip() for e in ("sched_switch", "sched_wakeup")
    }
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        for e in saved_events:
            (fs / "events/sched" / e / "enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        subprocess.run(["sh", "-c", "for i in 1 2 3 4 5; do sleep 0.02; done"], check=True)
        (fs / "tracing_on").write_text("0")
        # resizing the comm cache empties it: the kernel then prints every task as `<...>`
        (fs / "saved_cmdlines_size").write_text(saved["saved_cmdlines_size"])
        text = (fs / "trace").read_text()
        listing = subprocess.run(
            ["ps", "-A", "-T", "-o", "user,pid,tid,comm"], check=True, capture_output=True, text=True
        ).stdout
    finally:
        for e, v in saved_events.items():
            (fs / "events/sched" / e / "enable").write_text(v)
        (fs / "saved_cmdlines_size").write_text(saved["saved_cmdlines_size"])
        (fs / "tracing_on").write_text(saved["tracing_on"])
    path = tmp_path / "trace_ps.txt"
    path.write_text(text + listing)
    only = tmp_path / "trace.txt"
    only.write_text(text)
    plain, data = read_trace(only), read_trace(path)
    assert data.meta["events"] == plain.meta["events"] and data.meta["import_errors"] == {}
    names = {int(r.split()[2]): r.split(None, 3)[3].strip() for r in listing.splitlines()[1:]}
    tgids = {int(r.split()[2]): int(r.split()[1]) for r in listing.splitlines()[1:]}
    before = plain.tables["sched_switch"]
    after = data.tables["sched_switch"]
    unknown = before["common_comm"].cast(pl.Utf8) == "<...>"
    assert unknown.any(), "the emptied comm cache left no task unnamed"
    pids = before.filter(unknown)["common_pid"].to_list()
    filled = after.filter(unknown)
    for pid, comm, tgid in filled.select("common_pid", pl.col("common_comm").cast(pl.Utf8), "common_tgid").iter_rows():
        assert (comm, tgid) == ((names[pid], tgids[pid]) if pid in names else ("<...>", None))
    assert any(p in names for p in pids) and data.meta["process_table"]["filled_comms"] >= sum(p in names for p in pids)


# -- function_graph tracer text ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["6.1-default.txt", "6.1-proc-abstime-tail.txt", "6.1-events.txt", "6.12-default.txt"])
def test_function_graph_tracer_text(name):
    """The kernel's function_graph output (recorded in QEMU on Debian 6.1 / 6.12): a `func() {` or leaf
    `func();` line is a funcgraph_entry row, a `}` line a funcgraph_exit row, as trace-cmd report names them;
    events shown inside the graph (`/* sched_switch: ... */`) are rows of their own tables."""
    path = DATA / "funcgraph" / name
    text = path.read_text().splitlines()
    body = [ln.rsplit("|", 1)[-1].strip() for ln in text if not ln.startswith("#") and "|" in ln]
    entries = sum(1 for b in body if re.match(r"^[^\s(/]+\(\)(?: \{|;)", b))
    exits = sum(1 for b in body if b.startswith("}"))
    data = read_trace(path)
    meta = data.meta
    assert meta["events"]["funcgraph_entry"] == entries and meta["events"]["funcgraph_exit"] == exits
    assert meta["import_errors"] == {}
    for event in ("sched_switch", "sched_wakeup"):
        n = sum(1 for b in body if b.startswith(f"/* {event}: "))
        assert meta["events"].get(event, 0) == n
    entry, exit_ = data.tables["funcgraph_entry"], data.tables["funcgraph_exit"]
    assert entry["func"].null_count() == 0 and exit_["func"].null_count() == 0
    leaf = entry.filter(pl.col("leaf"))
    assert (
        leaf["duration_ns"].null_count() == 0
        and entry.filter(~pl.col("leaf"))["duration_ns"].null_count() == entry.filter(~pl.col("leaf")).height
    )
    timed = "abstime" in name or "events" in name
    assert (entry["ts"].null_count() == 0) if timed else (entry["ts"].null_count() == entry.height)
    if "proc" in name or "events" in name:
        assert entry["common_pid"].null_count() == 0


def test_function_graph_exit_takes_its_entry_function():
    """With funcgraph-tail the kernel names the function at each `}`; without it the exit takes the function
    of the entry at its depth: both files of the same kind of call agree on (depth, func) at every exit."""
    tail = read_trace(DATA / "funcgraph/6.1-proc-abstime-tail.txt").tables["funcgraph_exit"]
    text = (DATA / "funcgraph/6.1-proc-abstime-tail.txt").read_text()
    named = re.findall(r"\} /\* (\S+) \*/", text)
    assert tail["func"].to_list() == named
    plain = read_trace(DATA / "funcgraph/6.1-default.txt").tables["funcgraph_exit"]
    assert plain.filter(pl.col("depth") == 0)["func"].unique().to_list() == ["do_sys_openat2"]


def test_function_graph_trace_cmd_report_form():
    """trace-cmd report of a function_graph trace.dat: one row per line as trace-cmd names them; leaf lines
    carry the duration, exits the function of their entry."""
    path = DATA / "funcgraph/6.1-trace-cmd-report.txt"
    lines = path.read_text().splitlines()
    data = read_trace(path)
    assert data.meta["events"] == {
        "funcgraph_entry": sum(": funcgraph_entry:" in ln for ln in lines),
        "funcgraph_exit": sum(": funcgraph_exit:" in ln for ln in lines),
    }
    assert data.meta["import_errors"] == {}
    entry = data.tables["funcgraph_entry"]
    first = entry.row(0, named=True)
    assert (first["func"], first["leaf"], first["duration_ns"], first["overhead"]) == ("mutex_unlock", True, 19721, "+")
    assert data.tables["funcgraph_exit"]["func"].null_count() == 0


# -- data quality on every format -------------------------------------------------------------------------


def test_inferred_gaps_match_an_independent_count(traces):
    """sched_switch chain breaks per CPU, counted in Python from `trace-cmd report -R` of a real trace.dat,
    equal meta["inferred_gaps"] (these hackbench traces break the chain though no loss is recorded)."""
    path = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    rows = report_events(str(path))["sched_switch"]
    last: dict[int, int] = {}
    gaps: dict[str, int] = {}
    for _ts, cpu, _pid, rest in sorted(rows, key=lambda r: r[0]):
        fields = dict(re.findall(r"(\w+)=(\S+)", rest))
        if cpu in last and int(fields["prev_pid"]) != last[cpu]:
            gaps[str(cpu)] = gaps.get(str(cpu), 0) + 1
        last[cpu] = int(fields["next_pid"])
    meta = read_trace(path).meta
    assert meta["inferred_gaps"] == gaps and sum(gaps.values()) > 0
    assert read_trace(traces / "lisa/sched_load-trace.dat").meta["inferred_gaps"] == {}


def test_cpus_with_data_and_header_count(traces):
    meta = read_trace(traces / "tracecompass/trace-android-sched").meta
    assert (meta["cpus"], meta["cpus_header"]) == (4, 4)
    assert meta["cpus_with_data"] == sorted(
        {int(c) for c in re.findall(r"\[(\d{3})\]", (traces / "tracecompass/trace-android-sched").read_text())}
    )
    nohead = read_trace(traces / "trappy/trace_equals.txt").meta
    assert nohead["cpus_header"] is None and nohead["cpus"] == max(nohead["cpus_with_data"]) + 1


# -- the binary readers' accounting -------------------------------------------------------------------------


def test_perfetto_packets_not_imported_are_counted(traces):
    meta = read_trace(traces / "systing/trace.pb").meta
    not_decoded = meta["perfetto"]["packets_not_decoded"]
    assert (
        not_decoded
        and {
            k.split(".", 1)[1]: e["count"]
            for k, e in meta["import_errors"].items()
            if k.startswith("perfetto_packet_not_imported.")
        }
        == not_decoded
    )


def test_tracedat_event_with_unparsable_format_is_counted(traces, tmp_path):
    """A trace.dat whose sched_switch format text is damaged: its records are kept as raw bytes and counted
    under event_format_unparsed, the other events unchanged."""
    raw = bytearray((traces / "lisa/sched_load-trace.dat").read_bytes())
    at = raw.index(b"offset:24;", raw.index(b"name: sched_switch"))
    raw[at : at + 10] = b"offset:2x;"
    path = tmp_path / "badformat.dat"
    path.write_bytes(bytes(raw))
    clean = read_trace(traces / "lisa/sched_load-trace.dat").meta["events"]
    meta = read_trace(path).meta
    entry = meta["import_errors"]["event_format_unparsed"]
    assert entry["count"] == clean["sched_switch"] and "sched_switch" in entry["examples"][0]["text"]
    assert {k: v for k, v in meta["events"].items() if not k.startswith("unknown_event_")} == {
        k: v for k, v in clean.items() if k != "sched_switch"
    }


def test_trace_info_json_carries_the_accounting(traces):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "trace",
            "info",
            "--json",
            "--no-cache",
            str(DATA / "funcgraph/6.1-events.txt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    info = json.loads(r.stdout)
    assert {"import_errors", "non_event_content", "inferred_gaps", "cpus_with_data", "cpus_header"} <= set(info)
    assert info["non_event_content"]["funcgraph_task_switch"]["count"] == 123


def test_live_marker_with_newlines_is_joined(tracefs_lock, tmp_path):
    """Recorded here: trace_marker writes holding newlines (the kernel prints the rest of the text on the
    next lines, as Android apps' atrace messages did in the refused captures): each message comes back whole
    in the `marker` table, the continuation lines counted, and a sched_switch after them is still read."""
    fs = tracefs_lock
    saved_on = (fs / "tracing_on").read_text().strip()
    saved_switch = (fs / "events/sched/sched_switch/enable").read_text().strip()
    messages = ["B|1234|binder transaction\n gid=4", "abtest line one\nline two\nline three"]
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "events/sched/sched_switch/enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        for m in messages:
            (fs / "trace_marker").write_text(m)
        subprocess.run(["sleep", "0.05"], check=True)
        (fs / "tracing_on").write_text("0")
        text = (fs / "trace").read_text()
        (fs / "trace").write_text("")
    finally:
        (fs / "events/sched/sched_switch/enable").write_text(saved_switch)
        (fs / "tracing_on").write_text(saved_on)
    path = tmp_path / "markers.txt"
    path.write_text(text)
    data = read_trace(path)
    got = data.tables["marker"]["text"].to_list()
    assert got == messages
    assert data.meta["import_errors"]["continuation_line"]["count"] == 3
    assert data.meta["events"]["sched_switch"] == sum(": sched_switch:" in ln for ln in text.splitlines())
