"""`abtest history add|detect|gate|serve|triage|list` (thin: parse, call abtest.history, print).

Exit codes: 0 ok / gate passed; 1 `history gate` found a new regression change point; 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from abtest.history.db import HISTORY_ENV

DB_OPT = click.option(
    "--db",
    default=None,
    metavar="URL|PATH",
    help=f"Results database: an SQLite file or a URL (postgresql://user@host/db). Default "
    f"${HISTORY_ENV}, else ~/.local/share/abtest/history.sqlite.",
)
FILTERS = [
    click.option("--metric", "metrics", multiple=True, help="Metric key or shell pattern (repeatable)."),
    click.option("--device", "devices", multiple=True, help="Device (target name; repeatable)."),
    click.option("--workload", "workloads", multiple=True, help="Workload (repeatable)."),
]
SETTINGS = [
    click.option(
        "--p-max",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        default=0.001,
        show_default=True,
        help="Significance level of the t-test between segments.",
    ),
    click.option(
        "--min-change",
        type=click.FloatRange(0),
        default=2.0,
        show_default=True,
        help="Smallest relative change of a change point, percent.",
    ),
    click.option(
        "--min-segment",
        type=click.IntRange(1),
        default=3,
        show_default=True,
        help="Builds on each side of a change point (a single odd build is a spike, not a step).",
    ),
    click.option(
        "--min-tail",
        type=click.IntRange(1),
        default=2,
        show_default=True,
        help="Builds after a change point at the newest end of a series.",
    ),
    click.option(
        "--window",
        type=click.IntRange(8),
        default=50,
        show_default=True,
        help="Builds per window of the E-divisive candidate search.",
    ),
]


class BadInput(click.ClickException):
    exit_code = 2


def _with(opts):
    def deco(f):
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def _engine(db):
    from abtest.history.db import open_db

    try:
        return open_db(db)
    except Exception as e:
        raise BadInput(f"cannot open the history database {db or '(default)'}: {type(e).__name__}: {e}") from e


def _settings(p_max, min_change, min_segment, min_tail, window):
    from abtest.history.changepoint import Settings

    return Settings(p_max=p_max, min_change_pct=min_change, min_segment=min_segment, min_tail=min_tail, window=window)


@click.group()
def history() -> None:
    """Results across builds: a database of iterations, change points, a CI gate and a dashboard."""


@history.command("add")
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.argument("labels", nargs=-1)
@DB_OPT
@click.option("--no-trace", is_flag=True, help="Skip trace analyses (metrics.json and power.csv only).")
@click.option("--no-cache", is_flag=True, help="Recompute per-iteration metrics; do not write caches.")
@click.option(
    "--workers",
    "-j",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Dask worker processes of a local cluster (1: in this process).",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="A running Dask scheduler (tcp://host:8786) instead of a local cluster.",
)
def add_cmd(store, labels, db, no_trace, no_cache, workers, scheduler):
    """Record every complete iteration of STORE's LABELs (default: all) with its metric values."""
    from abtest.history.ingest import add
    from abtest.store.model import StoreError

    engine = _engine(db)
    try:
        res = add(
            engine,
            [store],
            tuple(labels),
            with_trace=not no_trace,
            use_cache=not no_cache,
            workers=workers,
            scheduler=scheduler,
            progress=True,
        )
    except StoreError as e:
        raise BadInput(str(e)) from e
    for n in res.notes:
        if "analysis failed" in n or "unavailable" in n or "no complete iteration" in n:
            click.echo(f"note  {n}", err=True)
    click.echo(
        f"{res.builds} new build(s), {res.iterations} iteration(s) with {res.values} values recorded; "
        f"{res.skipped} iteration(s) already recorded"
    )


@history.command("detect")
@DB_OPT
@_with(FILTERS)
@_with(SETTINGS)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def detect_cmd(db, metrics, devices, workloads, p_max, min_change, min_segment, min_tail, window, fmt):
    """Find change points per (device, workload, metric) series and record them (triage states are kept)."""
    from abtest.history.detect import detect

    engine = _engine(db)
    found = detect(
        engine,
        _settings(p_max, min_change, min_segment, min_tail, window),
        metrics=metrics,
        devices=devices,
        workloads=workloads,
    )
    if fmt == "json":
        click.echo(json.dumps([f.to_json() for f in found], indent=1))
        return
    if not found:
        click.echo("no change point")
    for f in found:
        click.echo(
            f"#{f.id:<4} {f.kind:11} {f.key.device}/{f.key.workload}/{f.key.metric} "
            f"{f.step.delta_pct:+.2f} % at {f.after.label} (after {f.before.label}; p {f.step.p:.2g}; "
            f"{f.triage})"
        )
        click.echo(f"      {f.to_json()['commands']['compare']}")


