"""`abtest analyze` as tables, from the declarations (abtest.analysis.registry): per analysis one table of its
scalar metrics (metric | value | unit), one table per declared grouping (rows = the group values: CPUs, tasks,
idle states, ...; columns = the metrics of that grouping, units in the headers) and its declared tables (units
from their TableSpec). `--windows` prints its combined values through the same grids; `--engine perfetto`'s
object gets its own column declarations (PERFETTO_TABLES). Grids: abtest.report.fit.
"""

from __future__ import annotations

from abtest.analysis import registry
from abtest.metric_spec import Grouping, MetricSpec
from abtest.report.fit import Grid, fmt, header

# the noun heading the first column of a grouping's table
GROUP_NOUN = {
    Grouping.CHANNEL: "channel",
    Grouping.RAIL: "rail",
    Grouping.DOMAIN: "domain",
    Grouping.TASK: "task",
    Grouping.CLUSTER: "cluster",
    Grouping.CPU: "CPU",
    Grouping.IDLE_STATE: "idle state",
    Grouping.OPP: "OPP",
    Grouping.BENCHMARK: "benchmark",
    Grouping.ZONE: "zone",
    Grouping.COOLING_DEVICE: "cooling device",
    Grouping.ROOT_DOMAIN: "root domain",
    Grouping.CGROUP: "cgroup",
}


def _order(groups) -> list[str]:
    """Group values in the order met, numbers (CPUs) numerically."""
    seen = list(dict.fromkeys(groups))
    if all(str(g).isdigit() for g in seen):
        return sorted(seen, key=int)
    return seen


def metric_grids(
    title: str, specs: tuple[MetricSpec, ...], values: dict[str, dict[str | None, float]], mark: dict | None = None
) -> list[Grid]:
    """The grids of one analysis' metric values ({template: {group: value}}, scalars under group None), in the
    order of their declaration: the scalars, then one grid per grouping. mark {(template, group): prefix}: put
    before a value (e.g. "≈ " for an approximate one)."""
    mark = mark or {}
    out: list[Grid] = []
    scalars = [s for s in specs if s.group is Grouping.NONE and s.key in values]
    if scalars:
        g = Grid(title, ["metric", "value", "unit"], [False, True, False], [], keys=1)
        for s in scalars:
            v = values[s.key].get(None)
            g.rows.append([s.title or s.key, mark.get((s.key, None), "") + fmt(v, s.unit), s.unit])
        out.append(g)
    for grouping in dict.fromkeys(s.group for s in specs if s.group is not Grouping.NONE and s.key in values):
        cols = [s for s in specs if s.group is grouping and s.key in values]
        noun = GROUP_NOUN.get(grouping, grouping.value)
        g = Grid(
            f"{title}: per {noun}",
            [noun] + [header(s.title or s.key, s.unit) for s in cols],
            [False] + [True] * len(cols),
            [],
            keys=1,
        )
        for grp in _order(grp for s in cols for grp in values[s.key]):
            g.rows.append(
                [str(grp)]
                + [
                    mark.get((s.key, grp), "") + fmt(values[s.key][grp], s.unit) if grp in values[s.key] else "-"
                    for s in cols
                ]
            )
        g.notes.append("metrics: " + ", ".join(s.key for s in cols))
        out.append(g)
    return out


def table_grid(title: str, columns: dict[str, str], rows: list[dict], keys: int = 1, note: str = "") -> Grid:
    """A declared table: columns {name: unit}; the first `keys` name the row (printed as they are: a pid or a
    CPU is no quantity), numbers right-aligned, formatted for their unit."""
    names = list(columns)
    numeric = [all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) for c in names]
    g = Grid(
        title,
        [header(c, columns[c]) for c in names],
        [n and i >= keys for i, n in enumerate(numeric)],
        [
            [str(r[c]) if i < keys and r.get(c) is not None else fmt(r.get(c), columns[c]) for i, c in enumerate(names)]
            for r in rows
        ],
        keys=keys,
    )
    if note:
        g.notes.append(note)
    return g


def _sort_key(v) -> tuple:
    """Numbers in numeric order ("574" before "1,200"), then text in the order met."""
    try:
        return (0, float(str(v).replace(",", "")))
    except ValueError:
        return (1, 0.0)


