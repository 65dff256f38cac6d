"""Report header: what a reviewer asks for first ("kernel, version, hardware, test conditions").

Rows come from the meta.json summaries of both labels (abtest.compare.comparison.summarize_meta), in a fixed
order of sections; keys that no collector wrote are simply absent.
"""
from __future__ import annotations

from abtest.compare.comparison import Comparison, WorkloadComparison

# (section title, key prefixes) in display order; keys are flattened meta.json keys.
SECTIONS = (
    ("Kernel", ("kernel.",)),
    ("Hardware", ("hardware.",)),
    ("Governors", ("governors.",)),
    ("Thermal", ("thermal.",)),
    ("Settings", ("settings.", "workload.", "label_settings.")),
    ("Tools", ("tools.", "host_tools.", "target_tools.")),
    ("Time", ("timestamps.", "timestamp", "started", "finished", "start_time", "end_time", "date")),
)


def header_rows(c: Comparison, w: WorkloadComparison) -> list[tuple[str, str, str]]:
    """[(field, value for A, value for B)] for one workload: workload, iterations, then meta.json fields."""
    rows = [("workload", w.workload, w.workload),
            ("label", c.label_a, c.label_b),
            ("iterations used", str(len(w.iterations_a)), str(len(w.iterations_b))),
            ("iterations excluded", str(sum(e["label"] == c.label_a for e in w.excluded)),
             str(sum(e["label"] == c.label_b for e in w.excluded)))]
    keys = list(dict.fromkeys(list(w.meta_a) + list(w.meta_b)))
    used = set()
    for _, prefixes in SECTIONS:
        for k in keys:
            if k not in used and any(k.startswith(p) for p in prefixes):
                used.add(k)
                rows.append((k, _s(w.meta_a.get(k)), _s(w.meta_b.get(k))))
    for k in keys:
        if k not in used:
            rows.append((k, _s(w.meta_a.get(k)), _s(w.meta_b.get(k))))
    return rows


def _s(v) -> str:
    return "" if v is None else str(v)


def missing_header_fields(c: Comparison, w: WorkloadComparison) -> list[str]:
    """Reviewer-facing fields with no value on either side (printed as a warning, never invented)."""
    wanted = ("kernel.release", "kernel.version", "hardware.cpu_model")
    return [k for k in wanted if k not in w.meta_a and k not in w.meta_b]