@history.command("gate")
@DB_OPT
@click.option(
    "--thresholds",
    "thresholds_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The thresholds TOML of `abtest gate`: gated metrics and max_regression_pct.",
)
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML.")
@click.option("--build", "build_label", default=None, help="Gate this build (label; default: the newest).")
@click.option("--device", "devices", multiple=True, help="Only this device (repeatable).")
@click.option("--workload", "workloads", multiple=True, help="Only this workload (repeatable).")
@_with(SETTINGS[:1] + SETTINGS[2:])
def gate_cmd(db, thresholds_path, junit_path, build_label, devices, workloads, p_max, min_segment, min_tail, window):
    """CI: exit 1 when the newest build opens a regression change point on a gated metric."""
    from sqlalchemy import select

    from abtest.compare.gate import (
        ERROR,
        FAIL,
        SKIP,
        ThresholdsError,
        junit_xml,
        load_thresholds,
    )
    from abtest.history import schema as S
    from abtest.history.gate import history_gate

    try:
        th = load_thresholds(thresholds_path)
    except ThresholdsError as e:
        raise BadInput(str(e)) from e
    engine = _engine(db)
    build_id = None
    if build_label:
        with engine.connect() as conn:
            build_id = conn.execute(
                select(S.builds.c.id).where(S.builds.c.label == build_label).order_by(S.builds.c.id.desc())
            ).scalar()
        if build_id is None:
            raise BadInput(f"no build labelled {build_label!r} in the history database")
    res, _ = history_gate(
        engine,
        th,
        _settings(p_max, 0.0, min_segment, min_tail, window),
        build_id=build_id,
        devices=devices,
        workloads=workloads,
    )
    mark = {FAIL: "FAIL", ERROR: "ERROR", SKIP: "skip"}
    for chk in res.checks:
        click.echo(f"{mark.get(chk.status, 'ok'):5} {chk.workload}/{chk.metric}: {chk.message}")
    for e in res.errors:
        click.echo(f"ERROR {e}")
    if junit_path:
        Path(junit_path).write_text(junit_xml(res, thresholds_path))
    click.echo(
        {
            0: "history gate passed",
            1: "history gate FAILED: a new regression change point",
            2: "history gate ERROR: bad input or not enough data",
        }[res.exit_code],
        err=True,
    )
    sys.exit(res.exit_code)


@history.command("triage")
@click.argument("change_point", type=int)
@click.argument("state", type=click.Choice(["new", "acknowledged", "invalid"]))
@click.option("--note", default=None, help="Why (kept with the change point).")
@DB_OPT
def triage_cmd(change_point, state, note, db):
    """Set a change point's triage state (it survives re-detection)."""
    from abtest.history.detect import set_triage

    try:
        set_triage(_engine(db), change_point, state, note)
    except KeyError as e:
        raise BadInput(str(e.args[0])) from e
    click.echo(f"change point {change_point}: {state}")


def compare_report(cp: dict) -> str:
    """HTML of `abtest compare` (with explain) between the builds of a change point, for its workload."""
    from html import escape

    from abtest.compare.comparison import CompareError, compare_labels
    from abtest.compare.explain import explain_workload
    from abtest.compare.tables import seed_tables
    from abtest.report.html import comparison_html
    from abtest.store.config import load_store_config
    from abtest.store.reader import load_label

    a = load_label(Path(cp["before"]["store"]) / cp["before"]["label"])
    b = load_label(Path(cp["after"]["store"]) / cp["after"]["label"])
    title = (
        f"<h1 id='report-title'>change point #{cp['id']}: {escape(cp['metric'])} "
        f"{cp['delta_pct']:+.2f} % &mdash; {escape(a.name)} &rarr; {escape(b.name)}</h1>"
        f"<p>bisect: <code>{escape(cp['commands']['bisect'])}</code></p>"
    )
    try:
        c = compare_labels(a, b, workload=cp["workload"], config=load_store_config(cp["before"]["store"]))
    except CompareError as e:
        return f"<!doctype html>{title}<p>compare failed: {escape(str(e))}</p>"
    explanations, failed = [], []
    for w in c.workloads:
        try:
            explanations.append(explain_workload(c, a, b, w.workload))
        except Exception as e:  # noqa: BLE001 - explain needs traces; the comparison is shown without it
            failed.append(f"explain {w.workload}: {type(e).__name__}: {e}")
    html = comparison_html(c, seed_tables(c), explanations=explanations)
    title += "".join(f"<p class='note'>{escape(x)}</p>" for x in failed)
    return html.replace("<body>", "<body>" + title, 1) if "<body>" in html else title + html


@history.command("serve")
@DB_OPT
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8741, show_default=True)
def serve_cmd(db, host, port):
    """The dashboard: per metric, builds with CI bands and change points; JSON API under /api."""
    from abtest.history.web import Server, create_app

    server = Server(create_app(_engine(db), report=compare_report), host, port)
    click.echo(f"abtest history dashboard on {server.url} (Ctrl-C stops it)", err=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


COMMANDS = [history]
