"""Rendering of an N-way comparison (`abtest compare BASE B C ...`, abtest.compare.multi): terminal, plain text,
markdown and HTML. Every form shows the same parts in the same order: the verdict headlines of each label
against the baseline, the side-by-side summary (one column per label: value, "(+x.xx %)" and the verdict for
the non-baseline labels), the test conditions side by side (identity and what differs), "All metrics" on
request (folded in HTML), the notes and the outlier iterations of every pair, each line once.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from abtest.compare.comparison import Comparison
from abtest.compare.multi import MultiComparison, multi_all_metrics, multi_summary
from abtest.compare.outliers import outlier_lines
from abtest.compare.tables import TEXT, Table
from abtest.report.header import differing_rows, header_rows, identity_rows
from abtest.report.notes import comparison_notes, condense


def title(mc: MultiComparison) -> str:
    return f"abtest compare: {', '.join(mc.labels[1:])} vs {mc.baseline} (baseline)"


def conditions_table(mc: MultiComparison, *, full: bool = False) -> Table:
    """Test conditions, one column per label: identity rows and the fields that differ in any pair (every
    meta.json field when `full`)."""
    t = Table(
        "conditions_multi",
        "Test conditions" + ("" if full else " (identity, and what differs)"),
        [("workload", TEXT), ("field", TEXT)] + [(x, TEXT) for x in mc.labels],
    )
    for wname in mc.workloads():
        shown: dict[str, None] = {}  # field names in display order
        values: dict[str, dict[str, str]] = {}
        for c in mc.pairs:
            w = c.workload(wname)
            if w is None:
                continue
            for k, _, _ in identity_rows(c, w) + (header_rows(c, w) if full else differing_rows(c, w)):
                shown.setdefault(k)
            for k, a, b in identity_rows(c, w) + header_rows(c, w):
                row = values.setdefault(k, {})
                row.setdefault(mc.baseline, a)
                row.setdefault(c.label_b, b)
        for k in shown:
            t.rows.append([wname, k] + [values[k].get(x, "") for x in mc.labels])
    return t


def notes(mc: MultiComparison) -> list[str]:
    """The notes of every pair, each once: the per-iteration notes of all labels condensed together (the
    baseline's iterations appear in every pair), then what each pair's own notes add."""
    out = []
    for wname in mc.workloads():
        ws = [w for w in (c.workload(wname) for c in mc.pairs) if w is not None]
        excluded = dict.fromkeys(f"{wname}: excluded {e['path']}: {e['reason']}" for w in ws for e in w.excluded)
        raw = list(dict.fromkeys(n for w in ws for n in w.notes))
        out += list(excluded) + [f"{wname}: {n}" for n in condense(raw)]
    shown = set(out)
    for c in mc.pairs:  # workloads or metrics on one side only (pair-specific)
        single = Comparison(
            c.label_a, c.label_b, c.path_a, c.path_b, c.policy, [], c.workloads_only_in_a, c.workloads_only_in_b
        )
        out += [n for n in comparison_notes(single) if n not in shown]
        out += [
            f"{w.workload}: metrics only in {c.label_a}: {', '.join(w.only_in_a) or 'none'}; only in "
            f"{c.label_b}: {', '.join(w.only_in_b) or 'none'}"
            for w in c.workloads
            if w.only_in_a or w.only_in_b
        ]
    return list(dict.fromkeys(out))


def outliers(mc: MultiComparison) -> list[str]:
    """The outlier iterations of every pair, each once."""
    return list(dict.fromkeys(x for c in mc.pairs for x in outlier_lines(c)))


def tables(mc: MultiComparison, *, show_all: bool = False, conditions: bool = False) -> list[Table]:
    """The tables in reading order: summary, conditions, all metrics (when `show_all`)."""
    out = [multi_summary(mc), conditions_table(mc, full=conditions)]
    return out + ([multi_all_metrics(mc)] if show_all else [])


def footer(mc: MultiComparison) -> str:
    return (
        f"alpha = {mc.policy.alpha}, minimum effect = {mc.policy.min_effect_pct} %; each label against "
        f"{mc.baseline} with the two-label rule: {mc.rule_text()} (docs/compare.md)."
    )


def _fill(text: str, width: int, first: str = "  ", rest: str = "    ") -> str:
    return textwrap.fill(
        text, width, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )


def multi_text(mc: MultiComparison, *, width: int = 80, show_all: bool = False, conditions: bool = False) -> str:
    """The N-way report as plain text (ASCII box tables at most `width` columns, split into column groups)."""
    from abtest.report.text import table_text

    out = [title(mc), ""] + [_fill(h, width) for h in mc.headlines()] + [""]
    out += [table_text(t, width) for t in tables(mc, show_all=show_all, conditions=conditions)]
    for head, lines in (("Notes:", notes(mc)), ("Outlier iterations:", outliers(mc))):
        if lines:
            out += [head] + [_fill(n, width, "  - ") for n in lines] + [""]
    out.append(textwrap.fill(footer(mc), width))
    return "\n".join(out) + "\n"


def multi_markdown(mc: MultiComparison, *, show_all: bool = False, conditions: bool = False) -> str:
    """The N-way report as markdown (pipe tables)."""
    from abtest.report.markdown import _esc, table_markdown

    out = [f"## {_esc(title(mc))}", ""] + [f"- {_esc(h)}" for h in mc.headlines()] + [""]
    out += [table_markdown(t) for t in tables(mc, show_all=show_all, conditions=conditions)]
    for head, lines in (("### Notes", notes(mc)), ("### Outlier iterations", outliers(mc))):
        if lines:
            out += [head, ""] + [f"- {_esc(n)}" for n in lines] + [""]
    out.append(_esc(footer(mc)))
    return "\n".join(out) + "\n"


_STATUS_STYLE = {"REGRESSION": "bold red", "IMPROVEMENT": "bold green", "NO CHANGE": "bold", "INCONCLUSIVE": "yellow"}


def print_multi(mc: MultiComparison, console, *, show_all: bool = False, conditions: bool = False) -> None:
    """The N-way report on a rich console, tables fitted to its width."""
    from abtest.report.terminal import print_table, wrap_line

    console.print(title(mc), style="bold", markup=False, highlight=False)
    for h in mc.headlines():
        status = h.split(": ", 1)[1]
        style = next((s for k, s in _STATUS_STYLE.items() if status.startswith(k)), None)
        console.print(wrap_line(h, console.width, ""), style=style, markup=False, highlight=False)
    for t in tables(mc, show_all=show_all, conditions=conditions):
        print_table(console, t)
    for head, lines in (("Notes", notes(mc)), ("Outlier iterations", outliers(mc))):
        if lines:
            console.print(head, style="bold", markup=False, highlight=False)
            for n in lines:
                console.print(wrap_line(n, console.width, "  - "), markup=False, highlight=False)
    console.print(
        wrap_line(footer(mc) + " All metrics: --all", console.width, ""), style="dim", markup=False, highlight=False
    )


def _headline_class(h: str) -> str:
    return "has-regression" if "REGRESSION" in h else "has-improvement" if "IMPROVEMENT" in h else ""


def multi_html(mc: MultiComparison) -> str:
    """A self-contained HTML page: headlines, the side-by-side summary, conditions, all metrics (folded), notes,
    outlier iterations. Wide tables scroll inside their container."""
    from abtest.report.html import CSS, _e, outliers_html, table_html

    items = "".join(f'<li class="{_headline_class(h)}">{_e(h)}</li>' for h in mc.headlines())
    body = [
        f"<h1>{_e(title(mc))}</h1>",
        f'<ul class="verdicts">{items}</ul>',
        table_html(multi_summary(mc)),
        "<p>Baseline <b>"
        + _e(mc.baseline)
        + f"</b> ({_e(mc.path)}); compared: "
        + ", ".join(f"<b>{_e(c.label_b)}</b> ({_e(c.path_b)})" for c in mc.pairs)
        + f". {_e(footer(mc))}</p>",
        table_html(conditions_table(mc)),
    ]
    allm = multi_all_metrics(mc)
    body.append(
        f'<details id="all-metrics"><summary>All metrics ({len(allm.rows)})</summary>{table_html(allm)}</details>'
    )
    ns = notes(mc)
    if ns:
        body.append('<h2>Notes</h2><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in ns) + "</ul>")
    body.append(outliers_html(outliers(mc)))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title(mc))}</title>'
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_multi_html(mc: MultiComparison, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(multi_html(mc), encoding="utf-8")
    return path
