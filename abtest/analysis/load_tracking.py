"""Load tracking: util vs runnable per CPU and per task, contention, PELT / window simulations, boost what-if.

Signals come from the kernel's PELT trace events when present (``sched_pelt_cfs`` for the CPU's root CFS
runqueue, ``sched_pelt_se`` for tasks; any variant, see abtest.trace.schema), else from the PELT simulation
(abtest.analysis.pelt_sim) over sched_switch. The kernel's values are used for every signal the trace
carries; only what it lacks is simulated. Kernels before 5.7 have util (and load) but no runnable_avg:
util and load then come from the kernel and runnable alone is simulated (seeded at each CPU's first kernel
util sample). Each column says where it comes from: ``util_source``, ``runnable_source``, ``load_source``
("kernel" | "simulated" | null when absent), and ``source`` summarises them ("kernel", "simulated" or
"kernel util, simulated runnable").

Signal frames: ``cpu`` (or ``pid``, ``comm``), ``ts`` (ns), ``util``, ``runnable``, ``load`` (PELT units:
util/runnable 0..1024 x CPUs' capacity scale; runnable of a runqueue may exceed 1024 with several runnable
tasks; null when not known), the source columns. Values hold until the next sample of the same column.
"""

from __future__ import annotations

import polars as pl

from abtest.analysis import pelt_sim, window_sim
from abtest.analysis.intervals import df_intervals, window_of
from abtest.analysis.per_trace import per_trace
from abtest.analysis.platform import trace_platform
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue, TableSpec, WindowCombine
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError

# sched_switch (enough for the simulated signals) or the kernel's sched_pelt_cfs: metrics() raises
# MissingEventsError when the trace has neither
EVENTS: tuple[str, ...] = ()
OPTIONAL_EVENTS = (
    "sched_switch",
    "sched_pelt_cfs",
    "sched_pelt_se",
    "cpu_frequency",
    "sched_wakeup",
    "sched_waking",
    "sched_wakeup_new",
    "sched_migrate_task",
    "cpu_idle",
)
KERNEL_EVENTS = ("sched_pelt_cfs", "sched_pelt_se")

__all__ = [
    "EVENTS",
    "OPTIONAL_EVENTS",
    "df_cpu_signals_kernel",
    "df_task_signals_kernel",
    "df_contention",
    "plot_cpu_util_vs_runnable",
    "LoadTrackingAnalysis",
]


def _col_or_null(df: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Float64) if name in df.columns else pl.lit(None, pl.Float64).alias(name)


def df_cpu_signals_kernel(sched_pelt_cfs: pl.DataFrame) -> pl.DataFrame:
    """Kernel root-runqueue signals per CPU: ``cpu, ts, util, runnable, load, source="kernel"``.

    Only the root cfs_rq (path "/" when the variant has a path; group runqueues are dropped). The CPU is the
    event's own cpu field. Events: sched_pelt_cfs (sched_load_cfs_rq, lisa__sched_pelt_cfs, sched_load_avg_cpu).
    """
    df = sched_pelt_cfs
    if "path" in df.columns:
        df = df.filter(pl.col("path").cast(pl.Utf8) == "/")
    cpu = pl.col("field_cpu") if "field_cpu" in df.columns else pl.col("cpu")
    return df.select(
        cpu.cast(pl.Int32).alias("cpu"),
        "ts",
        _col_or_null(df, "util"),
        _col_or_null(df, "runnable"),
        _col_or_null(df, "load"),
        pl.lit("kernel").alias("source"),
    ).sort("cpu", "ts")


