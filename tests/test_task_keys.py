"""Task keys (abtest.analysis.task_keys): per-task metrics keyed PROCESS/THREAD where the trace lists its
processes (perfetto ProcessTree -> table `process`), the comm otherwise."""

from __future__ import annotations

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import placement, task_keys, tasks
from abtest.analysis.registry import MetricOptions
from abtest.metric_spec import Grouping

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"

PROCESS = pl.DataFrame(
    {
        "pid": [10, 11, 12, 20, 21, 30, 2, 40, 41],
        "tgid": [10, 10, 10, 20, 20, 30, 2, 41, 41],
        "ppid": [1, 1, 1, 1, 1, 1, 0, 1, 1],
        "name": [
            "/vendor/bin/hw/hal.a",
            "w",
            "hal.a",
            "/vendor/bin/hw/hal.b",
            "w",
            "system_server",
            None,
            "x",
            "/vendor/bin/hw/android.hardware.power-service",
        ],
        "user": [None] * 9,
    },
    schema={"pid": pl.Int32, "tgid": pl.Int32, "ppid": pl.Int32, "name": pl.Utf8, "user": pl.Utf8},
)


def test_keys_name_the_process_and_the_thread():
    sw = pl.DataFrame(
        {
            "ts": [1, 2, 3, 4, 5, 6, 7, 8],
            "next_pid": [10, 11, 21, 12, 99, 2, 30, 40],
            "next_comm": [
                "hal.a",
                "hal_worker",
                "hal_worker",
                "hal.a",
                "kworker/0:1",
                "kthreadd",
                "system_server",
                "android.hardwar",
            ],
        },
        schema={"ts": pl.Int64, "next_pid": pl.Int32, "next_comm": pl.Categorical},
    )
    out = task_keys.with_task_keys(sw, task_keys.process_names(PROCESS))
    assert out.schema == sw.schema and out["ts"].to_list() == sw["ts"].to_list()
    assert out["next_comm"].cast(pl.Utf8).to_list() == [
        "hal.a",  # main thread: the process
        "hal.a/hal_worker",  # the event's comm, not the listed name ("w"): the name at the event
        "hal.b/hal_worker",  # same comm, other process: apart
        "hal.a",  # named like its process
        "kworker/0:1",  # not listed: the comm
        "kthreadd",  # a process without a name (kernel thread): the comm
        "system_server",
        "android.hardware.power-service",  # a thread that kept its process's comm (cut to 15)
    ]
    kthread = pl.DataFrame(
        {"pid": [5], "tgid": [5], "name": ["kworker/0:1"]}, schema=PROCESS.select("pid", "tgid", "name").schema
    )
    one = pl.DataFrame(
        {"next_pid": [5], "next_comm": ["kworker/0:1"]}, schema={"next_pid": pl.Int32, "next_comm": pl.Utf8}
    )
    # a kernel thread's name (perfetto's cmdline = its comm) is not a path: not cut
    assert task_keys.with_task_keys(one, task_keys.process_names(kthread))["next_comm"].to_list() == ["kworker/0:1"]


def test_a_name_selects_the_key_or_its_thread_part():
    keys = ["hal.a/hal_worker", "hal.b/hal_worker", "android.hardware.power-service", "kworker/0:1", "surfaceflinger"]
    assert task_keys.select(keys, ["hal_worker"]) == ["hal.a/hal_worker", "hal.b/hal_worker"]
    assert task_keys.select(keys, ["hal.a/hal_worker"]) == ["hal.a/hal_worker"]
    assert task_keys.select(keys, ["surfaceflinger"]) == ["surfaceflinger"]
    # a comm cut to 15 characters selects the processes it begins
    assert task_keys.select(keys, ["android.hardwar"]) == ["android.hardware.power-service"]
    assert task_keys.select(keys, ["hal"]) == []


