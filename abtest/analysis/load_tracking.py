"""Load tracking: util vs runnable per CPU and per task, contention, PELT / window simulations, boost what-if.

Signals come from the kernel's PELT trace events when present (``sched_pelt_cfs`` for the CPU's root CFS
runqueue, ``sched_pelt_se`` for tasks; any variant, see abtest.trace.schema), else from the PELT simulation
(abtest.analysis.pelt_sim) over sched_switch. Every signal frame says which it is in ``source``
("kernel" | "simulated"). Kernels before 5.7 have no runnable_avg: the CPU runnable signal is then simulated
(seeded at each CPU's first kernel util sample) and ``source`` says "simulated".

Signal frames: ``cpu`` (or ``pid``, ``comm``), ``ts`` (ns), ``util``, ``runnable``, ``load`` (PELT units:
util/runnable 0..1024 x CPUs' capacity scale; runnable of a runqueue may exceed 1024 with several runnable
tasks; null when the source lacks it), ``source``. Values hold until the next sample.
"""
from __future__ import annotations

import polars as pl

from abtest.analysis import pelt_sim, window_sim
from abtest.analysis.platform import trace_platform
from abtest.analysis.intervals import df_intervals, window_of
from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec, MetricValue

EVENTS = ("sched_switch",)  # enough for the simulated signals
OPTIONAL_EVENTS = ("sched_pelt_cfs", "sched_pelt_se", "cpu_frequency", "sched_wakeup", "sched_waking",
                   "sched_wakeup_new", "sched_migrate_task", "cpu_idle")
KERNEL_EVENTS = ("sched_pelt_cfs", "sched_pelt_se")

__all__ = ["EVENTS", "OPTIONAL_EVENTS", "df_cpu_signals_kernel", "df_task_signals_kernel", "df_contention",
           "plot_cpu_util_vs_runnable", "LoadTrackingAnalysis", "summary"]


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
    return df.select(cpu.cast(pl.Int32).alias("cpu"), "ts", _col_or_null(df, "util"), _col_or_null(df, "runnable"),
                     _col_or_null(df, "load"), pl.lit("kernel").alias("source")).sort("cpu", "ts")


def df_task_signals_kernel(sched_pelt_se: pl.DataFrame) -> pl.DataFrame:
    """Kernel per-task signals: ``pid, comm, cpu, ts, util, runnable, load, source="kernel"`` (tasks only:
    pid > 0; group entities are dropped). Events: sched_pelt_se (sched_load_se, lisa__sched_pelt_se,
    sched_load_avg_task)."""
    df = sched_pelt_se.filter(pl.col("pid") > 0) if "pid" in sched_pelt_se.columns else sched_pelt_se
    cpu = pl.col("field_cpu") if "field_cpu" in df.columns else pl.col("cpu")
    comm = pl.col("comm").cast(pl.Utf8) if "comm" in df.columns else pl.lit(None, pl.Utf8).alias("comm")
    return df.select(pl.col("pid").cast(pl.Int64), comm, cpu.cast(pl.Int32).alias("cpu"), "ts",
                     _col_or_null(df, "util"), _col_or_null(df, "runnable"), _col_or_null(df, "load"),
                     pl.lit("kernel").alias("source")).sort("pid", "ts")


