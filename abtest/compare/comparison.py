"""Compare two labels of a run store: per workload, per metric statistics and verdicts.

`compare_labels(label_a, label_b)` is the library entry point behind `abtest compare` and `abtest gate`.
A is the baseline: delta_pct = 100 * (mean(B) - mean(A)) / |mean(A)|.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from dataclasses import dataclass, field

import numpy as np

from abtest.analysis import task_keys
from abtest.compare import stats
from abtest.compare.metrics import Measured, options_for
from abtest.compare.verdict import Policy, Verdict, aggregate, decide
from abtest.metric_spec import Grouping, MetricSpec
from abtest.store.config import StoreConfig
from abtest.store.layout import INCOMPLETE_FIX, LAYOUT_HINT
from abtest.store.model import Iteration
from abtest.store.reader import Label, align_plain
from abtest.units import unit_factor


class CompareError(ValueError):
    """Bad input for a comparison (missing workload, no complete iterations, ...). CLI exit code 2."""


@dataclass
class MetricComparison:
    """One metric of one workload, A vs B.

    name: full key ("power.CPU-Big"); spec: its declaration (key template, unit, direction, aggregation,
    grouping); group: the template's placeholder value (None for a scalar). values_*: per usable iteration (same
    order as iterations_*), NaN-free; nan_iterations: iteration paths whose value was NaN/null (excluded and
    reported). a / b: descriptive statistics; value_a / value_b: the aggregate the declaration asks for (mean,
    gmean or median; None when it is not defined, e.g. a gmean over a 0) — delta_pct always compares these two.
    declared: False when the metric came from a metrics.json key the registry does not declare.
    """

    name: str
    spec: MetricSpec
    group: str | None
    source: str
    values_a: list
    values_b: list
    a: stats.Summary | None
    b: stats.Summary | None
    value_a: float | None
    value_b: float | None
    delta_pct: float | None
    bootstrap_ci95_pct: tuple[float, float] | None
    verdict: Verdict
    nan_iterations: list = field(default_factory=list)
    declared: bool = True
    analysis: str = ""

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def lower_is_better(self) -> bool | None:
        return self.spec.lower_is_better

    @property
    def aggregation(self) -> str:
        return self.spec.aggregation.value

    @property
    def title(self) -> str:
        t = self.spec.title or self.spec.key
        return f"{t} [{self.group}]" if self.group is not None else t

    def to_json(self) -> dict:
        v = self.verdict
        return {
            "name": self.name,
            "key_template": self.spec.key,
            "group": self.group,
            "analysis": self.analysis,
            "declared": self.declared,
            "title": self.spec.title,
            "unit": self.unit,
            "direction": self.spec.direction.value,
            "lower_is_better": self.lower_is_better,
            "aggregation": self.aggregation,
            "grouping": self.spec.group.value,
            "source": self.source,
            "a": self.a.to_json() if self.a else None,
            "b": self.b.to_json() if self.b else None,
            "value_a": _num(self.value_a),
            "value_b": _num(self.value_b),
            "values_a": self.values_a,
            "values_b": self.values_b,
            "delta_pct": _num(self.delta_pct),
            "bootstrap_ci95_pct": list(self.bootstrap_ci95_pct) if self.bootstrap_ci95_pct else None,
            "p_mannwhitney": _num(v.p_mannwhitney),
            "p_welch": _num(v.p_welch),
            "decision_test": v.decision_test,
            "significant": v.significant,
            "equivalence_ci90_pct": list(v.equivalence_ci90_pct) if v.equivalence_ci90_pct else None,
            "verdict": v.verdict,
            "verdict_text": v.text,
            "need_more_iterations": v.need_more_iterations,
            "aggregation_note": v.note or None,
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
    # every value of every usable iteration, as compare computed it (same order as iterations_a / _b): what
    # explain and other readers use, so that none recomputes a value with other options; not serialised
    measured_a: list = field(default_factory=list, repr=False)
    measured_b: list = field(default_factory=list, repr=False)
    # the usable iterations' directories (same order as iterations_a / _b), for notes naming an iteration
    paths_a: list = field(default_factory=list, repr=False)
    paths_b: list = field(default_factory=list, repr=False)

    def metric(self, name: str) -> MetricComparison | None:
        """The comparison of one metric by its full key ("power.Total"), or None."""
        return next((m for m in self.metrics if m.name == name), None)

    def of(self, spec: MetricSpec, group: str | None = None) -> MetricComparison | None:
        """The comparison of a declared metric (and group), or None when this workload did not measure it."""
        return next((m for m in self.metrics if m.spec == spec and m.group == group), None)

    def grouped(self, spec: MetricSpec) -> list[MetricComparison]:
        """Every group of a grouped declared metric measured here, in the order of the metric list."""
        return [m for m in self.metrics if m.spec == spec]

    def to_json(self) -> dict:
        return {
            "workload": self.workload,
            "n_a": len(self.iterations_a),
            "n_b": len(self.iterations_b),
            "iterations_a": self.iterations_a,
            "iterations_b": self.iterations_b,
            "excluded": self.excluded,
            "metrics": [m.to_json() for m in self.metrics],
            "metrics_only_in_a": self.only_in_a,
            "metrics_only_in_b": self.only_in_b,
            "meta_a": self.meta_a,
            "meta_b": self.meta_b,
            "notes": self.notes,
        }


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

    def sample_sizes(self) -> set[tuple[int, int]]:
        """The (n A, n B) usable values per side that the verdicts of this comparison were decided at."""
        return {(len(m.values_a), len(m.values_b)) for w in self.workloads for m in w.metrics}

    def rule_text(self) -> str:
        """The decision rule as applied to this comparison's sample sizes (report footers print it)."""
        return self.policy.describe(self.sample_sizes())

    def to_json(self) -> dict:
        return {
            "schema": "abtest.compare/1",
            "label_a": self.label_a,
            "label_b": self.label_b,
            "path_a": self.path_a,
            "path_b": self.path_b,
            "alpha": self.policy.alpha,
            "min_effect_pct": self.policy.min_effect_pct,
            "decision_rule": self.rule_text(),
            "workloads": [w.to_json() for w in self.workloads],
            "workloads_only_in_a": self.workloads_only_in_a,
            "workloads_only_in_b": self.workloads_only_in_b,
        }


