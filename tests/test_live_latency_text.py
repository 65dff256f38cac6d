"""The kernel's latency-format text (tracefs `options/latency-format` = 1), recorded live: the same ring buffer
read as tracefs `trace` text in the default form and in the latency form, and extracted as trace.dat.

The latency form prints `comm-pid  CPUflags  TIMEus+: event: fields` with the comm cut to 8 characters and
the time in microseconds since the ring buffer's start. Its tables must equal the default text's (fields,
CPU, pid, flags), the comm must be the first 8 characters, and the times must keep the same spacing
(both are rounded to the microsecond). Counts equal the trace.dat's; the header's CPU count and entries are
read. The tracefs lock is held and every switch restored."""

from __future__ import annotations

import subprocess

import polars as pl

from abtest.trace import tracedat
from abtest.trace.readers import read_trace

EVENTS = ["sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking", "power/cpu_idle"]


def test_kernel_latency_format_text(tracefs_lock, tmp_path):
    fs = tracefs_lock
    option = fs / "options" / "latency-format"
    saved_option = option.read_text().strip()
    saved_kb = (fs / "buffer_size_kb").read_text().split()[0]  # the machine's default may be a few KiB
    default_txt, latency_txt, dat = tmp_path / "default.txt", tmp_path / "latency.txt", tmp_path / "same.dat"
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text("4096")
        for e in EVENTS:
            (fs / "events" / e / "enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        subprocess.run(["hackbench", "-l", "20"], check=True, capture_output=True, timeout=120)
        (fs / "tracing_on").write_text("0")
        option.write_text("0")
        default_txt.write_text((fs / "trace").read_text())
        option.write_text("1")
        latency_txt.write_text((fs / "trace").read_text())
        option.write_text(saved_option)
        subprocess.run(["trace-cmd", "extract", "-o", str(dat)], check=True, capture_output=True, timeout=120)
    finally:
        option.write_text(saved_option)
        (fs / "tracing_on").write_text("0")
        for e in EVENTS:
            (fs / "events" / e / "enable").write_text("0")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text(saved_kb)

    assert "latency trace v" in latency_txt.read_text()[:400]
    lat, plain = read_trace(latency_txt), read_trace(default_txt)
    raw, dat_meta = tracedat.read(dat, dat.read_bytes())
    assert lat.meta["events"] == plain.meta["events"] == {n: df.height for n, df in raw.items()}
    assert lat.meta["events"].get("sched_switch", 0) > 100
    assert lat.meta["cpus"] == plain.meta["cpus"] == dat_meta["cpus"]
    assert lat.meta["entries_in_buffer"] == plain.meta["entries_in_buffer"] == sum(lat.meta["events"].values())
    assert lat.meta["time_origin"] == "buffer start" and "time_origin" not in plain.meta
    assert any("latency format" in w for w in lat.meta["warnings"])
    for name, want in plain.tables.items():
        got = lat.tables[name]
        assert got.columns == want.columns, name
        assert "common_flags" in got.columns and got["common_flags"].null_count() == 0, name
        # every field, the CPU, pid and flags (the kernel's letters, all bits) as in the default form
        assert got.drop("ts", "common_comm").equals(want.drop("ts", "common_comm")), name
        assert got["common_comm"].cast(pl.String).equals(want["common_comm"].cast(pl.String).str.slice(0, 8)), name
    # the same spacing of events in time, each form rounded to the microsecond on its own
    ts_lat = pl.concat([t.select("ts") for t in lat.tables.values()])["ts"].sort()
    ts_plain = pl.concat([t.select("ts") for t in plain.tables.values()])["ts"].sort()
    shift = ts_plain - ts_lat
    assert shift.max() - shift.min() <= 1000, (shift.min(), shift.max())
    assert ts_lat.min() >= 0 and ts_lat.max() < ts_plain.min()
