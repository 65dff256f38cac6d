"""Figures for a comparison (matplotlib, Agg backend; each function returns a Figure or None).

plot_metric_dots      per-iteration values of A and B for several metrics, mean and 95 % CI of the mean
plot_power_channels   average power per channel (mW), A vs B bars with 95 % CI error bars
plot_residency        residency side by side (OPP residency from the frequency analysis, or idle-state
                      residency from the idle analysis): mean % per state/OPP, A vs B
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from abtest.analysis.frequency import OPP_RESIDENCY_PCT, split_opp_group  # noqa: E402
from abtest.analysis.idle import STATE_RESIDENCY_PCT  # noqa: E402
from abtest.analysis.power import CHANNEL_ORDER, POWER_CHANNEL  # noqa: E402
from abtest.compare.comparison import MetricComparison, WorkloadComparison  # noqa: E402
from abtest.compare.summary import metric_label  # noqa: E402

COLOR_A, COLOR_B = "#1f77b4", "#d62728"
MAX_DOT_PANELS = 12
TIME_UNITS = ("ns", "us", "ms", "s")
LOG_SPAN = 10.0  # a latency panel whose values span at least this ratio (max / min) gets a log axis


def log_axis(m: MetricComparison) -> bool:
    """A latency distribution (a metric in a time unit) whose positive values span a decade or more: on a
    linear axis one 1 s outlier would flatten every other iteration into a line."""
    vals = [x for x in m.values_a + m.values_b if x > 0]
    if m.unit not in TIME_UNITS or len(vals) < len(m.values_a) + len(m.values_b) or not vals:
        return False
    return max(vals) / min(vals) >= LOG_SPAN


def _ci(s):
    if s is None or s.ci95_low is None:
        return 0.0
    return (s.ci95_high - s.ci95_low) / 2


def _agg_and_ci(vals: list, aggregation: str) -> tuple[float | None, tuple[float, float] | None]:
    """The declared aggregate of a side and its 95 % CI: Student t on the values (mean), on their logarithms
    mapped back (gmean: an asymmetric interval), none for the median."""
    from scipy import stats as sps

    x = np.asarray(vals, float)
    if x.size == 0:
        return None, None
    if aggregation == "gmean":
        if np.any(x <= 0):
            return None, None
        lx = np.log(x)
        centre = float(np.exp(lx.mean()))
        if x.size < 2:
            return centre, None
        half = float(sps.t.ppf(0.975, x.size - 1)) * lx.std(ddof=1) / np.sqrt(x.size)
        return centre, (float(np.exp(lx.mean() - half)), float(np.exp(lx.mean() + half)))
    if aggregation == "median":
        return float(np.median(x)), None
    centre = float(x.mean())
    if x.size < 2:
        return centre, None
    half = float(sps.t.ppf(0.975, x.size - 1)) * x.std(ddof=1) / np.sqrt(x.size)
    return centre, (centre - half, centre + half)


def plot_metric_dots(metrics: list[MetricComparison], label_a: str, label_b: str, ncols: int = 3):
    """One panel per metric: iteration values as dots (A left, B right), the declared aggregate (mean, gmean or
    median) as a diamond with its 95 % CI. Panel title: the metric's declared title, group and unit (not its key),
    aggregation, delta % and verdict; latency panels spanning a decade or more on a log axis (`log_axis`)."""
    if not metrics:
        return None
    ncols = min(ncols, len(metrics))
    nrows = (len(metrics) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    rng = np.random.default_rng(0)  # fixed jitter: the same data draws the same figure
    for ax, m in zip(axes.flat, metrics):
        for x, vals, color in ((0, m.values_a, COLOR_A), (1, m.values_b, COLOR_B)):
            if not vals:
                continue
            ax.scatter(x + rng.uniform(-0.12, 0.12, len(vals)), vals, color=color, alpha=0.7, s=18)
            centre, ci = _agg_and_ci(vals, m.aggregation)
            if centre is not None:
                yerr = None if ci is None else [[centre - ci[0]], [ci[1] - centre]]
                ax.errorbar(x + 0.25, centre, yerr=yerr, fmt="D", color="black", capsize=4, ms=4)
        ax.set_xticks([0, 1], [label_a, label_b])
        ax.set_xlim(-0.5, 1.5)
        d = f"{m.delta_pct:+.2f} %" if m.delta_pct is not None else "n/a"
        agg = "" if m.aggregation == "mean" else f" ({m.aggregation})"
        ax.set_title(f"{metric_label(m)}{agg}\n{d}, {m.verdict.text}", fontsize=8)
        ax.set_ylabel(m.unit + (" (log scale)" if log_axis(m) else ""), fontsize=8)
        if log_axis(m):
            ax.set_yscale("log")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_power_channels(w: WorkloadComparison, label_a: str, label_b: str):
    """Grouped bars of mean power per channel (mW) with 95 % CI of the mean; None without channel metrics."""
    ms = [(ch, w.of(POWER_CHANNEL, ch)) for ch in CHANNEL_ORDER]
    ms = [(ch, m) for ch, m in ms if m is not None and m.a and m.b]
    if not ms:
        return None
    x = np.arange(len(ms))
    fig, ax = plt.subplots(figsize=(1.3 * len(ms) + 3, 3.6))
    ax.bar(
        x - 0.2, [m.a.mean for _, m in ms], 0.4, yerr=[_ci(m.a) for _, m in ms], color=COLOR_A, capsize=3, label=label_a
    )
    ax.bar(
        x + 0.2, [m.b.mean for _, m in ms], 0.4, yerr=[_ci(m.b) for _, m in ms], color=COLOR_B, capsize=3, label=label_b
    )
    for xi, (_, m) in zip(x, ms):
        if m.delta_pct is not None:
            ax.annotate(
                f"{m.delta_pct:+.1f}%",
                (xi, max(m.a.mean, m.b.mean)),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 6),
                textcoords="offset points",
            )
    ax.set_xticks(x, [ch for ch, _ in ms])
    ax.set_ylabel("average power (mW)")
    ax.set_title(f"{w.workload}: average power per channel")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def opp_residency_metrics(w: WorkloadComparison) -> dict[str, dict[str, MetricComparison]]:
    """{"cpu<N>" (frequency domain): {"<MHz>": metric}} from the declared OPP residency metric."""
    out: dict[str, dict[str, MetricComparison]] = {}
    for m in sorted(w.grouped(OPP_RESIDENCY_PCT), key=lambda m: split_opp_group(m.group)):
        dom, khz = split_opp_group(m.group)
        out.setdefault(f"cpu{dom}", {})[f"{khz / 1000:g}"] = m
    return out


def idle_residency_metrics(w: WorkloadComparison) -> dict[str, dict[str, MetricComparison]]:
    """{"all CPUs": {state name: metric}} from the declared idle-state residency metric."""
    ms = w.grouped(STATE_RESIDENCY_PCT)
    return {"all CPUs": {m.group: m for m in sorted(ms, key=lambda m: m.group)}} if ms else {}


def plot_residency(
    w: WorkloadComparison, label_a: str, label_b: str, groups: dict, title: str, max_groups: int = 4, xlabel: str = ""
):
    """Side-by-side residency bars (mean % of time) per state or OPP, one panel per group (frequency domain,
    or all CPUs); `groups` from opp_residency_metrics / idle_residency_metrics."""
    if not groups:
        return None
    names = list(groups)[:max_groups]
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.4), squeeze=False)
    for ax, g in zip(axes.flat, names):
        states = list(groups[g])
        x = np.arange(len(states))
        ms = [groups[g][s] for s in states]
        ax.bar(x - 0.2, [m.a.mean if m.a else 0 for m in ms], 0.4, color=COLOR_A, label=label_a)
        ax.bar(x + 0.2, [m.b.mean if m.b else 0 for m in ms], 0.4, color=COLOR_B, label=label_b)
        ax.set_xticks(x, states, rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("% of time")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_title(f"domain of {g}" if g.startswith("cpu") else g, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{w.workload}: {title}", fontsize=10)
    fig.tight_layout()
    return fig


def dot_plot_metrics(w: WorkloadComparison) -> list[MetricComparison]:
    """Metrics worth a dot plot: those with a direction (verdicts) whose values are not one constant; workload
    metrics (metrics.json) first, then regressions/improvements, then overall before per-CPU values."""

    def informative(m: MetricComparison) -> bool:
        return len(set(m.values_a) | set(m.values_b)) > 1

    chosen = [m for m in w.metrics if m.lower_is_better is not None and m.a and m.b and informative(m)]
    chosen.sort(
        key=lambda m: (
            m.source != "metrics.json",
            m.verdict.verdict not in ("regression", "improvement"),
            m.group is not None,
            m.name,
        )
    )
    return chosen[:MAX_DOT_PANELS]


def workload_figures(w: WorkloadComparison, label_a: str, label_b: str) -> dict:
    """{name: Figure or None} for one workload: "metrics" (per-iteration dots), "power" (per channel),
    "opp_residency", "idle_residency"; None where the data is absent."""
    return {
        "metrics": plot_metric_dots(dot_plot_metrics(w), label_a, label_b),
        "power": plot_power_channels(w, label_a, label_b),
        "opp_residency": plot_residency(
            w, label_a, label_b, opp_residency_metrics(w), "OPP residency", xlabel="OPP (MHz)"
        ),
        "idle_residency": plot_residency(
            w, label_a, label_b, idle_residency_metrics(w), "idle-state residency", xlabel="idle state"
        ),
    }


def write_plots(c, out_dir, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 150) -> list:
    """Every figure of a comparison as files `<workload>-<figure>.<format>` in out_dir (created); returns the
    paths written. Figures without data are not written."""
    import re
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for w in c.workloads:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", w.workload)
        for name, fig in workload_figures(w, c.label_a, c.label_b).items():
            if fig is None:
                continue
            for fmt in formats:
                path = out / f"{safe}-{name}.{fmt}"
                fig.savefig(path, format=fmt, dpi=dpi)
                written.append(path)
            plt.close(fig)
    return written


def plot_explain_opps(ch) -> plt.Figure | None:
    """An explained channel (abtest.compare.explain.ChannelExplanation): per frequency domain, active time at
    each OPP (ms per s of window) A vs B, annotated with each OPP's power change (mW)."""
    rows = [c for c in ch.contributions if c.kind == "active" and c.a_ms_per_s is not None]
    doms = sorted({c.domain for c in rows})
    if not doms:
        return None
    fig, axes = plt.subplots(1, len(doms), figsize=(4.8 * len(doms), 3.4), squeeze=False)
    for ax, dom in zip(axes.flat, doms):
        mine = sorted((c for c in rows if c.domain == dom), key=lambda c: c.opp_khz or 0)
        x = np.arange(len(mine))
        ax.bar(x - 0.2, [c.a_ms_per_s for c in mine], 0.4, color=COLOR_A, label="A")
        ax.bar(x + 0.2, [c.b_ms_per_s for c in mine], 0.4, color=COLOR_B, label="B")
        for xi, c in zip(x, mine):
            if abs(c.delta_mw) > 1e-9:
                ax.annotate(
                    f"{c.delta_mw:+.2f} mW",
                    (xi, max(c.a_ms_per_s, c.b_ms_per_s)),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 3),
                    textcoords="offset points",
                )
        ax.set_xticks(x, [f"{(c.opp_khz or 0) / 1000:g}" for c in mine], fontsize=7)
        ax.set_xlabel("OPP (MHz)", fontsize=8)
        ax.set_ylabel("active time (ms/s)", fontsize=8)
        ax.set_title(f"{dom}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{ch.channel}: active time per OPP, A vs B ({ch.delta_mw:+.2f} mW in all)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_explain_tasks(ch, top: int = 8) -> plt.Figure | None:
    """An explained channel: CPU time of the tasks that changed power most, per domain, A vs B (ms/s)."""
    tasks = [c for c in ch.tasks if c.a_ms_per_s is not None][:top]
    if not tasks:
        return None
    y = np.arange(len(tasks))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(tasks) + 1.4))
    ax.barh(y - 0.2, [c.a_ms_per_s for c in tasks], 0.4, color=COLOR_A, label="A")
    ax.barh(y + 0.2, [c.b_ms_per_s for c in tasks], 0.4, color=COLOR_B, label="B")
    ax.set_yticks(y, [f"{c.task} ({c.domain}) {c.delta_mw:+.2f} mW" for c in tasks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("CPU time (ms per s of window)")
    ax.set_title(f"{ch.channel}: tasks by power change (priced by the model)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
