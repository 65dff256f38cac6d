"""`abtest bisect start|run|status|log|reset|oracle`: find the commit that made a metric regress (thin over
abtest.bisect; docs/bisect.md).

Exit codes: 0 done (run) / ok; 2 bad input, or the bisection stopped (nothing to bisect; a dead target: the
state is kept and `abtest bisect run` resumes); 130 interrupted (resumable too).
`oracle`: 0 good, 1 bad, 125 skip (untestable), 128 abort, as `git bisect run` expects.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from abtest.store.layout import STORE_ENV, default_store_root

STORE_OPT = click.option(
    "--store",
    type=click.Path(file_okay=False),
    envvar=STORE_ENV,
    default=None,
    help="run store directory [env ABTEST_STORE; default ./results]",
)
FORMAT_OPT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)


def _store(store) -> Path:
    return Path(store) if store else default_store_root()


def _pct(text: str) -> float:
    try:
        return float(str(text).strip().rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a percentage (e.g. 2%)", param_hint="--min-effect") from None


def _err(msg: str) -> None:
    click.secho(f"error: {msg}", fg="red", err=True)


@click.group("bisect")
def bisect() -> None:
    """Bisect a regression of one metric between a good and a bad revision, with compare's decision rule as a
    noise-aware oracle; every tested revision becomes a label of the run store."""


@bisect.command("start")
@click.option("--good", required=True, help="a revision without the regression")
@click.option("--bad", required=True, help="a later revision with it (good must be its ancestor)")
@click.option("--repo", type=click.Path(exists=True, file_okay=False), default=".", show_default=True)
@click.option(
    "--build",
    "build_cmd",
    required=True,
    help="build command; called as CMD REV OUTDIR in the repository (also $ABTEST_REV, $ABTEST_OUT)",
)
@click.option("--target", "target_spec", required=True, help="target TOML file, or a name in targets/examples")
@click.option("--workload", required=True, help="NAME[:param=value,...] as for `abtest collect`")
@click.option("--metric", required=True, help="metric key, e.g. power.Total (`abtest metrics` lists them)")
@click.option("--min-effect", default="2%", show_default=True, help="smallest change worth calling a regression")
@click.option(
    "--confidence",
    type=click.FloatRange(0.5, 0.9999),
    default=0.95,
    show_default=True,
    help="posterior probability of the culprit to stop at",
)
@click.option(
    "--max-iterations", type=click.IntRange(8), default=400, show_default=True, help="run budget of the whole bisection"
)
@click.option(
    "--per-step-cap",
    type=click.IntRange(4),
    default=40,
    show_default=True,
    help="runs of one revision before it is given up (skip)",
)
@click.option("--batch", type=click.IntRange(1), default=2, show_default=True, help="runs per visit of a revision")
@click.option("--mode", type=click.Choice(["posterior", "classic"]), default="posterior", show_default=True)
@click.option(
    "--direction",
    type=click.Choice(["lower", "higher"]),
    default=None,
    help="which way is better, for a metric that declares none",
)
@click.option("--trace", is_flag=True, help="trace every run (needed for trace-derived metrics)")
@STORE_OPT
def start(
    good,
    bad,
    repo,
    build_cmd,
    target_spec,
    workload,
    metric,
    min_effect,
    confidence,
    max_iterations,
    per_step_cap,
    batch,
    mode,
    direction,
    trace,
    store,
) -> None:
    """Start a bisection in the run store (measures nothing; `abtest bisect run` does)."""
    from abtest.bisect import state as S
    from abtest.commands.collect import resolve_target_file

    root = _store(store)
    if S.state_path(root).exists():
        raise click.UsageError(f"a bisection is already in {root} (`abtest bisect reset` ends it)")
    target = resolve_target_file(target_spec)
    try:
        revs, subjects = S.revision_range(repo, good, bad)
    except S.BisectError as e:
        raise click.UsageError(str(e)) from e
    cfg = S.Config(
        good=good,
        bad=bad,
        repo=str(Path(repo).resolve()),
        build=build_cmd,
        target=str(target.resolve()),
        workload=workload,
        metric=metric,
        min_effect_pct=_pct(min_effect),
        confidence=confidence,
        max_iterations=max_iterations,
        per_step_cap=per_step_cap,
        batch=batch,
        mode=mode,
        direction=direction or "",
        trace=trace,
    )
    st = S.BisectState(cfg, revs, subjects)
    st.event("start", good=revs[0], bad=revs[-1], revisions=len(revs))
    S.save(root, st)
    click.echo(
        f"bisecting {len(revs) - 2} commits between {revs[0][:12]} (good) and {revs[-1][:12]} (bad) "
        f"on {metric}; next: abtest bisect run --store {root}",
        err=True,
    )


@bisect.command("run")
@STORE_OPT
@FORMAT_OPT
@click.option("--no-progress", is_flag=True, help="no progress lines on stderr")
def run(store, fmt, no_progress) -> None:
    """Run (or resume) the bisection until the culprit is found."""
    from abtest.bisect import state as S
    from abtest.bisect.boot import TargetDead
    from abtest.bisect.measure import Measurer
    from abtest.bisect.search import Bisector

    root = _store(store)
    log = (lambda m: None) if no_progress else (lambda m: click.echo(_plain(m), err=True))
    try:
        st = S.load(root)
        m = Measurer(st.config, root, log=log)
    except S.BisectError as e:
        _err(str(e))
        sys.exit(2)
    if st.result is not None:  # finished: show the result again (`abtest bisect reset` to start another)
        _print_result(st.result, root, fmt, st.config.trace)
        return
    try:
        res = Bisector(root, st, m, log=log).run()
    except TargetDead as e:
        st.event("abort", why=str(e)[:300])
        S.save(root, st)
        _err(f"target dead: {e}\nthe state is kept: `abtest bisect run --store {root}` resumes")
        sys.exit(2)
    except S.BisectError as e:
        st.event("stop", why=str(e)[:300])
        S.save(root, st)
        _err(str(e))
        sys.exit(2)
    except KeyboardInterrupt:
        click.secho(f"\ninterrupted: `abtest bisect run --store {root}` resumes", fg="yellow", err=True)
        sys.exit(130)
    finally:
        m.shutdown()
    _print_result(res, root, fmt, st.config.trace)


@bisect.command("status")
@STORE_OPT
@FORMAT_OPT
def status(store, fmt) -> None:
    """Where the bisection stands: range, runs per revision, the current posterior, the result when done."""
    from abtest.bisect import state as S
    from abtest.bisect.measure import Measurer
    from abtest.bisect.report import status_doc, status_text

    root = _store(store)
    try:
        st = S.load(root)
        m = Measurer(st.config, root, log=lambda msg: None)
        doc = status_doc(root, st, [m.values(st.label(i)) for i in range(st.n)])
    except S.BisectError as e:
        _err(str(e))
        sys.exit(2)
    click.echo(json.dumps(doc, indent=1) if fmt == "json" else status_text(doc))


@bisect.command("log")
@STORE_OPT
@FORMAT_OPT
def log_cmd(store, fmt) -> None:
    """The bisection's events (start, endpoints, skips, aborts, the result)."""
    from abtest.bisect import state as S

    try:
        st = S.load(_store(store))
    except S.BisectError as e:
        _err(str(e))
        sys.exit(2)
    if fmt == "json":
        click.echo(json.dumps(st.log, indent=1))
        return
    for e in st.log:
        rest = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("utc", "event"))
        click.echo(f"{e['utc']} {e['event']:<10} {rest}")