def _num(x):
    return x if (x is None or math.isfinite(x)) else None


def compare_labels(
    label_a: Label,
    label_b: Label,
    *,
    workload: str | None = None,
    policy: Policy = Policy(),
    with_trace: bool = True,
    use_cache: bool = True,
    metric_patterns: tuple = (),
    tasks: tuple[str, ...] = (),
    config: StoreConfig | None = None,
    jobs: int = 1,
    top_tasks: int = 10,
    progress=False,
    analysed: dict | None = None,
) -> Comparison:
    """Compare every workload present under both labels (or only `workload`). Raises CompareError on bad input.

    metric_patterns: shell-style patterns (fnmatch); when given, only matching metric names are compared.
    tasks: task names whose per-task metrics are compared (plus the store config's list for the workload);
    when neither names any, the `top_tasks` task names with the most CPU time in A that appear in every
    iteration of both sides. jobs: processes that analyse iterations in parallel (1: in this process).
    progress: show a progress bar on stderr while iterations are analysed (True, or the rich Console to draw it
    on: abtest.compare.parallel.analyse_iterations). analysed: a memo shared by several
    calls of one run ({str(iteration path): (metrics, notes)}, same options): iterations already in it are not
    analysed again, the ones analysed here are added (an N-way compare analyses its baseline once)."""
    config = config or StoreConfig()
    label_a, label_b = align_plain(label_a, label_b)
    empty = [f"{lab.name} ({lab.path})" for lab in (label_a, label_b) if not lab.workloads]
    if empty:
        raise CompareError(f"no workload and no trace file found in {' nor in '.join(empty)}: {LAYOUT_HINT}")
    wa, wb = set(label_a.workloads), set(label_b.workloads)
    if workload is not None:
        missing = [f"{lab.name} ({lab.path})" for lab, ws in ((label_a, wa), (label_b, wb)) if workload not in ws]
        if missing:
            raise CompareError(
                f"workload {workload!r} not found under {' and '.join(missing)}; "
                f"workloads: {label_a.name}: {sorted(wa) or 'none'}, "
                f"{label_b.name}: {sorted(wb) or 'none'}"
            )
        common = [workload]
    else:
        common = sorted(wa & wb)
        if not common:
            raise CompareError(
                f"labels {label_a.name} and {label_b.name} have no workload in common "
                f"({label_a.name}: {sorted(wa) or 'none'}; {label_b.name}: {sorted(wb) or 'none'})"
            )
    result = Comparison(
        label_a.name,
        label_b.name,
        str(label_a.path),
        str(label_b.path),
        policy,
        [],
        sorted(wa - wb) if workload is None else [],
        sorted(wb - wa) if workload is None else [],
    )
    sides = {}
    jobs_list = []
    for w in common:
        options = options_for(config, w, tuple(tasks))
        named = options.tasks
        for label in (label_a, label_b):
            usable, excluded = _usable(label, w)
            sides[(label.name, w)] = (usable, excluded, options, named)
            jobs_list += [(it, options) for it in usable]
    from abtest.compare.parallel import analyse_iterations

    memo = analysed if analysed is not None else {}
    todo = [(it, o) for it, o in jobs_list if str(it.path) not in memo]
    memo.update(analyse_iterations(todo, use_cache=use_cache, with_trace=with_trace, jobs=jobs, progress=progress))
    results = memo
    for w in common:
        side_a = _side(label_a, w, sides, results)
        side_b = _side(label_b, w, sides, results)
        named = sides[(label_a.name, w)][3]
        result.workloads.append(
            _compare_workload(label_a.name, label_b.name, w, side_a, side_b, policy, metric_patterns, named, top_tasks)
        )
    if not any(w.metrics for w in result.workloads):
        what = f"matching {', '.join(metric_patterns)} " if metric_patterns else ""
        raise CompareError(
            f"{label_a.name} and {label_b.name} have no metric {what}in common in "
            f"{', '.join(common)} (no metrics.json, power.csv or analysable trace on one side?)"
        )
    return result


