"""The first open of a long trace.dat, decoded in rounds into its cache entry (abtest.trace.streamed,
native/tracedat/src/rounds.rs): its tables and meta are the whole decode's. Rounds of a few pages (tiny
ABTEST_DECODE_ROUND_MB / ABTEST_DECODE_PIECE_KB) make the shared traces cut into many rounds, with pieces
decoded again across round ends; a trace whose pages go back in time is decoded whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from abtest import Trace
from abtest.trace import cache, streamed
from abtest.trace.convert import convert
from abtest.trace.readers import read_trace

SHARED_TRACEDAT = (
    "langraph/trace.dat",
    "lisa/sched_load-trace.dat",
    "trappy/trace.dat",
    "trappy/trace_idle.dat",
    "x86-vm/x86-haltpoll-hackbench-cyclictest.dat",
    "x86-vm/x86-ladder-hackbench-cyclictest.dat",
    "x86-vm/x86-menu-hackbench-cyclictest.dat",
)


@pytest.fixture
def tiny_rounds(monkeypatch):
    """Rounds of ~50 KB of ring-buffer data, pieces of two 4 KiB pages."""
    monkeypatch.setenv(streamed.ROUND_MB_ENV, "0.05")
    monkeypatch.setenv(streamed.PIECE_KB_ENV, "8")


def assert_streamed_equals_whole(path: Path, entry: Path) -> int:
    """Decode `path` in rounds into `entry` and compare with read_trace: every table (values, dtypes, order)
    and the meta. Returns the number of rounds."""
    whole = read_trace(path)
    assert streamed.write_entry(path, entry)
    assert cache.is_complete(entry)
    assert cache.table_names(entry) == sorted(whole.tables)
    for name in whole.tables:
        mine = cache.read_table(entry, name)
        assert mine.schema == whole.tables[name].schema, name
        assert_frame_equal(mine, whole.tables[name], categorical_as_str=True)
    meta = cache.read_meta(entry)
    rounds = meta.pop("decoded_in_rounds")
    assert meta == json.loads(json.dumps(whole.meta, default=str))
    ts_sorted = json.loads((entry / cache.TS_SORTED).read_text())
    assert ts_sorted == sorted(n for n, t in whole.tables.items() if "ts" in t.columns and t["ts"].is_sorted())
    return rounds


@pytest.mark.parametrize("rel", SHARED_TRACEDAT)
def test_rounds_equal_the_whole_decode(traces, tmp_path, tiny_rounds, rel):
    rounds = assert_streamed_equals_whole(traces / rel, tmp_path / "entry")
    assert rounds >= 1
    # the progress reported after each round: the ring-buffer bytes decoded, up to all of them
    seen: list[tuple[int, int]] = []
    assert streamed.write_entry(traces / rel, tmp_path / "again", progress=lambda d, t: seen.append((d, t)))
    assert len(seen) == rounds and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] and a[1] == b[1] for a, b in zip(seen, seen[1:]))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left


@pytest.mark.parametrize("rel", SHARED_TRACEDAT)
def test_convert_in_rounds_equals_the_whole_convert(traces, tmp_path, tiny_rounds, rel):
    """`abtest trace convert` of a long trace.dat goes in rounds too: its parquet files read back (polars and
    pyarrow) to read_trace's tables, its meta.json is read_trace's."""
    path = traces / rel
    meta = convert(path, tmp_path / "out")
    assert meta["decoded_in_rounds"] >= 1
    ref = read_trace(path)
    assert cache.table_names(tmp_path / "out") == sorted(ref.tables)
    written = cache.read_meta(tmp_path / "out")
    written.pop("decoded_in_rounds")
    assert written == json.loads(json.dumps(ref.meta, default=str))
    for name, df in ref.tables.items():
        got = cache.read_table(tmp_path / "out", name)
        assert got.schema == df.schema, name
        assert_frame_equal(got, df, categorical_as_str=True)
        assert pq.read_table(tmp_path / "out" / f"{name}.parquet").to_pylist() == df.to_arrow().to_pylist(), name


def test_the_shared_traces_are_cut_into_many_rounds(traces, tmp_path, tiny_rounds):
    """The comparison above is not vacuous: most shared traces take many rounds."""
    rounds = {}
    for rel in SHARED_TRACEDAT:
        entry = tmp_path / rel.replace("/", "_")
        assert streamed.write_entry(traces / rel, entry)
        rounds[rel] = cache.read_meta(entry)["decoded_in_rounds"]
    assert sum(r >= 10 for r in rounds.values()) >= 4, rounds


def _swap_first_pages(src: Path, dst: Path) -> None:
    """Copy a v6 trace.dat, swapping the first two ring-buffer pages of its fullest CPU (its timestamps then go
    backwards between them)."""
    from abtest.trace import tracedat

    data = bytearray(src.read_bytes())
    lay = tracedat.layout(src, bytes(data))
    page = lay["page_size"]
    cpu = max((c for b in lay["buffers"] for c in b["cpus"] if c["size"]), key=lambda c: c["size"])
    assert cpu["size"] >= 3 * page
    a, b = cpu["offset"], cpu["offset"] + page
    data[a : a + page], data[b : b + page] = data[b : b + page], data[a : a + page]
    dst.write_bytes(bytes(data))


def test_pages_back_in_time_are_decoded_whole(traces, tmp_path, tiny_rounds, monkeypatch):
    path = tmp_path / "swapped.dat"
    _swap_first_pages(traces / "lisa" / "sched_load-trace.dat", path)
    assert not streamed.write_entry(path, tmp_path / "entry")
    assert not (tmp_path / "entry").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # a first Trace() open falls back to the whole decode, which orders the pages itself
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    t = Trace(path)
    whole = read_trace(path)
    assert "decoded_in_rounds" not in t.meta
    assert_frame_equal(t.df("sched_switch"), whole.tables["sched_switch"], categorical_as_str=True)


def test_a_first_open_of_a_long_trace_goes_in_rounds(traces, tmp_path, tiny_rounds, monkeypatch):
    """Trace(): a trace.dat of at least a round is written to the cache in rounds; later opens map it."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "x86.dat"
    shutil.copy(traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat", path)
    first = Trace(path)
    assert first.meta["decoded_in_rounds"] > 1
    whole = read_trace(path)
    again = Trace(path)
    for name in whole.tables:
        assert_frame_equal(again.df(name), whole.tables[name], categorical_as_str=True)
    assert again.latency.df_stats().equals(Trace(path, use_cache=False).latency.df_stats())
    # a small file (below a round) is decoded whole
    monkeypatch.setenv(streamed.ROUND_MB_ENV, "512")
    assert not streamed.applies(path)


def test_a_failing_consumer_is_not_a_format_error(traces):
    """An error raised by the code that takes the rounds (here a ValueError) reaches the caller as it is, not
    as a TraceFormatError about the file."""
    from abtest.trace import tracedat

    path = traces / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"

    def emit(tables):
        raise ValueError("the consumer broke")

    with pytest.raises(ValueError, match="the consumer broke") as raised:
        tracedat.read_rounds(path, path.read_bytes(), emit, round_bytes=50_000, piece_bytes=8192)
    assert raised.type is ValueError


def test_rounds_account_what_canonicalising_drops(traces, tmp_path, tiny_rounds, monkeypatch):
    """One ingestion driver (readers.Ingest) for both paths: rows canonicalising moves to import errors (a
    cpu_idle whose cpu_id does not fit, as in tests/test_analyze_unfit_fields.py) are counted, with the same
    examples, whether the trace is decoded whole or in rounds (the rounds used to lose the count)."""
    from abtest.trace import tracedat

    frames = tracedat.frames

    def unfit_cpu_ids(batches):
        out = frames(batches)
        if "cpu_idle" in out:  # every 7th microsecond: the same rows whatever the rounds
            df = out["cpu_idle"]
            bad = (pl.col("ts") // 1000) % 7 == 0
            out["cpu_idle"] = df.with_columns(
                pl.when(bad)
                .then(pl.lit(4294967295))
                .otherwise(pl.col("cpu_id"))
                .cast(df.schema["cpu_id"])
                .alias("cpu_id")
            )
        return out

    monkeypatch.setattr(tracedat, "frames", unfit_cpu_ids)
    path = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    assert assert_streamed_equals_whole(path, tmp_path / "entry") > 10
    whole = read_trace(path).meta["import_errors"]["value_out_of_range"]
    assert whole["count"] > 100 and len(whole["examples"]) == 5


def test_chain_breaks_in_parts_equal_the_whole_table():
    """quality.ChainBreaks, the one count of sched_switch chain breaks: a table given in parts (cut anywhere,
    a part perhaps without the `instance` column) counts what the whole table counts."""
    import random

    from abtest.trace.quality import ChainBreaks

    rng = random.Random(39)
    n = 2000
    switch = pl.DataFrame(
        {
            "ts": range(n),
            "cpu": [rng.randrange(3) for _ in range(n)],
            "instance": [rng.choice([None, "b"]) for _ in range(n)],
            "prev_pid": [rng.choice([None, 1, 2, 3]) for _ in range(n)],
            "next_pid": [rng.choice([1, 2, 3]) for _ in range(n)],
        },
        schema_overrides={"cpu": pl.Int32, "prev_pid": pl.Int32, "next_pid": pl.Int32},
    )
    whole = ChainBreaks()
    whole.add(switch)
    # an independent count: per (cpu, instance), consecutive rows where prev_pid is not the previous next_pid
    last: dict = {}
    expected: dict[str, int] = {}
    for cpu, inst, prev, nxt in switch.select("cpu", "instance", "prev_pid", "next_pid").iter_rows():
        before = last.get((cpu, inst))
        if prev is not None and before is not None and prev != before:
            expected[str(cpu)] = expected.get(str(cpu), 0) + 1
        last[(cpu, inst)] = nxt
    assert whole.gaps() == dict(sorted(expected.items())) and expected
    cuts = [0, *sorted(rng.sample(range(1, n), 12)), n]
    parts = ChainBreaks()
    first = switch.slice(0, cuts[1])  # its top buffer's rows come first, without the instance column
    parts.add(first.filter(pl.col("instance").is_null()).drop("instance"))
    parts.add(first.filter(pl.col("instance").is_not_null()))
    for lo, hi in zip(cuts[1:], cuts[2:]):
        parts.add(switch.slice(lo, hi - lo))
    assert parts.gaps() == whole.gaps()
    assert ChainBreaks().gaps() == {}
