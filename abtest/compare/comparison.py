"""Compare two labels of a run store: per workload, per metric statistics and verdicts.

`compare_labels(label_a, label_b)` is the library entry point behind `abtest compare` and `abtest gate`.
A is the baseline: delta_pct = 100 * (mean(B) - mean(A)) / |mean(A)|.
"""
from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field

import numpy as np

from abtest.compare import stats
from abtest.compare.metrics import iteration_metrics
from abtest.compare.store import Iteration, Label
from abtest.compare.verdict import Policy, Verdict, decide


class CompareError(ValueError):
    """Bad input for a comparison (missing workload, no complete iterations, ...). CLI exit code 2."""


@dataclass
class MetricComparison:
    """One metric of one workload, A vs B. values_*: per usable iteration (same order as iterations_*),
    NaN-free; nan_iterations: iteration paths whose value was NaN/null (excluded and reported)."""
    name: str
    unit: str
    lower_is_better: bool | None
    source: str
    values_a: list
    values_b: list
    a: stats.Summary | None
    b: stats.Summary | None
    delta_pct: float | None
    bootstrap_ci95_pct: tuple[float, float] | None
    verdict: Verdict
    nan_iterations: list = field(default_factory=list)

    def to_json(self) -> dict:
        v = self.verdict
        return {
            "name": self.name, "unit": self.unit, "lower_is_better": self.lower_is_better, "source": self.source,
            "a": self.a.to_json() if self.a else None, "b": self.b.to_json() if self.b else None,
            "values_a": self.values_a, "values_b": self.values_b,
            "delta_pct": _num(self.delta_pct),
            "bootstrap_ci95_pct": list(self.bootstrap_ci95_pct) if self.bootstrap_ci95_pct else None,
            "p_mannwhitney": _num(v.p_mannwhitney), "p_welch": _num(v.p_welch),
            "decision_test": v.decision_test, "significant": v.significant,
            "equivalence_ci90_pct": list(v.equivalence_ci90_pct) if v.equivalence_ci90_pct else None,
            "verdict": v.verdict, "verdict_text": v.text, "need_more_iterations": v.need_more_iterations,
            "nan_iterations": self.nan_iterations,
        }


@dataclass
class WorkloadComparison:
    """All metrics of one workload. excluded: [{"label", "path", "reason"}] for incomplete/broken iterations.
    meta_a / meta_b: meta.json summaries (see `summarize_meta`). notes: things the reader must know."""
    workload: str
    iterations_a: list
    iterations_b: list
    excluded: list
    metrics: list
    only_in_a: list
    only_in_b: list
    meta_a: dict
    meta_b: dict
    notes: list

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.name == name), None)

    def to_json(self) -> dict:
        return {"workload": self.workload, "n_a": len(self.iterations_a), "n_b": len(self.iterations_b),
                "iterations_a": self.iterations_a, "iterations_b": self.iterations_b, "excluded": self.excluded,
                "metrics": [m.to_json() for m in self.metrics], "metrics_only_in_a": self.only_in_a,
                "metrics_only_in_b": self.only_in_b, "meta_a": self.meta_a, "meta_b": self.meta_b,
                "notes": self.notes}


@dataclass
class Comparison:
    label_a: str
    label_b: str
    path_a: str
    path_b: str
    policy: Policy
    workloads: list
    workloads_only_in_a: list
    workloads_only_in_b: list

    def workload(self, name: str) -> WorkloadComparison | None:
        return next((w for w in self.workloads if w.workload == name), None)

    def to_json(self) -> dict:
        return {"schema": "abtest.compare/1", "label_a": self.label_a, "label_b": self.label_b,
                "path_a": self.path_a, "path_b": self.path_b, "alpha": self.policy.alpha,
                "min_effect_pct": self.policy.min_effect_pct,
                "workloads": [w.to_json() for w in self.workloads],
                "workloads_only_in_a": self.workloads_only_in_a, "workloads_only_in_b": self.workloads_only_in_b}


def _num(x):
    return x if (x is None or math.isfinite(x)) else None


