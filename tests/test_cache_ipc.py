"""The cache's Arrow IPC tables read back as views of a memory mapping (abtest._native.ipc_map,
native/src/cache_ipc.rs): the same frames as the decode wrote (values, dtypes, chunks), columns not copied,
time ranges cut by binary search equal to a filter, damaged files refused with an error."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_streamed_open import SHARED_TRACEDAT

from abtest.trace import cache, streamed
from abtest.trace.readers import read_trace


def _rss_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@pytest.mark.parametrize("rel", SHARED_TRACEDAT)
def test_mapped_tables_are_the_decoded_tables(traces, tmp_path, rel):
    whole = read_trace(traces / rel)
    cache.write_tables(whole, tmp_path / "entry", fmt="ipc")
    for name, df in whole.tables.items():
        mine = cache.read_table(tmp_path / "entry", name)
        assert mine.schema == df.schema, name
        assert_frame_equal(mine, df, categorical_as_str=True)
        assert mine.n_chunks() == 1  # one record batch per table: numpy and the simulators read it in place


def test_time_ranges_equal_a_filter(traces, tmp_path, monkeypatch):
    """read_table_range on an entry written in rounds (one record batch per round, so ts in many chunks)
    and on one written whole: the rows of [lo, hi) by binary search, as a filter finds them."""
    path = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    cache.write_tables(read_trace(path), tmp_path / "whole", fmt="ipc")
    monkeypatch.setenv(streamed.ROUND_MB_ENV, "0.05")
    monkeypatch.setenv(streamed.PIECE_KB_ENV, "8")
    assert streamed.write_entry(path, tmp_path / "rounds")
    rng = random.Random(24)
    for entry in (tmp_path / "whole", tmp_path / "rounds"):
        sw = cache.read_table(entry, "sched_switch")
        if entry.name == "rounds":
            assert sw.n_chunks() > 1
        lo_ts, hi_ts = sw["ts"].min(), sw["ts"].max()
        bounds = [(None, None), (lo_ts, None), (None, hi_ts), (hi_ts + 1, None), (None, lo_ts)]
        bounds += [tuple(sorted(rng.randint(lo_ts - 10, hi_ts + 10) for _ in range(2))) for _ in range(20)]
        bounds += [(int(sw["ts"][i]), int(sw["ts"][i + 1])) for i in rng.sample(range(sw.height - 1), 5)]
        for lo, hi in bounds:
            got = cache.read_table_range(entry, "sched_switch", lo, hi)
            keep = pl.lit(True)
            if lo is not None:
                keep &= pl.col("ts") >= lo
            if hi is not None:
                keep &= pl.col("ts") < hi
            assert_frame_equal(got, sw.filter(keep), categorical_as_str=True)
            assert got.n_chunks() == 1


def test_columns_are_views_of_the_mapping(traces, tmp_path):
    """Reading a table maps it: summing its ts column brings the file's pages in (RssFile), not a copy
    (RssAnon grows by a small part of the column; names are turned into polars categories when the frame is
    made, before the measure). The table: a shared trace's sched_switch repeated to
    4 MiB of ts (the shared traces are small)."""
    sw = read_trace(traces / "x86-vm/x86-menu-hackbench-cyclictest.dat").tables["sched_switch"]
    big = pl.concat([sw] * (1 + (1 << 19) // sw.height), rechunk=True)
    cache.write_table(big, tmp_path / "sched_switch.arrow", "ipc")
    col_kb = big.height * 8 // 1024
    del big
    df = cache.read_ipc_mapped(tmp_path / "sched_switch.arrow")
    anon0, file0 = _rss_kb("RssAnon"), _rss_kb("RssFile")
    assert df["ts"].sum() > 0
    anon1, file1 = _rss_kb("RssAnon"), _rss_kb("RssFile")
    assert file1 - file0 >= col_kb * 0.9, (file1 - file0, col_kb)
    assert anon1 - anon0 < col_kb * 0.5, (anon1 - anon0, col_kb)


def test_a_damaged_file_is_an_error_not_a_crash(traces, tmp_path):
    whole = read_trace(traces / "lisa/sched_load-trace.dat")
    cache.write_tables(whole, tmp_path / "entry", fmt="ipc")
    path = cache.table_path(tmp_path / "entry", "sched_switch")
    good = path.read_bytes()
    from abtest import _native

    for damaged in (good[: len(good) // 2], b"ARROW1\0\0" + b"\xff" * 64, good[:-10] + b"\xff\xff\xff\x7fARROW1"):
        path.write_bytes(damaged)
        with pytest.raises(ValueError):
            _native.ipc_map(str(path))
    with pytest.raises(OSError):
        _native.ipc_map(str(tmp_path / "missing.arrow"))
