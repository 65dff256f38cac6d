"""Hostile or damaged binary traces (issue 27, items 6-9), each made in the test from a shared real trace:

6. a perfetto compressed_packets bomb stops at the inflate limit (abtest.trace.limits) with an error naming
   the file, the block's offset and the limit, and the process stays small;
7. a trace.dat v7 chunk header declaring 0xFFFFFFFF inflated bytes is refused at that header (no 4 GiB
   allocation, also under a memory limit);
8. a malformed size field in the file's first event format and a CPUSTAT option with a non-numeric CPU
   are no longer tracebacks: the trace decodes, the damage is counted and warned about;
9. a ring-buffer page whose timestamp is near 2^63 gives no negative or wrapped timestamps (records beyond
   the int64 range are counted as not imported, the page out of time order is warned about), and a BUFFER
   option naming CPU 0x7fffffff is skipped with a warning instead of producing events on CPU 2147483647.
"""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from pb_writer import ld
from shared_data import TRACES

from abtest.trace import tracedat
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

V6 = TRACES / "lisa" / "sched_load-trace.dat"
V7 = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"


def _cli_info(path: Path, memory_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit():  # in the child only
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit if memory_limit else None,
    )


def _v7_options(data: bytes) -> list[tuple[int, int, int]]:
    """(file offset, id, size) of every option of the (stored) v7 options sections, in file order."""
    pos = data.index(b"\0", 10) + 1 + 2 + 4  # version, endianness, long size, page size
    pos = data.index(b"\0", pos) + 1
    pos = data.index(b"\0", pos) + 1  # compression name, version
    (sec,) = struct.unpack_from("<Q", data, pos)
    out = []
    while sec:
        sec_id, flags, _desc, _size = struct.unpack_from("<HHIQ", data, sec)
        assert (sec_id, flags) == (0, 0), "the options sections of the shared v7 traces are stored"
        pos, sec = sec + 16, 0
        while True:
            opt_id, opt_size = struct.unpack_from("<HI", data, pos)
            out.append((pos, opt_id, opt_size))
            if opt_id == 0:  # DONE: the offset of the next options section (0: none)
                sec = struct.unpack_from("<Q", data, pos + 6)[0] if opt_size >= 8 else 0
                break
            pos += 6 + opt_size
    return out


def test_perfetto_compressed_packets_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    """The Pixel trace followed by a packet whose compressed_packets (zlib) inflate to 256 MiB (~250 KB
    compressed, 1030x): with a 16 MiB limit the error names the file, the block's offset and the limit."""
    real = PIXEL.read_bytes()
    bomb = zlib.compress(bytes(256 << 20), 9)
    p = tmp_path / "bomb.perfetto-trace"
    p.write_bytes(real + ld(1, ld(50, bomb)))
    monkeypatch.setenv("ABTEST_MAX_INFLATED_BYTES", str(16 << 20))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    e = str(ei.value)
    assert str(p) in e and "inflates beyond 16777216 bytes" in e and "compressed_packets" in e
    assert len(real) < ei.value.offset < len(real) + 16  # the block, right after the real packets


def test_perfetto_bomb_under_default_limits_keeps_the_process_small(tmp_path):
    """Default limits (ratio 250 x compressed size, floor 64 MiB): the CLI exits 2 naming the limit, and the
    child's peak RSS stays far below the 256 MiB the block would inflate to (it reached 1.2 GB before)."""
    p = tmp_path / "bomb.perfetto-trace"
    p.write_bytes(PIXEL.read_bytes() + ld(1, ld(50, zlib.compress(bytes(256 << 20), 9))))
    r = _cli_info(p)
    assert r.returncode == 2, r.stderr
    assert "inflates beyond 67108864 bytes" in r.stderr and str(p) in r.stderr
    child = (
        "import sys\nfrom abtest.trace.errors import TraceFormatError\nfrom abtest.trace.readers import read_trace\n"
        "try:\n    read_trace(sys.argv[1])\nexcept TraceFormatError:\n    pass\n"
        "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')))"
    )
    out = subprocess.run([sys.executable, "-c", child, str(p)], capture_output=True, text=True, timeout=300, check=True)
    peak_mb = int(out.stdout.split()[-1]) / 1024
    assert peak_mb < 400, peak_mb


def test_v7_chunk_declaring_4_gib_is_refused_at_its_header(tmp_path):
    data = bytearray(V7.read_bytes())
    lay = tracedat.layout(V7, bytes(data))
    chunk_offset = lay["buffers"][0]["cpus"][0]["chunks"][3][0]
    header = chunk_offset - 8
    struct.pack_into("<I", data, header + 4, 0xFFFF_FFFF)  # the chunk's inflated size
    p = tmp_path / "chunk-4gib.dat"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert ei.value.offset == header
    assert "declares 4294967295 inflated bytes" in str(ei.value) and "limit" in str(ei.value)
    # a child limited to 2 GiB of address space gets the same clear error (exit 2), not an abort
    r = _cli_info(p, memory_limit=2 << 30)
    assert r.returncode == 2 and "declares 4294967295 inflated bytes" in r.stderr, r.stderr[-2000:]