def not_enough_data(c: Comparison, min_iterations: int = 2) -> list[str]:
    """Workloads where a side has fewer than `min_iterations` usable iterations (messages; empty if none)."""
    out = []
    for w in c.workloads:
        for label, its in ((c.label_a, w.iterations_a), (c.label_b, w.iterations_b)):
            if len(its) < min_iterations:
                out.append(
                    f"{label}/{w.workload}: {len(its)} usable iteration(s); statistics need at least "
                    f"{min_iterations} per label (run more iterations)"
                )
    return out


def _usable(label: Label, workload: str) -> tuple[list[Iteration], list[dict]]:
    """Usable iterations and the excluded ones ({label, path, reason}); CompareError when none is usable."""
    usable = label.complete(workload)
    excluded = [
        {
            "label": label.name,
            "path": str(it.path),
            "reason": "; ".join(it.problems) if it.problems else "incomplete (no .complete marker)",
        }
        for it in label.excluded(workload)
    ]
    if not usable:
        where = label.path if label.plain else label.path / workload
        msg = f"{label.name}/{workload}: no complete iterations under {where}"
        if excluded:
            msg += f" ({len(excluded)} excluded: " + "; ".join(e["reason"] for e in excluded) + ")"
        if any(not it.problems and not it.complete for it in label.excluded(workload)):
            msg += ". " + INCOMPLETE_FIX.format(dir=where)
        raise CompareError(msg)
    return usable, excluded


@dataclass
class _Side:
    label: str
    iterations: list
    per_it: list  # dict[key, Measured] per usable iteration
    excluded: list
    notes: list


def _side(label: Label, workload: str, sides: dict, results: dict) -> _Side:
    usable, excluded, _options, _named = sides[(label.name, workload)]
    per_it, notes = [], []
    for it in usable:
        m, n = results[str(it.path)]
        per_it.append(m)
        notes.extend(f"{label.name}/{workload}/{it.name}: {x}" for x in n)
    return _Side(label.name, usable, per_it, excluded, notes)


