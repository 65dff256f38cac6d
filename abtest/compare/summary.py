"""The first screen of a comparison: verdict headlines and one summary table per workload.

Headline metrics are those the registry marks `headline` (power per channel, FPS, jank, scores, idle misses,
wakeup latency, workload results), plus any other metric whose verdict is a significant regression or
improvement (so nothing that changed hides in "All metrics"; single rails are left to the power table). Cells are `value (perc_diff)` as workload-
processor's `summary()` prints them; values are the declared aggregates over iterations.
"""
from __future__ import annotations

from abtest.analysis.power import CHANNEL_ORDER, POWER_CHANNEL
from abtest.compare.comparison import Comparison, MetricComparison, WorkloadComparison
from abtest.compare.tables import TEXT, VALDIFF, Table
from abtest.compare.verdict import IMPROVEMENT, REGRESSION
from abtest.metric_spec import Grouping

MAX_EXTRA_ROWS = 12  # significant non-headline metrics listed in the summary; the rest are counted


def _significant(m: MetricComparison) -> bool:
    return m.verdict.verdict in (REGRESSION, IMPROVEMENT)


def _rank(m: MetricComparison) -> tuple:
    if m.spec == POWER_CHANNEL:
        order = {c: i for i, c in enumerate(CHANNEL_ORDER)}
        return (0, order.get(m.group, len(order)), m.group or "")
    return (1, m.name)


def summary_metrics(w: WorkloadComparison) -> tuple[list[MetricComparison], int]:
    """(metrics for the summary table, number of further significant ones not listed)."""
    head = [m for m in w.metrics if m.spec.headline and m.declared and m.spec.group in (Grouping.NONE, Grouping.CHANNEL)]
    head += [m for m in w.metrics if not m.declared]  # a workload's own results: what the user asked to compare
    extra = [m for m in w.metrics if _significant(m) and m not in head and m.spec.group is not Grouping.RAIL]
    extra.sort(key=lambda m: -abs(m.delta_pct or 0.0))
    chosen = sorted(head, key=_rank) + extra[:MAX_EXTRA_ROWS]
    return chosen, max(0, len(extra) - MAX_EXTRA_ROWS)


def short_verdict(m: MetricComparison) -> str:
    """The verdict in a few words: "regression", "inconclusive, need ~4 more", "changed (higher)"."""
    v = m.verdict
    if v.verdict == "inconclusive" and v.need_more_iterations:
        return f"inconclusive (~{v.need_more_iterations} more)" if v.need_more_iterations < 999 \
            else "inconclusive (noisy)"
    if v.verdict in (REGRESSION, IMPROVEMENT, "no change"):
        return v.verdict
    return v.text


def metric_label(m: MetricComparison) -> str:
    """"wakeup latency gmean (us)", "power CPU-Big (mW)": title, group and unit."""
    title = m.spec.title or m.name
    if m.spec == POWER_CHANNEL:
        title = f"power {m.group}"
    elif m.group is not None:
        title = f"{title} [{m.group}]"
    return f"{title} ({m.unit})" if m.unit else title


def table_summary(c: Comparison) -> Table:
    """Per workload: metric, A (value), B (value (perc_diff)), verdict; the headline metrics first."""
    t = Table("summary", f"Summary: {c.label_b} vs {c.label_a} (baseline)",
              [("workload", TEXT), ("metric", TEXT), (c.label_a, VALDIFF), (c.label_b, VALDIFF), ("verdict", TEXT)])
    for w in c.workloads:
        chosen, more = summary_metrics(w)
        for m in chosen:
            t.rows.append([w.workload, metric_label(m), [m.value_a, None], [m.value_b, m.delta_pct],
                           short_verdict(m)])
            if m.verdict.note:
                t.notes.append(f"{w.workload}: {m.name}: {m.verdict.note}")
        other = sorted({metric_label(m) for m in chosen if m.aggregation != "mean"})
        if other:
            t.notes.append(f"{w.workload}: geometric mean (gmean) / median over iterations: {', '.join(other)}; "
                           "arithmetic mean for the others")
        if more:
            t.notes.append(f"{w.workload}: {more} more significant changes (all metrics: --all)")
    t.notes.append(f"cells: value over iterations, and perc_diff vs {c.label_a}; a verdict needs Welch's t and "
                   f"Mann-Whitney U to agree at alpha = {c.policy.alpha}")
    return t


def headlines(c: Comparison) -> list[str]:
    """One line per workload: how many metrics regressed / improved / did not change, and the largest
    significant changes by name with their perc_diff."""
    out = []
    for w in c.workloads:
        counts: dict[str, int] = {}
        for m in w.metrics:
            counts[m.verdict.verdict] = counts.get(m.verdict.verdict, 0) + 1
        sig = sorted((m for m in w.metrics if _significant(m) and m.spec.group is not Grouping.RAIL),
                     key=lambda m: (not m.spec.headline, -abs(m.delta_pct or 0.0)))
        parts = [f"{counts.get(v, 0)} {v}{'s' if v in (REGRESSION, IMPROVEMENT) and counts.get(v, 0) != 1 else ''}"
                 for v in (REGRESSION, IMPROVEMENT)]
        parts += [f"{n} {v}" for v, n in sorted(counts.items()) if v not in (REGRESSION, IMPROVEMENT)]
        line = (f"{w.workload} ({len(w.iterations_a)} vs {len(w.iterations_b)} iterations): " + ", ".join(parts))
        if sig:
            line += "; " + "; ".join(
                f"{m.verdict.verdict.upper()} {metric_label(m)} "
                + (f"{m.delta_pct:+.2f} %" if m.delta_pct is not None else "(from 0)") for m in sig[:3])
        out.append(line)
    return out
