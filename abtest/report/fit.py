"""Tables that fit where they are read: a Table's cells formatted once, then fitted to a width, never squashed
mid-word: first text columns wrap at their spaces (down to their longest word; numbers never wrap), then the
columns are split into groups that each repeat the table's key columns. Headers wrap at spaces. When even the
key columns and one more do not fit, the table is stacked instead: one block per row, one line per column.

The one text grid of abtest: `abtest compare`'s reports (terminal, text, markdown: `grid_of` a compare Table) and
`abtest analyze` (a Grid built from declared metrics and tables, numbers by `fmt`) print through it;
`print_grid` renders a Grid on a rich console at its width (rich honours $COLUMNS, also when piped).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # compare's tables (and scipy behind them) are imported only to render a compare Table
    from rich.console import Console

    from abtest.compare.tables import Table


@dataclass
class Grid:
    """A table as text. headers: column titles; right: right-aligned columns; rows: cell strings."""

    title: str
    headers: list
    right: list
    rows: list
    notes: list = field(default_factory=list)
    key: str = ""
    keys: int | None = None  # leading columns repeated in each part of a split table (None: KEY_COLUMNS[key])


def header(name: str, unit: str = "") -> str:
    """A column header with its unit: "time (s)"; the name alone without a unit."""
    return f"{name} ({unit})" if unit else name


_DECIMALS = {"%": 2, "s": 3, "us": 1, "ms": 2, "J": 3, "mW": 2}


def fmt(v, unit: str = "") -> str:
    """A value as a table prints it: ints with thousands separators; floats with the decimals of their unit
    (% 2, s 3, us 1, ms 2, J 3, mW 2) below 1000; else 0 decimals from 1000, 1 from 100, 2 from 0.01,
    3 significant digits below; None / NaN -> "-"."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if not isinstance(v, float):
        return str(v)
    if not math.isfinite(v):
        return "-"
    d = _DECIMALS.get(unit)
    if d is not None and abs(v) < 1000:
        if v != 0 and abs(v) < 0.5 * 10**-d:
            return f"<{10**-d:.{d}f}" if v > 0 else f">-{10**-d:.{d}f}"
        return f"{v:,.{d}f}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.2f}" if a >= 0.01 else f"{v:.3g}"


def grid_of(t: Table, *, drop_single_workload: bool = True) -> Grid:
    """Cells formatted as every renderer prints them. A "workload" column holding one workload only is dropped
    (the workload goes into the title)."""
    from abtest.compare.tables import TEXT, format_value

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
            words = max((len(c.rstrip()) for r in g.rows for c in chunks(r[i])), default=0)
            out.append(max(words, _header_width(h), 1))
    return out


_BREAK = re.compile(r"(?<=[ /.:,])")  # a text cell may wrap after these characters (paths, dotted names)


def chunks(text: str) -> list[str]:
    """The pieces a text cell may wrap between: after a space, "/", ".", ":" or ","."""
    return [c for c in _BREAK.split(text) if c]


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
    """A cell broken into lines of at most `width` characters after a space, "/", ".", ":" or "," (a longer
    piece stays whole)."""
    lines: list[str] = []
    cur = ""
    for c in chunks(text):
        if cur and len(cur + c.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = c.lstrip()
        else:
            cur += c
    return lines + [cur.rstrip()] if cur.strip() or not lines else lines


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
    keys = (g.keys if g.keys is not None else KEY_COLUMNS.get(g.key, 1)) if keys is None else keys
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
            keys,
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


def wrap_line(text: str, width: int, indent: str) -> str:
    """`text` wrapped at spaces to `width`, first line indented by `indent`, the rest 2 more."""
    import textwrap

    return textwrap.fill(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=" " * (len(indent) + 2),
        break_long_words=False,
        break_on_hyphens=False,
    )


def print_grid(console: Console, g: Grid, *, cell_style: Callable[[str, str], str | None] | None = None) -> None:
    """The grid on a rich console at its width: whole (text columns wrapped at spaces), else split into parts
    that repeat the key columns, else stacked; then its notes. cell_style(header, cell): a rich style or None."""
    from rich.table import Table as RichTable

    parts = split(g, console.width)
    if not parts:
        for line in stacked_lines(g):
            console.print(line, markup=False, highlight=False)
    for p in parts:
        widths = fitted_widths(p, console.width) or min_widths(p)
        # the title on its own line at the console's width (a rich title wraps at the table's width: a narrow table
        # would stack a long title word by word)
        if p.title:
            console.print(wrap_line(p.title, console.width, ""), style="italic", markup=False, highlight=False)
        rt = RichTable(show_lines=False)
        for h, right, w in zip(p.headers, p.right, widths):
            head = "\n".join(wrap_header(h, w)).replace("[", "\\[")
            rt.add_column(head, justify="right" if right else "left", width=w, no_wrap=right, overflow="fold")
        for row in p.rows:
            cells = []
            for h, v, right, w in zip(p.headers, row, p.right, widths):
                style = cell_style(h, v) if cell_style else None
                esc = (v if right or len(v) <= w else "\n".join(wrap_cell(v, w))).replace("[", "\\[")
                cells.append(f"[{style}]{esc}[/]" if style and v else esc)
            rt.add_row(*cells)
        console.print(rt)
    for n in g.notes:
        console.print(wrap_line(n, console.width, "  "), style="dim", markup=False, highlight=False)
