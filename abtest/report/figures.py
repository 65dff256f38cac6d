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

COLOR_A, COLOR_B = "#1f77b4", "#d62728"


def _ci(s):
    if s is None or s.ci95_low is None:
        return 0.0
    return (s.ci95_high - s.ci95_low) / 2


def plot_metric_dots(metrics: list[MetricComparison], label_a: str, label_b: str, ncols: int = 3):
    """One panel per metric: iteration values as dots (A left, B right), mean as a bar with its 95 % CI.
    Panel title: metric, unit, delta % and verdict."""
    if not metrics:
        return None
    ncols = min(ncols, len(metrics))
    nrows = (len(metrics) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    rng = np.random.default_rng(0)  # fixed jitter: the same data draws the same figure
    for ax, m in zip(axes.flat, metrics):
        for x, vals, s, color in ((0, m.values_a, m.a, COLOR_A), (1, m.values_b, m.b, COLOR_B)):
            if not vals:
                continue
            ax.scatter(x + rng.uniform(-0.12, 0.12, len(vals)), vals, color=color, alpha=0.7, s=18)
            ax.errorbar(x + 0.25, s.mean, yerr=_ci(s), fmt="D", color="black", capsize=4, ms=4)
        ax.set_xticks([0, 1], [label_a, label_b])
        ax.set_xlim(-0.5, 1.5)
        d = f"{m.delta_pct:+.2f} %" if m.delta_pct is not None else "n/a"
        ax.set_title(f"{m.name}\n{d}, {m.verdict.text}", fontsize=8)
        ax.set_ylabel(m.unit, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(metrics):]:
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
    ax.bar(x - 0.2, [m.a.mean for _, m in ms], 0.4, yerr=[_ci(m.a) for _, m in ms], color=COLOR_A,
           capsize=3, label=label_a)
    ax.bar(x + 0.2, [m.b.mean for _, m in ms], 0.4, yerr=[_ci(m.b) for _, m in ms], color=COLOR_B,
           capsize=3, label=label_b)
    for xi, (_, m) in zip(x, ms):
        if m.delta_pct is not None:
            ax.annotate(f"{m.delta_pct:+.1f}%", (xi, max(m.a.mean, m.b.mean)), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 6), textcoords="offset points")
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


def plot_residency(w: WorkloadComparison, label_a: str, label_b: str, groups: dict, title: str,
                   max_groups: int = 4, xlabel: str = ""):
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