def matrix_grids(
    title: str, columns: dict[str, str], rows: list[dict], keys: int, across: str, note: str = ""
) -> list[Grid]:
    """A declared table with a key column spread `across` (TableSpec.across): per value column one matrix, rows =
    the other key columns, one column per value of `across` ("CPU 0 (%)"), "-" where a pair has no row."""
    names = list(columns)
    down = [c for c in names[:keys] if c != across]
    heads = _order(r[across] for r in rows) if all(str(r[across]).isdigit() for r in rows) else None
    heads = heads or list(dict.fromkeys(r[across] for r in rows))
    labels = sorted(dict.fromkeys(tuple(r[c] for c in down) for r in rows), key=lambda k: [_sort_key(x) for x in k])
    cells = {(tuple(r[c] for c in down), r[across]): r for r in rows}
    noun = "CPU" if across == "cpu" else across
    out = []
    for col in names[keys:]:
        unit = columns[col]
        g = Grid(
            f"{title}: {col}" + (f" ({unit})" if unit else ""),
            down + [header(f"{noun} {h}", unit) for h in heads],
            [False] * len(down) + [True] * len(heads),
            [
                [str(x) for x in lab] + [fmt((cells.get((lab, h)) or {}).get(col), unit) for h in heads]
                for lab in labels
            ],
            keys=len(down),
        )
        out.append(g)
    if note and out:
        out[-1].notes.append(note)
    return out


def analysis_grids(analysis: registry.Analysis, res: dict) -> list[Grid]:
    """The grids of one analysis' `--json` object (abtest.commands.analyze.evaluation_json)."""
    values: dict[str, dict[str | None, float]] = {}
    for m in res.get("metrics", {}).values():
        values.setdefault(m["template"], {})[m["group"]] = m["value"]
    tables = res.get("tables") or {}
    shown = {k for t in analysis.tables if t.key in tables for k in t.shows}  # printed by a table: not twice
    out = metric_grids(analysis.title, tuple(s for s in analysis.metrics if s.key not in shown), values)
    for t in analysis.tables:
        if t.key in tables and t.across:
            out += matrix_grids(t.title, t.units(), tables[t.key]["rows"], t.keys, t.across, t.note)
        elif t.key in tables:
            out.append(table_grid(t.title, t.units(), tables[t.key]["rows"], t.keys, t.note))
    return out


# -- the perfetto engine (`--engine perfetto`, abtest.trace.perfetto_engine.analyze) --------------------------
# result key -> (title, {column: unit}): what trace_processor's stdlib returns, declared once here
PERFETTO_TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "event_counts": ("Events ingested by trace_processor", {"event": "", "count": ""}),
    "power_rails": (
        "Power rails (linux / android.power_rails, average over each rail's first to last sample)",
        {"rail": "", "raw_rail": "", "average_power_mw": "mW", "energy_uws": "uWs", "samples": ""},
    ),
    "cpu_idle_residency": (
        "Idle state residency per CPU (linux.cpu.idle; state -1 = active; % of the CPU's time known to "
        "trace_processor)",
        {"cpu": "", "state": "", "time_ns": "ns", "percent": "%", "entries": ""},
    ),
    "cpu_frequency_residency": (
        "OPP residency per CPU (linux.cpu.frequency; % of the CPU's time known to trace_processor)",
        {"cpu": "", "frequency_khz": "kHz", "time_ns": "ns", "percent": "%"},
    ),
    "sched": ("Scheduling per CPU (sched slices)", {"cpu": "", "slices": "", "busy_ns": "ns", "sched_switch": ""}),
}


def perfetto_grids(d: dict) -> list[Grid]:
    """The grids of `abtest analyze --engine perfetto`: one per result list, with the declared columns it has."""
    out = []
    for key, (title, columns) in PERFETTO_TABLES.items():
        rows = d.get(key) or []
        if rows:
            have = {c: u for c, u in columns.items() if any(c in r for r in rows)}
            out.append(table_grid(title, have, rows, keys=2 if key.endswith("_residency") else 1))
    return out
