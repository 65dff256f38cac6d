"""Seed-shaped tables from a Comparison: the tables kernel engineers post on LKML.

Each table is plain data (`Table`: columns with a kind, rows of raw values); abtest.report renders it for
the terminal (rich), plain text, markdown, HTML and JSON. Tables appear only when their metrics exist. Rows
are found by declaration (abtest.analysis.registry specs), never by a key's spelling; every value printed is
the metric's declared aggregate over iterations, and a perc_diff always compares the two values beside it.

  fps_power       workload, kernel, FPS, FPS sdev, SoC power = power.Total (mW), power sdev, diff
                  (the cpu_util boost revert seed: YouTube 59.94 / 59.93 FPS, 913.6 -> 720.4 mW, -21.15 %)
  power_channels  "Average power": channel, tag (kernel), value (mW), perc_diff — CPU, CPU-Big, CPU-Little,
                  CPU-Mid, GPU, Total, then the other channels (the uclamp seed)
  idle            too deep %, too shallow %, wakeup latency (gmean over iterations), power, per kernel, with a
                  perc_diff row (the teo util-awareness seed)
  geekbench       single / multi core score per kernel with perc_diff
  jank            jank % per kernel with perc_diff (the uclamp seed's Jankbench table)
  tasks           per task name: wakeup latency gmean / p95 and CPU time per kernel with perc_diff
  all_metrics     every metric: n, aggregates, CVs, delta %, bootstrap 95 % CI, p-values, verdict
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abtest.analysis import idle, latency, placement
from abtest.analysis.power import CHANNEL_ORDER, POWER_CHANNEL
from abtest.compare.comparison import Comparison, MetricComparison
from abtest.results import specs as wl

# Column kinds: how renderers format a raw value. VALDIFF: [value, perc_diff or None] -> "18.54 (+11.40 %)".
TEXT, NUM, INT, PCT, DIFF, PVAL, CI, VALDIFF = "text", "num", "int", "pct", "diff", "pval", "ci", "valdiff"
SIGNED, INTERVAL = "signed", "interval"  # "+4.56"; [lo, hi] -> "[-1.20, 3.40]" (in the column's unit)
VALVERDICT = "valverdict"  # [value, perc_diff, verdict] -> "14.20 (+13.93 %) regression" (N-way compare)


@dataclass
class Table:
    """key: stable identifier (JSON). columns: [(title, kind)]. rows: lists of raw values (None = empty)."""

    key: str
    title: str
    columns: list
    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "title": self.title,
            "columns": [c for c, _ in self.columns],
            "kinds": [k for _, k in self.columns],
            "rows": self.rows,
            "notes": self.notes,
        }


def _value(m: MetricComparison | None, side: str):
    """The declared aggregate of one side (None when absent or not defined)."""
    if m is None:
        return None
    return m.value_a if side == "a" else m.value_b


def _sdev(m: MetricComparison | None, side: str):
    if m is None:
        return None
    s = m.a if side == "a" else m.b
    return s.stdev if s is not None else None


def _power_total(w) -> MetricComparison | None:
    return w.of(POWER_CHANNEL, "Total")


def table_fps_power(c: Comparison) -> Table | None:
    t = Table(
        "fps_power",
        "FPS and SoC power",
        [
            ("workload", TEXT),
            ("kernel", TEXT),
            ("FPS", NUM),
            ("FPS sdev", NUM),
            ("SoC Power (mW)", NUM),
            ("power sdev", NUM),
            ("diff", DIFF),
            ("verdict", TEXT),
        ],
    )
    for w in c.workloads:
        fps, pw = w.of(wl.FPS), _power_total(w)
        if fps is None and pw is None:
            continue
        t.rows.append(
            [w.workload, c.label_a, _value(fps, "a"), _sdev(fps, "a"), _value(pw, "a"), _sdev(pw, "a"), None, None]
        )
        t.rows.append(
            [
                w.workload,
                c.label_b,
                _value(fps, "b"),
                _sdev(fps, "b"),
                _value(pw, "b"),
                _sdev(pw, "b"),
                pw.delta_pct if pw else None,
                pw.verdict.text if pw else None,
            ]
        )
        if pw is not None:
            t.notes.append(f"{w.workload}: SoC power = power.Total, from {pw.source}")
    return t if t.rows else None


def _channel_rank(m: MetricComparison) -> tuple:
    order = {ch: i for i, ch in enumerate(CHANNEL_ORDER)}
    return (order.get(m.group, len(order)), m.group)


def table_power_channels(c: Comparison) -> Table | None:
    """The seeds' "Average power" table: per channel one row per kernel (value, perc_diff vs the first)."""
    t = Table(
        "power_channels",
        "Average power",
        [
            ("workload", TEXT),
            ("channel", TEXT),
            ("tag", TEXT),
            ("value (mW)", NUM),
            ("perc_diff", DIFF),
            ("verdict", TEXT),
        ],
    )
    for w in c.workloads:
        chans = sorted(w.grouped(POWER_CHANNEL), key=_channel_rank)
        for m in chans:
            t.rows.append([w.workload, m.group, c.label_a, m.value_a, 0.0 if m.value_a is not None else None, None])
            t.rows.append([w.workload, m.group, c.label_b, m.value_b, m.delta_pct, m.verdict.text])
        if chans:
            t.notes.append(
                f"{w.workload}: power from {chans[0].source}; mean over iterations of each iteration's average power"
            )
    return t if t.rows else None


