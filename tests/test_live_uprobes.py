"""Dynamic events recorded live: uprobes (tracefs `uprobe_events`) on the C library's open64, an entry
probe fetching arguments of several types (a user-space string, x32, s16 at an odd offset, u64) and a
return probe, with sched_switch alongside. The event formats exist only while the probes do, with
fields `__probe_ip` / `__probe_func` / `__probe_ret_ip` and packed, unaligned fetch-args. Every value
must equal `trace-cmd report -R -t` of the same file; the paths opened by the workload must appear.
The probes are removed and every tracefs switch restored, also on failure (kprobes are not available
on this machine's kernel; uprobes are)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import polars as pl
import tracedat_ref as ref

from abtest.trace import tracedat
from abtest.trace.readers import read_trace


def _file_offset(symbol: str) -> tuple[str, int]:
    """(shared object path, file offset) of a libc function in this process, from /proc/self/maps."""
    addr = ctypes.cast(getattr(ctypes.CDLL(None), symbol), ctypes.c_void_p).value
    for line in open("/proc/self/maps"):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= addr < hi and len(parts) >= 6:
            return parts[5], addr - lo + int(parts[2], 16)
    raise AssertionError(f"{symbol} at {addr:#x} is in no mapping of this process")


def _probe_command(probes, line: str) -> None:
    """Append one definition (or `-:name` removal) to uprobe_events (O_APPEND; tracefs files do not seek)."""
    fd = os.open(probes, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def test_uprobe_events_decode_as_trace_cmd_reports_them(tracefs_lock, tmp_path):
    fs = tracefs_lock
    lib, off = _file_offset("open64")
    entry, ret = "abtest_up_open", "abtest_up_ret"
    probes = fs / "uprobe_events"
    out = tmp_path / "uprobes.dat"
    opened = tmp_path / "opened-by-the-workload"
    opened.write_text("x")
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        _probe_command(probes, f"p:{entry} {lib}:{off:#x} path=+0(%di):string flags=%si:x32 mode=%dx:s16 raw=%di:u64")
        _probe_command(probes, f"r:{ret} {lib}:{off:#x} ret=$retval:s32")
        (fs / "events/uprobes" / entry / "enable").write_text("1")
        (fs / "events/uprobes" / ret / "enable").write_text("1")
        (fs / "events/sched/sched_switch/enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        subprocess.run(["ls", "-R", "/usr/lib/python3"], capture_output=True, timeout=60)
        subprocess.run([sys.executable, "-c", f"open({str(opened)!r}).read()"], check=True, timeout=60)
        (fs / "tracing_on").write_text("0")
        subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True, capture_output=True, timeout=120)
    finally:
        (fs / "tracing_on").write_text("0")
        for name in (entry, ret):
            if (fs / "events/uprobes" / name).exists():
                (fs / "events/uprobes" / name / "enable").write_text("0")
        (fs / "events/sched/sched_switch/enable").write_text("0")
        for name in (entry, ret):
            if (fs / "events/uprobes" / name).exists():
                _probe_command(probes, f"-:{name}")
        (fs / "trace").write_text("")
    assert entry not in probes.read_text()

    data = out.read_bytes()
    raw, meta = tracedat.read(out, data)
    assert raw[entry].height > 10 and raw[ret].height > 10
    schema = raw[entry].schema
    assert (schema["__probe_ip"], schema["path"], schema["flags"], schema["mode"], schema["raw"]) == (
        pl.UInt64,
        pl.String,
        pl.UInt32,
        pl.Int16,
        pl.UInt64,
    )
    assert raw[ret].schema["ret"] == pl.Int32 and (raw[ret]["ret"] >= -1).all()
    # the workload's own open of `opened`: its process's entries and returns pair up (other processes
    # may be caught mid-call when tracing starts or stops)
    mine = raw[entry].filter(pl.col("path") == str(opened))
    assert mine.height == 1
    pid = mine["common_pid"][0]
    calls, returns = raw[entry].filter(pl.col("common_pid") == pid), raw[ret].filter(pl.col("common_pid") == pid)
    assert calls.height == returns.height and (calls["__probe_ip"] == returns["__probe_func"]).all()
    assert (returns["ts"] > calls["ts"]).all()
    checked = ref.compare_fields_as_printed(raw, str(out), *ref.printk_and_symbols(out))
    assert checked["events"] == sum(df.height for df in raw.values())
    assert read_trace(out).meta["events"] == {ev: len(rows) for ev, rows in ref.events(str(out)).items()}
