"""cgroups: which cgroup each task was in, and wakeup latency and CPU time per cgroup.

Sources of membership (per thread id, over time):

* ``cgroup_attach_task`` (kernel event ``cgroup:cgroup_attach_task``: dst_root, dst_id, dst_level,
  dst_path, pid, comm): a task moved into ``dst_path`` (Android moves apps between ``/top-app``,
  ``/foreground``, ``/background``, ``/system-background`` as they change state);
* the collector's snapshot at trace start (abtest.collectors.annotate, marker-carried
  ``cgroup_attach_task: dst_path=<path> pid=<tid>``, ``source`` "marker"): where every thread already was;
* ``sched_process_fork`` (optional): a new task or thread starts in its parent's group (``source`` "fork";
  no attach event fires at fork), three generations deep.

A task's group holds from one record to the next; before its first record it is ``unknown`` (reported as
such, never guessed). cgroup v1 traces one event per hierarchy a task moves in; at equal timestamps the last
one wins (Android moves cpuset and cpu groups together, with the same path); pass ``root`` (dst_root) to
follow one hierarchy only.

Per cgroup: wakeup latency (abtest.analysis.latency's default definition, sched_wakeup -> switch-in; a
wakeup belongs to the group its task was in at the wakeup) and CPU time (sched_switch runs; a run belongs to
the group in force when it started), per cluster too. workload-processor groups the same way but takes the
tasks ever attached to a group in the trace for the whole trace.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis.latency import df_latency_stats
from abtest.analysis.meta_events import df_meta_events
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import MissingEventsError

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("cgroup_attach_task", "marker", "sched_process_fork", "sched_wakeup", "sched_wakeup_new")
UNKNOWN = "unknown"

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "df_membership_changes",
    "df_with_forks",
    "df_attribute",
    "df_cgroup_latency",
    "df_cgroup_runtime",
    "CgroupAnalysis",
    "metrics",
]


def df_membership_changes(
    cgroup_attach_task: pl.DataFrame | None, marker: pl.DataFrame | None = None, *, root: int | None = None
) -> pl.DataFrame:
    """``ts, pid (Int32), cgroup (Utf8 path), source`` ("kernel" | "marker"), sorted by ts (marker snapshot
    first at equal ts). Events: cgroup_attach_task; optional marker (the collector's snapshot)."""
    schema = {"ts": pl.Int64, "pid": pl.Int32, "cgroup": pl.Utf8, "source": pl.Utf8}
    parts = []
    if marker is not None and not marker.is_empty():
        snap = df_meta_events(marker, "cgroup_attach_task", {"dst_path": pl.Utf8, "pid": pl.Int64})
        parts.append(
            snap.drop_nulls(["dst_path", "pid"]).select(
                "ts", pl.col("pid").cast(pl.Int32), pl.col("dst_path").alias("cgroup"), pl.lit("marker").alias("source")
            )
        )
    if cgroup_attach_task is not None and not cgroup_attach_task.is_empty():
        ev = cgroup_attach_task
        if root is not None and "dst_root" in ev.columns:
            ev = ev.filter(pl.col("dst_root") == root)
        path = "dst_path" if "dst_path" in ev.columns else "path"
        parts.append(
            ev.select(
                pl.col("ts").cast(pl.Int64),
                pl.col("pid").cast(pl.Int32),
                pl.col(path).cast(pl.Utf8).alias("cgroup"),
                pl.lit("kernel").alias("source"),
            )
        )
    if not parts:
        return pl.DataFrame(schema=schema)
    order = (pl.col("source") == "kernel").cast(pl.Int8)
    return pl.concat([p.cast(schema) for p in parts]).with_row_index("_i").sort("ts", order, "_i").drop("_i")


def df_with_forks(changes: pl.DataFrame, sched_process_fork: pl.DataFrame | None, generations: int = 3) -> pl.DataFrame:
    """``changes`` (df_membership_changes) + one ``source="fork"`` row per task forked while its parent's group
    was known and before the child has a record of its own (children of such children too, ``generations``
    deep). Events: sched_process_fork (parent_pid, child_pid)."""
    if sched_process_fork is None or sched_process_fork.is_empty() or changes.is_empty():
        return changes
    forks = sched_process_fork.select(
        pl.col("ts").cast(pl.Int64),
        pl.col("parent_pid").cast(pl.Int32).alias("pid"),
        pl.col("child_pid").cast(pl.Int32).alias("child"),
    )
    out = changes
    for _ in range(generations):
        first = out.group_by("pid").agg(pl.col("ts").min().alias("_first"))
        todo = (
            forks.join(first.rename({"pid": "child"}), on="child", how="left")
            .filter(pl.col("_first").is_null() | (pl.col("ts") < pl.col("_first")))
            .drop("_first")
        )
        att = df_attribute(todo, out, ts="ts").filter(pl.col("cgroup") != UNKNOWN)
        new = att.select("ts", pl.col("child").alias("pid"), "cgroup", pl.lit("fork").alias("source"))
        new = new.join(out.select("pid", "ts"), on=["pid", "ts"], how="anti")
        if new.is_empty():
            break
        out = pl.concat([out, new.cast(out.schema)]).sort("ts", maintain_order=True)
    return out


def df_attribute(rows: pl.DataFrame, membership: pl.DataFrame, *, ts: str, pid: str = "pid") -> pl.DataFrame:
    """``rows`` + ``cgroup``: the group its task was in at ``rows[ts]`` (last membership record at or before it;
    ``"unknown"`` when none)."""
    m = (
        membership.select(pl.col("pid").cast(pl.Int32).alias(pid), pl.col("ts").alias(ts), "cgroup")
        .unique([pid, ts], keep="last", maintain_order=True)
        .sort(pid, ts)
    )
    out = (
        rows.with_columns(pl.col(pid).cast(pl.Int32))
        .sort(pid, ts)
        .join_asof(m, on=ts, by=pid, strategy="backward", check_sortedness=False)
    )
    return out.with_columns(pl.col("cgroup").fill_null(UNKNOWN))


def df_cgroup_latency(latency: pl.DataFrame, membership: pl.DataFrame) -> pl.DataFrame:
    """Wakeup latency statistics per cgroup (df_latency_stats columns; ``latency``: df_wakeup_latency rows)."""
    return df_latency_stats(df_attribute(latency, membership, ts="wakeup_ts"), by="cgroup")


def df_cgroup_runtime(
    runs: pl.DataFrame, membership: pl.DataFrame, clusters: pl.DataFrame | None = None, *, window_ns: int
) -> pl.DataFrame:
    """CPU time per cgroup: ``cgroup, tasks, runtime_ns, runtime_ms_per_s`` (per second of window) and, with
    ``clusters`` (cpu, cluster), one ``<cluster>_pct`` column each (% of the group's CPU time on that cluster).
    ``runs``: placement.df_task_intervals (cpu, ts, dur, pid, comm)."""
    att = df_attribute(runs, membership, ts="ts")
    out = att.group_by("cgroup").agg(
        pl.col("pid").n_unique().cast(pl.Int64).alias("tasks"), pl.col("dur").sum().alias("runtime_ns")
    )
    out = out.with_columns((pl.col("runtime_ns") / 1e6 / (window_ns / 1e9)).alias("runtime_ms_per_s"))
    if clusters is not None and not clusters.is_empty():
        per = (
            att.join(clusters.select(pl.col("cpu").cast(pl.Int32), "cluster"), on="cpu", how="left")
            .group_by("cgroup", "cluster")
            .agg(pl.col("dur").sum().alias("_t"))
        )
        wide = per.pivot(on="cluster", index="cgroup", values="_t")
        cols = [c for c in wide.columns if c != "cgroup"]
        out = (
            out.join(wide, on="cgroup", how="left")
            .with_columns([(100.0 * pl.col(c).fill_null(0) / pl.col("runtime_ns")).alias(f"{c}_pct") for c in cols])
            .drop(cols)
        )
    return out.sort("runtime_ns", descending=True)


class CgroupAnalysis:
    """cgroup attribution of one trace (``trace.cgroups``)."""

    def __init__(self, trace, root: int | None = None):
        self.trace = trace
        self.root = root

    def df_membership_changes(self) -> pl.DataFrame:
        t = self.trace
        ev = t.df("cgroup_attach_task", windowed=False) if "cgroup_attach_task" in t.tables else None
        mk = t.df("marker", windowed=False) if "marker" in t.tables else None
        ch = df_membership_changes(ev, mk, root=self.root)
        if ch.is_empty():
            raise MissingEventsError("cgroups", ["cgroup_attach_task"], str(t.path))
        forks = t.df("sched_process_fork", windowed=False) if "sched_process_fork" in t.tables else None
        return df_with_forks(ch, forks)

    def df_latency(self) -> pl.DataFrame:
        """Wakeup latency rows (default definition) + cgroup."""
        from abtest.analysis.latency import LatencyAnalysis

        return df_attribute(LatencyAnalysis(self.trace).df_latency(), self.df_membership_changes(), ts="wakeup_ts")

    def df_latency_stats(self) -> pl.DataFrame:
        return df_latency_stats(self.df_latency(), by="cgroup")

    def df_runtime(self) -> pl.DataFrame:
        from abtest.analysis.clusters import trace_clusters
        from abtest.analysis.placement import df_task_intervals

        t = self.trace
        t.require("cgroup CPU time", "sched_switch")
        members = self.df_membership_changes()  # first: a trace without cgroup information stops here, cheaply
        runs = df_task_intervals(t.df("sched_switch", windowed=False), start_ns=t.start_ns, end_ns=t.end_ns)
        return df_cgroup_runtime(runs, members, trace_clusters(t), window_ns=t.end_ns - t.start_ns)


def _cgroup_rows(trace, fn) -> pl.DataFrame | None:
    """fn(CgroupAnalysis) when the trace has cgroup information and sched_switch, else None."""
    ca = CgroupAnalysis(trace)
    try:
        ca.df_membership_changes()
    except MissingEventsError:
        return None
    return fn(ca) if "sched_switch" in trace.tables else None


def _runtime_rows(ca: CgroupAnalysis) -> pl.DataFrame:
    return ca.df_runtime().with_columns((pl.col("runtime_ns") / 1e9).alias("runtime_s"))


def _cluster_rows(ca: CgroupAnalysis) -> pl.DataFrame:
    rt = ca.df_runtime()
    pct = [c for c in rt.columns if c.endswith("_pct")]
    return (
        rt.select("cgroup", *pct)
        .unpivot(pct, index="cgroup", variable_name="cluster", value_name="pct")
        .with_columns(pl.col("cluster").str.strip_suffix("_pct"))
    )


def _source_rows(ca: CgroupAnalysis) -> pl.DataFrame:
    ch = ca.df_membership_changes()
    counts = dict(ch.group_by("source").len().iter_rows())
    return pl.DataFrame(
        {
            "source": ["kernel_events", "fork_inherited", "snapshot_tasks"],
            "count": [
                int(counts.get("kernel", 0)),
                int(counts.get("fork", 0)),
                int(ch.filter(pl.col("source") == "marker")["pid"].n_unique()),
            ],
        }
    )


TABLES = (
    TableSpec(
        "runtime",
        "CPU time per cgroup",
        "cgroup tasks runtime_s[s] runtime_ms_per_s[ms/s]",
        lambda t: _cgroup_rows(t, _runtime_rows),
    ),
    TableSpec(
        "cluster_runtime",
        "CPU time per cgroup and cluster (% of the cgroup's CPU time)",
        "cgroup cluster pct[%]",
        lambda t: _cgroup_rows(t, _cluster_rows),
        keys=2,
    ),
    TableSpec(
        "latency",
        "Wakeup latency per cgroup",
        "cgroup wakeups gmean_us[us] p50_us[us] p95_us[us] p99_us[us]",
        lambda t: _cgroup_rows(t, CgroupAnalysis.df_latency_stats) if "sched_wakeup" in t.tables else None,
    ),
    TableSpec(
        "sources",
        "Where cgroup membership came from",
        "source count",
        lambda t: _cgroup_rows(t, _source_rows),
    ),
)


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_G = "of the tasks in cgroup {cgroup} at the time (cgroup_attach_task events and the collector's start snapshot)"
CGROUP_LATENCY_GMEAN_US = MetricSpec(
    "cgroup.{cgroup}.latency_gmean_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CGROUP,
    title="cgroup wakeup latency gmean",
    description=f"Geometric mean wakeup latency (sched_wakeup -> switch-in) {_G}.",
    window=WindowCombine.EVENTS_GEO,
)
CGROUP_LATENCY_P95_US = MetricSpec(
    "cgroup.{cgroup}.latency_p95_us",
    "us",
    Direction.LOWER,
    Aggregation.GMEAN,
    Grouping.CGROUP,
    title="cgroup wakeup latency p95",
    description=f"95th percentile wakeup latency (sched_wakeup -> switch-in) {_G}.",
    window=WindowCombine.QUANTILE,
)
CGROUP_RUNTIME = MetricSpec(
    "cgroup.{cgroup}.runtime_ms_per_s",
    "ms/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CGROUP,
    title="cgroup CPU time",
    description=f"CPU time per second of window, all CPUs, {_G}.",
    window=WindowCombine.RATE,
)

METRICS = (CGROUP_LATENCY_GMEAN_US, CGROUP_LATENCY_P95_US, CGROUP_RUNTIME)


def metrics(trace, options=None) -> list[MetricValue]:
    """Per cgroup: CPU time, and wakeup latency when the trace has sched_wakeup (groups with at least
    ``options.min_task_wakeups`` wakeups). MissingEventsError without any cgroup information."""
    ca = CgroupAnalysis(trace)
    out = [
        MetricValue(CGROUP_RUNTIME, float(r["runtime_ms_per_s"]), r["cgroup"])
        for r in ca.df_runtime().iter_rows(named=True)
    ]  # one row per cgroup
    if "sched_wakeup" in trace.tables:
        floor = getattr(options, "min_task_wakeups", 10)
        for r in ca.df_latency_stats().filter(pl.col("wakeups") >= floor).iter_rows(named=True):
            if r["gmean_us"] is not None:
                out.append(MetricValue(CGROUP_LATENCY_GMEAN_US, float(r["gmean_us"]), r["cgroup"]))
            out.append(MetricValue(CGROUP_LATENCY_P95_US, float(r["p95_us"]), r["cgroup"]))
    return out
