"""Terminal rendering with rich: verdict headlines, the summary table, the test conditions that differ, the
seed-style tables, notes. Fits the terminal: tables are fitted to the console width (text columns wrap at
spaces, wide tables split into column groups; abtest.report.fit), COLUMNS is honoured when output is piped."""
from __future__ import annotations

import os
import textwrap

from rich.console import Console
from rich.table import Table as RichTable

from abtest.compare.comparison import Comparison
from abtest.compare.summary import headlines, table_summary
from abtest.compare.tables import Table, seed_tables
from abtest.report.fit import Grid, fitted_widths, grid_of, min_widths, split, stacked_lines, wrap_header
from abtest.report.header import missing_header_fields
from abtest.report.notes import comparison_notes
from abtest.report.text import condition_lines

PIPED_WIDTH = 100  # when stdout is not a terminal and COLUMNS is not set
_VERDICT_STYLE = {"regression": "bold red", "improvement": "bold green", "no change": "dim",
                  "changed": "yellow", "inconclusive": "yellow", "insufficient": "red"}


def _style(text: str) -> str | None:
    for k, v in _VERDICT_STYLE.items():
        if text.startswith(k):
            return v
    return None


def wrap_line(text: str, width: int, indent: str) -> str:
    """`text` wrapped at spaces to `width`, first line indented by `indent`, the rest 2 more."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=" " * (len(indent) + 2),
                         break_long_words=False, break_on_hyphens=False)


def console_for_output(width: int | None = None) -> Console:
    """A console `width` wide if given, else as wide as the terminal, else COLUMNS, else PIPED_WIDTH when
    output is piped."""
    if width:
        return Console(width=width)
    con = Console()
    if not con.is_terminal:
        cols = os.environ.get("COLUMNS", "")
        con = Console(width=int(cols) if cols.isdigit() and int(cols) > 20 else PIPED_WIDTH)
    return con


def _rich(g: Grid, width: int) -> RichTable:
    widths = fitted_widths(g, width) or min_widths(g)
    rt = RichTable(title=g.title, title_justify="left", show_lines=False)
    for h, right, w in zip(g.headers, g.right, widths):
        head = "\n".join(wrap_header(h, w)).replace("[", "\\[")
        rt.add_column(head, justify="right" if right else "left", width=w, no_wrap=right, overflow="fold")
    for row in g.rows:
        cells = []
        for h, v in zip(g.headers, row):
            style = _style(v) if h == "verdict" else None
            esc = v.replace("[", "\\[")
            cells.append(f"[{style}]{esc}[/]" if style and v else esc)
        rt.add_row(*cells)
    return rt


def print_table(console: Console, t: Table) -> None:
    g = grid_of(t)
    parts = split(g, console.width)
    if not parts:
        for line in stacked_lines(g):
            console.print(line, markup=False, highlight=False)
    for p in parts:
        console.print(_rich(p, console.width))
    for n in g.notes:
        console.print(wrap_line(n, console.width, "  "), style="dim", markup=False, highlight=False)


def print_comparison(c: Comparison, console: Console | None = None, tables: list[Table] | None = None, *,
                     conditions: bool = False) -> None:
    """The report: headlines, summary, conditions (identity + what differs; all with `conditions`), seed tables
    (`tables`, default: those of seed_tables without "All metrics"), notes."""
    console = console or console_for_output()
    tables = tables if tables is not None else seed_tables(c, with_all=False)
    console.print(f"[bold]abtest compare[/]: {c.label_b} vs {c.label_a} (baseline)")
    for h in headlines(c):
        style = "bold red" if "REGRESSION" in h else ("bold green" if "IMPROVEMENT" in h else None)
        console.print(wrap_line(h, console.width, "  "), style=style, markup=False, highlight=False)
    print_table(console, table_summary(c))
    for w in c.workloads:
        for line in condition_lines(c, w, full=conditions):
            indent = " " * (len(line) - len(line.lstrip()))
            console.print(wrap_line(line.lstrip(), console.width, indent), markup=False, highlight=False)
        missing = missing_header_fields(c, w)
        if missing:
            console.print(f"  [yellow]meta.json lacks {', '.join(missing)}: the report cannot state them[/]")
    for t in tables:
        if t.key != "summary":
            print_table(console, t)
    notes = comparison_notes(c)
    if notes:
        console.print("[bold]Notes[/]")
        for n in notes:
            console.print(wrap_line(n, console.width, "  - "), markup=False, highlight=False)
    console.print(f"[dim]alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} %; "
                  "verdict needs Welch's t and Mann-Whitney U to agree (docs/compare.md); all metrics: --all[/]")