def _select_tasks(a: _Side, b: _Side, named: tuple[str, ...], top: int, notes: list[str]) -> set[str] | None:
    """Task names whose per-task metrics are compared: the named ones, else the `top` names with the most
    CPU time in A among those present in every iteration of both sides. None: no per-task metric at all."""

    def tasks_in(m: dict) -> set[str]:
        return {x.group for x in m.values() if x.spec.group is Grouping.TASK}

    every = [tasks_in(m) for m in a.per_it + b.per_it]
    if not any(every):
        return None
    if named:
        # a name selects task keys: the key itself or its thread part (abtest.analysis.task_keys.matches)
        present = set().union(*every)
        absent = [t for t in named if not task_keys.select(present, [t])]
        if absent:
            notes.append(
                f"task(s) {', '.join(absent)} never seen in these iterations (per-task metrics need the "
                "task to run and be woken; names are comm, at most 15 characters, or PROCESS/THREAD keys)"
            )
        return set(named) | set(task_keys.select(present, named))
    common = set.intersection(*every)
    runtime: dict[str, float] = {}
    for m in a.per_it:
        for x in m.values():
            if x.spec.key == "placement.task.{task}.runtime_ms_per_s" and x.group in common:
                runtime[x.group] = runtime.get(x.group, 0.0) + x.value
    ranked = sorted(common, key=lambda t: (-runtime.get(t, 0.0), t))
    chosen = set(ranked[:top])
    if len(common) > top:
        notes.append(
            f"per-task metrics: the {top} task names with the most CPU time in {a.label} of the "
            f"{len(common)} present in every iteration (name others with --task)"
        )
    return chosen


def _compare_workload(
    label_a: str,
    label_b: str,
    workload: str,
    a: _Side,
    b: _Side,
    policy: Policy,
    metric_patterns: tuple,
    named: tuple[str, ...],
    top_tasks: int,
) -> WorkloadComparison:
    notes = a.notes + b.notes
    ma, mb = a.per_it, b.per_it
    if metric_patterns:
        keep = lambda name: any(fnmatch.fnmatchcase(name, p) for p in metric_patterns)  # noqa: E731
        ma = [{k: v for k, v in m.items() if keep(k)} for m in ma]
        mb = [{k: v for k, v in m.items() if keep(k)} for m in mb]
    tasks = _select_tasks(
        _Side(a.label, a.iterations, ma, [], []), _Side(b.label, b.iterations, mb, [], []), named, top_tasks, notes
    )
    if tasks is not None:
        drop = lambda x: x.spec.group is Grouping.TASK and x.group not in tasks  # noqa: E731
        ma = [{k: v for k, v in m.items() if not drop(v)} for m in ma]
        mb = [{k: v for k, v in m.items() if not drop(v)} for m in mb]
    for side in (a, b):
        if side.excluded:
            notes.append(
                f"{side.label}/{workload}: {len(side.excluded)} iteration(s) excluded, {len(side.iterations)} used"
            )
    ma, mb = _same_units(ma, mb, a.label, b.label, notes)
    names_a = set().union(*(m.keys() for m in ma))
    names_b = set().union(*(m.keys() for m in mb))
    missing: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    metrics = [
        _compare_metric(name, a.iterations, ma, b.iterations, mb, policy, notes, label_a, label_b, missing)
        for name in sorted(names_a & names_b)
    ]
    notes += _missing_notes(missing)
    return WorkloadComparison(
        workload=workload,
        iterations_a=[it.name for it in a.iterations],
        iterations_b=[it.name for it in b.iterations],
        excluded=a.excluded + b.excluded,
        metrics=metrics,
        only_in_a=sorted(names_a - names_b),
        only_in_b=sorted(names_b - names_a),
        meta_a=summarize_meta(a.iterations),
        meta_b=summarize_meta(b.iterations),
        notes=notes,
        measured_a=a.per_it,
        measured_b=b.per_it,
        paths_a=[str(it.path) for it in a.iterations],
        paths_b=[str(it.path) for it in b.iterations],
    )


