"""Terminal rendering with rich: verdict headlines, the summary table, the test conditions that differ, the
seed-style tables, notes. Fits the terminal: tables are fitted to the console width (text columns wrap at
spaces, wide tables split into column groups; abtest.report.fit), COLUMNS is honoured when output is piped."""

from __future__ import annotations

import os
import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from abtest.analysis.power import POWER_CHANNEL
from abtest.compare.comparison import Comparison
from abtest.compare.outliers import outlier_lines
from abtest.compare.summary import (
    deciding_metrics,
    metric_label,
    short_verdict,
    shown_values,
    summary_metrics,
    table_summary,
    verdict_counts,
    workload_status,
)
from abtest.compare.tables import Table, seed_tables
from abtest.report.fit import grid_of, print_grid, wrap_line
from abtest.report.header import missing_header_fields
from abtest.report.notes import comparison_notes
from abtest.report.text import condition_lines

PIPED_WIDTH = 100  # when stdout is not a terminal and COLUMNS is not set
_VERDICT_STYLE = {
    "regression": "bold red",
    "improvement": "bold green",
    "no change": "dim",
    "changed": "yellow",
    "inconclusive": "yellow",
    "insufficient": "red",
}


def _style(text: str) -> str | None:
    for k, v in _VERDICT_STYLE.items():
        if text.startswith(k):
            return v
    return None


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


def print_table(console: Console, t: Table) -> None:
    print_grid(console, grid_of(t), cell_style=lambda h, v: _style(v) if h == "verdict" else None)


def print_comparison(
    c: Comparison, console: Console | None = None, tables: list[Table] | None = None, *, conditions: bool = False
) -> None:
    """The report: headlines, summary, conditions (identity + what differs; all with `conditions`), seed tables
    (`tables`, default: those of seed_tables without "All metrics"), notes."""
    console = console or console_for_output()
    tables = tables if tables is not None else seed_tables(c, with_all=False)
    console.print(f"[bold]abtest compare[/]: {c.label_b} vs {c.label_a} (baseline)")
    print_first_screen(c, console)
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
    flagged = outlier_lines(c)
    if flagged:
        console.print("[bold]Outlier iterations[/] (look at them before trusting the verdict)")
        for n in flagged:
            console.print(wrap_line(n, console.width, "  - "), markup=False, highlight=False)
    console.print(
        f"[dim]alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} %; "
        f"{escape(c.rule_text())} (docs/compare.md); all metrics: --all[/]"
    )


# -- the first screen: a status per workload, the metrics that decided it, the summary ---------------------------
_STATUS_STYLE = {"REGRESSION": "bold red", "IMPROVEMENT": "bold green", "NO CHANGE": "bold", "INCONCLUSIVE": "yellow"}


def _pct(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f} %"


def _evidence(m) -> list[str]:
    """perc_diff, bootstrap 95 % CI of it, and both sides' CV, as short cells."""
    ci = m.bootstrap_ci95_pct
    cvs = [f"{100 * s.cv:.1f}" if s is not None and s.cv is not None else "-" for s in (m.a, m.b)]
    return [_pct(m.delta_pct), "CI " + (f"[{ci[0]:+.1f}, {ci[1]:+.1f}] %" if ci else "n/a"), f"CV {'/'.join(cvs)} %"]


def deciding_lines(w, width: int) -> list[str]:
    """The metrics behind a workload's status, one line each: label, perc_diff, 95 % CI, CV of A/B. A label
    too long for the line gets a line of its own, the numbers under it (labels never wrap)."""
    rows = [(metric_label(m), _evidence(m)) for m in deciding_metrics(w)]
    if not rows:
        return []
    cols = [max(len(r[1][i]) for r in rows) for i in range(3)]
    numbers = [
        "  ".join(e.rjust(cw) if i == 0 else e.ljust(cw) for i, (e, cw) in enumerate(zip(ev, cols))).rstrip()
        for _, ev in rows
    ]
    room = width - 4 - 2 - max(len(n) for n in numbers)
    name_w = min(max(len(label) for label, _ in rows), max(room, 0))
    out = []
    for (label, _), nums in zip(rows, numbers):
        if len(label) <= name_w:
            out.append(f"    {label.ljust(name_w)}  {nums}")
        else:
            out += [f"    {label}", f"      {nums}"]
    return out


