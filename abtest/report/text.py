"""Plain ASCII rendering (`abtest compare --format text`): box tables in the style kernel engineers paste into
LKML mails, at most `width` columns (80 by default; wider tables are split into column groups that repeat their
key columns), verdicts first, full test conditions only on request.

    +------------+------+------------+-----------+
    | channel    | tag  | value (mW) | perc_diff |
    +------------+------+------------+-----------+
    | CPU        | base |     913.60 |   +0.00 % |
"""

from __future__ import annotations

import textwrap

from abtest.compare.comparison import Comparison, WorkloadComparison
from abtest.compare.summary import headlines, table_summary
from abtest.compare.tables import Table, seed_tables
from abtest.report.fit import Grid, fitted_widths, grid_of, min_widths, split, stacked_lines, wrap_cell, wrap_header
from abtest.report.header import differing_rows, header_rows, identity_rows
from abtest.report.notes import comparison_notes
from abtest.report.timeline_links import outlier_lines_with_timelines

DEFAULT_WIDTH = 80


def box(g: Grid, width: int = DEFAULT_WIDTH) -> list[str]:
    """One grid as an ASCII box table: text cells and headers wrapped at spaces to fit `width`, numbers whole."""
    widths = fitted_widths(g, width) or min_widths(g)
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head = [wrap_header(h, w) for h, w in zip(g.headers, widths)]
    depth = max((len(h) for h in head), default=1)
    lines = [g.title, rule]
    for i in range(depth):
        lines.append("|" + "|".join(f" {(h[i] if i < len(h) else '').ljust(w)} " for h, w in zip(head, widths)) + "|")
    lines.append(rule)
    for r in g.rows:
        cells = [[c] if right else wrap_cell(c, w) for c, w, right in zip(r, widths, g.right)]
        for i in range(max(len(c) for c in cells)):
            lines.append(
                "|"
                + "|".join(
                    f" {(c[i] if i < len(c) else '').rjust(w) if right else (c[i] if i < len(c) else '').ljust(w)} "
                    for c, w, right in zip(cells, widths, g.right)
                )
                + "|"
            )
    lines.append(rule)
    return lines + [
        textwrap.fill(
            n, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
        )
        for n in g.notes
    ]


def table_text(t: Table, width: int = DEFAULT_WIDTH) -> str:
    g = grid_of(t)
    parts = split(g, width)
    if not parts:
        return "\n".join(stacked_lines(g) + [f"  {n}" for n in g.notes]) + "\n"
    return "\n\n".join("\n".join(box(p, width)) for p in parts) + "\n"


def condition_lines(c: Comparison, w: WorkloadComparison, *, full: bool = False) -> list[str]:
    """Test conditions as lines: identity (kernel, version, hardware, workload, iterations, date), then the
    conditions that differ (per-run noise left out), or every condition when `full`. "A -> B" when they differ."""

    def line(k, a, b, indent="  "):
        return f"{indent}{k}: {a}" if a == b else f"{indent}{k}: {a or '-'} -> {b or '-'}"

    out = [f"Test conditions ({w.workload}; {c.label_a} -> {c.label_b} where they differ):"]
    out += [line(*r) for r in identity_rows(c, w)]
    rows = header_rows(c, w) if full else differing_rows(c, w)
    if full:
        out += ["  all conditions (--conditions):"] + [line(*r, indent="    ") for r in rows]
    elif rows:
        out += ["  other conditions that differ:"] + [line(*r, indent="    ") for r in rows]
    else:
        out.append("  no other test condition differs (full list: --conditions)")
    return out


def comparison_text(
    c: Comparison, tables: list[Table] | None = None, *, width: int = DEFAULT_WIDTH, conditions: bool = False
) -> str:
    """The whole report as plain text: verdict lines, summary, conditions that differ, seed tables, notes."""
    tables = tables if tables is not None else seed_tables(c, with_all=False)
    out = [f"abtest compare: {c.label_b} vs {c.label_a} (baseline)", ""]
    out += [
        textwrap.fill(
            h, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
        )
        for h in headlines(c)
    ] + [""]
    out.append(table_text(table_summary(c), width))
    for w in c.workloads:
        out += [
            textwrap.fill(
                x,
                width,
                subsequent_indent=" " * (len(x) - len(x.lstrip()) + 4),
                break_long_words=False,
                break_on_hyphens=False,
            )
            for x in condition_lines(c, w, full=conditions)
        ] + [""]
    out += [table_text(t, width) for t in tables if t.key != "summary"]
    notes = comparison_notes(c)
    if notes:
        out += (
            ["Notes:"]
            + [
                textwrap.fill(
                    n,
                    width,
                    initial_indent="  - ",
                    subsequent_indent="    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                for n in notes
            ]
            + [""]
        )
    flagged = outlier_lines_with_timelines(c)  # each names its trace, time range and `abtest timeline`
    if flagged:
        out += ["Outlier iterations (look at them before trusting the verdict):"]
        out += [
            textwrap.fill(
                n,
                width,
                initial_indent="  - ",
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            for n in flagged
        ] + [""]
    out.append(
        textwrap.fill(
            f"alpha = {c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} %; "
            f"{c.rule_text()} (docs/compare.md).",
            width,
        )
    )
    return "\n".join(out) + "\n"