def _reference_process_tree(path) -> tuple[dict[int, str], dict[int, int]]:
    """(pid -> cmdline[0], tid -> tgid) of the trace's ProcessTree packets, read with perfetto's own protos."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    t = pb.Trace()
    t.ParseFromString(path.read_bytes())
    procs: dict[int, str] = {}
    tgid: dict[int, int] = {}
    for pk in t.packet:
        if pk.HasField("process_tree"):
            for p in pk.process_tree.processes:
                procs[p.pid] = p.cmdline[0] if p.cmdline else ""
                tgid[p.pid] = p.pid
            for th in pk.process_tree.threads:
                tgid.setdefault(th.tid, th.tgid)
                if th.tid not in procs:
                    tgid[th.tid] = th.tgid
    return procs, tgid


@pytest.fixture(scope="module")
def pixel(traces):
    return Trace(traces / PIXEL)


def test_perfetto_process_tree_is_the_process_table(pixel, traces):
    procs, tgid = _reference_process_tree(traces / PIXEL)
    p = pixel.df("process")
    assert p.columns == ["pid", "tgid", "ppid", "name", "user"]
    assert p.height == len(tgid) and p["pid"].is_unique().all()
    rows = {r["pid"]: r for r in p.iter_rows(named=True)}
    for pid, name in procs.items():
        assert rows[pid]["tgid"] == pid and rows[pid]["name"] == (name or None)
    assert all(rows[t]["tgid"] == g for t, g in tgid.items())
    assert "process_tree" not in pixel.meta["perfetto"].get("packets_not_decoded", {})


def test_processes_sharing_a_comm_stay_apart(pixel, traces):
    procs, tgid = _reference_process_tree(traces / PIXEL)
    sw = pixel.df("sched_switch", windowed=False)
    seen = sw.select(pl.col("next_pid").alias("pid"), pl.col("next_comm").cast(pl.Utf8).alias("comm")).unique()
    # comms that threads of more than one process (differently named: kernel threads of one name stay one
    # task) ran under
    by_comm: dict[str, set[str]] = {}
    for pid, comm in seen.iter_rows():
        g = tgid.get(pid)
        if g is not None and procs.get(g):
            by_comm.setdefault(comm, set()).add(procs[g])
    shared = {c: g for c, g in by_comm.items() if len(g) > 1}
    assert "android.hardwar" in shared and len(shared["android.hardwar"]) >= 2, shared.get("android.hardwar")

    def expected(pid, comm):
        g = tgid.get(pid)
        proc = (procs.get(g) or "") if g is not None else ""
        if proc.startswith("/"):
            proc = proc.rstrip("/").rsplit("/", 1)[-1]
        if not proc:
            return comm
        same = comm == proc or (len(comm.encode()) == 15 and proc.startswith(comm))
        return proc if pid == g or same else f"{proc}/{comm}"

    keyed = task_keys.keyed(pixel).df("sched_switch", windowed=False)
    pairs = pl.concat(
        [
            sw.select(pl.col("next_pid").alias("pid"), pl.col("next_comm").cast(pl.Utf8).alias("comm")),
            sw.select(pl.col("prev_pid").alias("pid"), pl.col("prev_comm").cast(pl.Utf8).alias("comm")),
        ]
    )
    keys = pl.concat([keyed["next_comm"].cast(pl.Utf8).alias("key"), keyed["prev_comm"].cast(pl.Utf8).alias("key")])
    checked = pl.concat([pairs, keys.to_frame()], how="horizontal").unique()
    # every key is built from names only (process basename, comm): no pid of the run goes into it
    assert all(k == expected(p, c) for p, c, k in checked.iter_rows())
    for comm, groups in shared.items():
        got = set(checked.filter(pl.col("comm") == comm)["key"].to_list())
        assert len(got) >= len(groups), (comm, got)

    # the per-task metrics carry those keys: the threads of two processes that share a comm are two tasks
    vals = tasks.metrics(pixel, MetricOptions(top_tasks=10_000))
    groups = {v.group for v in vals if v.spec.group is Grouping.TASK}
    assert any(len({k for k in groups if k in set(checked.filter(pl.col("comm") == c)["key"])}) > 1 for c in shared)
    # a bare thread name still selects its keys (top_tasks=0: only the named ones)
    comm = next(iter(shared))
    named = placement.metrics(pixel, MetricOptions(tasks=(comm,), top_tasks=0))
    sel = {v.group for v in named if v.spec.group is Grouping.TASK}
    assert len(sel) > 1 and all(task_keys.matches(k, comm) for k in sel)


def test_a_trace_without_process_table_keeps_comm(traces):
    t = Trace(traces / "lisa" / "sched_load-trace.dat")
    assert "process" not in t.tables
    assert task_keys.keyed(t) is t
    groups = {v.group for v in tasks.metrics(t, MetricOptions()) if v.spec.group is Grouping.TASK}
    comms = set(t.df("sched_switch")["next_comm"].cast(pl.Utf8)) | set(t.df("sched_switch")["prev_comm"].cast(pl.Utf8))
    assert groups and groups <= comms
