"""Self-contained HTML report: verdicts first, then the summary, the seed tables, figures as base64 PNG, and the
full metric table and test conditions folded at the end.

One file, no external resources (no scripts, fonts or stylesheets to fetch), so it can be attached to a CI
job or a mail. Structure (stable, tests parse it):
  <h1>                      title "abtest compare: B vs A"
  <ul class="verdicts">     one line per workload: counts of verdicts, the largest significant changes
  <table class="seed" id="table-summary">  headline metrics, cells "value (perc_diff)", verdicts
  <table class="identity">  per workload: kernel, version, hardware, iterations, date, and what differs
  <table class="seed" id="table-<key>">   one per seed table (abtest.compare.tables keys)
  <figure class="fig"> <img src="data:image/png;base64,..." alt="..."> per figure
  <details id="all-metrics"> the all_metrics table (folded)
  <details id="conditions"> <table class="header"> per workload: every meta.json field, A | B (folded)
  <ul class="notes">        excluded iterations, missing metrics, lost events ...
  <section id="outliers">   "Outlier iterations": iterations beyond Tukey's fences on a metric that decided a
                            verdict, or lacking an analysis others have, each with its path (abtest.compare.outliers)
Every table sits in a <div class="scroll">: a table wider than the window scrolls inside it (overflow-x: auto),
the page itself never grows wider than the window.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib.pyplot as plt

from abtest.compare.comparison import Comparison, WorkloadComparison
from abtest.compare.summary import headlines, table_summary
from abtest.compare.tables import TEXT, VALVERDICT, Table, format_value, seed_tables
from abtest.report import figures
from abtest.report.header import differing_rows, header_rows, identity_rows, missing_header_fields
from abtest.report.notes import comparison_notes
from abtest.report.timeline_links import outlier_lines_with_timelines, write_outlier_timelines

CSS = """
body{font-family:sans-serif;margin:2em;color:#222} table{border-collapse:collapse;margin:1em 0}
div.scroll{overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px} th{background:#f0f0f0}
td.num{text-align:right;font-variant-numeric:tabular-nums} tr.differs td{background:#fff6d5}
.regression{color:#b00;font-weight:bold}.improvement{color:#070;font-weight:bold}.inconclusive{color:#a60}
figure{margin:1em 0} img{max-width:100%} .warn{color:#a60}
ul.verdicts{font-size:15px;line-height:1.6;padding:.6em 1.2em;background:#f7f7f7;border-left:4px solid #888}
ul.verdicts li.has-regression{border-left:0;color:#b00} ul.verdicts li.has-improvement{color:#070}
details{margin:1em 0} summary{cursor:pointer;font-weight:bold;font-size:17px}
table.identity th{text-align:left}
"""


def figure_png_base64(fig) -> str:
    """PNG bytes of a figure, base64 (closes the figure)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _e(x) -> str:
    return html.escape(str(x))


def scroll(table: str) -> str:
    """A table in a container that scrolls sideways when the table is wider than the window."""
    return f'<div class="scroll">{table}</div>'


def _cell_class(s: str, value, title: str, kind: str) -> str:
    """The class attribute of a cell: the verdict's colour for a verdict column or the verdict of an N-way
    "value (perc_diff) verdict" cell, "num" for other numbers."""
    if title == "verdict":
        return _verdict_class(s)
    if kind == VALVERDICT:
        verdict = _verdict_class(value[2] if value else "")
        return verdict.replace('class="', 'class="num ') if verdict else ' class="num"'
    return "" if kind == TEXT else ' class="num"'


def _verdict_class(text: str) -> str:
    for k in ("regression", "improvement", "inconclusive"):
        if text.startswith(k):
            return f' class="{k}"'
    return ""


def table_html(t: Table) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c, _ in t.columns)
    rows = []
    for row in t.rows:
        cells = []
        for v, (title, kind) in zip(row, t.columns):
            s = format_value(v, kind)
            cls = _cell_class(s, v, title, kind)
            cells.append(f"<td{cls}>{_e(s)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in t.notes)
    return (
        f"<h3>{_e(t.title)}</h3>"
        + scroll(
            f'<table class="seed" id="table-{_e(t.key)}"><thead><tr>{head}'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
        + (f"<ul>{notes}</ul>" if notes else "")
    )


def header_html(c: Comparison, w: WorkloadComparison) -> str:
    rows = []
    for k, a, b in header_rows(c, w):
        cls = ' class="differs"' if a != b and k != "label" else ""
        rows.append(f"<tr{cls}><th>{_e(k)}</th><td>{_e(a)}</td><td>{_e(b)}</td></tr>")
    missing = missing_header_fields(c, w)
    warn = f'<p class="warn">meta.json lacks {_e(", ".join(missing))}: not stated.</p>' if missing else ""
    return (
        f"<h2>Test conditions: {_e(w.workload)}</h2>"
        + scroll(
            f'<table class="header" data-workload="{_e(w.workload)}"><thead><tr><th>field</th>'
            f"<th>{_e(c.label_a)}</th><th>{_e(c.label_b)}</th></tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>"
        )
        + warn
    )


def _figure_html(fig, caption: str) -> str:
    if fig is None:
        return ""
    data = figure_png_base64(fig)
    return (
        f'<figure class="fig"><img src="data:image/png;base64,{data}" alt="{_e(caption)}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def workload_figures_html(c: Comparison, w: WorkloadComparison) -> tuple[str, list[str]]:
    """HTML of the workload's figures and notes on figures that could not be drawn."""
    parts, missing = [], []
    dots = figures.dot_plot_metrics(w)
    parts.append(
        _figure_html(
            figures.plot_metric_dots(dots, c.label_a, c.label_b),
            f"{w.workload}: per-iteration values, mean and 95 % CI",
        )
    )
    fig = figures.plot_power_channels(w, c.label_a, c.label_b)
    if fig is None:
        missing.append(
            f"{w.workload}: no power per channel figure (no power source in the iterations: power.csv, trace rails, "
            "BattOr)"
        )
    parts.append(_figure_html(fig, f"{w.workload}: average power per channel"))
    fig = figures.plot_residency(
        w, c.label_a, c.label_b, figures.opp_residency_metrics(w), "OPP residency", xlabel="OPP (MHz)"
    )
    if fig is None:
        missing.append(
            f"{w.workload}: no OPP residency figure (no frequency residency metrics: "
            "cpu_frequency events absent or the frequency analysis unavailable)"
        )
    parts.append(_figure_html(fig, f"{w.workload}: OPP residency"))
    parts.append(
        _figure_html(
            figures.plot_residency(
                w, c.label_a, c.label_b, figures.idle_residency_metrics(w), "idle-state residency", xlabel="idle state"
            ),
            f"{w.workload}: idle-state residency",
        )
    )
    return "".join(parts), missing


def identity_html(c: Comparison, w: WorkloadComparison) -> str:
    rows = identity_rows(c, w) + differing_rows(c, w)
    differs = ' class="differs"'
    body = "".join(
        f"<tr{differs if a != b else ''}><th>{_e(k)}</th><td>{_e(a)}</td><td>{_e(b)}</td></tr>" for k, a, b in rows
    )
    return scroll(
        f'<table class="identity" data-workload="{_e(w.workload)}"><thead><tr><th>{_e(w.workload)}</th>'
        f"<th>{_e(c.label_a)}</th><th>{_e(c.label_b)}</th></tr></thead><tbody>{body}</tbody></table>"
    )


def explanation_html(ex) -> str:
    """One workload's explanation: the narrative, then its tables."""
    from abtest.report.explain import explanation_tables

    paras = "".join(f"<p>{_e(x)}</p>" for x in ex.narrative) + "".join(f'<p class="warn">{_e(n)}</p>' for n in ex.notes)
    return (
        f'<section class="explain" data-workload="{_e(ex.workload)}"><h3>{_e(ex.workload)}</h3>{paras}'
        + "".join(table_html(t) for t in explanation_tables(ex))
        + "</section>"
    )


def outliers_html(lines: list[str], timelines: dict[str, Path] | None = None) -> str:
    """The "Outlier iterations" note section ("" when no iteration is flagged); ``timelines``: {line: perfetto
    trace written for it} (abtest.report.timeline_links), linked after the line."""
    if not lines:
        return ""
    timelines = timelines or {}

    def item(x: str) -> str:
        f = timelines.get(x)
        link = (
            (f' <a class="timeline" href="{_e(f.parent.name + "/" + f.name)}">timeline (open in the Perfetto UI)</a>')
            if f is not None
            else ""
        )
        return f"<li>{_e(x)}{link}</li>"

    return (
        '<section id="outliers"><h2>Outlier iterations</h2><p>Iterations beyond the Tukey fences (1.5 IQR) '
        "of their label on a metric that decided a verdict, or lacking an analysis other iterations have: "
        'look at them before trusting the verdict.</p><ul class="notes">'
        + "".join(item(x) for x in lines)
        + "</ul></section>"
    )


def comparison_html(
    c: Comparison,
    tables: list[Table] | None = None,
    explanations: list | None = None,
    timelines: dict[str, Path] | None = None,
) -> str:
    """The report (see the module docstring for its structure). `tables`: the seed tables (default: all,
    "All metrics" included; it is folded)."""
    tables = tables if tables is not None else seed_tables(c)
    title = f"abtest compare: {c.label_b} vs {c.label_a}"
    heads = headlines(c)
    items = "".join(
        f'<li class="{"has-regression" if "REGRESSION" in h else "has-improvement" if "IMPROVEMENT" in h else ""}">'
        f"{_e(h)}</li>"
        for h in heads
    )
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<ul class="verdicts">{items}</ul>',
        table_html(table_summary(c)),
        f"<p>Baseline <b>{_e(c.label_a)}</b> ({_e(c.path_a)}), compared <b>{_e(c.label_b)}</b> "
        f"({_e(c.path_b)}). perc_diff = (B - A) / |A| of each metric's declared aggregate; alpha = "
        f"{c.policy.alpha}, minimum effect = {c.policy.min_effect_pct} %; {_e(c.rule_text())}.</p>",
    ]
    body += ["<h2>Test conditions</h2>"] + [identity_html(c, w) for w in c.workloads]
    body.append("<h2>Results</h2>")
    body += [table_html(t) for t in tables if t.key not in ("summary", "all_metrics")]
    if explanations:
        body.append('<h2 id="explain">Where the change came from</h2>')
        body += [explanation_html(ex) for ex in explanations]
    notes = comparison_notes(c)
    body.append("<h2>Figures</h2>")
    for w in c.workloads:
        figs, missing = workload_figures_html(c, w)
        body.append(f"<h3>{_e(w.workload)}</h3>{figs}")
        notes += missing
    allm = next((t for t in tables if t.key == "all_metrics"), None)
    if allm is not None:
        body.append(
            f'<details id="all-metrics"><summary>All metrics ({len(allm.rows)})</summary>{table_html(allm)}</details>'
        )
    body.append(
        '<details id="conditions"><summary>All test conditions (meta.json)</summary>'
        + "".join(header_html(c, w) for w in c.workloads)
        + "</details>"
    )
    if notes:
        body.append('<h2>Notes</h2><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    body.append(outliers_html(outlier_lines_with_timelines(c), timelines))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_html(
    c: Comparison, path: str | Path, tables: list[Table] | None = None, *, explanations: list | None = None
) -> Path:
    path = Path(path)
    # the flagged iterations' timelines beside the report (<report>.timelines/), linked from its outlier notes
    timelines = write_outlier_timelines(c, path.with_name(path.stem + ".timelines"))
    path.write_text(comparison_html(c, tables, explanations, timelines), encoding="utf-8")
    return path