IDLE_COLUMNS = (
    (idle.TOO_DEEP_PCT, "too deep %"),
    (idle.TOO_SHALLOW_PCT, "too shallow %"),
    (latency.LATENCY_GMEAN_US, "wakeup latency (us)"),
)


def table_idle(c: Comparison) -> Table | None:
    cols = [("workload", TEXT), ("kernel", TEXT)] + [(title, NUM) for _, title in IDLE_COLUMNS]
    t = Table("idle", "Idle misses and wakeup latency (gmean over iterations)", cols + [("power (mW)", NUM)])
    for w in c.workloads:
        found = [w.of(spec) for spec, _ in IDLE_COLUMNS]
        if not any(found):
            continue
        pw = _power_total(w)
        for side, label in (("a", c.label_a), ("b", c.label_b)):
            t.rows.append([w.workload, label] + [_value(m, side) for m in found] + [_value(pw, side)])
        t.rows.append(
            [w.workload, "perc_diff"] + [m.delta_pct if m else None for m in found] + [pw.delta_pct if pw else None]
        )
        for m in found + [pw]:
            if m is not None and m.verdict.note:
                t.notes.append(f"{w.workload}: {m.name}: {m.verdict.note}")
        t.notes.append(
            f"{w.workload}: "
            + ", ".join(f"{m.name} ({m.aggregation})" for m in found + [pw] if m)
            + "; perc_diff compares the two values above it"
        )
    return t if t.rows else None


def _two_metric_table(c: Comparison, key, title, specs) -> Table | None:
    cols = [("workload", TEXT), ("kernel", TEXT)]
    for label, _ in specs:
        cols += [(label, NUM), (f"{label} perc_diff", DIFF)]
    t = Table(key, title, cols)
    for w in c.workloads:
        ms = [w.of(spec) for _, spec in specs]
        if not any(ms):
            continue
        row_a, row_b = [w.workload, c.label_a], [w.workload, c.label_b]
        for m in ms:
            row_a += [_value(m, "a"), None]
            row_b += [_value(m, "b"), m.delta_pct if m else None]
        t.rows += [row_a, row_b]
    return t if t.rows else None


def table_geekbench(c: Comparison) -> Table | None:
    return _two_metric_table(
        c,
        "geekbench",
        "Geekbench scores (gmean over iterations)",
        [("single", wl.GEEKBENCH_SINGLE), ("multi", wl.GEEKBENCH_MULTI)],
    )


def table_jank(c: Comparison) -> Table | None:
    return _two_metric_table(c, "jank", "Jank", [("jank %", wl.JANK_PCT)])


TASK_COLUMNS = (
    (latency.TASK_LATENCY_GMEAN_US, "wakeup latency gmean (us)"),
    (latency.TASK_LATENCY_P95_US, "wakeup latency p95 (us)"),
    (placement.TASK_RUNTIME, "CPU time (ms/s)"),
)


