"""Values the perfetto reader derives rather than reads, checked on the real shared traces against
Perfetto's own trace_processor (wasm build, offline; abtest.trace.perfetto_engine) and against the
protobuf runtime's decode (perfetto's generated classes):

* compact sched_switch prev_comm of a task renamed while running (task_rename): the new comm;
* compact sched_waking common_pid: the task running on the waking's CPU (the waker);
* SysStats cpufreq_khz polling -> the counter-sample table cpu_frequency_polled.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # dev dependency (make setup)

from abtest.trace import perfetto_engine as pe
from abtest.trace.readers import read_trace

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
SYSTING = "systing/trace.pb"


def _tp(path: Path, sql: str) -> pl.DataFrame:
    s = pe.open_session(path, "wasm")
    try:
        return s.query(sql)
    finally:
        s.close()


def test_renamed_task_switches_out_under_new_comm(traces):
    """Pixel 7 Pro: 9 compact sched_switch rows switch out a task renamed while it ran (e.g. a kworker
    renamed on exit); prev_comm is the new name, as the kernel printed it and trace_processor shows."""
    path = traces / PIXEL
    sw = read_trace(path).tables["sched_switch"]
    renames = read_trace(path).tables["task_rename"]
    # rows whose prev_comm is not the comm the task was switched in with
    stale = sw.with_columns(pl.col("next_comm").cast(pl.Utf8).shift(1).over("cpu").alias("in_comm")).filter(
        pl.col("prev_comm").cast(pl.Utf8) != pl.col("in_comm")
    )
    assert stale.height == 9
    # each of them is a rename's newcomm for that pid
    got = stale.select("ts", "cpu", "prev_pid", pl.col("prev_comm").cast(pl.Utf8))
    named = got.join(
        renames.select(pl.col("pid").alias("prev_pid"), pl.col("newcomm").cast(pl.Utf8).alias("prev_comm")),
        on=["prev_pid", "prev_comm"],
        how="semi",
    )
    assert named.height == 9
    tp = _tp(
        path,
        "select ts, cpu, extract_arg(arg_set_id, 'prev_comm') as prev_comm, "
        "extract_arg(arg_set_id, 'prev_pid') as prev_pid from ftrace_event where name = 'sched_switch'",
    )
    # trace_processor agrees on these rows and on every other row it has (it skips each CPU's first switch)
    ours = sw.select(
        "ts",
        pl.col("cpu").cast(pl.Int64),
        pl.col("prev_pid").cast(pl.Int64),
        pl.when((pl.col("prev_pid") == 0) & pl.col("prev_comm").cast(pl.Utf8).str.contains(r"^swapper/\d+$"))
        .then(pl.lit("swapper"))
        .otherwise(pl.col("prev_comm").cast(pl.Utf8))
        .alias("prev_comm"),
    )
    joined = ours.join(tp, on=["ts", "cpu"], how="inner", suffix="_tp")
    assert joined.height == tp.height == sw.height - 8
    assert joined.filter(
        (pl.col("prev_comm") != pl.col("prev_comm_tp")) | (pl.col("prev_pid") != pl.col("prev_pid_tp"))
    ).is_empty()
    assert joined.join(got.select("ts", pl.col("cpu").cast(pl.Int64)), on=["ts", "cpu"], how="semi").height == 9


def test_compact_waking_waker_is_the_running_task(traces):
    """systing: compact sched_waking has no common_pid field; abtest gives the task running on that CPU
    (next_pid of the CPU's last sched_switch before the waking). trace_processor attributes each compact
    waking to the same thread (its utid) and skips the wakings before their CPU's first switch, which are
    exactly abtest's null ones."""
    path = traces / SYSTING
    t = read_trace(path).tables
    wk, sw = t["sched_waking"], t["sched_switch"]
    tp = _tp(
        path,
        "select e.ts, e.cpu, t.tid as waker, extract_arg(e.arg_set_id, 'pid') as pid "
        "from ftrace_event e join thread t using (utid) where e.name = 'sched_waking'",
    )
    skipped = _tp(path, "select value from stats where name = 'compact_sched_waking_skipped'")["value"].sum()
    known = wk.filter(pl.col("common_pid").is_not_null())
    assert known.height == tp.height == wk.height - skipped
    assert wk["common_pid"].null_count() == skipped > 0
    ours = known.select(
        "ts",
        pl.col("cpu").cast(pl.Int64),
        pl.col("common_pid").cast(pl.Int64).alias("waker"),
        pl.col("pid").cast(pl.Int64),
    )
    assert ours.sort("ts", "cpu", "pid").equals(tp.select(ours.columns).sort("ts", "cpu", "pid"))
    # the null ones: before the first sched_switch on their CPU
    first = sw.group_by("cpu").agg(pl.col("ts").min().alias("t0"))
    nulls = wk.filter(pl.col("common_pid").is_null()).join(first, on="cpu", how="left")
    assert nulls.filter(pl.col("t0").is_not_null() & (pl.col("ts") > pl.col("t0"))).is_empty()


def test_polled_cpu_frequency_table(traces):
    """Pixel 7 Pro: traced polled scaling_cur_freq every ~500 ms (SysStats.cpufreq_khz); the samples land in
    cpu_frequency_polled (ts = packet time, cpu, frequency_khz), the cpu_frequency events are untouched.
    trace_processor puts both into its cpufreq counter tracks: its counters minus abtest's cpu_frequency
    events are exactly abtest's polled samples. With them, the X1 CPUs (6, 7), whose first cpu_frequency
    event comes ~18 s into the trace, have a frequency from the first poll."""
    path = traces / PIXEL
    data = read_trace(path)
    polled, events = data.tables["cpu_frequency_polled"], data.tables["cpu_frequency"]
    assert data.meta["events"]["cpu_frequency"] == 11998  # expected-counts.json: unchanged
    assert "cpu_frequency_polled" not in data.meta["events"]
    assert data.meta["samples"]["cpu_frequency_polled"] == polled.height
    assert polled.schema == pl.Schema({"ts": pl.Int64, "cpu": pl.Int32, "frequency_khz": pl.Int64})
    assert polled["ts"].is_sorted()
    ref = pb.Trace.FromString(path.read_bytes())
    want = [
        (p.timestamp, cpu, khz)
        for p in ref.packet
        if p.HasField("sys_stats")
        for cpu, khz in enumerate(p.sys_stats.cpufreq_khz)
    ]
    assert len(want) == 120 * 8
    assert polled.rows() == sorted(want, key=lambda r: r[0])
    tp = _tp(
        path,
        "select c.ts, t.cpu, cast(c.value as int) as frequency_khz from counter c "
        "join cpu_counter_track t on c.track_id = t.id where t.name = 'cpufreq'",
    )
    ev = events.select("ts", pl.col("cpu").cast(pl.Int64), "frequency_khz")
    assert (
        tp.join(ev, on=["ts", "cpu", "frequency_khz"], how="anti")
        .sort("ts", "cpu")
        .equals(polled.select("ts", pl.col("cpu").cast(pl.Int64), "frequency_khz").sort("ts", "cpu"))
    )
    for cpu in (6, 7):
        first_event = events.filter(pl.col("cpu") == cpu)["ts"].min()
        first_poll = polled.filter(pl.col("cpu") == cpu)["ts"].min()
        assert first_event - first_poll > 17 * 10**9
        assert first_poll - data.meta["start_ns"] < 10**9


def _compact_packet(
    cpu: int, switches: list[tuple[int, int, str]], wakings: list[tuple[int, int]], events: list | None = None
) -> pb.TracePacket:
    """One bundle: compact switches (ts, next_pid, next_comm) and wakings (ts, pid), absolute ts."""
    p = pb.TracePacket()
    p.ftrace_events.cpu = cpu
    c = p.ftrace_events.compact_sched
    names = sorted({n for _, _, n in switches} | {"w"})
    c.intern_table.extend(names)
    last = 0
    for ts, pid, comm in switches:
        c.switch_timestamp.append(ts - last)
        last = ts
        c.switch_prev_state.append(1)
        c.switch_next_pid.append(pid)
        c.switch_next_prio.append(120)
        c.switch_next_comm_index.append(names.index(comm))
    last = 0
    for ts, pid in wakings:
        c.waking_timestamp.append(ts - last)
        last = ts
        c.waking_pid.append(pid)
        c.waking_target_cpu.append(cpu)
        c.waking_prio.append(120)
        c.waking_comm_index.append(names.index("w"))
    for e in events or []:
        p.ftrace_events.event.append(e)
    return p


def test_waker_and_rename_rules_on_edge_cases(tmp_path):
    """Hand-built compact bundles (serialized by perfetto's classes) for the cases the real traces lack:
    a waking before the CPU's first switch (null), one at the exact ts of a switch to another task
    (order unknown: null), one at the exact ts of a switch that keeps the same task (known), a rename
    before the switch-in (already in next_comm) and one while running (new prev_comm)."""
    rename_early = pb.FtraceEvent(timestamp=50, pid=99)
    rename_early.task_rename.pid, rename_early.task_rename.oldcomm, rename_early.task_rename.newcomm = 10, "a", "a0"
    rename_running = pb.FtraceEvent(timestamp=250, pid=10)
    rename_running.task_rename.pid, rename_running.task_rename.oldcomm, rename_running.task_rename.newcomm = (
        10,
        "a",
        "b",
    )
    pkt = _compact_packet(
        0,
        [(100, 10, "a"), (300, 20, "c"), (400, 20, "c"), (500, 10, "a")],
        [(90, 5), (200, 6), (300, 7), (400, 8), (600, 9)],
        [rename_early, rename_running],
    )
    path = tmp_path / "edge.pftrace"
    tr = pb.Trace()
    tr.packet.append(pkt)
    path.write_bytes(tr.SerializeToString())
    t = read_trace(path).tables
    assert t["sched_waking"].select("ts", "common_pid").rows() == [
        (90, None),
        (200, 10),
        (300, None),
        (400, 20),
        (600, 10),
    ]
    assert t["sched_switch"].select("ts", pl.col("prev_comm").cast(pl.Utf8), "prev_pid").rows() == [
        (100, None, None),
        (300, "b", 10),
        (400, "c", 20),
        (500, "c", 20),
    ]
