"""Tables that fit the terminal: a small table model and a renderer that never squashes a cell mid-word.

`Grid` is a titled table of pre-formatted cells; each column has a name and a unit (printed in the
header: "time (s)"). `print_grid` renders it with rich at the console's width (rich honours $COLUMNS,
also when the output is piped; 80 columns when piped without it):

1. the whole table at its natural width when it fits, else with headers wrapped at spaces; a grid may
   offer `alternatives` (e.g. the same matrix transposed, or long names moved to a `legend` table): the
   first of the grid and its alternatives that fits whole without wrapping a cell is printed;
2. else split: the key columns (the first `Grid.keys`, which name the row) are repeated in each part and
   the other columns are packed into parts that fit, never separating columns of one `Column.group`
   (e.g. the "s" and "%" of one CPU); text cells may wrap after a space, "/", ".", ":" or "," but not
   inside a word;
3. else (a terminal narrower than one key column and one group) stacked: one "field  value" block per row.

Numbers are formatted by `fmt(value, unit)` (thousands separators; decimals by unit; None -> "-").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

MISSING = "-"
_OVERHEAD_PER_COLUMN = 3  # box.SIMPLE_HEAD without edges: 1 space of padding each side + 1 separator
_BREAK = re.compile(r"(?<=[ /.:,])")  # a text cell may wrap after these characters (paths, dotted names)


@dataclass(frozen=True)
class Column:
    """name: what the column holds; unit: printed after the name in brackets ("" = plain number or text);
    numeric: right-aligned, never wrapped; group: columns with the same group stay together when split."""

    name: str
    unit: str = ""
    numeric: bool = True
    group: str | None = None

    @property
    def header(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name


@dataclass
class Grid:
    """A titled table. rows hold formatted strings (use `fmt`); the first `keys` columns name the row.
    alternatives: other layouts of the same data, used when this one does not fit whole; legend: a table
    printed after this one (long names referred to by a short key)."""

    title: str
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    keys: int = 1
    notes: list[str] = field(default_factory=list)
    alternatives: list[Grid] = field(default_factory=list)
    legend: Grid | None = None

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: row of {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))


# -- numbers ----------------------------------------------------------------------------------------------
_DECIMALS = {"%": 2, "s": 3, "us": 1, "ms": 2, "J": 3, "mW": 2}


def fmt(v, unit: str = "") -> str:
    """A value as a table prints it: ints with thousands separators; floats with the decimals of their unit
    (% 2, s 3, us 1, ms 2, J 3, mW 2) below 1000; else 0 decimals from 1000, 1 from 100, 2 from 0.01,
    3 significant digits below; None / NaN -> "-"."""
    if v is None:
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return MISSING
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
    return str(v)


# -- layout -------------------------------------------------------------------------------------------------
def _longest_word(s: str) -> int:
    return max((cell_len(w) for w in s.split()), default=0)


def _chunks(s: str) -> list[str]:
    return [c for c in _BREAK.split(s) if c]


def _wrap_text(s: str, width: int) -> str:
    """Wrap a text cell at separators so that no line is wider than `width` (a chunk longer than width,
    which has no separator to break at, is cut: only reachable on a terminal narrower than one word)."""
    lines: list[str] = []
    cur = ""
    for c in _chunks(s):
        while cell_len(c) > width:  # no break point: fold (last resort)
            if cur:
                lines.append(cur.rstrip())
                cur = ""
            lines.append(c[:width])
            c = c[width:]
        if cell_len(cur + c.rstrip()) > width and cur:
            lines.append(cur.rstrip())
            cur = ""
        cur += c
    if cur or not lines:
        lines.append(cur.rstrip())
    return "\n".join(lines)


@dataclass(frozen=True)
class _Widths:
    cells: int  # widest cell
    hard: int  # narrowest possible: numbers whole, text wrapped at separators, header wrapped at spaces
    soft: int  # no cell wrapped (header may wrap at spaces)
    natural: int  # nothing wrapped


def _widths(col: Column, cells: list[str]) -> _Widths:
    cw = max((cell_len(c) for c in cells), default=0)
    word = _longest_word(col.header)
    if col.numeric:
        hard = max(cw, word)
    else:
        hard = max(max((cell_len(ch.rstrip()) for c in cells for ch in _chunks(c)), default=0), word)
    soft = max(cw, word)
    return _Widths(cw, hard, soft, max(cw, cell_len(col.header)))


def _table_width(widths: list[int]) -> int:
    return sum(widths) + _OVERHEAD_PER_COLUMN * len(widths) - 1


def _fit(ws: list[_Widths], width: int) -> list[int] | None:
    """Column widths for one table within `width`, or None. Starts from the hard minimum, then gives the
    space left to text cells (up to no wrapping), then to headers (up to no wrapping)."""
    out = [w.hard for w in ws]
    if _table_width(out) > width:
        return None
    for target in ("soft", "natural"):
        for i, w in enumerate(ws):
            spare = width - _table_width(out)
            if spare <= 0:
                return out
            out[i] = min(getattr(w, target), out[i] + spare)
    return out


def _parts(grid: Grid, ws: list[_Widths], width: int) -> list[list[int]] | None:
    """Column indices of each part of a split table (keys first in every part), or None when one key set
    plus one group does not fit."""
    keys = list(range(grid.keys))
    groups: list[list[int]] = []
    for i in range(grid.keys, len(grid.columns)):
        g = grid.columns[i].group
        if groups and g is not None and grid.columns[groups[-1][-1]].group == g:
            groups[-1].append(i)
        else:
            groups.append([i])
    for target in ("soft", "hard"):
        parts: list[list[int]] = []
        cur: list[int] = []
        ok = True
        for g in groups:
            cand = keys + cur + g
            if _table_width([getattr(ws[i], target) for i in cand]) <= width:
                cur += g
                continue
            if not cur:
                ok = False
                break
            parts.append(keys + cur)
            cur = list(g)
            if _table_width([getattr(ws[i], target) for i in keys + cur]) > width:
                ok = False
                break
        if ok:
            if cur or not parts:
                parts.append(keys + cur)
            return parts
    return None


def _rich_table(grid: Grid, idx: list[int], widths: list[int]) -> RichTable:
    rt = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), header_style="bold")
    for i, w in zip(idx, widths):
        col = grid.columns[i]
        # cells fit `w` (numbers by construction, text pre-wrapped at separators); headers wrap at spaces
        rt.add_column(col.header, justify="right" if col.numeric else "left", width=w, overflow="fold")
    for row in grid.rows:
        cells = []
        for i, w in zip(idx, widths):
            c = row[i]
            cells.append(Text(c if grid.columns[i].numeric or cell_len(c) <= w else _wrap_text(c, w)))
        rt.add_row(*cells)
    return rt


def _stacked(grid: Grid, width: int) -> RichTable:
    """One 'field  value' block per row, for terminals too narrow for the table."""
    fw = max(cell_len(c.header) for c in grid.columns)
    fw = min(fw, max(8, width // 3))
    vw = max(4, width - fw - _OVERHEAD_PER_COLUMN * 2 + 1)
    rt = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_header=False)
    rt.add_column("field", width=fw, style="bold")
    rt.add_column("value", width=vw)
    for r, row in enumerate(grid.rows):
        for j, (col, c) in enumerate(zip(grid.columns, row)):
            rt.add_row(
                Text(_wrap_text(col.header, fw)),
                Text(_wrap_text(c, vw)),
                end_section=(j == len(row) - 1 and r < len(grid.rows) - 1),
            )
    return rt


def _column_widths(grid: Grid) -> list[_Widths]:
    return [_widths(c, list(cells)) for c, cells in zip(grid.columns, zip(*grid.rows))]


def fits_whole(grid: Grid, width: int) -> bool:
    """The grid fits `width` as one table without wrapping any cell (headers may wrap at spaces)."""
    if not grid.rows:
        return True
    return _table_width([w.soft for w in _column_widths(grid)]) <= width


def print_grid(con: Console, grid: Grid) -> None:
    """Print the grid's title, the table (whole, an alternative layout, split or stacked to fit `con.width`),
    its notes and its legend."""
    width = con.width
    for alt in grid.alternatives:
        if not fits_whole(grid, width) and fits_whole(alt, width):
            print_grid(con, Grid(alt.title, alt.columns, alt.rows, alt.keys, alt.notes, [], alt.legend))
            return
    if grid.rows:
        ws = _column_widths(grid)
        whole = _fit(ws, width)
        parts = [list(range(len(grid.columns)))] if whole else _parts(grid, ws, width)
        if parts is None:
            con.print(Text(grid.title + " (one block per row: too wide for this terminal)", style="bold"))
            con.print(_stacked(grid, width))
        else:
            for n, idx in enumerate(parts):
                title = grid.title
                if len(parts) > 1:
                    title += f" (part {n + 1} of {len(parts)}: split to fit {width} columns)"
                con.print(Text(title, style="bold"))
                widths = whole if whole else _fit([ws[i] for i in idx], width)
                con.print(_rich_table(grid, idx, widths))
    else:
        con.print(Text(grid.title, style="bold"))
        con.print(Text("  (no rows)"))
    for note in grid.notes:
        con.print(Padding(Text(note, style="dim"), (0, 0, 0, 2)))
    if grid.legend is not None:
        print_grid(con, grid.legend)