def table_tasks(c: Comparison) -> Table | None:
    """Per task name, one row per kernel and metric column, with perc_diff: the peers' per-task latency table."""
    cols = [("workload", TEXT), ("task", TEXT), ("kernel", TEXT)]
    for _, title in TASK_COLUMNS:
        cols += [(title, NUM), ("perc_diff", DIFF)]
    t = Table("tasks", "Per task (by name)", cols)
    for w in c.workloads:
        names = sorted({m.group for spec, _ in TASK_COLUMNS for m in w.grouped(spec)})
        for task in names:
            ms = [w.of(spec, task) for spec, _ in TASK_COLUMNS]
            row_a, row_b = [w.workload, task, c.label_a], [w.workload, task, c.label_b]
            for m in ms:
                row_a += [_value(m, "a"), None]
                row_b += [_value(m, "b"), m.delta_pct if m else None]
            t.rows += [row_a, row_b]
    return t if t.rows else None


def table_all_metrics(c: Comparison) -> Table:
    t = Table(
        "all_metrics",
        f"All metrics: {c.label_b} vs {c.label_a}",
        [
            ("workload", TEXT),
            ("metric", TEXT),
            ("unit", TEXT),
            ("agg", TEXT),
            ("n A", INT),
            ("n B", INT),
            (c.label_a, NUM),
            (c.label_b, NUM),
            ("CV A", PCT),
            ("CV B", PCT),
            ("delta", DIFF),
            ("95% CI (bootstrap)", CI),
            ("p MWU", PVAL),
            ("p Welch", PVAL),
            ("verdict", TEXT),
        ],
    )
    for w in c.workloads:
        for m in w.metrics:
            t.rows.append(
                [
                    w.workload,
                    m.name,
                    m.unit,
                    m.aggregation,
                    m.a.n if m.a else 0,
                    m.b.n if m.b else 0,
                    m.value_a,
                    m.value_b,
                    100 * m.a.cv if (m.a and m.a.cv is not None) else None,
                    100 * m.b.cv if (m.b and m.b.cv is not None) else None,
                    m.delta_pct,
                    list(m.bootstrap_ci95_pct) if m.bootstrap_ci95_pct else None,
                    m.verdict.p_mannwhitney,
                    m.verdict.p_welch,
                    m.verdict.text,
                ]
            )
    return t


def seed_tables(c: Comparison, *, with_all: bool = True) -> list[Table]:
    """All tables that apply, seed shapes first, the full metric table last (when with_all)."""
    out = [
        t
        for t in (
            table_fps_power(c),
            table_power_channels(c),
            table_idle(c),
            table_geekbench(c),
            table_jank(c),
            table_tasks(c),
        )
        if t is not None
    ]
    if with_all:
        out.append(table_all_metrics(c))
    return out


def format_value(value, kind: str) -> str:
    """Text form of a table cell: DIFF '-21.15 %', PCT '2.00 %', PVAL '0.0079', CI '[-22.0, -20.3] %'."""
    if kind == VALVERDICT:
        v, d, verdict = value if value is not None else (None, None, "")
        return format_value([v, d], VALDIFF) + (f" {verdict}" if verdict and v is not None else "")
    if kind == VALDIFF:
        v, d = value if value is not None else (None, None)
        if v is None:
            return "n/a"
        return format_value(v, NUM) + (f" ({d:+.2f} %)" if d is not None else "")
    if value is None:
        return ""
    if kind == TEXT:
        return str(value)
    if kind == INT:
        return str(int(value))
    if kind == DIFF:
        return f"{value:+.2f} %"
    if kind == PCT:
        return f"{value:.2f} %"
    if kind == PVAL:
        return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"
    if kind == CI:
        return f"[{value[0]:.2f}, {value[1]:.2f}] %"
    if kind == SIGNED:
        return f"{value:+.2f}"
    if kind == INTERVAL:
        return f"[{value[0]:.2f}, {value[1]:.2f}]"
    mag = abs(value)
    if mag >= 1e5 or (0 < mag < 1e-3):
        return f"{value:.4g}"
    return f"{value:.2f}"