def compare_labels(label_a: Label, label_b: Label, *, workload: str | None = None, policy: Policy = Policy(),
                   with_trace: bool = True, use_cache: bool = True, metric_patterns: tuple = ()) -> Comparison:
    """Compare every workload present under both labels (or only `workload`). Raises CompareError on bad input.
    metric_patterns: shell-style patterns (fnmatch); when given, only matching metric names are compared."""
    wa, wb = set(label_a.workloads), set(label_b.workloads)
    if workload is not None:
        missing = [f"{lab.name} ({lab.path})" for lab, ws in ((label_a, wa), (label_b, wb)) if workload not in ws]
        if missing:
            raise CompareError(f"workload {workload!r} not found under {' and '.join(missing)}; "
                               f"workloads: {label_a.name}: {sorted(wa) or 'none'}, "
                               f"{label_b.name}: {sorted(wb) or 'none'}")
        common = [workload]
    else:
        common = sorted(wa & wb)
        if not common:
            raise CompareError(f"labels {label_a.name} and {label_b.name} have no workload in common "
                               f"({label_a.name}: {sorted(wa) or 'none'}; {label_b.name}: {sorted(wb) or 'none'})")
    result = Comparison(label_a.name, label_b.name, str(label_a.path), str(label_b.path), policy, [],
                        sorted(wa - wb) if workload is None else [], sorted(wb - wa) if workload is None else [])
    for w in common:
        result.workloads.append(_compare_workload(label_a, label_b, w, policy, with_trace, use_cache,
                                                  metric_patterns))
    if not any(w.metrics for w in result.workloads):
        what = f"matching {', '.join(metric_patterns)} " if metric_patterns else ""
        raise CompareError(f"{label_a.name} and {label_b.name} have no metric {what}in common in "
                           f"{', '.join(common)} (no metrics.json, power.csv or analysable trace on one side?)")
    return result


def not_enough_data(c: Comparison, min_iterations: int = 2) -> list[str]:
    """Workloads where a side has fewer than `min_iterations` usable iterations (messages; empty if none)."""
    out = []
    for w in c.workloads:
        for label, its in ((c.label_a, w.iterations_a), (c.label_b, w.iterations_b)):
            if len(its) < min_iterations:
                out.append(f"{label}/{w.workload}: {len(its)} usable iteration(s); statistics need at least "
                           f"{min_iterations} per label (run more iterations)")
    return out


def _collect(label: Label, workload: str, with_trace: bool, use_cache: bool
             ) -> tuple[list[Iteration], list[dict], list[dict], list[str]]:
    """Usable iterations, their metric dicts, the excluded ones, notes."""
    usable = label.complete(workload)
    excluded = [{"label": label.name, "path": str(it.path),
                 "reason": "; ".join(it.problems) if it.problems else "incomplete (no .complete marker)"}
                for it in label.excluded(workload)]
    if not usable:
        raise CompareError(f"{label.name}/{workload}: no complete iterations under {label.path / workload}"
                           + (f" ({len(excluded)} excluded: " + "; ".join(e["reason"] for e in excluded) + ")"
                              if excluded else ""))
    per_it, notes = [], []
    for it in usable:
        m, n = iteration_metrics(it, use_cache=use_cache, with_trace=with_trace)
        per_it.append(m)
        notes.extend(f"{label.name}/{workload}/{it.name}: {x}" for x in n)
    return usable, per_it, excluded, notes


def _compare_workload(label_a: Label, label_b: Label, workload: str, policy: Policy, with_trace: bool,
                      use_cache: bool, metric_patterns: tuple = ()) -> WorkloadComparison:
    its_a, ma, ex_a, notes_a = _collect(label_a, workload, with_trace, use_cache)
    its_b, mb, ex_b, notes_b = _collect(label_b, workload, with_trace, use_cache)
    if metric_patterns:
        keep = lambda name: any(fnmatch.fnmatchcase(name, p) for p in metric_patterns)  # noqa: E731
        ma = [{k: v for k, v in m.items() if keep(k)} for m in ma]
        mb = [{k: v for k, v in m.items() if keep(k)} for m in mb]
    notes = notes_a + notes_b
    for lab, its, ex in ((label_a, its_a, ex_a), (label_b, its_b, ex_b)):
        if ex:
            notes.append(f"{lab.name}/{workload}: {len(ex)} iteration(s) excluded, {len(its)} used")
    names_a = set().union(*(m.keys() for m in ma))
    names_b = set().union(*(m.keys() for m in mb))
    metrics = []
    for name in sorted(names_a & names_b):
        metrics.append(_compare_metric(name, its_a, ma, its_b, mb, policy, notes, label_a.name, label_b.name))
    return WorkloadComparison(
        workload=workload, iterations_a=[it.name for it in its_a], iterations_b=[it.name for it in its_b],
        excluded=ex_a + ex_b, metrics=metrics, only_in_a=sorted(names_a - names_b),
        only_in_b=sorted(names_b - names_a), meta_a=summarize_meta(its_a), meta_b=summarize_meta(its_b),
        notes=notes)


