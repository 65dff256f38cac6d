"""The first screen of a comparison: one status per workload (REGRESSION / IMPROVEMENT / NO CHANGE /
INCONCLUSIVE: `workload_status`), the metrics that decided it (`deciding_metrics`), verdict headlines and one
summary table per workload. Verdict words: regression / improvement (significant, beyond the minimum effect,
in the metric's worse / better direction), no change (equivalence shown), inconclusive (~N more iterations per
side would decide), below noise (inconclusive, and N >= BELOW_NOISE_N: the difference is smaller than the
iteration-to-iteration noise), changed (significant, on a metric with no better direction, e.g. a residency).

Headline metrics are those the registry marks `headline` (power per channel, FPS, jank, scores, idle misses,
wakeup latency, workload results), plus any other metric whose verdict is a significant regression or
improvement (so nothing that changed hides in "All metrics"; single rails are left to the power table). Cells are `value
(perc_diff)` as workload-
processor's `summary()` prints them; values are the declared aggregates over iterations.
"""

from __future__ import annotations

from abtest.analysis.power import CHANNEL_ORDER, POWER_CHANNEL
from abtest.compare.comparison import Comparison, MetricComparison, WorkloadComparison
from abtest.compare.tables import TEXT, VALDIFF, Table
from abtest.compare.verdict import CHANGED, IMPROVEMENT, INCONCLUSIVE, MAX_MORE_ITERATIONS, NO_CHANGE, REGRESSION
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
    head = [
        m for m in w.metrics if m.spec.headline and m.declared and m.spec.group in (Grouping.NONE, Grouping.CHANNEL)
    ]
    head += [m for m in w.metrics if not m.declared]  # a workload's own results: what the user asked to compare
    extra = [m for m in w.metrics if _significant(m) and m not in head and m.spec.group is not Grouping.RAIL]
    extra.sort(key=lambda m: -abs(m.delta_pct or 0.0))
    chosen = sorted(head, key=_rank) + extra[:MAX_EXTRA_ROWS]
    return chosen, max(0, len(extra) - MAX_EXTRA_ROWS)


BELOW_NOISE_N = 50  # an inconclusive metric needing at least this many more iterations per side is "below noise"


def larger_cv_pct(m: MetricComparison) -> float | None:
    """The larger of the two sides' coefficients of variation, in % (None when neither has one)."""
    cvs = [s.cv for s in (m.a, m.b) if s is not None and s.cv is not None]
    return 100.0 * max(cvs) if cvs else None


def below_noise(m: MetricComparison) -> bool:
    """Inconclusive, and deciding it would take BELOW_NOISE_N or more iterations per side: the difference is
    smaller than the iteration-to-iteration noise can resolve."""
    n = m.verdict.need_more_iterations
    return m.verdict.verdict == INCONCLUSIVE and n is not None and n >= BELOW_NOISE_N


def noise_text(m: MetricComparison) -> str:
    """ "below noise (CV 12.3 %, needs ~992 iterations)" from the verdict's fields (iterations per side, in
    total: the ones run plus the ones missing; "> 999 more" when the estimate hit its cap)."""
    n = m.verdict.need_more_iterations or 0
    cv = larger_cv_pct(m)
    have = min(m.a.n if m.a else 0, m.b.n if m.b else 0)
    need = f"needs > {n} more iterations" if n >= MAX_MORE_ITERATIONS else f"needs ~{n + have} iterations"
    return f"below noise ({'' if cv is None else f'CV {cv:.1f} %, '}{need} per side)"


def short_verdict(m: MetricComparison) -> str:
    """The verdict in a few words: "regression", "inconclusive (~4 more)", "below noise", "changed (higher)"."""
    v = m.verdict
    if below_noise(m):
        return "below noise"
    if v.verdict == INCONCLUSIVE and v.need_more_iterations:
        return f"inconclusive (~{v.need_more_iterations} more)"
    if v.verdict in (REGRESSION, IMPROVEMENT, NO_CHANGE):
        return v.verdict
    return v.text


def all_zero(values: list) -> bool:
    """Every iteration's value is exactly 0 (a gmean is not defined, the values are)."""
    return bool(values) and all(x == 0 for x in values)


def shown_values(m: MetricComparison) -> tuple[float | None, float | None, float | None]:
    """(A, B, perc_diff) as the summary shows them: a side whose aggregate is not defined because every
    iteration is 0 shows 0 (and 0 % when both are)."""
    a = 0.0 if m.value_a is None and all_zero(m.values_a) else m.value_a
    b = 0.0 if m.value_b is None and all_zero(m.values_b) else m.value_b
    d = m.delta_pct
    if d is None and a == 0.0 and b == 0.0:
        d = 0.0
    return a, b, d


def metric_label(m: MetricComparison) -> str:
    """ "wakeup latency gmean (us)", "power CPU-Big (mW)": title, group and unit."""
    title = m.spec.title or m.name
    if m.spec == POWER_CHANNEL:
        title = f"power {m.group}"
    elif m.group is not None:
        title = f"{title} [{m.group}]"
    return f"{title} ({m.unit})" if m.unit else title