def df_contention(signals: pl.DataFrame, *, start_ns: int | None = None, end_ns: int | None = None,
                  key: str = "cpu", margin: float = 1.0) -> pl.DataFrame:
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
    w = pl.col("dur").cast(pl.Float64)
    pos = pl.col("util") >= 1.0
    return known.group_by(key).agg(
        pl.col("dur").sum().alias("known_ns"),
        pl.col("dur").filter(pl.col("runnable") > pl.col("util") + margin).sum().alias("contended_ns"),
        ((pl.col("util") * w).sum() / w.sum()).alias("mean_util"),
        ((pl.col("runnable") * w).sum() / w.sum()).alias("mean_runnable"),
        ((pl.col("runnable") / pl.col("util") * w).filter(pos).sum() / w.filter(pos).sum()).alias("runnable_util_ratio"),
        pl.col("runnable").max().alias("max_runnable"),
    ).with_columns((100.0 * pl.col("contended_ns") / pl.col("known_ns")).alias("contended_pct")).select(
        key, "known_ns", "contended_ns", "contended_pct", "mean_util", "mean_runnable", "runnable_util_ratio",
        "max_runnable").sort(key)


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

    # -- helpers -----------------------------------------------------------------------------------
    def _nonempty(self, name: str) -> bool:
        return self.trace.has_events(name) and self.trace.df(name, windowed=False).height > 0

    def _df(self, name: str) -> pl.DataFrame | None:
        return self.trace.df(name, windowed=False) if self._nonempty(name) else None

    def _win(self) -> dict:
        return {"start_ns": self.trace.start_ns, "end_ns": self.trace.end_ns}

    def _wakeups(self) -> list[pl.DataFrame]:
        return [df for df in (self._df(n) for n in ("sched_waking", "sched_wakeup", "sched_wakeup_new")) if df is not None]

    def _forks(self) -> pl.DataFrame | None:
        return self._df("sched_process_fork") if self._nonempty("sched_process_fork") else self._df("sched_wakeup_new")

    def _sim_common(self) -> dict:
        return dict(cpu_frequency=self._df("cpu_frequency"), wakeups=self._wakeups(), platform=trace_platform(self.trace),
                    **self._win())

    def _sim_cpu_args(self) -> dict:
        """df_pelt_sim_cpu's arguments for this trace: seeded with the kernel's own first samples when the
        trace has any (see pelt_sim.kernel_seeds)."""
        cpu_seeds, task_seeds, new_pids = pelt_sim.kernel_seeds(
            self.trace.df("sched_switch", windowed=False), sched_pelt_cfs=self._df("sched_pelt_cfs"),
            sched_pelt_se=self._df("sched_pelt_se"), forks=self._forks(), **self._win())
        return dict(initial=cpu_seeds, task_initial=task_seeds, new_pids=new_pids,
                    sched_migrate_task=self._df("sched_migrate_task"), **self._sim_common())

    def _kernel_source(self, source: str) -> bool:
        kern = self._df("sched_pelt_cfs")
        return source == "kernel" or (source == "auto" and kern is not None and "runnable" in kern.columns)

    # -- signals -----------------------------------------------------------------------------------
    def df_cpu_signals(self, source: str = "auto") -> pl.DataFrame:
        """Per-CPU util / runnable / load samples (see module doc). ``source``: "auto" (kernel when the trace
        has sched_pelt_cfs with runnable, else simulated), "kernel" or "simulated"."""
        kern = self._df("sched_pelt_cfs")
        if self._kernel_source(source):
            self.trace.require("load_tracking.df_cpu_signals(kernel)", "sched_pelt_cfs")
            if kern is None:
                raise ValueError(f"{self.trace.path}: sched_pelt_cfs is empty")
            w = self._win()
            return df_cpu_signals_kernel(kern).filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))
        self.trace.require("load_tracking.df_cpu_signals(simulated)", *EVENTS)
        sim = pelt_sim.df_pelt_sim_cpu(self.trace.df("sched_switch", windowed=False), **self._sim_cpu_args())
        return sim.select("cpu", "ts", "util", "runnable", pl.lit(None, pl.Float64).alias("load"),
                          pl.lit("simulated").alias("source"))

    def df_task_signals(self, source: str = "auto", pids: list[int] | None = None) -> pl.DataFrame:
        """Per-task signals: kernel sched_pelt_se when present ("auto"/"kernel"), else simulated."""
        kern = self._df("sched_pelt_se")
        if source == "kernel" or (source == "auto" and kern is not None):
            self.trace.require("load_tracking.df_task_signals(kernel)", "sched_pelt_se")
            out = df_task_signals_kernel(kern if kern is not None else self.trace.df("sched_pelt_se"))
            w = self._win()
            out = out.filter((pl.col("ts") >= w["start_ns"]) & (pl.col("ts") < w["end_ns"]))
            return out.filter(pl.col("pid").is_in(pids)) if pids is not None else out
        self.trace.require("load_tracking.df_task_signals(simulated)", *EVENTS)
        sim = pelt_sim.df_pelt_sim_task(self.trace.df("sched_switch", windowed=False), pids=pids, **self._sim_common())
        return sim.select("pid", pl.lit(None, pl.Utf8).alias("comm"), pl.lit(None, pl.Int32).alias("cpu"), "ts", "util",
                          "runnable", pl.lit(None, pl.Float64).alias("load"), pl.lit("simulated").alias("source"))

    def df_contention(self, source: str = "auto") -> pl.DataFrame:
        """Per-CPU contention (df_contention) on df_cpu_signals(source), + ``source``. Simulated signals are
        aggregated while they are simulated (pelt_sim.df_cpu_contention: the same figures, no segments kept)."""
        if not self._kernel_source(source):
            self.trace.require("load_tracking.df_cpu_signals(simulated)", *EVENTS)
            out = pelt_sim.df_cpu_contention(self.trace.df("sched_switch", windowed=False), **self._sim_cpu_args())
            return out.with_columns(pl.lit("simulated").alias("source"))
        sig = self.df_cpu_signals(source)
        return df_contention(sig, **self._win()).with_columns(pl.lit(sig["source"][0] if sig.height else None).alias("source"))

    def plot_cpu_util_vs_runnable(self, source: str = "auto", cpus: list[int] | None = None, axes=None):
        return plot_cpu_util_vs_runnable(self.df_cpu_signals(source), cpus=cpus, axes=axes)

    # -- simulations -------------------------------------------------------------------------------
    def df_pelt_sim_error(self, unknown_freq: str = "max") -> pl.DataFrame:
        """Simulated vs kernel util at each kernel sample (pelt_sim.df_sim_vs_kernel)."""
        self.trace.require("load_tracking.df_pelt_sim_error", "sched_switch")
        if not (self._nonempty("sched_pelt_cfs") or self._nonempty("sched_pelt_se")):
            self.trace.require("load_tracking.df_pelt_sim_error", *KERNEL_EVENTS)
            raise ValueError(f"{self.trace.path}: sched_pelt_cfs / sched_pelt_se tables are empty")
        forks = self._forks()
        return pelt_sim.df_sim_vs_kernel(
            self.trace.df("sched_switch", windowed=False), sched_pelt_cfs=self._df("sched_pelt_cfs"),
            sched_pelt_se=self._df("sched_pelt_se"), sched_migrate_task=self._df("sched_migrate_task"),
            forks=forks, unknown_freq=unknown_freq, **self._sim_common())

    def df_pelt_sim_error_summary(self) -> pl.DataFrame:
        """Mean / median / p95 absolute error (util units) of the simulation, per kind (cpu, task)."""
        err = self.df_pelt_sim_error()
        return err.group_by("kind").agg(
            pl.len().alias("samples"), pl.col("abs_err").mean().alias("mae_util"),
            pl.col("abs_err").median().alias("median_abs_err_util"),
            pl.col("abs_err").quantile(0.95).alias("p95_abs_err_util")).sort("kind")

    def df_window_demand(self, window_ms: float = 20.0, n_windows: int = 5, pids: list[int] | None = None) -> pl.DataFrame:
        self.trace.require("load_tracking.df_window_demand", *window_sim.EVENTS)
        return window_sim.df_window_demand(
            self.trace.df("sched_switch", windowed=False), cpu_frequency=self._df("cpu_frequency"),
            platform=trace_platform(self.trace), window_ms=window_ms, n_windows=n_windows, pids=pids, **self._win())

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


