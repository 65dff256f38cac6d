"""The `abtest trace info --json` contract on every shared trace: the keys external checks rely on, and
per-event counts equal to ../shared/traces/expected-counts.json (trace-cmd report for trace.dat; a line regex
or protobuf walk for the others) after the documented renames:
- PELT variants carry their canonical names (sched_load_se -> sched_pelt_se, ...), the raw name in event_aliases;
- "sched_switch(compact)" in the expected file is perfetto's compact sched_switch, reported as sched_switch;
- the two HTML files' event "0" is the old kernels' trace_marker write (print with ip 0), reported as
  tracing_mark_write (the lines are checked in tests/test_text_readers.py::test_old_marker_event_0_lines);
- a line cut short before the fields its event needs is an import error (missing_field), not an event (issue 43):
  CUT_LINES lists those of the shared traces.
Runs the real CLI entry point in-process (click) for speed; one subprocess run checks the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_data import TRACES

from abtest.cli import cli
from abtest.trace.schema import EVENT_ALIASES

EXPECTED = json.loads((TRACES / "expected-counts.json").read_text())
FILES = sorted(k for k in EXPECTED if not k.endswith(".yml"))
OLD_MARKER = {"0": "tracing_mark_write"}
# trappy's trace_idle_unsorted.txt line 17 is `sched_switch: prev_comm=bash prev_pid=14840`, cut there upstream
CUT_LINES = {"trappy/trace_idle_unsorted.txt": {"sched_switch": 1}}


def expected_events(name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for ev, n in EXPECTED[name]["events"].items():
        ev = ev.replace("(compact)", "")
        ev = OLD_MARKER.get(ev, ev) if name.endswith(".html") else ev
        ev = EVENT_ALIASES.get(ev, ev)
        out[ev] = out.get(ev, 0) + n
    for ev, n in CUT_LINES.get(name, {}).items():
        out[ev] -= n
    return out


@pytest.mark.parametrize("name", FILES)
def test_info_json_counts_and_keys(name):
    r = CliRunner().invoke(cli, ["trace", "info", "--json", str(TRACES / name)])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert {"format", "cpus", "start_ns", "end_ns", "events", "lost_events"} <= set(info)
    assert isinstance(info["format"], str) and isinstance(info["cpus"], int) and info["cpus"] >= 1
    assert isinstance(info["start_ns"], int) and isinstance(info["end_ns"], int)
    assert info["start_ns"] <= info["end_ns"]
    assert info["events"] == expected_events(name)
    cut = sum(CUT_LINES.get(name, {}).values())
    assert (info.get("import_errors") or {}).get("missing_field", {}).get("count", 0) == cut
    assert info["lost_events"] == header_overwritten(TRACES / name)


def header_overwritten(path: Path) -> int:
    """Events the ring buffer overwrote, as a tracefs text header states them
    (`# entries-in-buffer/entries-written: X/Y`: Y - X); 0 for files without that header."""
    import re

    head = path.read_bytes()[:4096].decode("latin-1")
    m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", head)
    return int(m.group(2)) - int(m.group(1)) if m else 0


def test_installed_script_prints_one_json_object():
    exe = Path(sys.executable).with_name("abtest")
    r = subprocess.run(
        [str(exe), "trace", "info", "--json", str(TRACES / "lisa/sched_load-trace.dat")],
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(r.stdout)
    assert info["events"]["sched_pelt_se"] == 364 and info["event_aliases"]["sched_pelt_se"] == "sched_load_se"
    assert info["cpus"] == 6 and info["format"] == "trace.dat"
