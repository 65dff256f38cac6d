"""User-space markers recorded live: text writes to tracefs `trace_marker` (ftrace `print`) and binary writes
to `trace_marker_raw` (ftrace `raw_data`: a u32 id, then the bytes, declared `char buf[]`). The binary
payload must come out as bytes (not text cut at the first NUL): the record's tail, as `trace-cmd report`
prints it (`# 3e8 00 01 ...`), i.e. the bytes written plus the record's alignment padding to 4 bytes (the
kernel stores no length; the padding holds whatever the page held). Both decode paths must agree, and the
text reader must give the same id and bytes from the kernel's text and from trace-cmd report's. The tracefs lock is held
and every switch restored."""

from __future__ import annotations

import os
import re
import struct
import subprocess

import polars as pl
import tracedat_ref as ref

from abtest.trace import tracedat
from abtest.trace.readers import read_trace

PAYLOADS = [bytes(range(i, i + n)) for i, n in ((0, 1), (1, 4), (2, 7), (0, 13), (250, 3), (9, 30))]


def _write(path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_text_and_binary_markers(tracefs_lock, tmp_path):
    fs = tracefs_lock
    out = tmp_path / "markers.dat"
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "events/sched/sched_switch/enable").write_text("1")
        (fs / "tracing_on").write_text("1")
        for i, payload in enumerate(PAYLOADS):
            _write(fs / "trace_marker_raw", struct.pack("<I", 0x3E8 + i) + payload)
        _write(fs / "trace_marker", b"abtest text marker")
        (fs / "tracing_on").write_text("0")
        kernel_txt = tmp_path / "kernel.txt"  # the kernel's own text: "# 3e8 buf: 00 01 ...", no event name
        kernel_txt.write_text((fs / "trace").read_text())
        subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True, capture_output=True, timeout=120)
    finally:
        (fs / "tracing_on").write_text("0")
        (fs / "events/sched/sched_switch/enable").write_text("0")
        (fs / "trace").write_text("")

    raw, _meta = tracedat.read(out, out.read_bytes())
    rd = raw["raw_data"].filter(pl.col("id") >= 0x3E8)
    assert rd.schema["buf"] == pl.Binary
    assert rd["id"].to_list() == [0x3E8 + i for i in range(len(PAYLOADS))]
    for payload, buf in zip(PAYLOADS, rd["buf"].to_list()):
        # the bytes written, then the record's alignment padding (whatever the ring buffer page held there)
        assert buf[: len(payload)] == payload and len(buf) == -(-len(payload) // 4) * 4, (payload, buf)
    # the bytes trace-cmd's raw_data plugin prints for each record
    printed = [
        bytes(int(h, 16) for h in re.findall(r"\b[0-9a-f]{2}\b", rest.split(" ", 2)[2]))
        for _ts, _cpu, _pid, rest in ref.events(str(out), raw=False)["raw_data"]
        if int(rest.split()[1], 16) >= 0x3E8
    ]
    assert printed == rd["buf"].to_list()
    canon = read_trace(out).tables
    assert "abtest text marker" in canon["marker"]["text"].to_list()
    assert canon["raw_data"]["buf"].to_list()[-len(PAYLOADS) :] == rd["buf"].to_list()
    # the same writes as text: the kernel's (`# 3e8 buf: 00 01 ...`) and trace-cmd report's (`raw_data: #
    # 3e8 00 01 ...`) give the same id (UInt32) and bytes (Binary)
    report_txt = tmp_path / "report.txt"
    report_txt.write_text("\n".join(ref.report_lines(str(out), raw=False)) + "\n")
    for text in (kernel_txt, report_txt):
        got = read_trace(text).tables["raw_data"].filter(pl.col("id") >= 0x3E8)
        assert got.schema["id"] == pl.UInt32 and got.schema["buf"] == pl.Binary, text
        assert got.select("id", "buf").equals(rd.select("id", "buf")), text