def df_task_signals_kernel(sched_pelt_se: pl.DataFrame) -> pl.DataFrame:
    """Kernel per-task signals: ``pid, comm, cpu, ts, util, runnable, load, source="kernel"`` (tasks only:
    pid > 0; group entities are dropped). Events: sched_pelt_se (sched_load_se, lisa__sched_pelt_se,
    sched_load_avg_task)."""
    df = sched_pelt_se.filter(pl.col("pid") > 0) if "pid" in sched_pelt_se.columns else sched_pelt_se
    cpu = pl.col("field_cpu") if "field_cpu" in df.columns else pl.col("cpu")
    comm = pl.col("comm").cast(pl.Utf8) if "comm" in df.columns else pl.lit(None, pl.Utf8).alias("comm")
    return df.select(
        pl.col("pid").cast(pl.Int64),
        comm,
        cpu.cast(pl.Int32).alias("cpu"),
        "ts",
        _col_or_null(df, "util"),
        _col_or_null(df, "runnable"),
        _col_or_null(df, "load"),
        pl.lit("kernel").alias("source"),
    ).sort("pid", "ts")


_SIGNAL_COLS = ["cpu", "ts", "util", "runnable", "load", "util_source", "runnable_source", "load_source", "source"]


def df_merge_signals(kernel: pl.DataFrame, runnable: pl.DataFrame) -> pl.DataFrame:
    """Kernel util/load samples (``cpu, ts, util, load, util_source, load_source``) and another runnable signal
    (``cpu, ts, runnable, runnable_source``) on one per-CPU time axis: every timestamp of either, each column
    holding its last sample (null before its first). ``source`` names the mix ("kernel util, simulated
    runnable")."""
    a = kernel.select("cpu", "ts", "util", "load", "util_source", "load_source")
    b = runnable.select(pl.col("cpu").cast(a.schema["cpu"]), pl.col("ts").cast(pl.Int64), "runnable", "runnable_source")
    axis = pl.concat([a.select("cpu", "ts"), b.select("cpu", "ts")]).unique().sort("cpu", "ts")
    out = axis.join_asof(a.sort("cpu", "ts"), on="ts", by="cpu", strategy="backward", check_sortedness=False).join_asof(
        b.sort("cpu", "ts"), on="ts", by="cpu", strategy="backward", check_sortedness=False
    )
    src = pl.concat_str([pl.lit("kernel util, "), pl.col("runnable_source").fill_null("no"), pl.lit(" runnable")])
    return out.with_columns(src.alias("source")).select(_SIGNAL_COLS)


def df_contention(
    signals: pl.DataFrame,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    key: str = "cpu",
    margin: float = 1.0,
) -> pl.DataFrame:
    """Contention per CPU (or task): how much runnable exceeds util.

    ``signals``: a signal frame (key, ts, util, runnable) — each sample holds until the next.
    Columns: key, known_ns (time with both signals known), contended_ns (runnable > util + ``margin`` PELT
    units), contended_pct (of known time), mean_util, mean_runnable (time-weighted), runnable_util_ratio
    (time-weighted mean of runnable / util over the time util >= 1), max_runnable.
    """
    sig = signals.select(key, "ts", "util", "runnable")
    start_ns, end_ns = window_of(sig, start_ns, end_ns)
    iv = df_intervals(sig, ["util", "runnable"], keys=key, start_ns=start_ns, end_ns=end_ns)
    known = iv.filter(pl.col("util").is_not_null() & pl.col("runnable").is_not_null())
    return pelt_sim.df_contention_of_intervals(known, key, margin)


def df_signal_means(
    signals: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None, key: str = "cpu"
) -> pl.DataFrame:
    """Time-weighted mean of util, runnable and load per CPU (or task), each over the time that signal is
    known (a sample holds until the next): ``key, mean_util, mean_runnable, mean_load, util_known_ns,
    runnable_known_ns``."""
    sig = signals.select(key, "ts", "util", "runnable", "load")
    start_ns, end_ns = window_of(sig, start_ns, end_ns)
    iv = df_intervals(sig, ["util", "runnable", "load"], keys=key, start_ns=start_ns, end_ns=end_ns, merge_equal=False)
    w = pl.col("dur").cast(pl.Float64)

    def mean(c: str) -> pl.Expr:
        k = pl.col(c).is_not_null()
        return ((pl.col(c) * w).filter(k).sum() / w.filter(k).sum()).alias(f"mean_{c}")

    return (
        iv.group_by(key)
        .agg(
            mean("util"),
            mean("runnable"),
            mean("load"),
            pl.col("dur").filter(pl.col("util").is_not_null()).sum().alias("util_known_ns"),
            pl.col("dur").filter(pl.col("runnable").is_not_null()).sum().alias("runnable_known_ns"),
        )
        .sort(key)
    )