def _same_units(
    ma: list[dict], mb: list[dict], label_a: str, label_b: str, notes: list[str]
) -> tuple[list[dict], list[dict]]:
    """Every value of a metric in one unit: the unit of its first iteration in A (declared metrics are already
    in their declared unit). Values in another unit of the same quantity are converted (abtest.units) and a
    note says so; a metric whose units do not convert (or that states no unit on one side only) is removed
    from both sides with a note: raw numbers in different units are never compared."""
    units: dict[str, dict[str, list[str]]] = {}  # metric -> unit -> labels that used it
    for label, per_it in ((label_a, ma), (label_b, mb)):
        for m in per_it:
            for key, x in m.items():
                if not x.declared:
                    units.setdefault(key, {}).setdefault(x.spec.unit, []).append(label)
    convert: dict[str, tuple[MetricSpec, dict[str, float]]] = {}
    refused: set[str] = set()
    for key, seen in units.items():
        if len(seen) < 2:
            continue
        ref = next(x[key].spec for x in ma + mb if key in x)
        factors = {u: unit_factor(u, ref.unit) if u and ref.unit else None for u in seen}
        used = "; ".join(f"{u or 'no unit'!r} in {', '.join(sorted(set(labs)))}" for u, labs in seen.items())
        if any(f is None for f in factors.values()):
            refused.add(key)
            notes.append(f"metric {key}: units differ ({used}) and do not convert: not compared")
        else:
            convert[key] = (ref, factors)
            notes.append(f"metric {key}: units differ ({used}): values converted to {ref.unit!r}")

    def fix(m: dict) -> dict:
        out = {}
        for key, x in m.items():
            if key in refused:
                continue
            if key in convert and x.spec.unit != convert[key][0].unit:
                ref, factors = convert[key]
                x = dataclasses.replace(x, spec=ref, value=x.value * factors[x.spec.unit])
            out[key] = x
        return out

    if not units or not (convert or refused):
        return ma, mb
    return [fix(m) for m in ma], [fix(m) for m in mb]


def _missing_notes(missing: dict[tuple[str, tuple[str, ...]], list[str]]) -> list[str]:
    """One note per (label, iterations) listing the metrics those iterations lack."""
    out = []
    for (label, its), names in sorted(missing.items()):
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(
            f"{label}: iteration(s) {', '.join(its)} lack {len(names)} metric(s) the others have: {shown} "
            "(their statistics use the other iterations)"
        )
    return out


def _values(
    name: str, its: list[Iteration], per_it: list[dict], label: str, notes: list[str], missing_by: dict | None = None
) -> tuple[list[float], list[str], Measured | None]:
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
        if missing_by is None:
            notes.append(f"{label}: metric {name} missing in iteration(s) {', '.join(missing)}")
        else:
            missing_by.setdefault((label, tuple(missing)), []).append(name)
    if nan_paths:
        notes.append(f"{label}: metric {name} is NaN/null in {', '.join(nan_paths)} (excluded from its statistics)")
    return vals, nan_paths, proto


def _compare_metric(name, its_a, ma, its_b, mb, policy, notes, label_a, label_b, missing=None) -> MetricComparison:
    va, nan_a, proto_a = _values(name, its_a, ma, label_a, notes, missing)
    vb, nan_b, proto_b = _values(name, its_b, mb, label_b, notes, missing)
    spec: MetricSpec = proto_a.spec
    if not proto_a.declared and proto_b.spec.direction != spec.direction:
        notes.append(f"metric {name}: lower_is_better differs between {label_a} and {label_b}; using {label_a}'s")
    agg = spec.aggregation.value
    sa = stats.describe(va) if va else None
    sb = stats.describe(vb) if vb else None
    v = decide(np.asarray(va), np.asarray(vb), spec.lower_is_better, policy, aggregation=agg)
    value_a, value_b = aggregate(va, agg), aggregate(vb, agg)
    ci = stats.bootstrap_delta_ci_pct(va, vb, aggregation=agg) if (len(va) >= 2 and len(vb) >= 2) else None
    return MetricComparison(
        name=name,
        spec=spec,
        group=proto_a.group,
        source=proto_a.source,
        values_a=va,
        values_b=vb,
        a=sa,
        b=sb,
        value_a=value_a,
        value_b=value_b,
        delta_pct=v.delta_pct if (value_a is not None and value_b is not None) else None,
        bootstrap_ci95_pct=ci,
        verdict=v,
        nan_iterations=nan_a + nan_b,
        declared=proto_a.declared,
        analysis=proto_a.analysis,
    )


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
        vals = [
            f[k]
            for f in flats
            if k in f and f[k] is not None and not (isinstance(f[k], float) and not math.isfinite(f[k]))
        ]  # NaN in meta.json: dropped
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
