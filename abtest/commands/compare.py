"""`abtest compare A B` and `abtest gate A B --thresholds FILE` (thin: parse, call abtest.compare, print).

Exit codes: 0 ok / gate passed; 1 gate found a significant regression beyond a threshold; 2 bad input
(unknown label, no common workload, no complete iterations, bad thresholds file) or not enough data.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from abtest.store.layout import STORE_ENV, default_store_root
from abtest.store.reader import StoreError, load_label


class BadInput(click.ClickException):
    """Bad input or not enough data: exit code 2 (also under click's standalone mode)."""
    exit_code = 2


def resolve_label(arg: str, store: Path):
    """A label name under the store, or a path to a label directory."""
    in_store = store / arg
    try:
        if in_store.is_dir():
            return load_label(in_store)
        if Path(arg).is_dir():
            return load_label(Path(arg))
    except StoreError as e:
        raise BadInput(str(e)) from e
    labels = sorted(p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if store.is_dir() else []
    where = f"store {store}" + ("" if store.is_dir() else " (which does not exist)")
    raise BadInput(f"label {arg!r} not found: not a directory in {where} nor a path to a label directory; "
                   f"labels in the store: {', '.join(labels) or 'none'} (set --store or {STORE_ENV})")


def _run_comparison(a, b, store, workload, alpha, min_effect, no_trace, no_cache, metric_patterns=(), tasks=(),
                    jobs=None):
    from abtest.compare.comparison import CompareError, compare_labels
    from abtest.compare.verdict import Policy
    from abtest.store.config import load_store_config
    from abtest.trace.errors import TraceFormatError

    root = Path(store) if store else default_store_root()
    la, lb = resolve_label(a, root), resolve_label(b, root)
    if la.path.resolve() == lb.path.resolve():
        raise BadInput(f"A and B are the same label directory ({la.path})")
    try:
        config = load_store_config(root if root.is_dir() else None)
        return compare_labels(la, lb, workload=workload, policy=Policy(alpha=alpha, min_effect_pct=min_effect),
                              with_trace=not no_trace, use_cache=not no_cache,
                              metric_patterns=tuple(metric_patterns), tasks=tuple(tasks), config=config,
                              jobs=jobs if jobs is not None else (os.cpu_count() or 1),
                              progress=sys.stderr.isatty())
    except (CompareError, StoreError, TraceFormatError) as e:
        raise BadInput(str(e)) from e


_common = [
    click.argument("a"),
    click.argument("b"),
    click.option("--store", type=click.Path(file_okay=False), default=None,
                 help=f"Run store root (default ${STORE_ENV} or ./results)."),
    click.option("--workload", default=None, help="Only this workload (default: all workloads in both)."),
    click.option("--no-trace", is_flag=True, help="Skip trace analyses (metrics.json and power.csv only)."),
    click.option("--no-cache", is_flag=True, help="Recompute per-iteration metrics; do not write caches."),
    click.option("--task", "tasks", multiple=True, metavar="NAME",
                 help="Compare per-task metrics of this task name (comm; repeatable). Default: the store's "
                      "abtest.toml list for the workload, else the 10 busiest names present in every iteration."),
    click.option("--jobs", "-j", type=click.IntRange(1), default=None,
                 help="Processes analysing iterations in parallel (default: the number of CPUs)."),
]


def _with_common(f):
    for dec in reversed(_common):
        f = dec(f)
    return f


@click.command()
@_with_common
@click.option("--format", "fmt", type=click.Choice(["table", "text", "markdown", "json"]), default="table",
              show_default=True, help="table: for the terminal; text: plain ASCII boxes for a mail (<= --width "
                                      "columns); markdown; json (everything, all metrics and conditions).")
@click.option("--all", "show_all", is_flag=True, help="Also print the table of all metrics (table/text/markdown).")
@click.option("--conditions", is_flag=True,
              help="Print every test condition (meta.json), not only the identity and what differs.")
@click.option("--width", type=click.IntRange(40), default=None,
              help="Width of --format text (default 80) and of the table form when piped (default: COLUMNS or 100).")
@click.option("--explain", "with_explain", is_flag=True,
              help="Also explain each significant power change (abtest explain: domains, OPPs, tasks, residual).")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the figures as PNG and SVG files into this directory (for slides and mails).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report with figures.")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level.")
@click.option("--min-effect", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Smallest change (percent) called a regression/improvement.")
@click.option("--metric", "metric_patterns", multiple=True,
              help="Only metrics matching this shell pattern, e.g. 'power.*' (repeatable; `abtest metrics` lists keys).")
def compare(a, b, store, workload, no_trace, no_cache, tasks, jobs, fmt, show_all, conditions, width, with_explain,
            plots_dir, html_path, alpha, min_effect, metric_patterns):
    """Compare kernel label B against baseline A: seed-style tables, statistics and a verdict per metric.

    A and B are labels in the store (STORE/<label>/<workload>/<iteration>/) or paths to label directories.
    Exit 0; 2 on bad input, or (after printing) when a label has fewer than 2 usable iterations.
    """
    from abtest.compare.summary import headlines, table_summary
    from abtest.compare.tables import seed_tables

    c = _run_comparison(a, b, store, workload, alpha, min_effect, no_trace, no_cache, metric_patterns, tasks, jobs)
    tables = seed_tables(c)
    shown = tables if show_all else [t for t in tables if t.key != "all_metrics"]
    explanations = _explanations(c, a, b, store) if (with_explain or html_path) and not no_trace else []
    if fmt == "json":
        doc = c.to_json()
        doc["headlines"] = headlines(c)
        doc["tables"] = [table_summary(c).to_json()] + [t.to_json() for t in tables]
        if with_explain:
            doc["explain"] = [e.to_json() for e in explanations]
        click.echo(json.dumps(doc, indent=1, allow_nan=False, default=lambda x: None))
    elif fmt == "markdown":
        from abtest.report.markdown import comparison_markdown
        click.echo(comparison_markdown(c, shown, conditions=conditions))
    elif fmt == "text":
        from abtest.report.text import comparison_text
        click.echo(comparison_text(c, shown, width=width or 80, conditions=conditions), nl=False)
    else:
        from abtest.report.terminal import console_for_output, print_comparison
        console = console_for_output(width)
        print_comparison(c, console, tables=shown, conditions=conditions)
    if with_explain and fmt != "json":
        from abtest.report.explain import print_explanations
        click.echo("")
        print_explanations(explanations, "table" if fmt == "table" else fmt, width)
    if html_path:
        from abtest.report.html import write_html
        write_html(c, html_path, tables, explanations=explanations)
        click.echo(f"HTML report written to {html_path}", err=True)
    if plots_dir:
        from abtest.report.figures import write_plots
        written = write_plots(c, plots_dir)
        click.echo(f"{len(written)} figure files written to {plots_dir}", err=True)
    from abtest.compare.comparison import not_enough_data
    short = not_enough_data(c)
    if short:
        raise BadInput("not enough data: " + "; ".join(short))


def _explanations(c, a, b, store) -> list:
    """abtest explain for every compared workload (failures become notes of that workload's explanation)."""
    from abtest.compare.explain import explain_workload
    root = Path(store) if store else default_store_root()
    la, lb = resolve_label(a, root), resolve_label(b, root)
    return [explain_workload(c, la, lb, w.workload) for w in c.workloads]


@click.command()
@_with_common
@click.option("--thresholds", "thresholds_path", required=True, type=click.Path(dir_okay=False),
              help="TOML file: alpha and [metrics.<name>] max_regression_pct (see ci/thresholds.toml).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None,
              help="Write JUnit XML (one testcase per workload and gated metric).")
def gate(a, b, store, workload, no_trace, no_cache, tasks, jobs, thresholds_path, junit_path):
    """CI gate: exit 1 if B regresses significantly beyond a threshold vs A, 2 on bad input / too few data."""
    from abtest.compare.gate import (ERROR, FAIL, SKIP, ThresholdsError, excluded_lines, junit_xml, load_thresholds,
                                     run_gate)

    try:
        th = load_thresholds(thresholds_path)
    except ThresholdsError as e:
        raise BadInput(str(e)) from e
    c = _run_comparison(a, b, store, workload, th.alpha, 1.0, no_trace, no_cache, (), tasks, jobs)
    res = run_gate(c, th)
    mark = {FAIL: "FAIL", ERROR: "ERROR", SKIP: "skip"}
    for chk in res.checks:
        click.echo(f"{mark.get(chk.status, 'ok'):5} {chk.workload}/{chk.metric}: {chk.message}")
    for e in res.errors:
        click.echo(f"ERROR {e}")
    for line in excluded_lines(res):
        click.echo(f"note  {line}")
    if junit_path:
        Path(junit_path).write_text(junit_xml(res, thresholds_path))
    verdict = {0: "gate passed", 1: "gate FAILED: significant regression beyond threshold",
               2: "gate ERROR: bad input or not enough data"}[res.exit_code]
    click.echo(verdict, err=True)
    sys.exit(res.exit_code)


COMMANDS = [compare, gate]
