"""The CI power gate: thresholds (TOML) applied to a Comparison, with JUnit XML for CI systems.

Thresholds file (see ci/thresholds.toml and docs/compare.md)::

    alpha = 0.05              # significance level (default 0.05)
    min_iterations = 3        # per side and metric, else "not enough data" (default 3)
    fail_on_inconclusive = false   # true: an inconclusive metric counts as not enough data (exit 2)
    [metrics."power.Total"]   # a full metric key (`abtest metrics` lists the declared ones)
    max_regression_pct = 3.0  # regression allowed, percent of A's aggregate, in the metric's bad direction
    # optional per metric: alpha, lower_is_better (override), workloads = ["youtube", ...],
    # required = false (a metric measured in no compared workload is then skipped instead of an error)

Per (workload, gated metric) the verdict rule of abtest.compare.verdict runs with alpha from the file and
min_effect_pct = max_regression_pct: the check FAILS when the result is "regression" (significant and at
least max_regression_pct worse). It is an ERROR when the metric has NaN values, fewer than min_iterations
on a side, or (when the metric lists `workloads`) is missing there; a gated metric found in no compared
workload is an error too unless it says `required = false` and the name is a declared metric (a typo in a
metric name must not pass silently). The test runs on the metric's declared aggregation (gmean metrics on
their logarithms, abtest.compare.verdict). With A's aggregate 0 there is no percent scale: a significant
change in the bad direction fails whatever max_regression_pct says. Exit code: 1 if any check failed, else 2 if any
error, else 0.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from abtest.analysis.registry import all_specs, resolve
from abtest.compare.comparison import Comparison
from abtest.compare.verdict import INCONCLUSIVE, REGRESSION, Policy, decide

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skipped"


class ThresholdsError(ValueError):
    """The thresholds file is missing or malformed (message names the file and the key)."""


@dataclass(frozen=True)
class MetricThreshold:
    name: str
    max_regression_pct: float
    alpha: float
    lower_is_better: bool | None = None  # None: use the metric's own direction
    workloads: tuple = ()
    required: bool = True  # False: a metric measured in no compared workload is skipped, not an error


@dataclass(frozen=True)
class Thresholds:
    path: str
    alpha: float
    min_iterations: int
    fail_on_inconclusive: bool
    metrics: tuple


@dataclass
class Check:
    """Outcome of one (workload, metric) check. status: pass / fail / error / skipped."""

    workload: str
    metric: str
    status: str
    message: str
    delta_pct: float | None = None
    p_welch: float | None = None
    p_mannwhitney: float | None = None
    n_a: int = 0
    n_b: int = 0
    max_regression_pct: float | None = None


@dataclass
class GateResult:
    label_a: str
    label_b: str
    checks: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # errors not tied to one check
    excluded: list = field(default_factory=list)  # {"label", "workload", "path", "reason"}: iterations not used

    @property
    def exit_code(self) -> int:
        if any(c.status == FAIL for c in self.checks):
            return 1
        if self.errors or any(c.status == ERROR for c in self.checks):
            return 2
        return 0


def _num(where: str, v, *, positive: bool = False, upper: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ThresholdsError(f"{where}: expected a number, got {v!r}")
    if positive and v <= 0 or v < 0 or (upper is not None and v >= upper):
        raise ThresholdsError(f"{where}: value {v!r} out of range")
    return float(v)


def load_thresholds(path: str | Path) -> Thresholds:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ThresholdsError(f"thresholds file {path} not found") from e
    except UnicodeDecodeError as e:
        raise ThresholdsError(f"{path}: not UTF-8 text (byte offset {e.start})") from e
    except OSError as e:
        raise ThresholdsError(f"{path}: cannot read ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise ThresholdsError(f"{path}: invalid TOML: {e}") from e
    alpha = _num(f"{path}: alpha", doc.get("alpha", 0.05), positive=True, upper=1)
    min_it = doc.get("min_iterations", 3)
    if isinstance(min_it, bool) or not isinstance(min_it, int) or min_it < 2:
        raise ThresholdsError(f"{path}: min_iterations must be an integer >= 2, got {min_it!r}")
    foi = doc.get("fail_on_inconclusive", False)
    if not isinstance(foi, bool):
        raise ThresholdsError(f"{path}: fail_on_inconclusive must be true or false")
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise ThresholdsError(
            f"{path}: no [metrics.<name>] tables; expected e.g. [metrics.soc_power_mw] max_regression_pct = 3.0"
        )
    out = []
    for name, spec in metrics.items():
        where = f"{path}: [metrics.{name}]"
        if not isinstance(spec, dict) or "max_regression_pct" not in spec:
            raise ThresholdsError(f"{where}: missing max_regression_pct")
        lib = spec.get("lower_is_better")
        if lib is not None and not isinstance(lib, bool):
            raise ThresholdsError(f"{where}: lower_is_better must be true or false")
        wl = spec.get("workloads", [])
        if not isinstance(wl, list) or not all(isinstance(x, str) for x in wl):
            raise ThresholdsError(f"{where}: workloads must be a list of names")
        req = spec.get("required", True)
        if not isinstance(req, bool):
            raise ThresholdsError(f"{where}: required must be true or false")
        out.append(
            MetricThreshold(
                name=name,
                max_regression_pct=_num(f"{where} max_regression_pct", spec["max_regression_pct"]),
                alpha=_num(f"{where} alpha", spec.get("alpha", alpha), positive=True, upper=1),
                lower_is_better=lib,
                workloads=tuple(wl),
                required=req,
            )
        )
    return Thresholds(str(path), alpha, min_it, foi, tuple(out))


def check_metric_names(th: Thresholds, labels) -> None:
    """Raise ThresholdsError (before any trace is read) for a gated metric that no compared iteration can have: not
    a declared metric (or an instance of a declared template, e.g. power.<channel>) and not a metrics.json key of
    any iteration of `labels` (abtest.store.reader.Label). The message suggests the closest known names."""
    known = {k for lab in labels for its in lab.workloads.values() for it in its for k in it.metrics}
    for t in th.metrics:
        if t.name in known or resolve(t.name) is not None:
            continue
        declared = [s.key for _, s in all_specs()]
        close = difflib.get_close_matches(t.name, sorted(known) + declared, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (`abtest metrics` lists the declared ones)"
        raise ThresholdsError(
            f"{th.path}: [metrics.{t.name}]: unknown metric {t.name!r}: not a declared metric nor "
            f"a metrics.json key of {' or '.join(lab.name for lab in labels)}{hint}"
        )


def run_gate(c: Comparison, th: Thresholds) -> GateResult:
    res = GateResult(c.label_a, c.label_b)
    res.excluded = [{"workload": w.workload, **e} for w in c.workloads for e in w.excluded]
    for t in th.metrics:
        found_anywhere = False
        for w in c.workloads:
            if t.workloads and w.workload not in t.workloads:
                continue
            m = w.metric(t.name)
            if m is None:
                if t.workloads:
                    res.checks.append(
                        Check(
                            w.workload,
                            t.name,
                            ERROR,
                            f"metric {t.name} missing in workload {w.workload} (thresholds list it for this workload)",
                        )
                    )
                else:
                    res.checks.append(Check(w.workload, t.name, SKIP, f"metric {t.name} not measured in {w.workload}"))
                continue
            found_anywhere = True
            res.checks.append(_check(w.workload, m, t, th))
        if not found_anywhere and not t.workloads and (t.required or resolve(t.name) is None):
            why = (
                ""
                if resolve(t.name) is not None
                else (
                    "; it is not a declared metric either (`abtest metrics` lists them: e.g. power.Total, fps, "
                    "latency.gmean_us), so this is probably a typo"
                )
            )
            res.errors.append(
                f"gated metric {t.name} was found in no compared workload "
                f"({', '.join(w.workload for w in c.workloads)}){why}"
            )
    return res


def _check(workload: str, m, t: MetricThreshold, th: Thresholds) -> Check:
    n_a, n_b = len(m.values_a), len(m.values_b)
    base = dict(workload=workload, metric=t.name, n_a=n_a, n_b=n_b, max_regression_pct=t.max_regression_pct)
    if m.nan_iterations:
        return Check(status=ERROR, message=f"NaN/null values in {', '.join(m.nan_iterations)}", **base)
    if n_a < th.min_iterations or n_b < th.min_iterations:
        return Check(
            status=ERROR, message=f"not enough data: n = {n_a} vs {n_b}, need >= {th.min_iterations} per side", **base
        )
    lib = t.lower_is_better if t.lower_is_better is not None else m.lower_is_better
    if lib is None:
        return Check(
            status=ERROR,
            message=f"metric {t.name} has no direction; set lower_is_better in the thresholds file",
            **base,
        )
    v = decide(
        np.asarray(m.values_a),
        np.asarray(m.values_b),
        lib,
        Policy(alpha=t.alpha, min_effect_pct=t.max_regression_pct, min_iterations=th.min_iterations),
        aggregation=m.aggregation,
    )
    base.update(delta_pct=v.delta_pct, p_welch=v.p_welch, p_mannwhitney=v.p_mannwhitney)
    d = f"{v.delta_pct:+.2f} %" if v.delta_pct is not None else "n/a"
    agg = f" ({m.aggregation})" if m.aggregation != "mean" else ""
    detail = (
        f"{t.name}{agg} {d} (limit {t.max_regression_pct} % worse, alpha {t.alpha}); p Welch "
        f"{_p(v.p_welch)}, p Mann-Whitney {_p(v.p_mannwhitney)}; n = {n_a} vs {n_b}; {v.text}"
        + (f" ({v.note})" if v.note else "")
    )
    if v.verdict == REGRESSION:
        return Check(status=FAIL, message=f"significant regression: {detail}", **base)
    if v.verdict == INCONCLUSIVE and th.fail_on_inconclusive:
        return Check(status=ERROR, message=f"not enough data: {detail}", **base)
    return Check(status=PASS, message=detail, **base)


def _p(p):
    return "n/a" if p is None else f"{p:.4g}"


def excluded_lines(res: GateResult) -> list[str]:
    """One line per iteration the gate did not use (incomplete or broken), with the reason."""
    return [f"excluded {e['label']}/{e['workload']}: {e['path']}: {e['reason']}" for e in res.excluded]


def junit_xml(res: GateResult, thresholds_path: str = "") -> str:
    """JUnit XML: one <testcase> per (workload, metric) check, classname abtest.gate.<workload>."""
    fails = sum(c.status == FAIL for c in res.checks)
    errs = sum(c.status == ERROR for c in res.checks) + len(res.errors)
    skips = sum(c.status == SKIP for c in res.checks)
    suites = ET.Element("testsuites", name="abtest gate")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"abtest gate {res.label_b} vs {res.label_a}",
        tests=str(len(res.checks) + len(res.errors)),
        failures=str(fails),
        errors=str(errs),
        skipped=str(skips),
        time="0",
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("label_a", res.label_a),
        ("label_b", res.label_b),
        ("thresholds", thresholds_path),
        ("exit_code", str(res.exit_code)),
        ("excluded_iterations", str(len(res.excluded))),
    ):
        ET.SubElement(props, "property", name=k, value=v)
    if res.excluded:
        ET.SubElement(suite, "system-out").text = "\n".join(excluded_lines(res))
    for c in res.checks:
        case = ET.SubElement(suite, "testcase", classname=f"abtest.gate.{c.workload}", name=c.metric, time="0")
        if c.status == FAIL:
            ET.SubElement(case, "failure", message=c.message, type="regression").text = c.message
        elif c.status == ERROR:
            ET.SubElement(case, "error", message=c.message, type="bad_input").text = c.message
        elif c.status == SKIP:
            ET.SubElement(case, "skipped", message=c.message)
        else:
            ET.SubElement(case, "system-out").text = c.message
    for e in res.errors:
        case = ET.SubElement(suite, "testcase", classname="abtest.gate", name="input", time="0")
        ET.SubElement(case, "error", message=e, type="bad_input").text = e
    _xml_safe(suites)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# characters XML 1.0 does not allow anywhere (not even as &#N; references): C0 controls but tab, LF, CR;
# lone surrogates; U+FFFE, U+FFFF. ElementTree writes them as they are, and then no XML parser reads the file.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _visible(text: str) -> str:
    r"""`text` with every character XML cannot carry written as a Python-style escape (\x1b, \ud800)."""
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], text)


def _xml_safe(root: ET.Element) -> None:
    """Escape, in place, the characters XML cannot carry in every text, tail and attribute value under `root`
    (labels, workload and metric names and messages come from directory names and files users wrote)."""
    for el in root.iter():
        if el.text:
            el.text = _visible(el.text)
        if el.tail:
            el.tail = _visible(el.tail)
        for k, v in el.attrib.items():
            el.attrib[k] = _visible(v)