def print_first_screen(c: Comparison, console: Console) -> None:
    """Per workload: its status line (REGRESSION / IMPROVEMENT / NO CHANGE / INCONCLUSIVE), the metrics that
    decided it with perc_diff, CI and CV, the verdict counts; then the summary table, metric names unwrapped."""
    for w in c.workloads:
        status = workload_status(w)
        console.print(
            f"{status} {w.workload} ({len(w.iterations_a)} vs {len(w.iterations_b)} iterations)",
            style=_STATUS_STYLE[status],
            markup=False,
            highlight=False,
        )
        for line in deciding_lines(w, console.width):
            console.print(line, markup=False, highlight=False)
        console.print(
            wrap_line("all metrics: " + verdict_counts(w), console.width, "  "),
            style="dim",
            markup=False,
            highlight=False,
        )
    print_summary(console, c)


def summary_rows(c: Comparison, w) -> list[tuple[str, list[str]]]:
    """(label, cells) of one workload's summary: metrics of a group (a task name) under a header row of the
    group, so labels stay short; cells: A, B, perc_diff, verdict ("" for a header row)."""
    chosen, _ = summary_metrics(w)
    order: dict = {}
    for m in chosen:
        order.setdefault(_group_of(m), []).append(m)
    out = []
    for group, ms in order.items():
        if group is not None:
            out.append((f"{group}:", ["", "", "", ""]))
        for m in ms:
            a, b, d = shown_values(m)
            label = metric_label(m) if group is None else "  " + _label_in_group(m)
            out.append((label, [fmt_value(a), fmt_value(b), _pct(d), _terse(short_verdict(m))]))
    return out


def _terse(verdict: str) -> str:
    """ "inconclusive (~7 more)" -> "inconclusive ~7" (the table's note says what the number is)."""
    m = re.fullmatch(r"inconclusive \(~(\d+) more\)", verdict)
    return f"inconclusive ~{m.group(1)}" if m else verdict


def _group_of(m) -> str | None:
    """The header a summary row goes under: its group (task, CPU, ...) except power channels (their label
    names them)."""
    return None if m.group is None or m.spec == POWER_CHANNEL else m.group


def _label_in_group(m) -> str:
    title = m.spec.title or m.name
    return f"{title} ({m.unit})" if m.unit else title


def fmt_value(x: float | None) -> str:
    """A summary value: 4 significant digits at least two decimals below 1000, thousands separated above."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:,.2f}" if abs(x) < 1e6 else f"{x:,.4g}"


def print_summary(console: Console, c: Comparison) -> None:
    """The summary table: metric | A | B | perc_diff | verdict, metric names never wrapped (at least as wide
    as the longest), then the table's notes."""
    from rich import box

    t = table_summary(c)
    for w in c.workloads:
        rt = RichTable(
            title=f"Summary: {c.label_b} vs {c.label_a} (baseline) — {w.workload}",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            show_edge=False,
        )
        rt.add_column("metric", no_wrap=True)
        for name in (c.label_a, c.label_b, "diff"):
            rt.add_column(escape(name), justify="right", no_wrap=True)
        rt.add_column("verdict", no_wrap=True)
        for label, cells in summary_rows(c, w):
            style = _style(cells[3]) if cells[3] else None
            rt.add_row(
                escape(label),
                *(escape(x) for x in cells[:3]),
                f"[{style}]{escape(cells[3])}[/]" if style else escape(cells[3]),
            )
        console.print(rt)
    if any(_terse(short_verdict(m)) != short_verdict(m) for w in c.workloads for m in summary_metrics(w)[0]):
        t.notes.insert(
            0,
            "inconclusive ~N: not significant and not shown equivalent; about N more iterations per side would decide",
        )
    for n in t.notes:
        console.print(wrap_line(n, console.width, "  "), style="dim", markup=False, highlight=False)
