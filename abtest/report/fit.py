"""Tables that fit where they are read: a Table's cells formatted once, then fitted to a width, never squashed
mid-word: first text columns wrap at their spaces (down to their longest word; numbers never wrap), then the
columns are split into groups that each repeat the table's key columns. Headers wrap at spaces. When even the
key columns and one more do not fit, the table is stacked instead: one block per row, one line per column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abtest.compare.tables import TEXT, Table, format_value


@dataclass
class Grid:
    """A table as text. headers: column titles; right: right-aligned columns; rows: cell strings."""

    title: str
    headers: list
    right: list
    rows: list
    notes: list = field(default_factory=list)
    key: str = ""


def grid_of(t: Table, *, drop_single_workload: bool = True) -> Grid:
    """Cells formatted as every renderer prints them. A "workload" column holding one workload only is dropped
    (the workload goes into the title)."""
    cols = list(t.columns)
    rows = [[format_value(v, k) for v, (_, k) in zip(r, cols)] for r in t.rows]
    title = t.title
    if drop_single_workload and cols and cols[0][0] == "workload":
        names = {r[0] for r in rows}
        if len(names) <= 1:
            cols, rows = cols[1:], [r[1:] for r in rows]
            if names:
                title = f"{title} — {next(iter(names))}"
    return Grid(title, [c for c, _ in cols], [k != TEXT for _, k in cols], rows, list(t.notes), t.key)


def _header_width(h: str) -> int:
    return max((len(w) for w in h.split()), default=0)


def column_widths(g: Grid) -> list[int]:
    """Widest cell of each column, or the header's longest word when that is wider."""
    out = []
    for i, h in enumerate(g.headers):
        cells = max((len(r[i]) for r in g.rows), default=0)
        out.append(max(cells, _header_width(h), 1))
    return out


def min_widths(g: Grid) -> list[int]:
    """The narrowest each column can be: text columns wrap down to their longest word, numbers not at all."""
    natural = column_widths(g)
    out = []
    for i, (h, right) in enumerate(zip(g.headers, g.right)):
        if right:
            out.append(natural[i])
        else:
            words = max((len(w) for r in g.rows for w in r[i].split()), default=0)
            out.append(max(words, _header_width(h), 1))
    return out


def fitted_widths(g: Grid, width: int, pad: int = 3) -> list[int] | None:
    """Column widths that fit `width` by wrapping text columns (widest first, never below their longest
    word), or None when wrapping alone cannot make the table fit."""
    widths, floor = column_widths(g), min_widths(g)
    budget = width - 1 - pad * len(widths)
    while sum(widths) > budget:
        cand = [i for i in range(len(widths)) if widths[i] > floor[i]]
        if not cand:
            return None
        i = max(cand, key=lambda j: widths[j] - floor[j])
        widths[i] = max(floor[i], widths[i] - (sum(widths) - budget))
    return widths


def wrap_cell(text: str, width: int) -> list[str]:
    """A cell broken at spaces into lines of at most `width` characters (a longer word stays whole)."""
    return wrap_header(text, width) or [""]


def wrap_header(h: str, width: int) -> list[str]:
    """A header broken at spaces into lines of at most `width` characters."""
    lines, cur = [], ""
    for word in h.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + ([cur] if cur else [])


KEY_COLUMNS = {
    "summary": 1,
    "power_channels": 2,
    "idle": 1,
    "tasks": 2,
    "all_metrics": 1,
    "fps_power": 1,
    "geekbench": 1,
    "jank": 1,
}


def split(g: Grid, width: int, *, pad: int = 3, keys: int | None = None) -> list[Grid]:
    """Column groups of `g` that each fit `width` characters when every column costs its width + `pad`
    (borders and padding) + 1. Each group repeats the first `keys` columns. [] when even one data column does
    not fit beside the key columns (the caller stacks the table instead)."""
    widths = column_widths(g)
    keys = KEY_COLUMNS.get(g.key, 1) if keys is None else keys
    keys = min(keys, len(widths))
    cost = [w + pad for w in widths]
    if sum(cost) + 1 <= width or fitted_widths(g, width, pad) is not None:
        return [g]
    widths = min_widths(g)[:keys] + widths[keys:]  # key columns wrapped as far as they go, then split
    cost = [w + pad for w in widths]
    base = sum(cost[:keys]) + 1
    groups, cur, used = [], [], base
    for i in range(keys, len(widths)):
        if base + cost[i] > width:
            return []
        if used + cost[i] > width:
            groups.append(cur)
            cur, used = [], base
        cur.append(i)
        used += cost[i]
    if cur:
        groups.append(cur)
    out = []
    for n, idx in enumerate(groups):
        cols = list(range(keys)) + idx
        sub = Grid(
            g.title + (f" ({n + 1}/{len(groups)})" if len(groups) > 1 else ""),
            [g.headers[i] for i in cols],
            [g.right[i] for i in cols],
            [[r[i] for i in cols] for r in g.rows],
            g.notes if n == len(groups) - 1 else [],
            g.key,
        )
        out.append(sub)
    return out


def stacked_lines(g: Grid) -> list[str]:
    """The table as blocks of "header: value" lines, one block per row (for very narrow outputs)."""
    lines = [g.title]
    label = max((len(h) for h in g.headers), default=0)
    for r in g.rows:
        lines.append("")
        lines += [f"  {h.ljust(label)}  {v}" for h, v in zip(g.headers, r) if v != ""]
    return lines
