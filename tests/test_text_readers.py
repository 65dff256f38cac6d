"""ftrace text family readers (abtest.trace.ftrace_text) on the real traces in ../shared/traces.

Counts are checked against expected-counts.json; field values against lines read from the files
here in the test; trace-cmd report text of a real trace.dat against trace-cmd's own -R output.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import polars as pl
import pytest

from abtest.trace import ftrace_text
from abtest.trace.detect import detect_format
from abtest.trace.readers import read_trace
from abtest.trace.schema import EVENT_ALIASES

TEXT_SUFFIXES = (".dat", ".yml", ".perfetto-trace", ".pb")


def _expected() -> dict:
    from tests.conftest import TRACES

    return json.loads((TRACES / "expected-counts.json").read_text())


def _text_files() -> list[str]:
    return sorted(n for n in _expected() if not n.endswith(TEXT_SUFFIXES))


# expected-counts.json counted the HTML lines "... 50260.929925: 0: C|124|VSYNC|1" as an event
# named "0". They are trace_marker writes printed by old 2.6/3.x kernels (the print event's ip was 0);
# the reader names them tracing_mark_write (test_old_marker_event_0_lines proves it on the lines).
CORRECTED = {
    "catapult/counter_tracks.html": {"tracing_mark_write": 1611},
    "catapult/trivial_systrace.html": {"tracing_mark_write": 4},
    # line 17 is a sched_switch cut after prev_pid (the upstream file has it so): it lacks the fields the canonical
    # table needs, so it is an import error (missing_field), not an event (test_line_without_canonical_fields)
    "trappy/trace_idle_unsorted.txt": {"cpu_idle": 8, "sched_switch": 6},
}


def _raw(path: Path):
    data = path.read_bytes()
    return ftrace_text.read(path, data, detect_format(data[:8192]))


def _line(path: Path, needle: str) -> str:
    """The single line of `path` containing `needle` (asserted unique)."""
    hits = [ln for ln in path.read_text(errors="replace").splitlines() if needle in ln]
    assert len(hits) == 1, (needle, hits[:3])
    return hits[0]


def _row(df: pl.DataFrame, ts_ns: int, cpu: int) -> dict:
    rows = df.filter((pl.col("ts") == ts_ns) & (pl.col("cpu") == cpu))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def _ts_ns(line: str) -> int:
    sec, frac = re.search(r"\] (?:\S+ +)?(\d+)\.(\d+):", line).groups()
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0"))


@pytest.mark.parametrize("name", _text_files())
def test_counts_match_expected(traces, name):
    raw, meta = _raw(traces / name)
    got = {ev: df.height for ev, df in raw.items()}
    assert got == CORRECTED.get(name, _expected()[name]["events"])
    for ev, df in raw.items():
        assert df.schema["ts"] == pl.Int64 and df.schema["cpu"] == pl.Int32, ev
        assert df.schema["common_pid"] == pl.Int32 and df.schema["common_comm"] == pl.Utf8, ev
        assert df["ts"].null_count() == 0 and df["common_pid"].null_count() == 0, ev


@pytest.mark.parametrize("name", _text_files())
def test_read_trace_canonical_counts(traces, name):
    """Whole pipeline (detect -> reader -> canonicalize): counts under the canonical names."""
    data = read_trace(traces / name)
    expected: dict[str, int] = {}
    for ev, n in CORRECTED.get(name, _expected()[name]["events"]).items():
        canon = EVENT_ALIASES.get(ev, ev)
        expected[canon] = expected.get(canon, 0) + n
    assert data.meta["events"] == expected
    assert data.meta["start_ns"] is not None and data.meta["start_ns"] <= data.meta["end_ns"]


def test_old_marker_event_0_lines(traces):
    """The "0" events of the catapult HTML files are atrace counter markers (C|pid|name|value)
    written through trace_marker: every such line's payload is a marker, and the reader keeps it
    verbatim as tracing_mark_write buf."""
    for name, n in (("catapult/counter_tracks.html", 1611), ("catapult/trivial_systrace.html", 4)):
        path = traces / name
        lines = [ln for ln in path.read_text().splitlines() if re.search(r"\] \d+\.\d+: 0: ", ln)]
        assert len(lines) == n
        payloads = [re.search(r": 0: (.*?)(?:\\n\\?|\\n\";)?$", ln).group(1) for ln in lines]
        assert all(re.fullmatch(r"C\|\d+\|.+\|-?\d+", p) for p in payloads), payloads[:3]
        raw, meta = _raw(path)
        assert set(raw) == {"tracing_mark_write"}
        df = raw["tracing_mark_write"]
        assert df["buf"].to_list() == payloads
        first = lines[0]
        assert df.row(0, named=True)["ts"] == _ts_ns(first)
        assert any("event name '0'" in w for w in meta["warnings"])
    first = _row(raw["tracing_mark_write"], 50_260_929_925_000, 0)
    assert (first["common_comm"], first["common_pid"], first["buf"]) == ("hwc_eventmon", 336, "C|124|VSYNC|1")


def test_fields_comm_with_space_and_flags(traces):
    path = traces / "tracecompass/trace-critical-path"
    line = _line(path, "26186.336632: sched_waking")
    assert line.strip().startswith("Web Content-2711  [003] d... 26186.336632:")
    raw, meta = _raw(path)
    row = _row(raw["sched_waking"], _ts_ns(line), 3)
    assert row == {
        "ts": 26_186_336_632_000,
        "cpu": 3,
        "common_pid": 2711,
        "common_comm": "Web Content",
        "comm": "Timer",
        "pid": 2745,
        "prio": 120,
        "target_cpu": 1,
        "common_flags": 0x01,
        "common_preempt_count": 0,
    }  # "d...": irqs off, preempt depth 0
    assert meta["text_columns"] == {"tgid": False, "flags": True, "flags_bits": 0xFF}
    sw = _line(path, "26186.336680: sched_switch")
    row = _row(raw["sched_switch"], _ts_ns(sw), 2)
    assert (row["prev_comm"], row["prev_pid"], row["prev_state"], row["next_comm"], row["next_pid"]) == (
        "kworker/2:0H",
        24678,
        2,
        "gnome-shell",
        1746,
    )  # prev_state=D -> 0x2


def test_payload_values_with_spaces(traces):
    """comm values with spaces in key=value payloads ("comm=Network Thread pid=3481 ...")."""
    path = traces / "tracecompass/trace-critical-path"
    line = _line(path, "26186.337978: sched_waking")
    assert "comm=Network Thread pid=3481" in line
    raw, _ = _raw(path)
    row = _row(raw["sched_waking"], _ts_ns(line), 2)
    assert (row["common_comm"], row["comm"], row["pid"], row["prio"], row["target_cpu"]) == (
        "gnome-shell",
        "Network Thread",
        3481,
        120,
        2,
    )
    names = set(raw["sched_switch"]["prev_comm"]) | set(raw["sched_switch"]["next_comm"])
    assert {"Web Content", "Network Thread"} <= names
    assert raw["sched_switch"]["prev_pid"].dtype == pl.Int64
    path = traces / "tracecompass/trace-android-sched"
    line = _line(path, "prev_comm=POSIX timer 2 prev_pid")
    raw, _ = _raw(path)
    cpu = int(re.search(r"\[(\d+)\]", line).group(1))
    row = _row(raw["sched_switch"], _ts_ns(line), cpu)
    assert (
        row["common_comm"],
        row["common_pid"],
        row["prev_comm"],
        row["prev_pid"],
        row["prev_state"],
        row["next_comm"],
        row["next_pid"],
    ) == ("<...>", 15649, "POSIX timer 2", 15649, 1, "RxComputationSc", 12549)


def test_fields_tgid_column(traces):
    path = traces / "catapult/decompressed_atrace_data.txt"
    raw, meta = _raw(path)
    df = raw["tracing_mark_write"]
    assert meta["text_columns"] == {"tgid": True, "flags": True, "flags_bits": 0xFF}
    assert meta["cpus"] == 6 and meta["lost_events"] == 0
    line = _line(path, "683202.104223: tracing_mark_write: S|13580|deliverInputEvent|263")
    assert line.startswith(" ndroid.systemui-13580 (13580) [001] ...1")
    row = _row(df, 683_202_104_223_000, 1)
    assert row["common_comm"] == "ndroid.systemui" and row["common_pid"] == 13580 and row["common_tgid"] == 13580
    assert row["buf"] == "S|13580|deliverInputEvent|263"
    assert (row["common_flags"], row["common_preempt_count"]) == (0, 1)  # "...1"
    row = _row(df, 683_202_104_223_000, 0)  # "<...>-18926 (-----) [000]": unknown tgid
    assert (row["common_comm"], row["common_pid"], row["common_tgid"]) == ("<...>", 18926, None)
    assert df.schema["common_tgid"] == pl.Int32


def test_fields_comm_with_dash_digits(traces):
    raw, _ = _raw(traces / "catapult/android_systrace.txt")
    line = _line(traces / "catapult/android_systrace.txt", "50260.766705: sched_switch")
    assert line.startswith(" irq/409-inv_irq-99    [000] 50260.766705:")
    row = _row(raw["sched_switch"], 50_260_766_705_000, 0)
    assert (
        row["common_comm"],
        row["common_pid"],
        row["prev_comm"],
        row["prev_prio"],
        row["prev_state"],
        row["next_comm"],
        row["next_pid"],
    ) == ("irq/409-inv_irq", 99, "irq/409-inv_irq", 49, 2, "WebViewCoreThre", 11043)
    raw, _ = _raw(traces / "tracecompass/trace-android-sched-irq-syscall")
    df = raw["sys_enter"].filter(pl.col("common_comm") == "Binder:2030_3")
    assert df.height > 0 and set(df["common_pid"]) == {2053}
    row = _row(raw["sys_enter"], 652_762_396_000, 1)
    assert row["buf"] == "NR 172 (29, c350, 805, ffffffff, 81, a508c6e8)"  # no key=value: kept as text


def test_prev_state_letters_and_numbers(traces):
    raw, _ = _raw(traces / "trappy/trace_legacy_systrace.html")
    sw = raw["sched_switch"].sort("ts")
    # prev_state=R+ (preempted) -> 0x100, S -> 0x1 (kernel >= 4.14 encoding)
    assert sw["prev_state"].to_list() == [0x100, 0x1, 0x100]
    raw, _ = _raw(traces / "lisa/trace_txt-trace.txt")
    states = raw["sched_switch"]["prev_state"]
    assert states.dtype == pl.Int64 and {0, 1, 64, 4096} <= set(states.to_list())  # numeric, as printed


def test_field_typing_units_prefix_and_collisions(traces):
    raw, _ = _raw(traces / "trappy/trace_empty.txt")
    row = raw["sched_stat_runtime"].row(0, named=True)  # runtime=7778999 [ns] vruntime=6087430069 [ns]
    assert (row["comm"], row["pid"], row["runtime"], row["vruntime"]) == ("trace-cmd", 2461, 7778999, 6087430069)
    raw, _ = _raw(traces / "trappy/trace_common_clk.txt")
    row = raw["clock_set_rate"].row(0, named=True)  # "video_subcore0_clk_src state=200000000 cpu_id=7"
    assert (row["buf"], row["state"], row["cpu_id"], row["cpu"]) == ("video_subcore0_clk_src", 200000000, 7, 7)
    raw, _ = _raw(traces / "trappy/trace_sched.txt")
    row = raw["sched_load_avg_cpu"].row(0, named=True)  # "sshd-2962 [000] ...: cpu=0 load=13 utilization=18"
    assert (row["cpu"], row["field_cpu"], row["load"], row["utilization"]) == (0, 0, 13, 18)
    row = raw["sched_load_avg_sg"].row(0, named=True)  # "cpus=00000002 load=0 utilization=0": a hex mask
    assert (row["cpus"], row["load"]) == ("00000002", 0)
    raw, _ = _raw(traces / "trappy/trace.txt")
    row = raw["thermal_power_cpu_get_power"].row(0, named=True)
    assert (row["cpus"], row["freq"], row["load"], row["dynamic_power"]) == (
        "00000000,00000006",
        1100000,
        "{24 19}",
        250,
    )
    raw, meta = _raw(traces / "trappy/trace_failed_to_parse.txt")
    row = raw["thermal_power_cpu_get_power"].row(0, named=True)
    assert row["buf"] == "[FAILED TO PARSE]" and row["freq"] == 0x82208  # known numeric field in hex
    assert row["cpumask"] == "ARRAY[0f, 00, 00, 00, 00, 00, 00, 00]"
    assert any("FAILED TO PARSE" in w for w in meta["warnings"])


def test_markers_print_bputs_bprint(traces):
    raw, _ = _raw(traces / "trappy/trace_equals.txt")
    bufs = raw["bputs"]["buf"].to_list()
    assert bufs[1] == "equals_event: my_field=foo=bar" and set(raw["bputs"]["ip"]) == {"0xffff0000080feeb8s"}
    raw, _ = _raw(traces / "lisa/trace_txt-trace.txt")
    row = _row(raw["print"], 76_368_433_000, 5)  # "print: 0xffff00000819ff24s: TRACE_MARKER_START"
    assert (row["common_comm"], row["common_pid"], row["ip"], row["buf"]) == (
        "sh",
        1702,
        "0xffff00000819ff24s",
        "TRACE_MARKER_START",
    )
    raw, _ = _raw(traces / "trappy/trace_dynamic.txt")
    assert raw["bprint"]["buf"][0] == "thermal_gpu_power_get: frequency=420 load=91"


def test_funcgraph_events_and_header_cpus(traces):
    raw, meta = _raw(traces / "tracecompass/trace-func-graph")
    assert meta["cpus"] == 8
    ex = raw["funcgraph_exit"].row(0, named=True)  # func/calltime are addresses/hex: kept as text
    assert ex["func"] == "0xffffffffbaac16a0" and ex["depth"] == 1 and ex["overrun"] == "0x0"


def test_lost_and_overwritten_events_reported(traces):
    raw, meta = _raw(traces / "tracecompass/trace-android-sched-irq")
    line = _line(traces / "tracecompass/trace-android-sched-irq", "entries-in-buffer")
    in_buf, written = map(int, re.search(r"(\d+)/(\d+)", line).groups())
    assert meta["lost_events"] == written - in_buf == 154150
    assert any("overwritten" in w for w in meta["warnings"])
    # the shared file is a 139-event excerpt of a 69657-entry buffer: said so, not presented as complete
    assert sum(df.height for df in raw.values()) == 139 < in_buf
    assert any("truncated or filtered copy" in w for w in meta["warnings"])
    _, meta = _raw(traces / "catapult/atrace_data")  # 116/116 in the header, 116 events in the file
    assert not any("truncated" in w for w in meta["warnings"]) and meta["lost_events"] == 0


def test_lost_event_lines_counted_per_cpu(traces, tmp_path):
    """tracefs 'CPU:N [LOST M EVENTS]' and trace-cmd 'CPU:N [M EVENTS DROPPED]' lines inserted
    between the real lines of a shared trace (a stand-in: no shared trace carries them)."""
    lines = (traces / "trappy/trace_idle_unsorted.txt").read_text().splitlines()
    lines.insert(5, "CPU:6 [LOST 120 EVENTS]")
    lines.insert(9, "CPU:5 [LOST 3 EVENTS]")
    lines.insert(12, "CPU:6 [7 EVENTS DROPPED]")
    path = tmp_path / "lost.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["lost_events_per_cpu"] == {"5": 3, "6": 127}  # keys as meta.json (the cache) gives them
    assert data.meta["lost_events"] == 130
    assert data.meta["lost_events_exact"] is True
    assert data.meta["events"] == {"cpu_idle": 8, "sched_switch": 6}  # + 1 cut sched_switch: missing_field
    # trace-cmd's marker for a page that lost events without room for their count: 1, a lower bound
    # (as the trace.dat reader counts that page; tests/test_live_all_events.py checks both on a real file)
    lines.insert(14, "CPU:5 [EVENTS DROPPED]")
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["lost_events_per_cpu"] == {"5": 4, "6": 127}
    assert data.meta["lost_events"] == 131
    assert data.meta["lost_events_exact"] is False
    assert any("lower bound" in w for w in data.meta["warnings"])


def test_atrace_z_inflates_to_decompressed_twin(traces):
    raw_z, meta_z = _raw(traces / "catapult/compressed_atrace_data.txt")
    raw_t, _ = _raw(traces / "catapult/decompressed_atrace_data.txt")
    assert meta_z["format"] == "atrace-z" and meta_z["inflated_size"] == 98550
    assert raw_z["tracing_mark_write"].equals(raw_t["tracing_mark_write"])
    # the catapult file carries 17600 bytes after the zlib stream's end: reported, not silently dropped
    assert any("after the atrace -z zlib stream" in w for w in meta_z["warnings"])


@pytest.mark.parametrize("preamble", [b"", b"capturing trace... done\n"])
def test_atrace_preamble(traces, tmp_path, preamble):
    body = (traces / "catapult/atrace_data").read_bytes()
    path = tmp_path / "atrace.txt"
    path.write_bytes(preamble + b"TRACE:\n" + body)
    data = read_trace(path)
    assert data.meta["format"] == "atrace"
    assert data.meta["events"] == {"sched_switch": 72, "sched_wakeup": 44}
    zpath = tmp_path / "atrace_z.txt"  # atrace -z with the same preamble
    zpath.write_bytes(preamble + (traces / "catapult/compressed_atrace_data.txt").read_bytes())
    zdata = read_trace(zpath)
    assert zdata.meta["format"] == "atrace-z" and zdata.meta["events"] == {"tracing_mark_write": 1042}


def test_systrace_html_blocks(traces):
    raw, meta = _raw(traces / "tracecompass/android_trace.html")
    assert meta["html_blocks"] == {"ftrace": 1, "skipped": 0}
    raw, meta = _raw(traces / "trappy/trace_systrace.html")
    row = _row(raw["sched_wakeup"], 514_769_086_417_000, 0)
    assert (row["common_comm"], row["common_pid"], row["common_tgid"], row["comm"], row["state"]) == (
        "Binder_4",
        280,
        184,
        "Binder_5",
        "W|m",
    )


@pytest.fixture(scope="module")
def tracecmd_reports(tmp_path_factory):
    """trace-cmd report of a real trace.dat: plugin-formatted, -R raw, and -t (ns) text."""
    from tests.conftest import TRACES

    dat = TRACES / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    out = tmp_path_factory.mktemp("tracecmd")
    paths = {}
    for name, args in (("plugin", []), ("raw", ["-R"]), ("ns", ["-t"]), ("latency", ["-l"])):
        paths[name] = out / f"{name}.txt"
        with open(paths[name], "wb") as f:
            subprocess.run(["trace-cmd", "report", *args, str(dat)], stdout=f, check=True, timeout=120)
    return paths


@pytest.mark.parametrize("kind", ["plugin", "raw", "ns", "latency"])
def test_tracecmd_report_counts(tracecmd_reports, kind):
    raw, meta = _raw(tracecmd_reports[kind])
    expected = _expected()["x86-vm/x86-menu-hackbench-cyclictest.dat"]["events"]
    assert {k: v.height for k, v in raw.items()} == expected
    assert meta["cpus"] == 2 and meta["lost_events"] == 0


def test_tracecmd_plugin_fields_equal_raw(tracecmd_reports):
    """Plugin text (comm:pid [prio] S ==> ...) decodes to the same values as -R text, except the
    preempt bit 0x100 that the plugin prints as plain R (documented loss)."""
    plugin, _ = _raw(tracecmd_reports["plugin"])
    raw, _ = _raw(tracecmd_reports["raw"])
    for ev in (
        "sched_switch",
        "sched_wakeup",
        "sched_waking",
        "sched_wakeup_new",
        "sched_migrate_task",
        "cpu_idle",
        "print",
    ):
        a, b = plugin[ev], raw[ev]
        assert a.columns == b.columns, ev
        if ev != "sched_switch":
            assert a.equals(b), ev
    a, b = plugin["sched_switch"], raw["sched_switch"]
    assert a.drop("prev_state").equals(b.drop("prev_state"))
    diff = pl.DataFrame({"plugin": a["prev_state"], "raw": b["prev_state"]}).filter(pl.col("plugin") != pl.col("raw"))
    assert diff.height == 12 and set(diff.rows()) == {(0, 256)}
    assert set(b["prev_state"].unique()) == {0, 1, 2, 16, 32, 128, 256}
    miss_p, miss_r = plugin["cpu_idle_miss"], raw["cpu_idle_miss"]
    assert miss_p["type"].to_list() == ["below" if x else "above" for x in miss_r["below"].to_list()]
    # a comm with a colon and a dash in the plugin format: "memfd:sealed-91:1802 [120] CPU:001"
    row = _row(plugin["sched_wakeup"], 1_792_658_151_000, 1)
    assert (row["comm"], row["pid"], row["prio"], row["target_cpu"]) == ("memfd:sealed-91", 1802, 120, 1)


def test_tracecmd_latency_format(tracecmd_reports):
    """-l prints CPU and flags run together ("0d..1.") and cuts comms to 8 characters."""
    lat, meta = _raw(tracecmd_reports["latency"])
    plain, _ = _raw(tracecmd_reports["plugin"])
    assert meta["text_columns"]["flags"]
    for ev, df in plain.items():
        # the decoded flags columns are checked against the binary fields in tests/test_text_flags.py
        assert lat[ev].drop("common_comm", "common_flags", "common_preempt_count").equals(df.drop("common_comm")), ev
        assert (df["common_comm"].str.slice(0, 8) == lat[ev]["common_comm"]).all(), ev


def test_tracecmd_nanosecond_timestamps(tracecmd_reports):
    """-t prints 9 fraction digits: ts is exact ns; the default text rounds to the nearest us."""
    ns, _ = _raw(tracecmd_reports["ns"])
    us, _ = _raw(tracecmd_reports["plugin"])
    line = next(ln for ln in tracecmd_reports["ns"].read_text().splitlines() if " print: " in ln)
    stamp = re.search(r"(\d+\.\d{9}):", line).group(1)
    assert ns["print"]["ts"][0] == int(stamp.replace(".", ""))
    a, b = ns["sched_switch"]["ts"], us["sched_switch"]["ts"]
    assert (((a + 500) // 1000) * 1000 == b).all() and (a % 1000 != 0).any()


@pytest.mark.parametrize("name", sorted(n for n in _expected() if n.endswith(".dat")))
def test_tracecmd_report_text_of_every_trace_dat(traces, tmp_path, name):
    """`trace-cmd report` text of every shared trace.dat (v6/v7, 32/64-bit, zstd) gives its counts."""
    out = tmp_path / "report.txt"
    with open(out, "wb") as f:
        subprocess.run(["trace-cmd", "report", str(traces / name)], stdout=f, check=True, timeout=120)
    raw, meta = _raw(out)
    assert {k: v.height for k, v in raw.items()} == _expected()[name]["events"]
    assert meta["cpus"] == int(out.read_text().split("\n", 1)[0].removeprefix("cpus="))


def test_tracecmd_report_old_header(traces):
    """Older trace-cmd printed 'version = 6', 'CPU N is empty', 'cpus=N' before the events."""
    path = traces / "trappy/raw_trace.txt"
    assert path.read_text().splitlines()[:4] == ["version = 6", "CPU 3 is empty", "CPU 4 is empty", "cpus=6"]
    raw, meta = _raw(path)
    assert meta["format_version"] == "6" and meta["cpus"] == 6 and meta["empty_cpus"] == [3, 4]
    row = raw["sched_switch"].row(0, named=True)  # "ls-4734 [002] 106439.675591: ... prev_state=1024"
    assert (
        row["common_comm"],
        row["common_pid"],
        row["cpu"],
        row["ts"],
        row["prev_comm"],
        row["prev_state"],
        row["next_comm"],
        row["next_prio"],
    ) == ("ls", 4734, 2, 106_439_675_591_000, "trace-cmd", 1024, "migration/2", 0)


@pytest.mark.parametrize(
    "name", ["lisa/trace_txt-trace.txt", "catapult/compressed_atrace_data.txt", "trappy/trace_systrace.html"]
)
@pytest.mark.parametrize("wrapper", ["gzip", "zip"])
def test_gzip_and_zip_wrappers(traces, tmp_path, name, wrapper):
    src = traces / name
    if wrapper == "gzip":
        path = tmp_path / (src.name + ".gz")
        path.write_bytes(gzip.compress(src.read_bytes()))
    else:
        path = tmp_path / (src.name + ".zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("README.txt", "not a trace\x00\x01\x02" * 3)
            zf.write(src, arcname=src.name)
    wrapped = read_trace(path)
    plain = read_trace(src)
    assert wrapped.meta["events"] == plain.meta["events"]
    assert wrapped.meta["wrapper"].startswith(wrapper)
    for name_, df in plain.tables.items():
        assert wrapped.tables[name_].equals(df)


LIVE_EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking")


@pytest.mark.tracefs
def test_live_tracefs_text_equals_trace_cmd_extract(tracefs_lock, tmp_path):
    """Real tracefs `trace` text (TGID + flags columns, kernel-format prev_state letters) recorded on
    this machine in a private tracefs instance, against `trace-cmd report -R` of the same buffer
    extracted with `trace-cmd extract`: same events, same fields (prev_state letters -> the
    kernel's integers exactly), timestamps equal to the microsecond the text prints."""
    inst = tracefs_lock / "instances" / f"abtest_text_{os.getpid()}"
    inst.mkdir()
    text_path, dat = tmp_path / "trace.txt", tmp_path / "trace.dat"
    try:
        (inst / "options/record-tgid").write_text("1")
        for ev in LIVE_EVENTS:
            (inst / "events" / ev / "enable").write_text("1")
        (inst / "tracing_on").write_text("1")
        subprocess.run(["hackbench", "-g", "1", "-l", "10"], capture_output=True, timeout=60, check=True)
        (inst / "trace_marker").write_text("abtest live text test")
        (inst / "tracing_on").write_text("0")
        text_path.write_bytes((inst / "trace").read_bytes())
        subprocess.run(
            ["trace-cmd", "extract", "-B", inst.name, "-o", str(dat)], capture_output=True, timeout=120, check=True
        )  # extract also removes the instance
    finally:
        if inst.exists():
            for ev in LIVE_EVENTS:
                (inst / "events" / ev / "enable").write_text("0")
            inst.rmdir()
    report = tmp_path / "report.txt"
    with open(report, "wb") as f:
        subprocess.run(["trace-cmd", "report", "-R", str(dat)], stdout=f, check=True, timeout=120)
    text, meta = _raw(text_path)
    ref, ref_meta = _raw(report)
    assert meta["text_columns"] == {"tgid": True, "flags": True, "flags_bits": 0xFF} and meta["lost_events"] == 0
    assert ref_meta["instances"] == [inst.name]
    assert {k: v.height for k, v in text.items() if k != "tracing_mark_write"} == {
        k: v.height for k, v in ref.items() if k != "print"
    }
    assert text["sched_switch"].height > 50
    assert text["tracing_mark_write"]["buf"].to_list() == ref["print"]["buf"].to_list() == ["abtest live text test"]
    for ev in ("sched_switch", "sched_wakeup", "sched_waking"):
        a = text[ev].drop("common_tgid", "common_flags", "common_preempt_count")  # flags: tests/test_text_flags.py
        # both the kernel's `trace` file and trace-cmd print ns rounded to the nearest us; trace-cmd
        # sometimes prints the raw ns count for instance buffers: round it the same way
        b = ref[ev].drop("instance").with_columns((pl.col("ts") + 500) // 1000 * 1000)
        assert a.columns == b.columns, ev
        # the task's comm comes from the kernel's small saved_cmdlines cache, read at two different
        # moments (when `trace` is read, when trace-cmd extracts): it may be "<...>" in one of them
        assert a.drop("common_comm").equals(b.drop("common_comm")), ev
        known = (a["common_comm"] != "<...>") & (b["common_comm"] != "<...>")
        assert known.sum() > 0 and (a["common_comm"].filter(known) == b["common_comm"].filter(known)).all(), ev
    assert text["sched_switch"]["common_tgid"].null_count() < text["sched_switch"].height


@pytest.mark.tracefs
def test_live_tracefs_stack_traces(tracefs_lock, tmp_path):
    """options/stacktrace: each event is followed by '<stack trace>' and ' => symbol' lines. The
    frames land in kernel_stack.buf, one symbol per line, identical to trace-cmd's own decoding."""
    inst = tracefs_lock / "instances" / f"abtest_stack_{os.getpid()}"
    inst.mkdir()
    text_path, dat = tmp_path / "trace.txt", tmp_path / "trace.dat"
    wakeup = inst / "events/sched/sched_wakeup/enable"
    try:
        (inst / "options/stacktrace").write_text("1")
        wakeup.write_text("1")
        (inst / "tracing_on").write_text("1")
        subprocess.run(["hackbench", "-g", "1", "-l", "2"], capture_output=True, timeout=60, check=True)
        (inst / "tracing_on").write_text("0")
        text_path.write_bytes((inst / "trace").read_bytes())
        subprocess.run(
            ["trace-cmd", "extract", "-B", inst.name, "-o", str(dat)], capture_output=True, timeout=120, check=True
        )
    finally:
        if inst.exists():
            wakeup.write_text("0")
            (inst / "options/stacktrace").write_text("0")
            inst.rmdir()
    report = tmp_path / "report.txt"
    with open(report, "wb") as f:
        subprocess.run(["trace-cmd", "report", str(dat)], stdout=f, check=True, timeout=120)
    assert " => " in text_path.read_text() and "<stack trace>" in text_path.read_text()
    text, _ = _raw(text_path)
    ref, _ = _raw(report)
    # (the kernel may skip a stack trace, e.g. when its per-CPU stack buffers are all in use)
    assert text["kernel_stack"].height == ref["kernel_stack"].height > 0
    assert text["sched_wakeup"].height == ref["sched_wakeup"].height >= text["kernel_stack"].height
    frames_text = text["kernel_stack"]["buf"]
    frames_ref = ref["kernel_stack"]["buf"].str.replace_all(r" \([0-9a-f]+\)", "")  # "sym (ffffffff8139c42c)"
    assert frames_text.equals(frames_ref)
    assert frames_text.str.contains("sched_wakeup", literal=True).all()  # the tracepoint frame
    assert "stack" not in text["sched_wakeup"].columns


def test_text_reader_agrees_with_trace_dat_reader(traces, tmp_path):
    """Cross-reader check: `trace-cmd report -R -t` text of a trace.dat, through this reader and
    canonicalize(), equals abtest's own trace.dat reader on every shared column (exact ns ts)."""
    from abtest.trace.schema import canonicalize

    dat = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    out = tmp_path / "report.txt"
    with open(out, "wb") as f:
        subprocess.run(["trace-cmd", "report", "-R", "-t", str(dat)], stdout=f, check=True, timeout=120)
    raw, meta = _raw(out)
    from_text = canonicalize(raw, meta)
    from_dat = read_trace(dat).tables
    for ev in (
        "sched_switch",
        "sched_wakeup",
        "sched_waking",
        "sched_wakeup_new",
        "sched_migrate_task",
        "cpu_idle",
        "cpu_idle_miss",
        "marker",
    ):
        a, b = from_dat[ev], from_text[ev]
        cols = [c for c in a.columns if c in b.columns]
        assert {"ts", "cpu"} <= set(cols) and len(cols) >= 4, (ev, a.columns, b.columns)
        as_text = [pl.col(pl.Categorical).cast(pl.Utf8)]
        assert a.select(cols).with_columns(as_text).equals(b.select(cols).with_columns(as_text)), ev


def test_kernel_syscall_line_forms(tmp_path):
    """The kernel prints syscall events without an `EVENT:` name (kernel/trace/trace_syscalls.c). The
    lines below are copied from tracefs `trace` text recorded on this machine with every event on
    (tests/test_live_all_events.py reads whole such files)."""
    path = tmp_path / "syscalls.txt"
    path.write_text(
        "# tracer: nop\n#\n# entries-in-buffer/entries-written: 5/5   #P:2\n#\n"
        "       hackbench-3008    [000] ..... 55060.726663: sys_read -> 0x64\n"
        "       hackbench-3008    [000] ..... 55060.726669: sys_read(fd: 7, buf: 0x7fffb4c35680, count: 0x64)\n"
        "       hackbench-3008    [000] ..... 55060.726793: sys_exit_group(error_code: 0)\n"
        "       hackbench-2681    [000] ..... 55060.731749: sys_wait4 -> 0xa8f\n"
        "          python-2565    [000] ..... 55060.757724: sys_vfork()\n"
    )
    data = read_trace(path)
    assert data.meta["events"] == {
        "sys_enter_exit_group": 1,
        "sys_enter_read": 1,
        "sys_enter_vfork": 1,
        "sys_exit_read": 1,
        "sys_exit_wait4": 1,
    }
    enter = data.tables["sys_enter_read"].row(0, named=True)
    assert (enter["fd"], enter["count"], enter["ts"]) == (7, "0x64", 55060726669000)
    assert data.tables["sys_exit_wait4"]["ret"].to_list() == ["0xa8f"]
    assert data.tables["sys_enter_exit_group"]["error_code"].to_list() == [0]


def test_multi_line_kernel_messages(tmp_path):
    """A newline inside a printk message or a trace_marker write continues the event on the next lines of the
    kernel's text (lines as tracefs printed them on this machine): joined to it and counted (such a line may as
    well be damage). An unrecognised line after any other event is an import error (counted with its line),
    and the events are kept."""
    head = "# tracer: nop\n#\n"
    path = tmp_path / "multi.txt"
    path.write_text(
        head + "              sh-1670    [001] d.... 57952.875240: console: abtest console test one\n"
        "              sh-1670    [001] d.... 57952.875267: console: two\nlines\nand three\n"
        "              sh-1671    [000] ..... 57952.875300: tracing_mark_write: abtest marker\n gid=4\n"
        "              sh-1671    [000] d..2. 57952.875400: sched_switch: prev_comm=sh prev_pid=1671 prev_prio=120 "
        "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n"
    )
    data = read_trace(path)
    assert data.tables["console"]["buf"].to_list() == ["abtest console test one", "two\nlines\nand three"]
    assert data.tables["marker"]["text"].to_list() == ["abtest marker\n gid=4"]
    assert data.meta["events"]["sched_switch"] == 1
    assert any("continue the text" in w for w in data.meta["warnings"])
    assert list(data.meta["import_errors"]) == ["continuation_line"]  # joined, and counted: it may be damage
    assert [ex["line"] for ex in data.meta["import_errors"]["continuation_line"]["examples"]] == [5, 6, 8]
    bad = tmp_path / "bad.txt"
    switch = (
        "sched_switch: prev_comm=sh prev_pid=1671 prev_prio=120 prev_state=S ==> next_comm=swapper/0 "
        "next_pid=0 next_prio=120"
    )
    bad.write_text(
        head + f"              sh-1671    [000] d..2. 57952.875400: {switch}\ngarbage here\n"
        f"              sh-1671    [000] d..2. 57952.875500: {switch}\n"
    )
    data = read_trace(bad)
    assert data.meta["events"] == {"sched_switch": 2}
    assert data.meta["import_errors"]["unrecognised_line"]["count"] == 1
    example = data.meta["import_errors"]["unrecognised_line"]["examples"][0]
    assert (example["line"], example["text"]) == (4, "garbage here")


def test_event_cpu_field_followed_by_text(tmp_path):
    """An event's own `cpu` field followed by text that is not `key=value` (cgroup_rstat_locked prints
    "cpu=%d lock contended:%d"): the rows are events with the leading number as their `cpu`, placed by the
    ring buffer's CPU (`buffer_cpu`), never import errors. Lines copied from `trace-cmd report` (3.1.6) of a
    recording on this machine (kernel 6.18, events cgroup:cgroup_rstat_locked/unlock, `cat */cpu.stat`); the
    last line is the same form with cpu=-1 (the event's "no CPU"), which the kernel prints for a whole-tree
    flush."""
    path = tmp_path / "rstat.txt"
    path.write_text(
        "cpus=2\n"
        "             cat-18119 [000]11926025161808: cgroup_rstat_locked:  root=4 id=1 level=0 cpu=0 lock contended:0\n"
        "             cat-18119 [000]11926025172540: cgroup_rstat_unlock:  root=4 id=1 level=0 cpu=0 lock contended:0\n"
        "             cat-18119 [000]11926025172680: cgroup_rstat_locked:  root=4 id=1 level=0 cpu=1 lock contended:0\n"
        "            cat-18119 [001]11926025175238: cgroup_rstat_unlock:  root=4 id=1 level=0 cpu=-1 lock contended:1\n"
    )
    data = read_trace(path)
    assert data.meta["events"] == {"cgroup_rstat_locked": 2, "cgroup_rstat_unlock": 2}
    assert "import_errors" not in data.meta or not data.meta["import_errors"]
    unlock = data.tables["cgroup_rstat_unlock"]
    assert unlock["cpu"].to_list() == [0, -1]
    assert unlock["buffer_cpu"].to_list() == [0, 1]
    assert data.tables["cgroup_rstat_locked"]["cpu"].to_list() == [0, 1]
