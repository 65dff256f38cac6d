"""Seed-shaped tables from a Comparison: the tables kernel engineers post on LKML.

Each table is plain data (`Table`: columns with a kind, rows of raw values); abtest.report renders it for
the terminal (rich), markdown, HTML and JSON. Tables appear only when their metrics exist.

  fps_power       workload, kernel, FPS, FPS sdev, SoC Power (mW), power sdev, diff (perc_diff of power)
                  (the cpu_util boost revert seed: YouTube 59.94 / 59.93 FPS, 913.6 -> 720.4 mW, -21.15 %)
  power_channels  average power per channel CPU, CPU-Big, CPU-Little, CPU-Mid, GPU, Total: A, B, perc_diff
  idle            gmean over iterations of too deep %, too shallow %, wakeup latency (us), per kernel
                  (the teo util-awareness seed)
  geekbench       single / multi core score per kernel with perc_diff
  jank            jank % per kernel with perc_diff (the uclamp seed's Jankbench table)
  all_metrics     every metric: n, means, CVs, delta %, bootstrap 95 % CI, p-values, verdict
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from abtest.compare.comparison import Comparison, MetricComparison, WorkloadComparison
from abtest.compare.metrics import CHANNELS

# Column kinds: how renderers format a raw value.
TEXT, NUM, INT, PCT, DIFF, PVAL, CI = "text", "num", "int", "pct", "diff", "pval", "ci"

POWER_NAMES = ("soc_power_mw", "power_mw", "total_power_mw", "avg_power_mw", "power.channel.Total_mw")
FPS_NAMES = ("fps", "avg_fps", "fps_mean")  # the collectors' YouTube/game plugins write "fps"
JANK_NAMES = ("jank_pct", "jank_percent", "jank_frames_pct")
GB_SINGLE_NAMES = ("geekbench_single", "geekbench_single_core_score", "geekbench.single_core_score",
                   "single_core_score", "score_single", "single_score", "geekbench_score")
GB_MULTI_NAMES = ("geekbench_multi", "geekbench_multi_core_score", "geekbench.multi_core_score",
                  "multi_core_score", "multicore_score", "score_multi", "multi_score", "geekbench_multicore_score")
IDLE_PATTERNS = (("too deep %", r"too_deep.*pct|pct.*too_deep"),
                 ("too shallow %", r"too_shallow.*pct|pct.*too_shallow"),
                 ("wakeup latency gmean (us)", r"latency.*gmean.*us|gmean.*latency.*us"))


@dataclass
class Table:
    """key: stable identifier (JSON). columns: [(title, kind)]. rows: lists of raw values (None = empty)."""
    key: str
    title: str
    columns: list
    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"key": self.key, "title": self.title, "columns": [c for c, _ in self.columns],
                "kinds": [k for _, k in self.columns], "rows": self.rows, "notes": self.notes}


def _first(w: WorkloadComparison, names) -> MetricComparison | None:
    for n in names:
        m = w.metric(n)
        if m is not None:
            return m
    return None


def _find(w: WorkloadComparison, pattern: str) -> MetricComparison | None:
    """The metric whose name matches `pattern` with the shortest name (overall value before per-CPU ones)."""
    hits = [m for m in w.metrics if re.search(pattern, m.name)]
    return min(hits, key=lambda m: (len(m.name), m.name)) if hits else None


def _mean(m, side):
    if m is None:
        return None
    s = m.a if side == "a" else m.b
    return s.mean if (m is not None and s is not None) else None


def _sdev(m, side):
    if m is None:
        return None
    s = m.a if side == "a" else m.b
    return s.stdev if (m is not None and s is not None) else None


def _gmean_or_mean(m, side):
    if m is None:
        return None
    s = m.a if side == "a" else m.b
    if s is None:
        return None
    return s.gmean if s.gmean is not None else s.mean


def table_fps_power(c: Comparison) -> Table | None:
    t = Table("fps_power", "FPS and SoC power", [("workload", TEXT), ("kernel", TEXT), ("FPS", NUM),
              ("FPS sdev", NUM), ("SoC Power (mW)", NUM), ("power sdev", NUM), ("diff", DIFF), ("verdict", TEXT)])
    for w in c.workloads:
        fps, pw = _first(w, FPS_NAMES), _first(w, POWER_NAMES)
        if fps is None and pw is None:
            continue
        t.rows.append([w.workload, c.label_a, _mean(fps, "a"), _sdev(fps, "a"), _mean(pw, "a"), _sdev(pw, "a"),
                       None, None])
        t.rows.append([w.workload, c.label_b, _mean(fps, "b"), _sdev(fps, "b"), _mean(pw, "b"), _sdev(pw, "b"),
                       pw.delta_pct if pw else None, pw.verdict.text if pw else None])
        if pw is not None and pw.name != POWER_NAMES[0]:
            t.notes.append(f"{w.workload}: SoC power from metric {pw.name}")
    return t if t.rows else None


def table_power_channels(c: Comparison) -> Table | None:
    t = Table("power_channels", "Average power per channel", [("workload", TEXT), ("channel", TEXT),
              (f"{c.label_a} (mW)", NUM), (f"{c.label_b} (mW)", NUM), ("perc_diff", DIFF), ("verdict", TEXT)])
    for w in c.workloads:
        others = sorted(m.name[len("power.channel."):-len("_mw")] for m in w.metrics
                        if m.name.startswith("power.channel.") and m.name.endswith("_mw"))
        for ch in list(CHANNELS) + [o for o in others if o not in CHANNELS]:
            m = w.metric(f"power.channel.{ch}_mw")
            if m is not None:
                t.rows.append([w.workload, ch, _mean(m, "a"), _mean(m, "b"), m.delta_pct, m.verdict.text])
    return t if t.rows else None


def table_idle(c: Comparison) -> Table | None:
    cols = [("workload", TEXT), ("kernel", TEXT)] + [(title, NUM) for title, _ in IDLE_PATTERNS]
    t = Table("idle", "Idle misses and wakeup latency (gmean over iterations)", cols + [("power (mW)", NUM)])
    for w in c.workloads:
        found = [_find(w, pat) for _, pat in IDLE_PATTERNS]
        if not any(found):
            continue
        pw = _first(w, POWER_NAMES)
        for side, label in (("a", c.label_a), ("b", c.label_b)):
            t.rows.append([w.workload, label] + [_gmean_or_mean(m, side) for m in found] + [_gmean_or_mean(pw, side)])
        t.rows.append([w.workload, "perc_diff"] + [m.delta_pct if m else None for m in found]
                      + [pw.delta_pct if pw else None])
        t.notes.append(f"{w.workload}: metrics " + ", ".join(m.name for m in found if m)
                       + " (perc_diff row: difference of means, %)")
    return t if t.rows else None


def _two_metric_table(c: Comparison, key, title, specs) -> Table | None:
    cols = [("workload", TEXT), ("kernel", TEXT)]
    for label, _ in specs:
        cols += [(label, NUM), (f"{label} perc_diff", DIFF)]
    t = Table(key, title, cols)
    for w in c.workloads:
        ms = [_first(w, names) for _, names in specs]
        if not any(ms):
            continue
        row_a, row_b = [w.workload, c.label_a], [w.workload, c.label_b]
        for m in ms:
            row_a += [_mean(m, "a"), None]
            row_b += [_mean(m, "b"), m.delta_pct if m else None]
        t.rows += [row_a, row_b]
    return t if t.rows else None


def table_geekbench(c: Comparison) -> Table | None:
    return _two_metric_table(c, "geekbench", "Geekbench scores",
                             [("single", GB_SINGLE_NAMES), ("multi", GB_MULTI_NAMES)])


def table_jank(c: Comparison) -> Table | None:
    return _two_metric_table(c, "jank", "Jank", [("jank %", JANK_NAMES)])


def table_all_metrics(c: Comparison) -> Table:
    t = Table("all_metrics", f"All metrics: {c.label_b} vs {c.label_a}", [
        ("workload", TEXT), ("metric", TEXT), ("unit", TEXT), ("n A", INT), ("n B", INT),
        (f"mean {c.label_a}", NUM), (f"mean {c.label_b}", NUM), ("CV A", PCT), ("CV B", PCT), ("delta", DIFF),
        ("95% CI (bootstrap)", CI), ("p MWU", PVAL), ("p Welch", PVAL), ("verdict", TEXT)])
    for w in c.workloads:
        for m in w.metrics:
            t.rows.append([w.workload, m.name, m.unit, m.a.n if m.a else 0, m.b.n if m.b else 0,
                           _mean(m, "a"), _mean(m, "b"),
                           100 * m.a.cv if (m.a and m.a.cv is not None) else None,
                           100 * m.b.cv if (m.b and m.b.cv is not None) else None,
                           m.delta_pct, list(m.bootstrap_ci95_pct) if m.bootstrap_ci95_pct else None,
                           m.verdict.p_mannwhitney, m.verdict.p_welch, m.verdict.text])
    return t


def seed_tables(c: Comparison) -> list[Table]:
    """All tables that apply, seed shapes first, the full metric table last."""
    out = [t for t in (table_fps_power(c), table_power_channels(c), table_idle(c), table_geekbench(c),
                       table_jank(c)) if t is not None]
    out.append(table_all_metrics(c))
    return out


def format_value(value, kind: str) -> str:
    """Text form of a table cell: DIFF '-21.15 %', PCT '2.00 %', PVAL '0.0079', CI '[-22.0, -20.3] %'."""
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
    mag = abs(value)
    if mag >= 1e5 or (0 < mag < 1e-3):
        return f"{value:.4g}"
    return f"{value:.2f}"