@bisect.command("reset")
@STORE_OPT
def reset(store) -> None:
    """End the bisection: remove its state and build cache (the revisions' runs stay in the store as labels)."""
    from abtest.bisect import state as S

    d = S.state_dir(_store(store))
    if not d.exists():
        click.echo("no bisection to reset", err=True)
        return
    shutil.rmtree(d)
    click.echo(f"removed {d}", err=True)


@bisect.command("oracle")
@click.argument("rev", required=False)
@STORE_OPT
def oracle(rev, store) -> None:
    """For `git bisect run abtest bisect oracle`: judge REV (default: the repository's HEAD) against the good
    endpoint with compare's decision rule; exit 0 good, 1 bad, 125 skip, 128 abort."""
    from abtest.bisect import state as S
    from abtest.bisect.boot import TargetDead
    from abtest.bisect.measure import Measurer
    from abtest.bisect.search import ABORT, ORACLE_EXIT, Bisector

    root = _store(store)
    m = None
    try:
        st = S.load(root)
        sha = S.git(st.config.repo, "rev-parse", "--verify", f"{rev or 'HEAD'}^{{commit}}").strip()
        m = Measurer(st.config, root, log=lambda msg: click.echo(_plain(msg), err=True))
        verdict = Bisector(root, st, m, log=lambda msg: click.echo(_plain(msg), err=True)).oracle(sha)
    except (S.BisectError, TargetDead) as e:
        _err(str(e))
        verdict = ABORT
    finally:
        if m is not None:
            m.shutdown()
    click.echo(f"{(rev or 'HEAD')}: {verdict}", err=True)
    sys.exit(ORACLE_EXIT[verdict])


def _plain(msg: str) -> str:
    import re

    return re.sub(r"\[/?[a-z ]*\]", "", msg)


def _print_result(res: dict, root: Path, fmt: str, trace: bool = False) -> None:
    from abtest.bisect.report import result_text

    if fmt == "json":
        click.echo(json.dumps(res, indent=1))
        return
    click.echo(result_text(res, root))
    click.echo(_compare_text(root, res, trace))


def _compare_text(root: Path, res: dict, trace: bool) -> str:
    """`abtest compare PARENT CULPRIT --metric METRIC --format text`, as the result's last part."""
    from abtest.compare.comparison import CompareError, compare_labels
    from abtest.compare.tables import seed_tables
    from abtest.compare.verdict import Policy
    from abtest.report.text import comparison_text
    from abtest.store.reader import StoreError, load_label

    try:
        a, b = (load_label(root / res["labels"][k]) for k in ("parent", "culprit"))
        c = compare_labels(
            a,
            b,
            policy=Policy(min_effect_pct=res.get("min_effect_pct", 1.0)),
            with_trace=trace,
            metric_patterns=(res["metric"],),
            jobs=1,
        )
        tables = [t for t in seed_tables(c) if t.key != "all_metrics"]
        return "\n" + comparison_text(c, tables, width=100)
    except (CompareError, StoreError, OSError, ValueError) as e:
        return f"(compare of parent vs culprit not available: {e})"


COMMANDS = [bisect]
