"""`abtest timeline`: the perfetto trace it writes, read back by Perfetto's trace_processor (the offline wasm
engine, v52), holds what abtest's own tables hold: the scheduling data (sched slices per CPU, CPU frequency
and idle counters) and the derived tracks (PELT util/runnable, idle misses, wakeups beyond p99, overutilized
spans, power per rail and channel), same counts, same timestamps, same values."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from shared_data import TRACES

from abtest import Trace
from abtest.timeline import wire
from abtest.timeline.builder import write_timeline
from abtest.timeline.tracks import QUANT_BITS, quantized
from abtest.trace import perfetto_engine as pe

JUNO_DAT = TRACES / "lisa" / "sched_load-trace.dat"
JUNO_PLAT = TRACES / "lisa" / "sched_load-plat_info.yml"
JUNO_TXT = TRACES / "lisa" / "trace_txt-trace.txt"
X86_DAT = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"
PIXEL = TRACES / "PerfettoTraceScript" / "pixel7pro-power-rails.perfetto-trace"


def _engine():
    try:
        pe.select_engine("wasm")
    except pe.EngineUnavailableError as e:  # `make setup` installs the perfetto package that bundles it
        pytest.fail(f"the wasm trace_processor engine is missing, an install step failed: {e}")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(Trace, summary, trace_processor session) per input, written once."""
    _engine()
    out, sessions = {}, []

    def get(path, platform=None):
        if (path, platform) not in out:
            t = Trace(path, platform=platform)
            dest = tmp_path_factory.mktemp("tl") / (path.name + ".perfetto-trace")
            summary = write_timeline(t, dest)
            s = pe.open_session(dest, "wasm")
            sessions.append(s)
            out[path, platform] = (t, summary, s)
        return out[path, platform]

    yield get
    for s in sessions:
        s.close()


def _counter(s, name: str) -> pl.DataFrame:
    q = f"select c.ts, c.value from counter c join track t on c.track_id = t.id where t.name = '{name}' order by c.ts"
    return s.query(q)


def _steps(df: pl.DataFrame, key: str, value: str, decimals: int | None = None) -> pl.DataFrame:
    """The contract of a derived counter: at the written resolution (``decimals``, else tracks.quantized), nulls
    out, a sample only when the value changes; ``raw``: the value before rounding."""
    v = pl.col(value).cast(pl.Float64)
    d = (
        df.select(key, "ts", (v.round(decimals) if decimals is not None else quantized(v)).alias(value), v.alias("raw"))
        .drop_nulls(value)
        .sort(key, "ts")
    )
    prev = pl.col(value).shift(1).over(key)
    return d.filter(prev.is_null() | (pl.col(value) != prev))


# -- the wire format ------------------------------------------------------------------------------------
def test_varints_match_protobuf():
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    vals = np.array([0, 1, 127, 128, 300, 2**35, -1, -7, 2**63 - 1], dtype=np.int64)
    inner = wire.Rows(len(vals))
    inner.varint(9, np.full(len(vals), 4)).varint(11, vals)
    names = wire.byte_strings([b"n" * i for i in range(len(vals))])
    inner.double(44, vals * 0.5, mask=vals % 2 == 0).strings(23, names)
    rows = wire.Rows(len(vals)).varint(8, vals).message(11, inner)
    trace = pb.Trace()
    trace.ParseFromString(wire.framed_packets(rows))
    assert [p.timestamp for p in trace.packet] == [int(v) & (2**64 - 1) for v in vals]
    assert [p.track_event.track_uuid for p in trace.packet] == [int(v) & (2**64 - 1) for v in vals]
    assert [p.track_event.name for p in trace.packet] == ["n" * i for i in range(len(vals))]
    assert [p.track_event.HasField("double_counter_value") for p in trace.packet] == list(vals % 2 == 0)
    assert wire.packed_varints(1, vals)[2:] == b"".join(wire.varint(int(v)) for v in vals)