_STAT_COLS = (
    "cpu",
    "mean_util",
    "mean_runnable",
    "mean_load",
    "util_known_ns",
    "runnable_known_ns",
    "known_ns",
    "contended_ns",
    "contended_pct",
    "runnable_util_ratio",
    "max_runnable",
    "util_source",
    "runnable_source",
    "load_source",
    "source",
)


def _sources(sig: pl.DataFrame) -> pl.DataFrame:
    """Per CPU: util_source, runnable_source, load_source (the non-null value of each), source."""
    first = lambda c: pl.col(c).drop_nulls().first().alias(c)  # noqa: E731
    return (
        sig.group_by("cpu")
        .agg(first("util_source"), first("runnable_source"), first("load_source"))
        .with_columns(
            pl.when(pl.col("util_source") == pl.col("runnable_source"))
            .then(pl.col("util_source"))
            .otherwise(
                pl.concat_str(
                    [
                        pl.col("util_source").fill_null("no"),
                        pl.lit(" util, "),
                        pl.col("runnable_source").fill_null("no"),
                        pl.lit(" runnable"),
                    ]
                )
            )
            .alias("source")
        )
    )


def plot_cpu_util_vs_runnable(signals: pl.DataFrame, *, cpus: list[int] | None = None, axes=None):
    """One panel per CPU: util and runnable (step, PELT units) over time (ms from the first sample)."""
    import matplotlib.pyplot as plt

    cpus = cpus if cpus is not None else sorted(signals["cpu"].unique().to_list())
    if axes is None:
        fig, axes = plt.subplots(len(cpus), 1, figsize=(9, 1.8 * max(len(cpus), 1)), sharex=True, squeeze=False)
        axes = axes[:, 0]
    else:
        fig = axes[0].figure
    t0 = signals["ts"].min()
    src = ", ".join(sorted(signals["source"].unique().to_list())) if "source" in signals.columns else ""
    for ax, cpu in zip(axes, cpus):
        s = signals.filter(pl.col("cpu") == cpu).sort("ts")
        t = ((s["ts"] - t0) / 1e6).to_list()
        ax.plot(t, s["util"].to_list(), drawstyle="steps-post", label="util_avg")
        if s["runnable"].null_count() < s.height:
            ax.plot(t, s["runnable"].to_list(), drawstyle="steps-post", label="runnable_avg")
        ax.set_ylabel(f"CPU{cpu}")
    axes[0].set_title(f"util vs runnable ({src})" if src else "util vs runnable")
    axes[0].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("time (ms)")
    return fig


