"""Task placement: where tasks ran (per-CPU residency), how often they moved (migrations), and how
evenly a group of tasks spreads over the CPUs of each cluster (balance).

Events: ``sched_switch`` (required); ``sched_migrate_task`` (optional: the kernel's migration events;
without it only observed CPU changes are counted). Record with ``-e sched:sched_switch
-e sched:sched_migrate_task``. Clusters are the platform's frequency domains, or one cluster of all
CPUs when the platform is unknown.

Balance (seed: 8 uclamp-capped tasks on 4 little CPUs should sit 2 per CPU). For the N selected
tasks whose *home cluster* (where they ran longest) is a cluster of M CPUs:

* ``expected_tasks_per_cpu`` = N / M; ``tasks`` on a CPU = tasks whose dominant CPU (longest run
  time inside the cluster) is that CPU; ``max_task_deviation`` = max over CPUs of
  |tasks - N / M|;
* ``runtime_share_pct`` of a CPU = the selected tasks' run time on it / their run time on the whole
  cluster; ``balance_index`` = 1 - sum_i |s_i - 1/M| / (2 (1 - 1/M)) with s_i the shares (0..1):
  1 = perfectly even, 0 = everything on one CPU; null when M = 1.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from abtest.analysis import task_keys
from abtest.analysis.intervals import window_of
from abtest.analysis.per_trace import per_trace
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine

EVENTS = ("sched_switch",)
OPTIONAL_EVENTS = ("sched_migrate_task",)


def df_task_intervals(
    sched_switch: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    include_idle: bool = False,
) -> pl.DataFrame:
    """Which task ran on each CPU, as intervals over ``[start_ns, end_ns)``.

    Needs: sched_switch (whole table, so the task running at the window start is carried in; before
    a CPU's first switch its ``prev`` task is taken as running).

    Returns cpu (Int32), ts (ns), dur (ns), pid (Int32, 0 = idle, dropped unless include_idle),
    comm (Categorical). The rules of intervals.df_intervals keyed by CPU with the next task of each switch
    as the value (the last switch of a timestamp counts; consecutive equal tasks merged), in one pass in time
    order (native/sim/src/placement.rs; readable reference: tests/oracles/placement.py). A switch without a
    time or a CPU is not placed; the runs of a null pid (perfetto's compact sched format does not know the
    task a CPU ran before its first recorded switch) are left out.
    """
    from abtest.analysis import sim_native

    lo, hi = window_of(sched_switch, start_ns, end_ns)
    return sim_native.placement_runs(sched_switch, start_ns=lo, end_ns=hi, include_idle=include_idle)


def df_task_residency(intervals: pl.DataFrame) -> pl.DataFrame:
    """Run time of each task on each CPU.

    Needs: sched_switch (via df_task_intervals). Returns pid, comm (last name seen), cpu,
    time_ns (ns), pct (% of the task's total run time), task_time_ns (task total, ns).
    """
    names = intervals.group_by("pid").agg(pl.col("comm").get(pl.col("ts").arg_max()))
    return _residency(intervals.group_by(["pid", "cpu"]).agg(pl.col("dur").sum().alias("time_ns")), names)


def _residency(per_cpu: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """df_task_residency from the run time per task and CPU (pid, cpu, time_ns) and each task's name (pid,
    comm)."""
    res = per_cpu.with_columns(pl.col("time_ns").sum().over("pid").alias("task_time_ns"))
    return (
        res.with_columns((100.0 * pl.col("time_ns") / pl.col("task_time_ns")).alias("pct"))
        .join(names, on="pid")
        .select("pid", "comm", "cpu", "time_ns", "pct", "task_time_ns")
        .sort(["task_time_ns", "pid", "cpu"], descending=[True, False, False])
    )


def df_migrations(
    intervals: pl.DataFrame,
    sched_migrate_task: pl.DataFrame | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> pl.DataFrame:
    """Migrations per task.

    Needs: sched_switch (via df_task_intervals); sched_migrate_task optional.
    Returns pid, comm, cpus_used (distinct CPUs it ran on), observed_cpu_changes (consecutive runs
    on different CPUs), migrate_events (sched_migrate_task events of the pid inside the window;
    null when the table is not given). Tasks that never ran but migrated appear with 0 runs.
    """
    # consecutive runs of a task (by start time) on different CPUs; sorted numbers only, names apart
    # (pid, ts) order as two stable one-key sorts: 3x faster than one sort on both keys here
    runs = intervals.select("pid", "ts", "cpu").sort("ts").sort("pid", maintain_order=True)
    chg = (pl.col("pid") == pl.col("pid").shift(1)) & (pl.col("cpu") != pl.col("cpu").shift(1))
    obs = (
        runs.group_by("pid")
        .agg(pl.col("cpu").n_unique().cast(pl.Int64).alias("cpus_used"))
        .join(
            runs.filter(chg.fill_null(False))
            .group_by("pid")
            .agg(pl.len().cast(pl.Int64).alias("observed_cpu_changes")),
            on="pid",
            how="left",
        )
        .join(intervals.group_by("pid").agg(pl.col("comm").get(pl.col("ts").arg_max())), on="pid")
        .with_columns(pl.col("observed_cpu_changes").fill_null(0))
        .select("pid", "comm", "cpus_used", "observed_cpu_changes")
    )
    if sched_migrate_task is None:
        return obs.with_columns(pl.lit(None, pl.Int64).alias("migrate_events")).sort("pid")
    mig = sched_migrate_task
    if start_ns is not None:
        mig = mig.filter(pl.col("ts") >= start_ns)
    if end_ns is not None:
        mig = mig.filter(pl.col("ts") < end_ns)
    mcount = mig.group_by(pl.col("pid").cast(pl.Int32)).agg(
        pl.len().cast(pl.Int64).alias("migrate_events"), pl.col("comm").cast(pl.Utf8).last().alias("_mcomm")
    )
    out = obs.join(mcount, on="pid", how="full", coalesce=True)
    return (
        out.with_columns(
            pl.coalesce("comm", "_mcomm").alias("comm"),
            pl.col("cpus_used", "observed_cpu_changes", "migrate_events").fill_null(0),
        )
        .drop("_mcomm")
        .select("pid", "comm", "cpus_used", "observed_cpu_changes", "migrate_events")
        .sort("pid")
    )


def _select_tasks(residency: pl.DataFrame, tasks, min_runtime_ns: int) -> pl.DataFrame:
    res = residency.filter(pl.col("task_time_ns") >= min_runtime_ns)
    if tasks is None:
        return res
    tasks = list(tasks)
    pids = [t for t in tasks if isinstance(t, int)]
    comms = [t for t in tasks if isinstance(t, str)]
    return res.filter(pl.col("pid").is_in(pids) | pl.col("comm").is_in(comms))


def df_balance_per_cpu(
    residency: pl.DataFrame, clusters: pl.DataFrame, *, tasks=None, min_runtime_ns: int = 0
) -> pl.DataFrame:
    """Per cluster and CPU: how the selected tasks spread (see the module docstring).

    Needs: sched_switch (via df_task_residency). ``clusters``: cpu, cluster. ``tasks``: pids (int)
    and/or comms (str) to consider (default all); ``min_runtime_ns``: ignore tasks that ran less.

    Every CPU of ``clusters`` appears (a cluster with no home task has n_tasks 0 and null shares).
    Returns cluster, cpu, tasks (count of home tasks whose dominant CPU this is), n_tasks (N),
    n_cpus (M), expected_tasks_per_cpu (N/M), runtime_ns, runtime_share_pct, expected_share_pct
    (100/M).
    """
    cl = clusters.select(pl.col("cpu").cast(pl.Int32), pl.col("cluster").cast(pl.Int32))
    res = _select_tasks(residency, tasks, min_runtime_ns).join(cl, on="cpu", how="inner")
    per_cl = res.group_by(["pid", "cluster"]).agg(pl.col("time_ns").sum().alias("cl_ns"))
    home = (
        per_cl.sort(["pid", "cl_ns", "cluster"], descending=[False, True, False])
        .group_by("pid")
        .first()
        .select("pid", pl.col("cluster").alias("home"))
    )
    res = res.join(home, on="pid").filter(pl.col("cluster") == pl.col("home"))
    dominant = (
        res.sort(["pid", "time_ns", "cpu"], descending=[False, True, False])
        .group_by("pid")
        .first()
        .select("pid", "cluster", "cpu")
    )
    ncpu = cl.group_by("cluster").agg(pl.len().cast(pl.Int64).alias("n_cpus"))
    ntask = home.group_by(pl.col("home").alias("cluster")).agg(pl.len().cast(pl.Int64).alias("n_tasks"))
    counts = dominant.group_by(["cluster", "cpu"]).agg(pl.len().cast(pl.Int64).alias("tasks"))
    rt = res.group_by(["cluster", "cpu"]).agg(pl.col("time_ns").sum().alias("runtime_ns"))
    grid = cl.join(ntask, on="cluster", how="left").join(ncpu, on="cluster")
    out = (
        grid.join(counts, on=["cluster", "cpu"], how="left")
        .join(rt, on=["cluster", "cpu"], how="left")
        .with_columns(pl.col("tasks", "runtime_ns", "n_tasks").fill_null(0))
    )
    return (
        out.with_columns(
            (pl.col("n_tasks") / pl.col("n_cpus")).alias("expected_tasks_per_cpu"),
            pl.when(pl.col("runtime_ns").sum().over("cluster") > 0)
            .then(100.0 * pl.col("runtime_ns") / pl.col("runtime_ns").sum().over("cluster"))
            .alias("runtime_share_pct"),
            (100.0 / pl.col("n_cpus")).alias("expected_share_pct"),
        )
        .select(
            "cluster",
            "cpu",
            "tasks",
            "n_tasks",
            "n_cpus",
            "expected_tasks_per_cpu",
            "runtime_ns",
            "runtime_share_pct",
            "expected_share_pct",
        )
        .sort(["cluster", "cpu"])
    )


def df_balance(per_cpu: pl.DataFrame) -> pl.DataFrame:
    """Per cluster balance from df_balance_per_cpu: cluster, n_tasks, n_cpus, expected_tasks_per_cpu,
    max_task_deviation (max |tasks - N/M| over the CPUs), balance_index (0..1, null when M = 1)."""
    share = pl.col("runtime_share_pct") / 100.0
    m = pl.col("n_cpus").first()
    return (
        per_cpu.group_by("cluster")
        .agg(
            pl.col("n_tasks").first(),
            pl.col("n_cpus").first(),
            pl.col("expected_tasks_per_cpu").first(),
            (pl.col("tasks") - pl.col("expected_tasks_per_cpu")).abs().max().alias("max_task_deviation"),
            pl.when((m > 1) & (pl.col("n_tasks").first() > 0))
            .then(1.0 - (share - 1.0 / m).abs().sum() / (2.0 * (1.0 - 1.0 / m)))
            .alias("balance_index"),
        )
        .sort("cluster")
    )


def plot_task_residency(residency: pl.DataFrame, top_tasks: int = 15, *, ax=None):
    """Heat map: % of each task's run time per CPU, for the top_tasks longest-running tasks.
    Returns the matplotlib Figure (drawn into ``ax`` when given)."""
    import matplotlib.pyplot as plt

    top = (
        residency.select("pid", "comm", "task_time_ns")
        .unique("pid")
        .sort("task_time_ns", descending=True)
        .head(top_tasks)
    )
    cpus = sorted(residency["cpu"].unique().to_list())
    wide = (
        residency.join(top.select("pid"), on="pid")
        .pivot(on="cpu", index="pid", values="pct")
        .join(top, on="pid")
        .sort("task_time_ns", descending=True)
    )
    mat = np.nan_to_num(
        np.array(
            [wide[str(c)].to_numpy() if str(c) in wide.columns else np.zeros(wide.height) for c in cpus], dtype=float
        ).T
    )
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, max(2.5, 0.3 * wide.height + 1)))
    im = ax.imshow(mat, aspect="auto", cmap="viridis", vmin=0, vmax=100)
    ax.set_xticks(range(len(cpus)), [str(c) for c in cpus])
    ax.set_yticks(range(wide.height), [f"{c}:{p}" for p, c in zip(wide["pid"], wide["comm"])], fontsize="small")
    ax.set_xlabel("CPU")
    ax.set_title("Task run time per CPU (% of the task's run time)")
    fig.colorbar(im, ax=ax, label="%")
    return fig


def plot_balance(per_cpu: pl.DataFrame, *, ax=None):
    """Bars of tasks per CPU vs the even split N/M, one group per cluster (from df_balance_per_cpu).
    Returns the matplotlib Figure (drawn into ``ax`` when given)."""
    import matplotlib.pyplot as plt

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 3.5))
    x = np.arange(per_cpu.height)
    ax.bar(x, per_cpu["tasks"].to_numpy(), label="tasks (dominant CPU)")
    ax.step(
        np.append(x, x[-1] + 1) - 0.5 if len(x) else x,
        np.append(per_cpu["expected_tasks_per_cpu"].to_numpy(), per_cpu["expected_tasks_per_cpu"].to_numpy()[-1:]),
        where="post",
        color="k",
        label="even split N/M",
    )
    ax.set_xticks(x, [f"{c}/{u}" for c, u in zip(per_cpu["cluster"], per_cpu["cpu"])])
    ax.set_xlabel("cluster/CPU")
    ax.set_ylabel("tasks")
    ax.set_title("Task placement balance")
    ax.legend(fontsize="small")
    return fig


class PlacementAnalysis:
    """Placement analyses of one trace (window = the trace's window)."""

    def __init__(self, trace):
        self.trace = task_keys.keyed(trace)  # comm columns hold task keys (abtest.analysis.task_keys)

    def df_intervals(self, include_idle: bool = False) -> pl.DataFrame:
        self.trace.require("placement", *EVENTS)
        return df_task_intervals(
            self.trace.df("sched_switch", windowed=False),
            start_ns=self.trace.start_ns,
            end_ns=self.trace.end_ns,
            include_idle=include_idle,
        )

    def df_residency(self) -> pl.DataFrame:
        return df_task_residency(self.df_intervals())

    def df_migrations(self) -> pl.DataFrame:
        mig = (
            self.trace.df("sched_migrate_task", windowed=False) if ("sched_migrate_task" in self.trace.tables) else None
        )
        return df_migrations(self.df_intervals(), mig, start_ns=self.trace.start_ns, end_ns=self.trace.end_ns)

    def clusters(self) -> pl.DataFrame:
        from abtest.analysis.idle import clusters_of

        return clusters_of(self.trace)

    def df_balance_per_cpu(self, tasks=None, min_runtime_ns: int = 0) -> pl.DataFrame:
        return df_balance_per_cpu(self.df_residency(), self.clusters(), tasks=tasks, min_runtime_ns=min_runtime_ns)

    def df_balance(self, tasks=None, min_runtime_ns: int = 0) -> pl.DataFrame:
        return df_balance(self.df_balance_per_cpu(tasks, min_runtime_ns))

    def plot_residency(self, top_tasks: int = 15, ax=None):
        return plot_task_residency(self.df_residency(), top_tasks, ax=ax)

    def plot_balance(self, tasks=None, min_runtime_ns: int = 0, ax=None):
        return plot_balance(self.df_balance_per_cpu(tasks, min_runtime_ns), ax=ax)


def _folded(trace, runs_from_ns: int) -> dict[str, pl.DataFrame]:
    """sim_native.placement_fold of the trace's runs from runs_from_ns to its end, counted from its start
    (readable reference: tests/oracles/placement.py folded)."""
    from abtest.analysis import sim_native

    return sim_native.placement_fold(
        trace.df("sched_switch", windowed=False), start_ns=runs_from_ns, end_ns=trace.end_ns, from_ns=trace.start_ns
    )


def _migrate_events(trace) -> int:
    """sched_migrate_task events in the window (df_migrations' migrate_events, summed over tasks)."""
    mig = trace.df("sched_migrate_task", windowed=False)
    return mig.filter((pl.col("ts") >= trace.start_ns) & (pl.col("ts") < trace.end_ns)).height


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
MIGRATIONS_PER_S = MetricSpec(
    "placement.cpu_changes_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    title="CPU changes",
    description="Times a task ran on a different CPU than on its previous run (from sched_switch), per second.",
    window=WindowCombine.RATE,
)
BALANCE_INDEX = MetricSpec(
    "placement.cluster.{cluster}.balance_index",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="placement balance",
    description="Balance index of the cluster's busy tasks over its CPUs (df_balance: 1 = tasks spread evenly).",
    window=WindowCombine.TIME_APPROX,
)
TASK_RUNTIME = MetricSpec(
    "placement.task.{task}.runtime_ms_per_s",
    "ms/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task CPU time",
    description="CPU time of the threads named {task} (comm at switch-in; same-name threads pooled) per second "
    "of window, all CPUs.",
    window=WindowCombine.RATE,
)
TASK_ACTIVATIONS = MetricSpec(
    "placement.task.{task}.activations_per_s",
    "1/s",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.TASK,
    title="task activations",
    description="Switch-ins of threads named {task} per second of window.",
    window=WindowCombine.RATE,
)

METRICS = (MIGRATIONS_PER_S, BALANCE_INDEX, TASK_RUNTIME, TASK_ACTIVATIONS)


@per_trace  # the runs of one trace, read once for its metrics and its declared tables
def _runs(trace) -> tuple[pl.DataFrame, pl.DataFrame, int, pl.DataFrame]:
    """(residency per pid and CPU, CPU time and switch-ins per name, CPU changes, df_balance_per_cpu of the tasks
    that ran at least 1 % of the window) of the trace's window. A view
    with a history (abtest.analysis.windowed) reads the runs from the history's start, so that a CPU change and a
    switch-in count in the window where the later run starts, and a run carried into the window counts its time
    in it but not as a switch-in."""
    keyed = task_keys.keyed(trace)
    keyed.require("placement", *EVENTS)
    start, reach = keyed.start_ns, keyed.reach_start_ns
    runs_from = reach if reach is not None and reach < start else start
    folded = _folded(keyed, runs_from)  # the runs folded as they are made
    n_changes = int(folded["tasks"]["cpu_changes"].sum())
    res = _residency(folded["residency"], folded["tasks"].select("pid", "comm"))
    per = folded["names"].sort(["run_ns", "comm"], descending=[True, False])
    min_ns = int((trace.end_ns - trace.start_ns) * 0.01)
    per_cpu = df_balance_per_cpu(res, PlacementAnalysis(keyed).clusters(), min_runtime_ns=min_ns)
    return res, per, n_changes, per_cpu


def _balance_rows(trace) -> pl.DataFrame:
    per_cpu = _runs(trace)[3]
    bal = df_balance(per_cpu).select("cluster", "expected_tasks_per_cpu", "balance_index")
    return per_cpu.select("cluster", "cpu", "tasks", "runtime_share_pct").join(bal, on="cluster", how="left")


def _top_task_rows(trace, top: int = 10) -> pl.DataFrame:
    res = _runs(trace)[0]
    top_pids = (
        res.select("pid", "task_time_ns")
        .unique("pid")
        .sort(["task_time_ns", "pid"], descending=[True, False])
        .head(top)
    )
    return (
        res.join(top_pids.select("pid", pl.int_range(pl.len()).alias("rank")), on="pid")
        .sort("rank", "cpu")
        .select("comm", "pid", (pl.col("task_time_ns") / 1e9).alias("runtime_s"), "cpu", "pct")
    )


def _count_rows(trace) -> pl.DataFrame:
    res, _, n_changes, _ = _runs(trace)
    mig = _migrate_events(trace) if "sched_migrate_task" in trace.tables else None
    return pl.DataFrame(
        {
            "quantity": ["tasks that ran", "sched_migrate_task events", "observed CPU changes"],
            "count": [int(res["pid"].n_unique()), mig, n_changes],
        },
        schema={"quantity": pl.Utf8, "count": pl.Int64},
    )


TABLES = (
    TableSpec("counts", "Tasks and migrations in the window", "quantity count", _count_rows),
    TableSpec(
        "balance",
        "Placement balance (tasks running >= 1 % of the window, each counted on the CPU where it ran longest)",
        "cluster cpu tasks expected_tasks_per_cpu runtime_share_pct[%] balance_index",
        _balance_rows,
        keys=2,
        note="balance index: 1 = runtime spread evenly over the cluster's CPUs, 0 = all on one CPU",
    ),
    TableSpec(
        "top_tasks",
        "CPU time of the 10 busiest tasks (% of each task's run time per CPU)",
        "comm pid runtime_s[s] cpu pct[%]",
        _top_task_rows,
        keys=2,
        note="every task: Trace(FILE).placement.df_residency()",
    ),
)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared placement metrics of one trace. Per task: names in ``options.tasks`` plus the
    ``options.top_tasks`` names with the most CPU time (runs: _runs)."""
    _, per, n_changes, per_cpu = _runs(trace)
    win_s = max((trace.end_ns - trace.start_ns) / 1e9, 1e-9)
    out: list[MetricValue] = [MetricValue(MIGRATIONS_PER_S, n_changes / win_s)]
    bal = df_balance(per_cpu)
    out += [
        MetricValue(BALANCE_INDEX, float(b), str(c))
        for c, b in bal.select("cluster", "balance_index").iter_rows()
        if b is not None
    ]
    named = tuple(getattr(options, "tasks", ()) or ())
    top = getattr(options, "top_tasks", 20)
    chosen = per.filter(
        pl.col("comm").is_in(task_keys.select(per["comm"].to_list(), named)) | (pl.int_range(pl.len()) < top)
    )
    for comm, run_ns, runs_n in chosen.iter_rows():  # at most top + len(named) task names
        out.append(MetricValue(TASK_RUNTIME, run_ns / 1e6 / win_s, comm))
        out.append(MetricValue(TASK_ACTIVATIONS, runs_n / win_s, comm))
    return out
