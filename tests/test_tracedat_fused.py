"""The streaming trace.dat decode (native/src/tracedat_fused.rs) against the record-index path it replaces
as the default (`tracedat.read(..., fused=False)`, which test_tracedat.py checks field by field against
`trace-cmd report`): identical tables (values, dtypes, row order, categorical codes) and metadata on every
real trace.dat under ../shared/traces, the benchmark trace, and hand-made edge cases: a CPU whose
timestamps go backwards (the streaming path must hand over to the record-index path), a corrupt kallsyms
section (same error), zlib stand-ins; each CPU's data decoded in several pieces and joined again."""
from __future__ import annotations

import struct
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from abtest.trace import tracedat, tracedat_layout
from abtest.trace.errors import TraceFormatError
from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
TRACEDAT_FILES = ["langraph/trace.dat", "lisa/sched_load-trace.dat", "trappy/trace.dat", "trappy/trace_idle.dat",
                  "x86-vm/x86-haltpoll-hackbench-cyclictest.dat", "x86-vm/x86-ladder-hackbench-cyclictest.dat",
                  "x86-vm/x86-menu-hackbench-cyclictest.dat"]


def _assert_same(fused: tuple, indexed: tuple) -> None:
    (a, meta_a), (b, meta_b) = fused, indexed
    assert list(a) == list(b)
    for name in a:
        assert_frame_equal(a[name], b[name])  # values, dtypes, order
        assert a[name].equals(b[name]), name
        for col, dtype in a[name].schema.items():
            if dtype == pl.Categorical:  # same dictionary codes, not only the same strings
                assert a[name][col].to_physical().equals(b[name][col].to_physical()), (name, col)
    assert meta_a == meta_b


def _both(path: Path, data: bytes) -> tuple[tuple, dict, tuple]:
    fused = tracedat.read(path, data)
    how = dict(tracedat.last_decode)
    indexed = tracedat.read(path, data, fused=False)
    return fused, how, indexed


def test_every_shared_file_listed(traces):
    assert sorted(str(p.relative_to(traces)) for p in traces.rglob("*.dat")) == sorted(TRACEDAT_FILES)


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_fused_equals_record_index_path(rel):
    p = TRACES / rel
    fused, how, indexed = _both(p, p.read_bytes())
    assert how == {"path": "fused", "fallback": None}
    _assert_same(fused, indexed)


def test_fused_equals_record_index_path_on_the_bench_trace(bench_trace):
    """>= 2 M events, v7 zstd: the trace bench/ingest.py records (and caches) on this machine."""
    fused, how, indexed = _both(bench_trace, bench_trace.read_bytes())
    assert how == {"path": "fused", "fallback": None}
    assert sum(df.height for df in fused[0].values()) > 2_000_000
    _assert_same(fused, indexed)


