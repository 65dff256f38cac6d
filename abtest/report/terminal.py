"""Terminal rendering with rich: header, seed tables, notes; verdicts coloured."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from abtest.compare.comparison import Comparison
from abtest.compare.tables import TEXT, Table, format_value, seed_tables
from abtest.report.header import header_rows, missing_header_fields
from abtest.report.markdown import comparison_notes

_VERDICT_STYLE = {"regression": "bold red", "improvement": "bold green", "no change": "dim",
                  "changed": "yellow", "inconclusive": "yellow", "insufficient": "red"}


def _style(text: str) -> str | None:
    for k, v in _VERDICT_STYLE.items():
        if text.startswith(k):
            return v
    return None


def rich_table(t: Table) -> RichTable:
    rt = RichTable(title=t.title, title_justify="left", show_lines=False)
    for title, kind in t.columns:
        rt.add_column(title, justify="left" if kind == TEXT else "right", overflow="fold")
    for row in t.rows:
        cells = []
        for v, (title, kind) in zip(row, t.columns):
            s = format_value(v, kind)
            style = _style(s) if title == "verdict" else None
            cells.append(f"[{style}]{s}[/]" if style and s else s.replace("[", "\\["))
        rt.add_row(*cells)
    return rt


def print_comparison(c: Comparison, console: Console | None = None, tables: list[Table] | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # piped / CI log: do not fold the wide tables into 80 columns
            console = Console(width=200)
    tables = tables if tables is not None else seed_tables(c)
    console.print(f"[bold]abtest compare[/]: {c.label_b} vs {c.label_a} (baseline)")
    for w in c.workloads:
        ht = RichTable(title=f"Test conditions: {w.workload}", title_justify="left")
        for col in ("field", c.label_a, c.label_b):
            ht.add_column(col, overflow="fold")
        for k, a, b in header_rows(c, w):
            ht.add_row(k, a, b, style="yellow" if a != b and k != "label" else None)
        console.print(ht)
        missing = missing_header_fields(c, w)
        if missing:
            console.print(f"[yellow]meta.json lacks {', '.join(missing)}: the report cannot state them[/]")
    for t in tables:
        console.print(rich_table(t))
        for n in t.notes:
            console.print(f"  [dim]{n}[/]")
    notes = comparison_notes(c)
    if notes:
        console.print("[bold]Notes[/]")
        for n in notes:
            console.print(f"  - {n}", markup=False, highlight=False)
    console.print(f"[dim]alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} %; "
                  "verdict needs Welch's t and Mann-Whitney U to agree (docs/compare.md)[/]")
