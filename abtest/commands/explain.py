"""`abtest explain A B`: where a power change came from — per frequency domain and OPP, idle state, task, with
the residual the model does not explain, the scheduler signals that moved and a narrative (thin over
abtest.compare.explain; docs/explain.md)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from abtest.commands.compare import BadInput, _common, _run_comparison, _with_common, resolve_label


@click.command("explain")
@_with_common
@click.option("--channel", "channels", multiple=True, metavar="CH",
              help="Power channel to decompose (CPU-Big, CPU, Total ...; repeatable). Default: every channel that "
                   "changed significantly.")
@click.option("--platform", "platform_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Platform file with an energy model, for iterations without platform.yml beside their trace.")
@click.option("--format", "fmt", type=click.Choice(["table", "text", "markdown", "json"]), default="table",
              show_default=True)
@click.option("--width", type=click.IntRange(40), default=None, help="Width of --format text (default 80).")
def explain(a, b, store, workload, no_trace, no_cache, tasks, jobs, channels, platform_file, fmt, width):
    """Explain the power change from A to B: a decomposition that adds up to the measured (or modelled) delta,
    ranked, with confidence intervals from the iterations, and a narrative ready for a mail."""
    from abtest.analysis.platform import PlatformFormatError, load_platform
    from abtest.compare.explain import explain_workload
    from abtest.store.layout import default_store_root

    if no_trace:
        raise BadInput("explain needs the traces (drop --no-trace)")
    platform = None
    if platform_file:
        try:
            platform = load_platform(platform_file)
        except PlatformFormatError as e:
            raise BadInput(str(e)) from e
    c = _run_comparison(a, b, store, workload, 0.05, 1.0, False, no_cache, (), tasks, jobs)
    root = Path(store) if store else default_store_root()
    la, lb = resolve_label(a, root), resolve_label(b, root)
    exs = [explain_workload(c, la, lb, w.workload, channels=tuple(channels), platform=platform) for w in c.workloads]
    print_explanations(exs, fmt, width)


def print_explanations(exs, fmt: str, width: int | None = None) -> None:
    from abtest.report.explain import explanation_tables, explanation_text_lines
    if fmt == "json":
        click.echo(json.dumps({"schema": "abtest.explain/1", "workloads": [e.to_json() for e in exs]}, indent=1,
                              allow_nan=False, default=lambda x: None))
        return
    if fmt == "markdown":
        from abtest.report.markdown import table_markdown
        for e in exs:
            click.echo("\n".join(f"> {x}" if i else f"### {x}" for i, x in enumerate(explanation_text_lines(e))))
            click.echo("")
            for t in explanation_tables(e):
                click.echo(table_markdown(t))
        return
    if fmt == "text":
        import textwrap
        from abtest.report.text import table_text
        w = width or 80
        for e in exs:
            for line in explanation_text_lines(e):
                click.echo(textwrap.fill(line, w, subsequent_indent="    ", break_long_words=False))
            click.echo("")
            for t in explanation_tables(e):
                click.echo(table_text(t, w))
        return
    from abtest.report.terminal import console_for_output, print_explanation
    con = console_for_output(width)
    for e in exs:
        print_explanation(con, e)


COMMANDS = [explain]
