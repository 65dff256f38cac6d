"""Self-contained HTML report: header (test conditions from meta.json), seed tables, figures as base64 PNG.

One file, no external resources (no scripts, fonts or stylesheets to fetch), so it can be attached to a CI
job or a mail. Structure (stable, tests parse it):
  <h1>                      title "abtest compare: B vs A"
  <table class="header">    per workload: field | A | B (kernel, hardware, governors, thermal, settings...)
  <table class="seed" id="table-<key>">   one per seed table (abtest.compare.tables keys)
  <figure class="fig"> <img src="data:image/png;base64,..." alt="..."> per figure
  <ul class="notes">        excluded iterations, missing metrics, lost events ...
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib.pyplot as plt

from abtest.compare.comparison import Comparison, MetricComparison, WorkloadComparison
from abtest.compare.tables import TEXT, Table, format_value, seed_tables
from abtest.report import figures
from abtest.report.header import header_rows, missing_header_fields
from abtest.report.markdown import comparison_notes

MAX_DOT_PANELS = 12
_CSS = """
body{font-family:sans-serif;margin:2em;color:#222} table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px} th{background:#f0f0f0}
td.num{text-align:right;font-variant-numeric:tabular-nums} tr.differs td{background:#fff6d5}
.regression{color:#b00;font-weight:bold}.improvement{color:#070;font-weight:bold}.inconclusive{color:#a60}
figure{margin:1em 0} img{max-width:100%} .warn{color:#a60}
"""


def figure_png_base64(fig) -> str:
    """PNG bytes of a figure, base64 (closes the figure)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _e(x) -> str:
    return html.escape(str(x))


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
            cls = _verdict_class(s) if title == "verdict" else ("" if kind == TEXT else ' class="num"')
            cells.append(f"<td{cls}>{_e(s)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in t.notes)
    return (f'<h3>{_e(t.title)}</h3><table class="seed" id="table-{_e(t.key)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>" + (f"<ul>{notes}</ul>" if notes else ""))


def header_html(c: Comparison, w: WorkloadComparison) -> str:
    rows = []
    for k, a, b in header_rows(c, w):
        cls = ' class="differs"' if a != b and k != "label" else ""
        rows.append(f"<tr{cls}><th>{_e(k)}</th><td>{_e(a)}</td><td>{_e(b)}</td></tr>")
    missing = missing_header_fields(c, w)
    warn = (f'<p class="warn">meta.json lacks {_e(", ".join(missing))}: not stated.</p>' if missing else "")
    return (f"<h2>Test conditions: {_e(w.workload)}</h2>"
            f'<table class="header" data-workload="{_e(w.workload)}"><thead><tr><th>field</th>'
            f"<th>{_e(c.label_a)}</th><th>{_e(c.label_b)}</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + warn)


def dot_plot_metrics(w: WorkloadComparison) -> list[MetricComparison]:
    """Metrics worth a dot plot: those with a direction (verdicts) whose values are not one constant; workload
    metrics (metrics.json) first, then regressions/improvements, then overall before per-CPU values."""
    def informative(m: MetricComparison) -> bool:
        return len(set(m.values_a) | set(m.values_b)) > 1

    chosen = [m for m in w.metrics if m.lower_is_better is not None and m.a and m.b and informative(m)]
    chosen.sort(key=lambda m: (m.source != "metrics.json", m.verdict.verdict not in ("regression", "improvement"),
                               m.group is not None, m.name))
    return chosen[:MAX_DOT_PANELS]


def _figure_html(fig, caption: str) -> str:
    if fig is None:
        return ""
    data = figure_png_base64(fig)
    return (f'<figure class="fig"><img src="data:image/png;base64,{data}" alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def workload_figures_html(c: Comparison, w: WorkloadComparison) -> tuple[str, list[str]]:
    """HTML of the workload's figures and notes on figures that could not be drawn."""
    parts, missing = [], []
    dots = dot_plot_metrics(w)
    parts.append(_figure_html(figures.plot_metric_dots(dots, c.label_a, c.label_b),
                              f"{w.workload}: per-iteration values, mean and 95 % CI"))
    fig = figures.plot_power_channels(w, c.label_a, c.label_b)
    if fig is None:
        missing.append(f"{w.workload}: no power per channel figure (no power source in the iterations: power.csv, trace rails, BattOr)")
    parts.append(_figure_html(fig, f"{w.workload}: average power per channel"))
    fig = figures.plot_residency(w, c.label_a, c.label_b, figures.opp_residency_metrics(w), "OPP residency",
                                  xlabel="OPP (MHz)")
    if fig is None:
        missing.append(f"{w.workload}: no OPP residency figure (no frequency residency metrics: "
                       "cpu_frequency events absent or the frequency analysis unavailable)")
    parts.append(_figure_html(fig, f"{w.workload}: OPP residency"))
    parts.append(_figure_html(figures.plot_residency(w, c.label_a, c.label_b, figures.idle_residency_metrics(w),
                                                     "idle-state residency", xlabel="idle state"),
                              f"{w.workload}: idle-state residency"))
    return "".join(parts), missing


def comparison_html(c: Comparison, tables: list[Table] | None = None) -> str:
    tables = tables if tables is not None else seed_tables(c)
    title = f"abtest compare: {c.label_b} vs {c.label_a}"
    body = [f"<h1>{_e(title)}</h1>",
            f"<p>Baseline: <b>{_e(c.label_a)}</b> ({_e(c.path_a)}); compared: <b>{_e(c.label_b)}</b> "
            f"({_e(c.path_b)}). Differences are (B - A) / |A|. alpha = {c.policy.alpha}, minimum effect = "
            f"{c.policy.min_effect_pct} %; a regression/improvement needs Welch's t and Mann-Whitney U to agree.</p>"]
    body += [header_html(c, w) for w in c.workloads]
    body.append("<h2>Results</h2>")
    body += [table_html(t) for t in tables]
    notes = comparison_notes(c)
    body.append("<h2>Figures</h2>")
    for w in c.workloads:
        figs, missing = workload_figures_html(c, w)
        body.append(f"<h3>{_e(w.workload)}</h3>{figs}")
        notes += missing
    if notes:
        body.append('<h2>Notes</h2><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_html(c: Comparison, path: str | Path, tables: list[Table] | None = None) -> Path:
    path = Path(path)
    path.write_text(comparison_html(c, tables), encoding="utf-8")
    return path
