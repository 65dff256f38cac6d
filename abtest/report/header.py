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
    rows = [
        ("workload", w.workload, w.workload),
        ("label", c.label_a, c.label_b),
        ("iterations used", str(len(w.iterations_a)), str(len(w.iterations_b))),
        (
            "iterations excluded",
            str(sum(e["label"] == c.label_a for e in w.excluded)),
            str(sum(e["label"] == c.label_b for e in w.excluded)),
        ),
    ]
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


# Per-run noise: fields that differ between runs without being a test condition. Left out of the "differs"
# list (they stay in `--conditions`, the JSON meta_a/meta_b and the HTML's folded conditions).
IGNORED_DIFFERENCES = (
    "boot_id",
    "timestamps.",
    "timings.",
    "tools.",
    "host_tools.",
    "target_tools.",
    "uptime_s",
    "iteration",
    "attempt",
    "label",
    "target.file",
    "cooldown.",
    "date",
    "started",
    "finished",
    "start_time",
    "end_time",
    "wa.run_uuid",
    "wa.job_id",
    "wa.start_time",
    "wa.end_time",
    # LAVA lab provenance per job (abtest/collectors/lab): lab.device stays (a condition)
    "lab.job_id",
    "lab.job_url",
    "lab.attempt_key",
    "lab.submit_time",
    "lab.start_time",
    "lab.end_time",
    "lab.files.",
    "lab.failed_attempts",
    "lab.log_problems",
)
IDENTITY = (
    ("kernel", ("kernel.release",)),
    ("version", ("kernel.version",)),
    ("hardware", ("hardware.cpu_model", "hardware.target", "hardware.soc", "hardware.model")),
    ("CPUs", ("hardware.cpus",)),
    ("date", ("timestamps.start_utc", "wa.start_time")),
)


def _ignored(key: str) -> bool:
    return any(key == p or key.startswith(p) for p in IGNORED_DIFFERENCES)


def _first(meta: dict, keys: tuple) -> str:
    for k in keys:
        if meta.get(k) not in (None, ""):
            return _s(meta[k])
    return ""


def identity_rows(c: Comparison, w: WorkloadComparison) -> list[tuple[str, str, str]]:
    """What a reviewer asks first: kernel release and version, hardware, workload, iterations, date."""
    rows = [
        ("workload", w.workload, w.workload),
        (
            "iterations",
            f"{len(w.iterations_a)}" + (f" (+{_excluded(c.label_a, w)} excluded)" if _excluded(c.label_a, w) else ""),
            f"{len(w.iterations_b)}" + (f" (+{_excluded(c.label_b, w)} excluded)" if _excluded(c.label_b, w) else ""),
        ),
    ]
    for name, keys in IDENTITY:
        a, b = _first(w.meta_a, keys), _first(w.meta_b, keys)
        if name == "date":
            a, b = a[:10], b[:10]
        if a or b:
            rows.append((name, a, b))
    return rows


def _excluded(label: str, w: WorkloadComparison) -> int:
    return sum(e["label"] == label for e in w.excluded)


def differing_rows(c: Comparison, w: WorkloadComparison) -> list[tuple[str, str, str]]:
    """Test conditions that differ between A and B and matter (per-run noise, IGNORED_DIFFERENCES, left out;
    identity fields are shown by identity_rows)."""
    shown = {k for _, keys in IDENTITY for k in keys}
    out = []
    for k in dict.fromkeys(list(w.meta_a) + list(w.meta_b)):
        if k in shown or _ignored(k):
            continue
        a, b = _s(w.meta_a.get(k)), _s(w.meta_b.get(k))
        if a != b:
            out.append((k, a, b))
    return out