def summary(trace) -> dict:
    """JSON-serialisable load-tracking summary (stable keys, units in names).

    Keys: signal_source ("kernel" | "simulated"), per_cpu {cpu: {mean_util, mean_runnable, contended_pct,
    runnable_util_ratio}}, and when the trace has kernel PELT events: pelt_sim_mae_util {cpu, task}.
    {} when the trace has no sched_switch and no sched_pelt_cfs.
    """
    lt = LoadTrackingAnalysis(trace)
    if not (lt._nonempty("sched_switch") or lt._nonempty("sched_pelt_cfs")):
        return {}
    out: dict = {}
    try:
        cont = lt.df_contention()
    except (LookupError, ValueError):
        return {}
    out["signal_source"] = cont["source"][0] if cont.height else None
    out["per_cpu"] = {str(r["cpu"]): {"mean_util": r["mean_util"], "mean_runnable": r["mean_runnable"],
                                      "contended_pct": r["contended_pct"], "runnable_util_ratio": r["runnable_util_ratio"]}
                      for r in cont.iter_rows(named=True)}
    if lt._nonempty("sched_switch") and (lt._nonempty("sched_pelt_cfs") or lt._nonempty("sched_pelt_se")):
        err = lt.df_pelt_sim_error_summary()
        out["pelt_sim_mae_util"] = {r["kind"]: r["mae_util"] for r in err.iter_rows(named=True)}
    return out


# --------------------------------------------------------------------------------------------
# Declared metrics (abtest.analysis.registry)
# --------------------------------------------------------------------------------------------
_SRC = "(the kernel's sched_pelt_cfs when it has runnable, else abtest's PELT simulation from sched_switch)"
CPU_MEAN_UTIL = MetricSpec(
    "load_tracking.cpu.{cpu}.mean_util", "", Direction.NONE, Aggregation.MEAN, Grouping.CPU, title="mean util",
    description=f"Time-weighted mean of the CPU's root cfs_rq util_avg in capacity units (1024 = the biggest CPU at "
                f"its top OPP) {_SRC}.")
CPU_MEAN_RUNNABLE = MetricSpec(
    "load_tracking.cpu.{cpu}.mean_runnable", "", Direction.NONE, Aggregation.MEAN, Grouping.CPU,
    title="mean runnable", description=f"Time-weighted mean of the CPU's runnable_avg (capacity units) {_SRC}.")
CPU_CONTENDED_PCT = MetricSpec(
    "load_tracking.cpu.{cpu}.contended_pct", "%", Direction.NONE, Aggregation.MEAN, Grouping.CPU,
    title="contended time",
    description=f"Share of the known time where runnable_avg exceeds util_avg by more than 1 unit {_SRC}.")

METRICS = (CPU_MEAN_UTIL, CPU_MEAN_RUNNABLE, CPU_CONTENDED_PCT)


def metrics(trace, options=None) -> list[MetricValue]:
    """The declared load-tracking metrics of one trace (per CPU). Needs sched_switch or sched_pelt_cfs."""
    lt = LoadTrackingAnalysis(trace)
    if not (lt._nonempty("sched_switch") or lt._nonempty("sched_pelt_cfs")):
        return []
    cont = lt.df_contention()
    out: list[MetricValue] = []
    for r in cont.iter_rows(named=True):  # one row per CPU
        cpu = str(r["cpu"])
        for spec, col in ((CPU_MEAN_UTIL, "mean_util"), (CPU_MEAN_RUNNABLE, "mean_runnable"),
                          (CPU_CONTENDED_PCT, "contended_pct")):
            if r[col] is not None:
                out.append(MetricValue(spec, float(r[col]), cpu))
    return out
