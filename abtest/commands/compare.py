"""`abtest compare A B [C ...]` (N-way: abtest.compare.multi) and `abtest gate A B --thresholds FILE` (thin:
parse, call abtest.compare, print).

Exit codes: 0 ok / gate passed; 1 gate found a significant regression beyond a threshold; 2 bad input
(unknown label, no common workload, no complete iterations, bad thresholds file) or not enough data.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from abtest.store.layout import DEFAULT_STORE, STORE_ENV, bundled_store, default_store_root
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
    where = f"store {store}" + ("" if store.is_dir() else " (which does not exist)")
    raise BadInput(
        f"label {arg!r} not found: not a directory in {where} nor a path to a label directory; "
        f"labels in the store: {', '.join(_labels_in(store)) or 'none'}"
        + _other_stores(store)
        + f" (set --store or {STORE_ENV}; a folder of trace files also works as a label)"
    )


def _labels_in(store: Path) -> list[str]:
    """Label directory names of a store root ([] when it is not a directory)."""
    if not store.is_dir():
        return []
    return sorted(p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))


def _shown(p: Path) -> str:
    """`p` relative to the current directory when it is below it, else absolute."""
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def _other_stores(store: Path) -> str:
    """ "; other stores: X (labels a, b): --store X" for the default store, $ABTEST_STORE and the bundled example
    store, when they exist and are not `store`."""
    seen, parts = {store.resolve()}, []
    for cand in (default_store_root(), Path(DEFAULT_STORE), bundled_store()):
        if cand is None or not cand.is_dir() or cand.resolve() in seen:
            continue
        seen.add(cand.resolve())
        parts.append(f"{_shown(cand)} (labels {', '.join(_labels_in(cand)) or 'none'}): `--store {_shown(cand)}`")
    return ("; other stores: " + "; ".join(parts)) if parts else ""


def _labels(a, b, store):
    """(label A, label B) resolved under the store (or as paths); BadInput when unknown or the same directory."""
    root = Path(store) if store else default_store_root()
    la, lb = resolve_label(a, root), resolve_label(b, root)
    if la.path.resolve() == lb.path.resolve():
        raise BadInput(f"A and B are the same label directory ({la.path})")
    return la, lb


def _run_comparison(
    a,
    b,
    store,
    workload,
    alpha,
    min_effect,
    no_trace,
    no_cache,
    metric_patterns=(),
    tasks=(),
    jobs=None,
    labels=None,
    progress=None,
):
    """compare_labels with the command line's options; progress: the per-iteration bar (default: on stderr when
    it is a terminal; a rich Console: drawn on it)."""
    from abtest.compare.comparison import CompareError, compare_labels
    from abtest.compare.verdict import Policy
    from abtest.store.config import load_store_config
    from abtest.trace.errors import TraceFormatError

    root = Path(store) if store else default_store_root()
    la, lb = labels or _labels(a, b, store)
    try:
        config = load_store_config(root if root.is_dir() else None)
        return compare_labels(
            la,
            lb,
            workload=workload,
            policy=Policy(alpha=alpha, min_effect_pct=min_effect),
            with_trace=not no_trace,
            use_cache=not no_cache,
            metric_patterns=tuple(metric_patterns),
            tasks=tuple(tasks),
            config=config,
            jobs=jobs if jobs is not None else (os.cpu_count() or 1),
            progress=sys.stderr.isatty() if progress is None else progress,
        )
    except (CompareError, StoreError, TraceFormatError) as e:
        raise BadInput(str(e)) from e


_label_args = [click.argument("a"), click.argument("b")]
_common = [
    click.option(
        "--store",
        type=click.Path(file_okay=False),
        default=None,
        help=f"Run store root (default ${STORE_ENV} or ./results).",
    ),
    click.option("--workload", default=None, help="Only this workload (default: all workloads in both)."),
    click.option("--no-trace", is_flag=True, help="Skip trace analyses (metrics.json and power.csv only)."),
    click.option("--no-cache", is_flag=True, help="Recompute per-iteration metrics; do not write caches."),
    click.option(
        "--task",
        "tasks",
        multiple=True,
        metavar="NAME",
        help="Compare per-task metrics of this task name (comm; repeatable). Default: the store's "
        "abtest.toml list for the workload, else the 10 busiest names present in every iteration.",
    ),
    click.option(
        "--jobs",
        "-j",
        type=click.IntRange(1),
        default=None,
        help="Processes analysing iterations in parallel (default: the number of CPUs).",
    ),
]


def _with_common(f):
    for dec in reversed(_common):
        f = dec(f)
    return f


def _with_labels(f):
    for dec in reversed(_label_args):
        f = dec(f)
    return f


_history_opt = click.option(
    "--history",
    "history_db",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[URL|PATH]",
    help="Also record the compared iterations, with the values computed here, in the results database of "
    "`abtest history` (idempotent): an SQLite path or a URL; the flag alone: $ABTEST_HISTORY, else "
    "~/.local/share/abtest/history.sqlite. Put the flag alone after the labels (or write --history=DB).",
)


def _history_engine(history_db, store):
    """The results database to record into (None: --history not given), opened before anything is analysed."""
    if history_db is None:
        return None
    if history_db and "://" not in history_db:
        root = Path(store) if store else default_store_root()
        if Path(history_db).is_dir() or (root / history_db).is_dir():
            raise BadInput(
                f"--history {history_db}: a directory (a label?), not a results database; put the "
                "flag alone after the labels, or write --history=DB"
            )
    from abtest.commands.history import _engine

    return _engine(history_db or None)


def _record_history(engine, comparisons, labels) -> None:
    """Record the iterations the comparison(s) read with the values they computed (abtest.history.ingest)."""
    from abtest.history.ingest import add_compared

    res = add_compared(engine, comparisons, labels)
    click.echo(
        f"history: {res.builds} new build(s), {res.iterations} iteration(s) with {res.values} values "
        f"recorded in {engine.url.render_as_string(hide_password=True)}; {res.skipped} iteration(s) already "
        f"recorded (next: abtest history detect)",
        err=True,
    )


@click.command()
@click.argument("labels", nargs=-1, required=True, metavar="BASE LABEL...")
@_with_common
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "text", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: for the terminal; text: plain ASCII boxes for a mail (<= --width "
    "columns); markdown; json (everything, all metrics and conditions).",
)
@click.option("--all", "show_all", is_flag=True, help="Also print the table of all metrics (table/text/markdown).")
@click.option(
    "--conditions", is_flag=True, help="Print every test condition (meta.json), not only the identity and what differs."
)
@click.option(
    "--width",
    type=click.IntRange(40),
    default=None,
    help="Width of --format text (default 80) and of the table form when piped (default: COLUMNS or 100).",
)
@click.option(
    "--explain",
    "with_explain",
    is_flag=True,
    help="Also explain each significant power change (abtest explain: domains, OPPs, tasks, residual).",
)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write the figures as PNG and SVG files into this directory (for slides and mails).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML report with figures.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Significance level.",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0),
    default=1.0,
    show_default=True,
    help="Smallest change (percent) called a regression/improvement.",
)
@click.option(
    "--metric",
    "metric_patterns",
    multiple=True,
    help="Only metrics matching this shell pattern, e.g. 'power.*' (repeatable; `abtest metrics` lists keys).",
)
@_history_opt
def compare(
    labels,
    store,
    workload,
    no_trace,
    no_cache,
    tasks,
    jobs,
    fmt,
    show_all,
    conditions,
    width,
    with_explain,
    plots_dir,
    html_path,
    alpha,
    min_effect,
    metric_patterns,
    history_db,
):
    """Compare kernel label B (or several: B C ...) against baseline BASE: seed-style tables, statistics and a
    verdict per metric.

    Labels are names in the store (STORE/<label>/<workload>/<iteration>/) or paths to label directories (a
    folder of trace files works too). With more than two labels, one column per label: value, perc_diff against
    BASE and the verdict of that label against BASE (the same two-label statistics for each label).
    Exit 0; 2 on bad input, or (after printing) when a label has fewer than 2 usable iterations.
    """
    if len(labels) < 2:
        raise BadInput("compare needs a baseline label and at least one label to compare with it")
    history_engine = _history_engine(history_db, store)
    if len(labels) > 2:
        return _compare_many(
            labels,
            store,
            workload,
            no_trace,
            no_cache,
            tasks,
            jobs,
            fmt,
            show_all,
            conditions,
            width,
            with_explain,
            plots_dir,
            html_path,
            alpha,
            min_effect,
            metric_patterns,
            history_engine,
        )
    a, b = labels
    from abtest.compare.summary import headlines, table_summary
    from abtest.compare.tables import seed_tables

    pair = _labels(a, b, store)
    c = _run_comparison(
        a, b, store, workload, alpha, min_effect, no_trace, no_cache, metric_patterns, tasks, jobs, pair
    )
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
    if history_engine is not None:
        _record_history(history_engine, [c], list(pair))
    from abtest.compare.comparison import not_enough_data

    short = not_enough_data(c)
    if short:
        raise BadInput("not enough data: " + "; ".join(short))


def _compare_many(
    names,
    store,
    workload,
    no_trace,
    no_cache,
    tasks,
    jobs,
    fmt,
    show_all,
    conditions,
    width,
    with_explain,
    plots_dir,
    html_path,
    alpha,
    min_effect,
    metric_patterns,
    history_engine=None,
):
    """`abtest compare BASE B C ...`: every label against BASE, side by side (abtest.compare.multi)."""
    from abtest.compare.comparison import CompareError
    from abtest.compare.multi import compare_many, multi_not_enough_data
    from abtest.compare.verdict import Policy
    from abtest.report import multi as render
    from abtest.store.config import load_store_config
    from abtest.trace.errors import TraceFormatError

    if with_explain or plots_dir:
        raise BadInput(
            "--explain and --plots compare two labels: run `abtest compare BASE X` for the label to explain or plot"
        )
    root = Path(store) if store else default_store_root()
    labels = [resolve_label(n, root) for n in names]
    dirs = [lab.path.resolve() for lab in labels]
    same = [names[i] for i, d in enumerate(dirs) if dirs.index(d) != i]
    if same:
        raise BadInput(f"label(s) {', '.join(same)} name a directory given before")
    try:
        config = load_store_config(root if root.is_dir() else None)
        mc = compare_many(
            labels[0],
            labels[1:],
            workload=workload,
            policy=Policy(alpha=alpha, min_effect_pct=min_effect),
            with_trace=not no_trace,
            use_cache=not no_cache,
            metric_patterns=tuple(metric_patterns),
            tasks=tuple(tasks),
            config=config,
            jobs=jobs if jobs is not None else (os.cpu_count() or 1),
            progress=sys.stderr.isatty(),
        )
    except (CompareError, StoreError, TraceFormatError) as e:
        raise BadInput(str(e)) from e
    if fmt == "json":
        click.echo(json.dumps(mc.to_json(), indent=1, allow_nan=False, default=lambda x: None))
    elif fmt == "markdown":
        click.echo(render.multi_markdown(mc, show_all=show_all, conditions=conditions))
    elif fmt == "text":
        click.echo(render.multi_text(mc, width=width or 80, show_all=show_all, conditions=conditions), nl=False)
    else:
        from abtest.report.terminal import console_for_output

        render.print_multi(mc, console_for_output(width), show_all=show_all, conditions=conditions)
    if html_path:
        render.write_multi_html(mc, html_path)
        click.echo(f"HTML report written to {html_path}", err=True)
    if history_engine is not None:
        _record_history(history_engine, mc.pairs, labels)
    short = multi_not_enough_data(mc)
    if short:
        raise BadInput("not enough data: " + "; ".join(short))


def _explanations(c, a, b, store) -> list:
    """abtest explain for every compared workload (failures become notes of that workload's explanation)."""
    from abtest.compare.explain import explain_workload

    root = Path(store) if store else default_store_root()
    la, lb = resolve_label(a, root), resolve_label(b, root)
    return [explain_workload(c, la, lb, w.workload) for w in c.workloads]


@click.command()
@_with_labels
@_with_common
@click.option(
    "--thresholds",
    "thresholds_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML file: alpha and [metrics.<name>] max_regression_pct (see ci/thresholds.toml).",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write JUnit XML (one testcase per workload and gated metric).",
)
@_history_opt
def gate(a, b, store, workload, no_trace, no_cache, tasks, jobs, thresholds_path, junit_path, history_db):
    """CI gate: exit 1 if B regresses significantly beyond a threshold vs A, 2 on bad input / too few data."""
    from abtest.compare.gate import (
        ERROR,
        FAIL,
        SKIP,
        ThresholdsError,
        check_metric_names,
        excluded_lines,
        junit_xml,
        load_thresholds,
        run_gate,
    )
    from abtest.report.notes import condense

    labels = _labels(a, b, store)
    try:  # the thresholds file, metric names included, is checked before any trace is read
        th = load_thresholds(thresholds_path)
        check_metric_names(th, labels)
    except ThresholdsError as e:
        raise BadInput(str(e)) from e
    history_engine = _history_engine(history_db, store)
    c = _run_comparison(a, b, store, workload, th.alpha, 1.0, no_trace, no_cache, (), tasks, jobs, labels)
    res = run_gate(c, th)
    mark = {FAIL: "FAIL", ERROR: "ERROR", SKIP: "skip"}
    for chk in res.checks:
        click.echo(f"{mark.get(chk.status, 'ok'):5} {chk.workload}/{chk.metric}: {chk.message}")
    for e in res.errors:
        click.echo(f"ERROR {e}")
    for line in excluded_lines(res):
        click.echo(f"note  {line}")
    for w in c.workloads:  # what the data lacked or had excluded (power samples, missing events), condensed
        for line in condense(w.notes):
            click.echo(f"note  {w.workload}: {line}")
    if junit_path:
        Path(junit_path).write_text(junit_xml(res, thresholds_path))
    if history_engine is not None:
        _record_history(history_engine, [c], list(labels))
    verdict = {
        0: "gate passed",
        1: "gate FAILED: significant regression beyond threshold",
        2: "gate ERROR: bad input or not enough data",
    }[res.exit_code]
    click.echo(verdict, err=True)
    sys.exit(res.exit_code)


COMMANDS = [compare, gate]
