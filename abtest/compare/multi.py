"""N-way comparison: several labels against one baseline (`abtest compare BASE B C ...`).

Each non-baseline label X is compared with the baseline by the two-label comparison (`compare_labels(BASE, X)`:
same statistics, same decision rule, same verdicts); the pairs share one memo of analysed iterations, so every
label's iterations, the baseline's included, are analysed once per run. `MultiComparison` holds the pairwise
`Comparison`s and builds the side-by-side tables (one column per label, as mmtests' compare-kernels prints
them): the baseline's value, then per label "value (perc_diff vs the baseline) verdict".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.compare.comparison import (
    CompareError,
    Comparison,
    MetricComparison,
    compare_labels,
    not_enough_data,
)
from abtest.compare.summary import (
    headlines,
    metric_label,
    short_verdict,
    shown_values,
    summary_metrics,
)
from abtest.compare.tables import TEXT, VALDIFF, VALVERDICT, Table
from abtest.compare.verdict import Policy
from abtest.store.reader import Label

SCHEMA = "abtest.compare-multi/1"


@dataclass
class MultiComparison:
    """baseline: the baseline label's name; pairs: one two-label Comparison (baseline, X) per other label, in
    the order given."""

    baseline: str
    path: str
    pairs: list

    @property
    def labels(self) -> list[str]:
        """Every label, the baseline first."""
        return [self.baseline] + [c.label_b for c in self.pairs]

    @property
    def policy(self) -> Policy:
        return self.pairs[0].policy

    def pair(self, label: str) -> Comparison:
        """The comparison of `label` against the baseline."""
        return next(c for c in self.pairs if c.label_b == label)

    def workloads(self) -> list[str]:
        """Workload names compared in at least one pair, in first-seen order."""
        return list(dict.fromkeys(w.workload for c in self.pairs for w in c.workloads))

    def rule_text(self) -> str:
        """The decision rule as applied at every pair's sample sizes."""
        sizes = set().union(*(c.sample_sizes() for c in self.pairs))
        return self.policy.describe(sizes)

    def headlines(self) -> list[str]:
        """Each pair's verdict headlines, prefixed "X vs BASE:"."""
        return [f"{c.label_b} vs {self.baseline}: {h}" for c in self.pairs for h in headlines(c)]

    def to_json(self) -> dict:
        """Everything: the labels, one `abtest.compare/1` document per pair, and the side-by-side tables."""
        return {
            "schema": SCHEMA,
            "baseline": self.baseline,
            "path": self.path,
            "labels": self.labels,
            "paths": {c.label_b: c.path_b for c in self.pairs},
            "alpha": self.policy.alpha,
            "min_effect_pct": self.policy.min_effect_pct,
            "decision_rule": self.rule_text(),
            "headlines": self.headlines(),
            "comparisons": [c.to_json() for c in self.pairs],
            "tables": [multi_summary(self).to_json(), multi_all_metrics(self).to_json()],
        }


def compare_many(baseline: Label, others: list[Label], **options) -> MultiComparison:
    """`compare_labels(baseline, x, **options)` for every x of `others`, sharing the analysed iterations.
    CompareError when fewer than one other label is given or two labels share a name (columns are named by
    label)."""
    if not others:
        raise CompareError("an N-way compare needs the baseline and at least one other label")
    names = [baseline.name] + [x.name for x in others]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CompareError(
            f"label name(s) given twice: {', '.join(twice)} (every column is named by its label; "
            "copy or link the directory under another name)"
        )
    memo: dict = {}
    pairs = [compare_labels(baseline, x, analysed=memo, **options) for x in others]
    return MultiComparison(baseline.name, str(baseline.path), pairs)


def multi_not_enough_data(mc: MultiComparison, min_iterations: int = 2) -> list[str]:
    """not_enough_data of every pair, each message once."""
    return list(dict.fromkeys(x for c in mc.pairs for x in not_enough_data(c, min_iterations)))


def terse_verdict(m: MetricComparison) -> str:
    """The verdict in a cell: "regression", "no change", "inconclusive ~7", "below noise", "changed (higher)"."""
    v = short_verdict(m)
    hit = re.fullmatch(r"inconclusive \(~(\d+) more\)", v)
    return f"inconclusive ~{hit.group(1)}" if hit else v


def _row_metrics(mc: MultiComparison, workload: str, chooser) -> list[tuple[str, MetricComparison]]:
    """(name, a comparison holding it) for the metrics `chooser(w)` picks in any pair, first-seen order."""
    out: dict[str, MetricComparison] = {}
    for c in mc.pairs:
        w = c.workload(workload)
        if w is not None:
            for m in chooser(w):
                out.setdefault(m.name, m)
    return list(out.items())


def _cells(mc: MultiComparison, workload: str, name: str) -> list:
    """Per non-baseline label: [value, perc_diff, verdict] of metric `name` (None when not compared there)."""
    cells = []
    for c in mc.pairs:
        w = c.workload(workload)
        m = w.metric(name) if w is not None else None
        if m is None:
            cells.append(None)
            continue
        _, b, d = shown_values(m)
        cells.append([b, d, terse_verdict(m)])
    return cells


def multi_summary(mc: MultiComparison) -> Table:
    """Per workload, the summary metrics of every pair: baseline value, then per label value (perc_diff)
    verdict."""
    cols = [("workload", TEXT), ("metric", TEXT), (mc.baseline, VALDIFF)] + [(x, VALVERDICT) for x in mc.labels[1:]]
    t = Table("summary_multi", f"Summary: {', '.join(mc.labels[1:])} vs {mc.baseline} (baseline)", cols)
    for wname in mc.workloads():
        for name, m in _row_metrics(mc, wname, lambda w: summary_metrics(w)[0]):
            a, _, _ = shown_values(m)
            t.rows.append([wname, metric_label(m), [a, None]] + _cells(mc, wname, name))
    t.notes.append(
        f"cells: value over iterations, (perc_diff vs {mc.baseline}) and the verdict of that label "
        f"against {mc.baseline}; inconclusive ~N: about N more iterations per side would decide; "
        f"{mc.rule_text()}"
    )
    return t


def multi_all_metrics(mc: MultiComparison) -> Table:
    """Every metric of every pair, one column per label (the baseline's value first)."""
    cols = [("workload", TEXT), ("metric", TEXT), ("unit", TEXT), ("agg", TEXT), (mc.baseline, VALDIFF)]
    t = Table(
        "all_metrics_multi",
        f"All metrics: {', '.join(mc.labels[1:])} vs {mc.baseline}",
        cols + [(x, VALVERDICT) for x in mc.labels[1:]],
    )
    for wname in mc.workloads():
        for name, m in _row_metrics(mc, wname, lambda w: w.metrics):
            a, _, _ = shown_values(m)
            t.rows.append([wname, name, m.unit, m.aggregation, [a, None]] + _cells(mc, wname, name))
    return t