# -- scheduling data, any input format ------------------------------------------------------------------
@pytest.mark.parametrize("path", [JUNO_DAT, JUNO_TXT, X86_DAT], ids=["trace.dat", "ftrace-text", "x86-trace.dat"])
def test_sched_tables_hold_abtests_switches(written, path):
    t, summary, s = written(path)
    sw = t.df("sched_switch").sort("cpu", "ts", maintain_order=True)
    assert summary.ftrace_rows["sched_switch"] == sw.height
    # trace_processor opens a slice at every switch but the first of each CPU (whose previous task it cannot
    # know from the compact form: it does the same on perfetto's own recordings)
    expect = sw.filter(pl.col("cpu").cum_count().over("cpu") > 1).select(
        pl.col("cpu").cast(pl.Int64), "ts", pl.col("next_pid").cast(pl.Int64).alias("tid")
    )
    got = s.query("select s.cpu, s.ts, t.tid from sched s join thread t using (utid) order by s.cpu, s.ts")
    assert got.height == expect.height
    assert got.equals(expect.sort("cpu", "ts", maintain_order=True))
    for table, track in (("cpu_idle", "cpuidle"), ("cpu_frequency", "cpufreq")):
        if table not in t.tables:
            continue
        n = s.query(
            f"select count(*) n from counter c join cpu_counter_track t on c.track_id = t.id where t.name = '{track}'"
        )["n"][0]
        assert n == t.df(table).height
    if "sched_waking" in t.tables:
        assert s.query("select count(*) n from thread_state")["n"][0] > sw.height  # runnable states from wakings


def test_perfetto_input_keeps_its_packets(written):
    t, summary, s = written(PIXEL)
    assert summary.ftrace_rows == {} and "own packets" in summary.source_packets
    assert summary.size > PIXEL.stat().st_size
    per_cpu = s.query("select cpu, count(*) n from sched group by cpu order by cpu")
    ours = t.df("sched_switch").group_by(pl.col("cpu").cast(pl.Int64)).len().sort("cpu")
    assert per_cpu["n"].to_list() == (ours["len"] - 1).cast(pl.Int64).to_list()


# -- derived tracks -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [JUNO_DAT, X86_DAT, PIXEL], ids=["kernel-pelt", "simulated", "perfetto"])
def test_pelt_counters_equal_abtests_signals(written, path):
    t, _summary, s = written(path, JUNO_PLAT if path == JUNO_DAT else None)
    sig = t.load_tracking.df_cpu_signals("auto")
    for col in ("util", "runnable"):
        expect = _steps(sig, "cpu", col)
        src = sig.select("cpu", f"{col}_source").unique("cpu")
        for cpu, part in expect.group_by("cpu"):
            src_name = src.filter(pl.col("cpu") == cpu[0])[f"{col}_source"][0]
            got = _counter(s, f"CPU {cpu[0]} {col} ({src_name})")
            assert got["ts"].to_list() == part["ts"].to_list()
            assert got["value"].to_list() == part[col].to_list()
            # the written resolution: whole units below 1024, relative error < 2**-10 above
            err = (part[col] - part["raw"]).abs()
            assert (err <= (part["raw"].abs() * 2.0**-QUANT_BITS).clip(0.5, None) + 1e-9).all()


def test_idle_misses_are_instants_with_state_and_sleep(written):
    t, _summary, s = written(X86_DAT)
    miss = t.df("cpu_idle_miss")
    got = s.query(
        "select s.ts, s.name, s.dur, t.name track, "
        "extract_arg(s.arg_set_id, 'debug.state') state, extract_arg(s.arg_set_id, 'debug.sleep_us') sleep "
        "from slice s join track t on s.track_id = t.id where t.name like '% idle misses' order by s.ts"
    )
    assert got.height == miss.height > 0
    assert (got["dur"] == 0).all()
    assert sorted(got["ts"].to_list()) == sorted(miss["ts"].to_list())
    names = {"above": "too deep", "below": "too shallow"}
    exp = miss.select(
        "ts", pl.col("type").cast(pl.Utf8).replace_strict(names).alias("name"), pl.col("state").cast(pl.Int64)
    ).sort("ts", "name", "state")
    assert got.select("ts", "name", "state").sort("ts", "name", "state").equals(exp)
    assert got["sleep"].null_count() == 0 and (got["sleep"] > 0).all()


def test_slow_wakeups_are_slices_named_by_task(written):
    t, summary, s = written(X86_DAT)
    lat = t.latency.df_latency("wakeup").with_columns(pl.col("comm").cast(pl.Utf8))
    p99 = lat.group_by("comm").agg(pl.col("latency_ns").quantile(0.99, "linear").alias("p99"), pl.len().alias("n"))
    slow = lat.join(p99.filter(pl.col("n") >= 20), on="comm").filter(pl.col("latency_ns") > pl.col("p99"))
    got = s.query(
        "select s.ts, s.dur, s.name, extract_arg(s.arg_set_id, 'debug.pid') pid from slice s "
        "join track t on s.track_id = t.id where t.name like '% wakeups > p99%'"
    )
    assert 0 < got.height <= slow.height
    if got.height < slow.height:  # more overlapping outliers on a CPU than lanes: said so
        assert any("wakeups > p99" in n and "not shown" in n for n in summary.notes)
    exp = slow.select(
        pl.col("wakeup_ts").alias("ts"),
        pl.col("latency_ns").alias("dur"),
        pl.col("comm").alias("name"),
        pl.col("pid").cast(pl.Int64),
    )
    assert got.join(exp, on=["ts", "dur", "name", "pid"], how="anti").is_empty()