def _values(name: str, its: list[Iteration], per_it: list[dict], label: str, notes: list[str]
            ) -> tuple[list[float], list[str], object]:
    vals, nan_paths, proto = [], [], None
    missing = []
    for it, m in zip(its, per_it):
        metric = m.get(name)
        if metric is None:
            missing.append(it.name)
            continue
        proto = proto or metric
        if math.isfinite(metric.value):
            vals.append(metric.value)
        else:
            nan_paths.append(str(it.path))
    if missing:
        notes.append(f"{label}: metric {name} missing in iteration(s) {', '.join(missing)}")
    if nan_paths:
        notes.append(f"{label}: metric {name} is NaN/null in {', '.join(nan_paths)} (excluded from its statistics)")
    return vals, nan_paths, proto


def _compare_metric(name, its_a, ma, its_b, mb, policy, notes, label_a, label_b) -> MetricComparison:
    va, nan_a, proto_a = _values(name, its_a, ma, label_a, notes)
    vb, nan_b, proto_b = _values(name, its_b, mb, label_b, notes)
    lib = proto_a.lower_is_better
    if proto_b.lower_is_better != lib:
        notes.append(f"metric {name}: lower_is_better differs between {label_a} and {label_b}; using {label_a}'s")
    sa = stats.describe(va) if va else None
    sb = stats.describe(vb) if vb else None
    d = stats.delta_pct(sa.mean, sb.mean) if (sa and sb) else None
    ci = stats.bootstrap_delta_ci_pct(va, vb) if (len(va) >= 2 and len(vb) >= 2) else None
    v = decide(np.asarray(va), np.asarray(vb), lib, policy)
    return MetricComparison(name=name, unit=proto_a.unit, lower_is_better=lib, source=proto_a.source,
                            values_a=va, values_b=vb, a=sa, b=sb, delta_pct=d, bootstrap_ci95_pct=ci,
                            verdict=v, nan_iterations=nan_a + nan_b)


_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        elif isinstance(v, list):
            out[key] = ", ".join(str(x) for x in v)
        else:
            out[key] = v
    return out


def summarize_meta(iterations: list[Iteration]) -> dict:
    """meta.json of all iterations, flattened ("kernel.release": "6.1.0-..."). A key whose value differs
    between iterations maps to "varies: v1 | v2 ..." (numbers: "min .. max"), so a change of conditions
    mid-run (governor, temperature) is visible in the report header. ISO timestamps become "first .. last"."""
    flats = [_flatten(it.meta) for it in iterations if it.meta]
    keys = sorted(set().union(*flats)) if flats else []
    out = {}
    for k in keys:
        vals = [f[k] for f in flats if k in f and f[k] is not None
                and not (isinstance(f[k], float) and not math.isfinite(f[k]))]  # NaN in meta.json: dropped
        if not vals:
            continue
        distinct = list(dict.fromkeys(str(v) for v in vals))
        if len(distinct) == 1:
            out[k] = vals[0]
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[k] = f"{min(vals)} .. {max(vals)}"
        elif all(isinstance(v, str) and _ISO_TIME.match(v) for v in vals):
            out[k] = f"{min(vals)} .. {max(vals)}"  # ISO 8601 timestamps sort as text
        else:
            out[k] = "varies: " + " | ".join(distinct[:4]) + (" ..." if len(distinct) > 4 else "")
    return out