def test_malformed_size_in_the_first_event_format(tmp_path):
    """The first format of the file (ftrace's first event) with `size:2` made `size:z`: it no longer parses;
    the common fields come from the next format, every table decodes as before."""
    data = V6.read_bytes()
    first = data.index(b"\tfield:unsigned short common_type;\toffset:0;\tsize:2;")
    bad = bytearray(data)
    at = data.index(b"size:2;", first)
    bad[at + 5] = ord("z")
    p = tmp_path / "bad-format-size.dat"
    p.write_bytes(bytes(bad))
    got, want = read_trace(p), read_trace(V6)
    assert got.meta["events"] == want.meta["events"]
    for name, df in want.tables.items():
        assert got.tables[name].equals(df), name
    assert _cli_info(p).returncode == 0


def test_cpustat_with_a_non_numeric_cpu(tmp_path):
    data = bytearray(V7.read_bytes())
    stats = [(at, size) for at, opt_id, size in _v7_options(bytes(data)) if opt_id == 2]
    assert len(stats) == 2  # CPU 0 and CPU 1
    at = stats[0][0]
    text = bytes(data[at + 6 : at + 6 + stats[0][1]])
    assert text.startswith(b"CPU: 0\n")
    data[at + 6 + 5] = ord("x")  # "CPU: x"
    p = tmp_path / "cpustat-x.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    assert d.meta["events"] == read_trace(V7).meta["events"]
    assert any("CPUSTAT option" in w and "'CPU: x'" in w for w in d.meta["warnings"])
    assert d.meta["import_errors"]["tracedat_cpustat_unreadable"]["count"] == 1


def test_page_timestamp_near_2_63(tmp_path):
    """The first page of the largest CPU stamped 2^63 - 256: records past the int64 range are not imported
    (counted, with the page's offset), none wraps negative; the CPU's later pages are earlier than that
    page, which the warnings say."""
    data = bytearray(V6.read_bytes())
    lay = tracedat.layout(V6, bytes(data))
    cpu = max((c for c in lay["buffers"][0]["cpus"] if c["size"]), key=lambda c: c["size"])
    struct.pack_into("<Q", data, cpu["offset"], (1 << 63) - 256)
    p = tmp_path / "ts-2-63.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    assert min(df["ts"].min() for df in d.tables.values()) >= 0
    errors = d.meta["import_errors"]["tracedat_timestamp_out_of_range"]
    assert errors["count"] >= 1 and cpu["offset"] <= errors["examples"][0]["offset"] < cpu["offset"] + 4096
    assert any("beyond the signed 64-bit ns range" in w for w in d.meta["warnings"])
    assert any(f"CPU {cpu['cpu']}:" in w and "earlier than the record before them" in w for w in d.meta["warnings"])
    imported = sum(d.meta["events"].values())
    assert imported + errors["count"] == sum(read_trace(V6).meta["events"].values())


def test_buffer_option_cpu_id_out_of_range(tmp_path):
    """The BUFFER option's second CPU id made 0x7fffffff in a 2-CPU file: that CPU's data is skipped with a
    warning and counted; no event lands on CPU 2147483647 and cpus stays 2."""
    data = bytearray(V7.read_bytes())
    ((at, _id, size),) = [o for o in _v7_options(bytes(data)) if o[1] == 3]
    payload = bytes(data[at + 6 : at + 6 + size])
    pos = payload.index(b"\0", 8) + 1  # u64 section offset, name ""
    pos = payload.index(b"\0", pos) + 1 + 4  # clock, page size
    (ncpu,) = struct.unpack_from("<I", payload, pos)
    assert ncpu == 2
    second = at + 6 + pos + 4 + 20  # (u32 cpu, u64 offset, u64 size) per CPU
    assert struct.unpack_from("<I", data, second)[0] == 1
    struct.pack_into("<I", data, second, 0x7FFF_FFFF)
    p = tmp_path / "cpu-7fffffff.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    assert d.meta["cpus"] == 2 and d.meta["cpus_with_data"] == [0]
    assert all(df["cpu"].max() <= 1 for df in d.tables.values() if "cpu" in df.columns)
    assert d.meta["import_errors"]["tracedat_cpu_id_out_of_range"]["count"] == 1
    assert any("CPU id 2147483647" in w and "skipped" in w for w in d.meta["warnings"])
    assert os.path.getsize(p) == os.path.getsize(V7)
