"""Outlier iterations of a workload comparison: the iterations a reader should look at before trusting a verdict.

An iteration is flagged when
  - its value of a metric that decided a verdict (a significant regression or improvement, or a metric
    behind the workload's status: abtest.compare.summary.deciding_metrics) lies beyond Tukey's fences of its own
    label's iterations: below Q1 - 1.5 IQR or above Q3 + 1.5 IQR (quartiles by linear interpolation; at least
    MIN_ITERATIONS values), or
  - it lacks every metric of an analysis that another iteration of the workload has (its trace is missing the
    events that analysis needs, or the analysis failed there).
Pure: reads the WorkloadComparison only (values as compare measured them, iteration paths, notes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from abtest.compare.comparison import MetricComparison, WorkloadComparison
from abtest.compare.summary import deciding_metrics, metric_label
from abtest.compare.verdict import IMPROVEMENT, REGRESSION
from abtest.metric_spec import Grouping

TUKEY_K = 1.5
MIN_ITERATIONS = 4  # quartiles of fewer values do not fence anything meaningfully


@dataclass(frozen=True)
class Outlier:
    """label / iteration (name) / path of the flagged iteration; reason: why, in words (metric, value, fences)."""

    label: str
    workload: str
    iteration: str
    path: str
    reason: str

    def text(self) -> str:
        return f"{self.label}/{self.workload}/{self.iteration} ({self.path}): {self.reason}"


def tukey_fences(values: list[float], k: float = TUKEY_K) -> tuple[float, float]:
    """(Q1 - k IQR, Q3 + k IQR) of `values` (same unit as the values)."""
    q1, q3 = np.percentile(np.asarray(values, float), [25, 75])
    return float(q1 - k * (q3 - q1)), float(q3 + k * (q3 - q1))


def verdict_metrics(w: WorkloadComparison) -> list[MetricComparison]:
    """The metrics that decided a verdict: significant ones (rails aside) and those behind the status."""
    sig = [m for m in w.metrics if m.verdict.verdict in (REGRESSION, IMPROVEMENT) and m.spec.group is not Grouping.RAIL]
    return list({m.name: m for m in sig + deciding_metrics(w, limit=len(w.metrics))}.values())


def _sides(w: WorkloadComparison, label_a: str, label_b: str):
    """(label, iteration names, paths, per-iteration measured dicts) of both sides."""
    return ((label_a, w.iterations_a, w.paths_a, w.measured_a), (label_b, w.iterations_b, w.paths_b, w.measured_b))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _value_outliers(w: WorkloadComparison, label_a: str, label_b: str) -> list[Outlier]:
    out = []
    for m in verdict_metrics(w):
        for label, names, paths, measured in _sides(w, label_a, label_b):
            vals = [
                (i, x[m.name].value) for i, x in enumerate(measured) if m.name in x and np.isfinite(x[m.name].value)
            ]
            if len(vals) < MIN_ITERATIONS:
                continue
            lo, hi = tukey_fences([v for _, v in vals])
            for i, v in vals:
                if v < lo or v > hi:
                    out.append(
                        Outlier(
                            label,
                            w.workload,
                            names[i],
                            _path(paths, i),
                            f"{metric_label(m)} = {_fmt(v)}, outside the Tukey fences "
                            f"[{_fmt(lo)}, {_fmt(hi)}] of {label}'s {len(vals)} iterations "
                            f"(verdict: {m.verdict.verdict})",
                        )
                    )
    return out


def _path(paths: list, i: int) -> str:
    return paths[i] if i < len(paths) else "?"


_SKIPPED = re.compile(
    r"^(?P<label>[^/]+)/(?P<workload>[^/]+)/(?P<it>[^:]+): (?P<analysis>[\w.-]+): "
    r"(?P<why>skipped, the trace has no .*? events)"
)


def _skip_reasons(w: WorkloadComparison) -> dict[tuple[str, str, str], str]:
    """{(label, iteration, analysis): "skipped, the trace has no X events"} from the per-iteration notes."""
    out = {}
    for n in w.notes:
        hit = _SKIPPED.match(n)
        if hit:
            out[(hit["label"], hit["it"], hit["analysis"])] = hit["why"]
    return out


def _missing_outliers(w: WorkloadComparison, label_a: str, label_b: str) -> list[Outlier]:
    analyses = [{x.analysis for x in m.values() if x.declared} for m in w.measured_a + w.measured_b]
    seen = set().union(*analyses) if analyses else set()
    why = _skip_reasons(w)
    out = []
    for label, names, paths, measured in _sides(w, label_a, label_b):
        for i, m in enumerate(measured):
            lacking = sorted(seen - {x.analysis for x in m.values() if x.declared})
            for a in lacking:
                reason = why.get((label, names[i], a), "no metric of it (other iterations have them)")
                out.append(Outlier(label, w.workload, names[i], _path(paths, i), f"{a}: {reason}"))
    return out


def outlier_iterations(w: WorkloadComparison, label_a: str, label_b: str) -> list[Outlier]:
    """Every flagged iteration of one workload comparison (A = `label_a`, B = `label_b`), value outliers first."""
    return _value_outliers(w, label_a, label_b) + _missing_outliers(w, label_a, label_b)


def outlier_lines(c) -> list[str]:
    """One line per flagged iteration of a Comparison (every workload), for the "outlier iterations" notes."""
    return [o.text() for w in c.workloads for o in outlier_iterations(w, c.label_a, c.label_b)]