def table_summary(c: Comparison) -> Table:
    """Per workload: metric, A (value), B (value (perc_diff)), verdict; the headline metrics first."""
    t = Table(
        "summary",
        f"Summary: {c.label_b} vs {c.label_a} (baseline)",
        [("workload", TEXT), ("metric", TEXT), (c.label_a, VALDIFF), (c.label_b, VALDIFF), ("verdict", TEXT)],
    )
    for w in c.workloads:
        chosen, more = summary_metrics(w)
        for m in chosen:
            a, b, d = shown_values(m)
            t.rows.append([w.workload, metric_label(m), [a, None], [b, d], short_verdict(m)])
            if (a, b) != (m.value_a, m.value_b):
                t.notes.append(
                    f"{w.workload}: {metric_label(m)}: 0 in every iteration of "
                    f"{_zero_sides(c, m)} (a gmean of zeros is not defined; the values are 0)"
                )
            elif m.verdict.note:
                t.notes.append(f"{w.workload}: {m.name}: {m.verdict.note}")
            if below_noise(m):
                t.notes.append(f"{w.workload}: {metric_label(m)}: {noise_text(m)}")
        other = sorted({metric_label(m) for m in chosen if m.aggregation != "mean"})
        if other:
            t.notes.append(
                f"{w.workload}: geometric mean (gmean) / median over iterations: {', '.join(other)}; "
                "arithmetic mean for the others"
            )
        if more:
            t.notes.append(f"{w.workload}: {more} more significant changes (all metrics: --all)")
    t.notes.append(f"cells: value over iterations, and perc_diff vs {c.label_a}; {c.rule_text()}")
    return t


def _zero_sides(c: Comparison, m: MetricComparison) -> str:
    sides = [lab for lab, v in ((c.label_a, m.values_a), (c.label_b, m.values_b)) if all_zero(v)]
    return " and ".join(sides)


STATUSES = ("REGRESSION", "IMPROVEMENT", "NO CHANGE", "INCONCLUSIVE")


def workload_status(w: WorkloadComparison) -> str:
    """One word for a workload: REGRESSION (any metric regressed), else IMPROVEMENT (any improved), else
    NO CHANGE (every summary metric with a direction shows no change), else INCONCLUSIVE."""
    verdicts = {m.verdict.verdict for m in w.metrics if m.spec.group is not Grouping.RAIL}
    if REGRESSION in verdicts:
        return "REGRESSION"
    if IMPROVEMENT in verdicts:
        return "IMPROVEMENT"
    key = [m for m in summary_metrics(w)[0] if m.lower_is_better is not None]
    if key and all(m.verdict.verdict == NO_CHANGE for m in key):
        return "NO CHANGE"
    return "INCONCLUSIVE"


def deciding_metrics(w: WorkloadComparison, limit: int = 5) -> list[MetricComparison]:
    """The metrics behind workload_status: the regressions (or improvements) largest first, else the summary
    metrics that are not "no change" (INCONCLUSIVE), else the summary metrics (NO CHANGE); at most `limit`."""
    status = workload_status(w)
    if status in ("REGRESSION", "IMPROVEMENT"):
        want = REGRESSION if status == "REGRESSION" else IMPROVEMENT
        ms = sorted(
            (m for m in w.metrics if m.verdict.verdict == want and m.spec.group is not Grouping.RAIL),
            key=lambda m: (not m.spec.headline, -abs(m.delta_pct or 0.0)),
        )
    else:
        chosen = [m for m in summary_metrics(w)[0] if m.lower_is_better is not None]
        ms = chosen if status == "NO CHANGE" else [m for m in chosen if m.verdict.verdict != NO_CHANGE]
    return ms[:limit]


def verdict_counts(w: WorkloadComparison) -> str:
    """ "5 regressions, 0 improvements, 13 no change, 123 inconclusive, 3 changed (no better direction)"."""
    counts: dict[str, int] = {}
    for m in w.metrics:
        counts[m.verdict.verdict] = counts.get(m.verdict.verdict, 0) + 1
    parts = [f"{counts.get(v, 0)} {v}{'s' if counts.get(v, 0) != 1 else ''}" for v in (REGRESSION, IMPROVEMENT)]
    for v, n in sorted(counts.items()):
        if v == CHANGED:
            parts.append(f"{n} changed (significant, on a metric with no better direction)")
        elif v not in (REGRESSION, IMPROVEMENT):
            parts.append(f"{n} {v}")
    return ", ".join(parts)


def headlines(c: Comparison) -> list[str]:
    """One line per workload: how many metrics regressed / improved / did not change, and the largest
    significant changes by name with their perc_diff."""
    out = []
    for w in c.workloads:
        sig = sorted(
            (m for m in w.metrics if _significant(m) and m.spec.group is not Grouping.RAIL),
            key=lambda m: (not m.spec.headline, -abs(m.delta_pct or 0.0)),
        )
        line = (
            f"{workload_status(w)} {w.workload} ({len(w.iterations_a)} vs {len(w.iterations_b)} iterations): "
            + verdict_counts(w)
        )
        if sig:
            line += "; " + "; ".join(
                f"{m.verdict.verdict.upper()} {metric_label(m)} "
                + (f"{m.delta_pct:+.2f} %" if m.delta_pct is not None else "(from 0)")
                for m in sig[:3]
            )
        out.append(line)
    return out
