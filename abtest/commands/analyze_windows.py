"""`abtest analyze FILE --windows SECONDS`: the declared metrics of a long trace, analysed window by window in
bounded memory (abtest.analysis.windowed) and printed as one table (or JSON with --json).

JSON: {"file", "windows_s", "history_s", "windows", "metrics": [{analysis, key, value, unit, window, exact,
windows}]}; a value whose combination is approximate (a percentile, a share of some threads' known time) has
"exact": false and is marked "≈" in the table.
"""

from __future__ import annotations

import json
import math
import os
import sys

import click
from rich.console import Console
from rich.text import Text

from abtest.analysis import registry
from abtest.analysis.windowed import WindowAnalysisError, df_combine, df_window_metrics
from abtest.commands.analyze_tables import metric_grids
from abtest.report.fit import print_grid


def _progress():
    """(callback, stop) of a progress bar on stderr when it is a terminal, else no-ops."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(
        TextColumn("analysing windows"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = p.add_task("", total=None)
    p.start()
    return (lambda done, total: p.update(task, completed=done, total=total)), p.stop


def run_windowed(
    trace, windows_s: float, *, history_s: float, jobs: int | None, only: tuple[str, ...], as_json: bool
) -> None:
    jobs = jobs or os.cpu_count() or 1
    tick, stop = _progress()
    try:
        per_window = df_window_metrics(
            trace, windows_s, history_s=history_s, analyses=only or None, jobs=jobs, on_window=tick
        )
    except (WindowAnalysisError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    finally:
        stop()
    combined = df_combine(per_window)
    n = per_window["window"].n_unique()
    if combined.is_empty():
        click.secho(
            f"error: no declared metric could be computed from {trace.path} in any window (its events are "
            f"absent or empty; `abtest analyze` without --windows says which)",
            fg="red",
            err=True,
        )
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "file": str(trace.path),
                        "windows_s": windows_s,
                        "history_s": history_s,
                        "windows": n,
                        "metrics": [],
                    }
                )
            )
        raise SystemExit(2)
    if as_json:
        rows = [
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in combined.select("analysis", "key", "value", "unit", "window", "exact", "windows").to_dicts()
        ]
        click.echo(
            json.dumps(
                {"file": str(trace.path), "windows_s": windows_s, "history_s": history_s, "windows": n, "metrics": rows}
            )
        )
        return
    con = Console(highlight=False)
    span = (trace.end_ns - trace.start_ns) / 1e9
    con.print(Text(str(trace.path), style="bold"))
    con.print(
        Text(f"{span:.3f} s in {n} windows of {windows_s:g} s (history {history_s:g} s); {combined.height} values")
    )
    for (name,), part in combined.group_by(["analysis"], maintain_order=True):
        values: dict[str, dict] = {}
        mark: dict = {}
        for r in part.iter_rows(named=True):
            spec, group = registry.resolve(r["key"]) or (None, None)
            if spec is None:
                continue
            values.setdefault(spec.key, {})[group] = r["value"]
            mark[(spec.key, group)] = "" if r["exact"] else "≈ "
        a = registry.BY_NAME[name]
        for g in metric_grids(a.title, a.metrics, values, mark):
            print_grid(con, g)
    con.print(
        Text(
            "≈: approximate combination of the windows' values (percentiles, shares of some threads' known "
            "time); the others equal the whole-trace analysis when the state carried into each window is "
            "within the history (docs/analyze.md)",
            style="dim",
        )
    )