class LoadTrackingAnalysis:
    """Load-tracking analyses bound to a Trace (``trace.load_tracking``)."""

    def __init__(self, trace):
        self.trace = trace
        self._signals: dict[tuple, pl.DataFrame] = {}
        self._stats: dict[tuple, pl.DataFrame] = {}

    # -- helpers -----------------------------------------------------------------------------------
    def _nonempty(self, name: str) -> bool:
        return self.trace.has_events(name) and self.trace.df(name, windowed=False).height > 0

    def _df(self, name: str) -> pl.DataFrame | None:
        return self.trace.df(name, windowed=False) if self._nonempty(name) else None

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def _reach(self) -> dict:
        """The span the signals are simulated (or kernel samples kept) over: the window, or for a view with a
        history (Trace.window(..., history_ns=), abtest.analysis.windowed) from the history's start, so that the
        signals enter the window warmed up; means and contention are still taken over _win()."""
        return {"start_ns": self.trace.reach_start_ns, "end_ns": self.trace.end_ns}

    def _wakeups(self) -> list[pl.DataFrame]:
        return [
            df for df in (self._df(n) for n in ("sched_waking", "sched_wakeup", "sched_wakeup_new")) if df is not None
        ]

    def _forks(self) -> pl.DataFrame | None:
        return self._df("sched_process_fork") if self._nonempty("sched_process_fork") else self._df("sched_wakeup_new")

    def _sim_common(self) -> dict:
        return dict(
            cpu_frequency=self._df("cpu_frequency"),
            wakeups=self._wakeups(),
            platform=trace_platform(self.trace),
            **self._reach(),
        )

    # -- signals -----------------------------------------------------------------------------------
    def _sim_cpu_args(self, kern: pl.DataFrame | None) -> dict:
        """pelt_sim's arguments for this trace's CPUs, seeded with the kernel's first samples (kernel_seeds)."""
        self.trace.require("load_tracking.df_cpu_signals(simulated)", *EVENTS)
        sw = self.trace.df("sched_switch", windowed=False)
        cpu_seeds, task_seeds, new_pids = pelt_sim.kernel_seeds(
            sw, sched_pelt_cfs=kern, sched_pelt_se=self._df("sched_pelt_se"), forks=self._forks(), **self._reach()
        )
        return dict(
            initial=cpu_seeds,
            task_initial=task_seeds,
            new_pids=new_pids,
            sched_migrate_task=self._df("sched_migrate_task"),
            **self._sim_common(),
        )

    def _simulated_cpu(self, kern: pl.DataFrame | None) -> pl.DataFrame:
        """abtest's PELT simulation of each CPU's root runqueue (seeded with the kernel's first samples)."""
        return pelt_sim.df_pelt_sim_cpu(self.trace.df("sched_switch", windowed=False), **self._sim_cpu_args(kern))

    def df_cpu_signals(self, source: str = "auto") -> pl.DataFrame:
        """Per-CPU util / runnable / load samples with per-column sources (see module doc). ``source``:
        "auto" (each signal from the kernel when the trace carries it, else simulated), "kernel" (kernel
        columns only; runnable null when the kernel has none) or "simulated" (all simulated). Computed once
        per source and window for this analysis object (metrics and tables share it: _facade)."""
        key = (source, self.trace.start_ns, self.trace.end_ns)
        if key not in self._signals:
            self._signals[key] = self._cpu_signals(source)
        return self._signals[key]

    def _cpu_signals(self, source: str) -> pl.DataFrame:
        kern = self._df("sched_pelt_cfs")
        w = self._reach()
        if source not in ("auto", "kernel", "simulated"):
            raise ValueError(f"source {source!r}: expected auto, kernel or simulated")
        if source == "kernel" or (source == "auto" and kern is not None):
            self.trace.require("load_tracking.df_cpu_signals(kernel)", "sched_pelt_cfs")
            if kern is None:
                raise AnalysisNotApplicable(f"{self.trace.path}: sched_pelt_cfs is empty")
            k = df_cpu_signals_kernel(kern).filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))
            has_run = k["runnable"].null_count() < k.height
            has_load = k["load"].null_count() < k.height
            k = k.with_columns(
                pl.lit("kernel").alias("util_source"),
                pl.lit("kernel" if has_run else None, pl.Utf8).alias("runnable_source"),
                pl.lit("kernel" if has_load else None, pl.Utf8).alias("load_source"),
            )
            if has_run or source == "kernel" or not self._nonempty("sched_switch"):
                return k.with_columns(pl.lit("kernel").alias("source")).select(_SIGNAL_COLS)
            sim = self._simulated_cpu(kern).select("cpu", "ts", "runnable")
            return df_merge_signals(k.drop("runnable"), sim.with_columns(pl.lit("simulated").alias("runnable_source")))
        sim = self._simulated_cpu(kern)
        return sim.select(
            "cpu",
            "ts",
            "util",
            "runnable",
            pl.lit(None, pl.Float64).alias("load"),
            pl.lit("simulated").alias("util_source"),
            pl.lit("simulated").alias("runnable_source"),
            pl.lit(None, pl.Utf8).alias("load_source"),
            pl.lit("simulated").alias("source"),
        )

    def df_task_signals(self, source: str = "auto", pids: list[int] | None = None) -> pl.DataFrame:
        """Per-task signals: kernel sched_pelt_se when present ("auto"/"kernel"), else simulated."""
        kern = self._df("sched_pelt_se")
        if source == "kernel" or (source == "auto" and kern is not None):
            self.trace.require("load_tracking.df_task_signals(kernel)", "sched_pelt_se")
            out = df_task_signals_kernel(kern if kern is not None else self.trace.df("sched_pelt_se"))
            w = self._reach()
            out = out.filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))
            return out.filter(pl.col("pid").is_in(pids)) if pids is not None else out
        self.trace.require("load_tracking.df_task_signals(simulated)", *EVENTS)
        sim = pelt_sim.df_pelt_sim_task(self.trace.df("sched_switch", windowed=False), pids=pids, **self._sim_common())
        return sim.select(
            "pid",
            pl.lit(None, pl.Utf8).alias("comm"),
            pl.lit(None, pl.Int32).alias("cpu"),
            "ts",
            "util",
            "runnable",
            pl.lit(None, pl.Float64).alias("load"),
            pl.lit("simulated").alias("source"),
        )

    def df_contention(self, source: str = "auto") -> pl.DataFrame:
        """Per-CPU contention (df_contention) on df_cpu_signals(source), + ``util_source``, ``runnable_source``,
        ``source`` (see the module doc). All-simulated signals are aggregated while they are simulated
        (pelt_sim.df_cpu_contention: the same figures, no segments kept)."""
        if self._all_simulated(source):
            # simulated over the reach (a window's history warms the signals up), aggregated over the window
            win = self.trace.start_ns if self._reach() != self._win() else None
            out = pelt_sim.df_cpu_contention(
                self.trace.df("sched_switch", windowed=False),
                aggregate_from_ns=win,
                **self._sim_cpu_args(self._df("sched_pelt_cfs")),
            )
            return out.with_columns(
                *[pl.lit("simulated").alias(c) for c in ("util_source", "runnable_source")],
                pl.lit(None, pl.Utf8).alias("load_source"),
                pl.lit("simulated").alias("source"),
            )
        sig = self.df_cpu_signals(source)
        return df_contention(sig, **self._win()).join(_sources(sig), on="cpu", how="left")

    def _all_simulated(self, source: str) -> bool:
        """Every signal is simulated: it can be aggregated over the window while simulated."""
        return source == "simulated" or (source == "auto" and self._df("sched_pelt_cfs") is None)

    def df_cpu_stats(self, source: str = "auto") -> pl.DataFrame:
        """Per CPU, what the metrics and the declared tables read: df_signal_means' columns (``mean_util``,
        ``mean_runnable``, ``mean_load``, ``util_known_ns``, ``runnable_known_ns``), df_contention's (``known_ns``,
        ``contended_ns``, ``contended_pct``, ``runnable_util_ratio``, ``max_runnable``; null for a CPU never
        known with both signals) and the sources. All-simulated signals are aggregated while they are simulated
        (no segment is kept: the means are those of df_signal_means to float rounding, tests/test_sim_native.py);
        else both are computed on df_cpu_signals. Computed once per source and window."""
        key = (source, self.trace.start_ns, self.trace.end_ns)
        if key in self._stats:
            return self._stats[key]
        if self._all_simulated(source):
            c = self.df_contention(source)
            out = c.with_columns(
                pl.lit(None, pl.Float64).alias("mean_load"),
                pl.col("known_ns").alias("util_known_ns"),
                pl.col("known_ns").alias("runnable_known_ns"),
            )
        else:
            sig = self.df_cpu_signals(source)
            w = self._win()
            cont = df_contention(sig, **w).select(
                "cpu", "known_ns", "contended_ns", "contended_pct", "runnable_util_ratio", "max_runnable"
            )
            out = df_signal_means(sig, **w).join(cont, on="cpu", how="left").join(_sources(sig), on="cpu", how="left")
        self._stats[key] = out.select(_STAT_COLS).sort("cpu")
        return self._stats[key]

    def df_signal_means(self, source: str = "auto") -> pl.DataFrame:
        """Per-CPU time-weighted means of each signal over its own known time (df_signal_means) + sources."""
        return self.df_cpu_stats(source).select(
            "cpu",
            "mean_util",
            "mean_runnable",
            "mean_load",
            "util_known_ns",
            "runnable_known_ns",
            "util_source",
            "runnable_source",
            "load_source",
            "source",
        )

    def df_cluster_signal_means(self, source: str = "auto") -> pl.DataFrame:
        """Per cluster (abtest.analysis.clusters): ``cluster, cpus, mean_util, mean_runnable, mean_load`` = the mean
        over the cluster's CPUs of each CPU's time-weighted mean (CPUs without samples are left out)."""
        from abtest.analysis.clusters import trace_clusters

        means = self.df_signal_means(source)
        cl = trace_clusters(self.trace).select("cpu", "cluster")
        return (
            means.join(cl, on="cpu", how="inner")
            .group_by("cluster")
            .agg(
                pl.col("cpu").sort().alias("cpus"),
                pl.col("mean_util").mean(),
                pl.col("mean_runnable").mean(),
                pl.col("mean_load").mean(),
            )
            .sort("cluster")
        )

    def plot_cpu_util_vs_runnable(self, source: str = "auto", cpus: list[int] | None = None, axes=None):
        return plot_cpu_util_vs_runnable(self.df_cpu_signals(source), cpus=cpus, axes=axes)

    # -- simulations -------------------------------------------------------------------------------
    def df_pelt_sim_error(self, unknown_freq: str = "max") -> pl.DataFrame:
        """Simulated vs kernel util at each kernel sample (pelt_sim.df_sim_vs_kernel)."""
        self.trace.require("load_tracking.df_pelt_sim_error", "sched_switch")
        if not (self._nonempty("sched_pelt_cfs") or self._nonempty("sched_pelt_se")):
            self.trace.require("load_tracking.df_pelt_sim_error", *KERNEL_EVENTS)
            raise AnalysisNotApplicable(f"{self.trace.path}: sched_pelt_cfs / sched_pelt_se tables are empty")
        forks = self._forks()
        return pelt_sim.df_sim_vs_kernel(
            self.trace.df("sched_switch", windowed=False),
            sched_pelt_cfs=self._df("sched_pelt_cfs"),
            sched_pelt_se=self._df("sched_pelt_se"),
            sched_migrate_task=self._df("sched_migrate_task"),
            forks=forks,
            unknown_freq=unknown_freq,
            **self._sim_common(),
        )

    def df_pelt_sim_error_summary(self) -> pl.DataFrame:
        """Mean / median / p95 absolute error (util units) of the simulation, per kind (cpu, task)."""
        err = self.df_pelt_sim_error()
        return (
            err.group_by("kind")
            .agg(
                pl.len().alias("samples"),
                pl.col("abs_err").mean().alias("mae_util"),
                pl.col("abs_err").median().alias("median_abs_err_util"),
                pl.col("abs_err").quantile(0.95).alias("p95_abs_err_util"),
            )
            .sort("kind")
        )

    def df_window_demand(
        self, window_ms: float = 20.0, n_windows: int = 5, pids: list[int] | None = None
    ) -> pl.DataFrame:
        self.trace.require("load_tracking.df_window_demand", *window_sim.EVENTS)
        return window_sim.df_window_demand(
            self.trace.df("sched_switch", windowed=False),
            cpu_frequency=self._df("cpu_frequency"),
            platform=trace_platform(self.trace),
            window_ms=window_ms,
            n_windows=n_windows,
            pids=pids,
            **self._win(),
        )

    def df_pelt_vs_window(self, pid: int, window_ms: float = 20.0, n_windows: int = 5) -> pl.DataFrame:
        """One task's simulated PELT util and window demand on one time axis (window_sim.df_pelt_vs_window)."""
        self.trace.require("load_tracking.df_pelt_vs_window", *EVENTS)
        sim = pelt_sim.df_pelt_sim_task(self.trace.df("sched_switch", windowed=False), pids=[pid], **self._sim_common())
        return window_sim.df_pelt_vs_window(sim, self.df_window_demand(window_ms, n_windows, [pid]), pid)

    def plot_pelt_vs_window(self, pid: int, window_ms: float = 20.0, n_windows: int = 5, ax=None):
        both = self.df_pelt_vs_window(pid, window_ms, n_windows)
        return window_sim.plot_pelt_vs_window(both, title=f"PELT vs {window_ms:g} ms window demand, pid {pid}", ax=ax)

    # -- boost what-if -------------------------------------------------------------------------------
    def df_boost(self, source: str = "auto"):
        """Boost what-if tables (abtest.analysis.boost.BoostResult) on df_cpu_signals(source)."""
        from abtest.analysis import boost

        return boost.boost_whatif_for_trace(self.trace, self.df_cpu_signals(source))

    def plot_boost(self, source: str = "auto"):
        from abtest.analysis import boost

        return boost.plot_boost(self.df_boost(source))


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_SRC = (
    "(each signal from the kernel's sched_pelt_cfs when the trace carries it, else abtest's PELT simulation "
    "from sched_switch: pre-5.7 kernels have util but no runnable, so only runnable is simulated there)"
)
CPU_MEAN_UTIL = MetricSpec(
    "load_tracking.cpu.{cpu}.mean_util",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="mean util",
    description=f"Time-weighted mean of the CPU's root cfs_rq util_avg in capacity units (1024 = the biggest CPU at "
    f"its top OPP) over the time it is known {_SRC}.",
    window=WindowCombine.TIME,
)
CPU_MEAN_RUNNABLE = MetricSpec(
    "load_tracking.cpu.{cpu}.mean_runnable",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="mean runnable",
    description=f"Time-weighted mean of the CPU's runnable_avg (capacity units) {_SRC}.",
    window=WindowCombine.TIME,
)
CPU_CONTENDED_PCT = MetricSpec(
    "load_tracking.cpu.{cpu}.contended_pct",
    "%",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CPU,
    title="contended time",
    description=f"Share of the time both signals are known where runnable_avg exceeds util_avg by more than 1 unit "
    f"{_SRC}.",
    window=WindowCombine.TIME,
)
CLUSTER_MEAN_UTIL = MetricSpec(
    "load_tracking.cluster.{cluster}.mean_util",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="cluster mean util",
    description=f"Mean over the cluster's CPUs of their root cfs_rq time-weighted mean util_avg (workload-processor's "
    f"per-cluster PELT; it averages the raw samples instead) {_SRC}.",
    window=WindowCombine.TIME,
)
CLUSTER_MEAN_LOAD = MetricSpec(
    "load_tracking.cluster.{cluster}.mean_load",
    "",
    Direction.NONE,
    Aggregation.MEAN,
    Grouping.CLUSTER,
    title="cluster mean load",
    description="Mean over the cluster's CPUs of their root cfs_rq time-weighted mean load_avg (kernel PELT events "
    "only: load is never simulated).",
    window=WindowCombine.TIME,
)

