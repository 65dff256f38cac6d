"""The notes of a comparison, condensed for reading: excluded iterations, workloads or metrics present on one
side only, and per-iteration notes — identical per-iteration notes are merged into one line naming the
iterations ("frequency: skipped, ... — in 16 iterations: menu 1-8, ladder 1-8")."""

from __future__ import annotations

import re

from abtest.compare.comparison import Comparison
from abtest.ranges import number_ranges

_ITER_NOTE = re.compile(r"^(?P<label>[^/]+)/(?P<workload>[^/]+)/(?P<it>[^:]+): (?P<text>.*)$", re.S)


def _ranges(names: list[str]) -> str:
    """ "1-8" for consecutive integers, else the names joined."""
    try:
        return number_ranges(names)
    except ValueError:
        return ", ".join(names)


def condense(notes: list[str]) -> list[str]:
    """Per-iteration notes with the same text merged (first-seen order kept); other notes unchanged."""
    out: list[str] = []
    groups: dict[str, dict[str, list[str]]] = {}
    order: list[str] = []
    for n in notes:
        m = _ITER_NOTE.match(n)
        if not m:
            out.append(n)
            continue
        text = m["text"]
        if text not in groups:
            groups[text] = {}
            order.append(text)
        groups[text].setdefault(m["label"], []).append(m["it"])
    merged = []
    for text in order:
        by_label = groups[text]
        total = sum(len(v) for v in by_label.values())
        where = "; ".join(f"{label} {_ranges(its)}" for label, its in by_label.items())
        merged.append(f"{text} — in {total} iteration{'s' if total != 1 else ''}: {where}")
    return merged + out


def comparison_notes(c: Comparison) -> list[str]:
    """Everything a reader must know that the tables do not show, condensed."""
    out = []
    if c.workloads_only_in_a:
        out.append(f"workloads only in {c.label_a} (not compared): {', '.join(c.workloads_only_in_a)}")
    if c.workloads_only_in_b:
        out.append(f"workloads only in {c.label_b} (not compared): {', '.join(c.workloads_only_in_b)}")
    for w in c.workloads:
        out += [f"{w.workload}: excluded {e['path']}: {e['reason']}" for e in w.excluded]
        out += [f"{w.workload}: {n}" for n in condense(w.notes)]
        if w.only_in_a or w.only_in_b:
            out.append(
                f"{w.workload}: metrics only in {c.label_a}: {', '.join(w.only_in_a) or 'none'}; "
                f"only in {c.label_b}: {', '.join(w.only_in_b) or 'none'}"
            )
    return out