@pytest.mark.parametrize("pieces", [None, "2"], ids=["one-job-per-cpu", "pieces-per-cpu"])
def test_backwards_timestamps_fall_back_to_the_record_index_path(tmp_path, monkeypatch, pieces):
    """A ring-buffer page whose header timestamp lies before the previous page's events: the per-table
    merge of per-CPU runs would not reproduce the global stable sort, so the record-index path runs. With
    pieces forced (one page per chunk, 2 pieces per CPU) the page is the first of the CPU's second piece:
    the check at the seam between a CPU's pieces must catch it."""
    if pieces:
        monkeypatch.setenv("ABTEST_FUSED_PIECES", pieces)
    src = TRACES / "lisa" / "sched_load-trace.dat"
    data = bytearray(src.read_bytes())
    lay = tracedat_layout.parse_layout(src, bytes(data))
    cd = max((c for c in lay.cpu_data if c.size), key=lambda c: c.size)
    assert cd.size >= 3 * lay.page_size
    pages = cd.size // lay.page_size
    middle = cd.file_offset + (pages // 2) * lay.page_size  # with 2 pieces, the second one's first page
    first_ts = struct.unpack_from("<Q", data, cd.file_offset)[0]
    struct.pack_into("<Q", data, middle, first_ts - 1_000_000)  # 1 ms before the CPU's first page
    p = tmp_path / "backwards.dat"
    p.write_bytes(bytes(data))
    fused, how, indexed = _both(p, bytes(data))
    assert how["path"] == "indexed" and "backwards" in how["fallback"]
    _assert_same(fused, indexed)
    assert all(df["ts"].is_sorted() for df in fused[0].values())


def test_corrupt_kallsyms_section_same_error(tmp_path):
    """The v7 kallsyms section is only located by the layout pass and inflated by the decoder: a corrupt
    one still raises the layout parser's error (offset of the section)."""
    src = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
    data = bytearray(src.read_bytes())
    lay = tracedat_layout.parse_layout(src, bytes(data), inflate=False)
    assert len(lay.deferred_sections) == 1
    start, csize, _ = lay.deferred_sections[0]
    assert data[start:start + 4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    data[start + csize // 2: start + csize // 2 + 64] = bytes(64)
    p = tmp_path / "bad-kallsyms.dat"
    p.write_bytes(bytes(data))
    errors = []
    for fused in (True, False):
        with pytest.raises(TraceFormatError) as ei:
            tracedat.read(p, bytes(data), fused=fused)
        errors.append((str(ei.value), ei.value.offset))
    assert errors[0] == errors[1]
    assert "kallsyms" in errors[0][0]


@pytest.mark.parametrize("endian", ["<", ">"], ids=["little", "big"])
def test_zlib_standin_fused(tmp_path, endian):
    from test_tracedat import _standin_v7_zlib  # the hand-built v7 zlib file (stand-in, see that test)

    blob, _expected = _standin_v7_zlib(endian)
    p = tmp_path / "standin-v7-zlib.dat"
    p.write_bytes(blob)
    fused, how, indexed = _both(p, blob)
    assert how == {"path": "fused", "fallback": None}
    _assert_same(fused, indexed)


@pytest.mark.parametrize("mode", ["rows", "segments"])
def test_both_merge_styles_equal_the_record_index_path(mode, monkeypatch, bench_trace):
    """The per-table merge moves columns row by row (runs interleaving every few rows) or by slice copies
    of segments (long runs), chosen per table; each style forced on every shared trace.dat and the bench
    trace gives the record-index path's tables."""
    monkeypatch.setenv("ABTEST_FUSED_MERGE", mode)
    paths = [TRACES / rel for rel in TRACEDAT_FILES] + [bench_trace]
    for p in paths:
        fused, how, indexed = _both(p, p.read_bytes())
        assert how == {"path": "fused", "fallback": None}, p
        _assert_same(fused, indexed)


@pytest.mark.parametrize("pieces", [2, 7])
def test_pieces_of_a_cpu_join_to_the_record_index_tables(pieces, monkeypatch, bench_trace):
    """Each CPU's chunks (v7 compressed chunks, or 1 MiB of stored pages) decoded as `pieces` separate
    pieces (ABTEST_FUSED_PIECES; a thread that runs out of work takes over the back half of another CPU's
    remaining chunks in the same way) and joined again before the merge (native/src/tracedat_split.rs):
    the record-index path's tables and metadata (lost events added up per CPU), on every shared
    trace.dat and the bench trace."""
    monkeypatch.setenv("ABTEST_FUSED_PIECES", str(pieces))
    for p in [TRACES / rel for rel in TRACEDAT_FILES] + [bench_trace]:
        fused, how, indexed = _both(p, p.read_bytes())
        assert how == {"path": "fused", "fallback": None}, p
        _assert_same(fused, indexed)


def test_native_unit_tests():
    """The Rust unit tests of the extension (work sharing between decode threads: every chunk decoded
    once, seams between pieces in time order), run by cargo."""
    import shutil
    import subprocess

    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    r = subprocess.run([cargo, "test", "--release", "--lib"], cwd=ROOT / "native", capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "test result: ok." in r.stdout and " 0 failed" in r.stdout