METRICS = (CPU_MEAN_UTIL, CPU_MEAN_RUNNABLE, CPU_CONTENDED_PCT, CLUSTER_MEAN_UTIL, CLUSTER_MEAN_LOAD)


# one facade per trace for the metrics and the declared tables, so that they share its per-CPU statistics
_facade = per_trace(LoadTrackingAnalysis)


def _signal_rows(trace) -> pl.DataFrame | None:
    lt = _facade(trace)
    if not (lt._nonempty("sched_switch") or lt._nonempty("sched_pelt_cfs")):
        return None
    return lt.df_cpu_stats().filter(pl.col("known_ns").is_not_null() | pl.col("mean_load").is_not_null())


def _sim_error_rows(trace) -> pl.DataFrame | None:
    lt = _facade(trace)
    if not (lt._nonempty("sched_switch") and (lt._nonempty("sched_pelt_cfs") or lt._nonempty("sched_pelt_se"))):
        return None
    return lt.df_pelt_sim_error_summary()


TABLES = (
    TableSpec(
        "signals",
        "Load-tracking signals per CPU (capacity units, 1024 = biggest CPU at its top OPP; where each came from)",
        "cpu mean_load runnable_util_ratio util_source runnable_source load_source source",
        _signal_rows,
        note="kernel: the kernel's PELT events; simulated: abtest's PELT simulation from sched_switch",
    ),
    TableSpec(
        "pelt_sim_error",
        "PELT simulation vs the kernel's PELT events (absolute error of util)",
        "kind samples mae_util median_abs_err_util p95_abs_err_util",
        _sim_error_rows,
    ),
)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared load-tracking metrics of one trace (per CPU, per cluster). Needs sched_switch or
    sched_pelt_cfs."""
    lt = _facade(trace)
    if not (lt._nonempty("sched_switch") or lt._nonempty("sched_pelt_cfs")):
        raise MissingEventsError("load_tracking", ["sched_switch"], str(trace.path))
    stats = lt.df_cpu_stats()
    out: list[MetricValue] = []
    # the known time of a mean weighs windows (abtest.analysis.windowed); not given for runnable where it is
    # simulated beside the kernel's util (the merged signals of a window are not those of the whole trace)
    for r in stats.iter_rows(named=True):  # one row per CPU
        one_source = r["util_source"] == r["runnable_source"]
        for spec, col, known in (
            (CPU_MEAN_UTIL, "mean_util", "util_known_ns"),
            (CPU_MEAN_RUNNABLE, "mean_runnable", "runnable_known_ns"),
        ):
            if r[col] is not None:
                known_s = r[known] / 1e9 if spec is CPU_MEAN_UTIL or one_source else None
                out.append(MetricValue(spec, float(r[col]), str(r["cpu"]), known_s=known_s))
    for r in stats.iter_rows(named=True):  # one row per CPU
        if r["contended_pct"] is not None:
            out.append(
                MetricValue(
                    CPU_CONTENDED_PCT,
                    float(r["contended_pct"]),
                    str(r["cpu"]),
                    known_s=r["known_ns"] / 1e9 if r["util_source"] == r["runnable_source"] else None,
                )
            )
    clusters = lt.df_cluster_signal_means()
    for r in clusters.iter_rows(named=True) if clusters.height > 1 else ():  # one cluster: the CPUs' values say it
        if r["mean_util"] is not None:
            out.append(MetricValue(CLUSTER_MEAN_UTIL, float(r["mean_util"]), r["cluster"]))
        if r["mean_load"] is not None:
            out.append(MetricValue(CLUSTER_MEAN_LOAD, float(r["mean_load"]), r["cluster"]))
    return out