def test_overutilized_spans(written):
    t, _summary, s = written(JUNO_TXT)
    iv = t.overutilized.df_intervals().filter(pl.col("overutilized") == 1)
    got = s.query(
        "select s.ts, s.dur from slice s join track t on s.track_id = t.id "
        "where t.name like 'overutilized %' order by s.ts"
    )
    assert got.height == iv.height > 0
    assert got.equals(iv.select("ts", "dur").sort("ts"))


def test_power_rails_and_channels(written):
    from abtest.analysis.power import df_rail_power_intervals

    t, summary, s = written(PIXEL)
    iv = df_rail_power_intervals(t.df("power_rail"), start_ns=t.start_ns, end_ns=t.end_ns)
    exp = _steps(iv.with_columns(pl.col("rail").cast(pl.Utf8)), "rail", "power_mw", 3)
    rails = exp["rail"].unique().to_list()
    assert len(rails) > 10
    for rail in rails[:6]:
        got = _counter(s, f"rail {rail}")
        part = exp.filter(pl.col("rail") == rail)
        assert got["ts"].to_list() == part["ts"].to_list()
        assert np.allclose(got["value"].to_numpy(), part["power_mw"].to_numpy())
    total = _counter(s, "power Total")
    # the Total channel at its first sample = the sum of every rail's power then
    first = total["ts"][0]
    at = exp.filter(pl.col("ts") <= first).group_by("rail").agg(pl.col("power_mw").last())
    assert total["value"][0] == pytest.approx(at["power_mw"].sum(), abs=0.01 * len(rails))
    assert any("Power (rails;" in name for name in summary.tracks)


def test_no_counter_sample_repeats(written):
    _t, _summary, s = written(PIXEL)
    rep = s.query(
        "select count(*) n from (select c.value, lag(c.value) over (partition by c.track_id order by c.ts) p "
        "from counter c join track t on c.track_id = t.id where t.name like 'CPU % util %' "
        "or t.name like 'rail %' or t.name like 'task %') where value = p"
    )
    assert rep["n"][0] == 0


# -- held-out real traces of every format: they open, with the expected threads and CPUs -----------------
HELD_OUT = [
    "langraph/trace.dat",
    "tracecompass/trace-android-sched",
    "tracecompass/android_trace.html",
    "catapult/compressed_atrace_data.txt",
    "systing/trace.pb",
]


@pytest.mark.parametrize(
    "rel", HELD_OUT, ids=["trace.dat-v7-zstd", "ftrace-text", "systrace-html", "atrace-z", "perfetto"]
)
def test_held_out_trace_opens_with_its_threads_and_cpus(tmp_path, rel):
    _engine()
    t = Trace(TRACES / rel)
    out = tmp_path / "t.perfetto-trace"
    write_timeline(t, out)
    s = pe.open_session(out, "wasm")
    try:
        tids = set(s.query("select distinct tid from thread")["tid"].to_list())
        sched_cpus = set(s.query("select distinct cpu from sched")["cpu"].to_list())
    finally:
        s.close()
    # every task that switched or was woken (sched_waking) is a thread; a wakeup-only pid may not be (TP's rule)
    pids = set()
    for name, cols in (("sched_switch", ("prev_pid", "next_pid")), ("sched_waking", ("pid",))):
        if name in t.tables:
            for c in cols:
                pids |= set(t.df(name)[c].drop_nulls().to_list())
    assert pids <= tids
    if t.meta["format"] != "perfetto":  # nothing else creates threads but the markers' writers and swapper
        extra = tids - pids - {0}
        marker_pids = set(t.df("marker")["pid"].to_list()) if "marker" in t.tables else set()
        assert extra <= marker_pids | set(t.df("sched_wakeup")["pid"].to_list() if "sched_wakeup" in t.tables else [])
    # a CPU has sched slices from its second switch on
    if "sched_switch" in t.tables:
        per_cpu = t.df("sched_switch").group_by("cpu").len()
        assert sched_cpus == set(per_cpu.filter(pl.col("len") >= 2)["cpu"].to_list())
