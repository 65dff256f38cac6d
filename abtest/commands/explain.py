"""`abtest explain A B`: where a power change came from — per frequency domain and OPP, idle state, task, with
the residual the model does not explain, the scheduler signals that moved and a narrative (thin over
abtest.compare.explain; docs/explain.md)."""

from __future__ import annotations

from pathlib import Path

import click

from abtest.commands.compare import BadInput, _run_comparison, _with_common, _with_labels, resolve_label
from abtest.commands.status import DelayedStatus


@click.command("explain")
@_with_labels
@_with_common
@click.option(
    "--channel",
    "channels",
    multiple=True,
    metavar="CH",
    help="Power channel to decompose (CPU-Big, CPU, Total ...; repeatable). Default: every channel that "
    "changed significantly.",
)
@click.option(
    "--platform",
    "platform_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Platform file with an energy model, for iterations without platform.yml beside their trace.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "text", "markdown", "json"]), default="table", show_default=True
)
@click.option("--width", type=click.IntRange(40), default=None, help="Width of --format text (default 80).")
def explain(a, b, store, workload, no_trace, no_cache, tasks, jobs, channels, platform_file, fmt, width):
    """Explain the power change from A to B: a decomposition that adds up to the measured (or modelled) delta,
    ranked, with confidence intervals from the iterations, and a narrative ready for a mail."""
    from abtest.analysis.platform import PlatformFormatError, load_platform
    from abtest.compare.explain import explain_workload
    from abtest.report.explain import print_explanations
    from abtest.store.layout import default_store_root

    if no_trace:
        raise BadInput("explain needs the traces (drop --no-trace)")
    platform = None
    if platform_file:
        try:
            platform = load_platform(platform_file)
        except PlatformFormatError as e:
            raise BadInput(str(e)) from e
    # 1-5 s before anything prints (per-iteration metrics read, compared, decomposed): a spinner on stderr at a
    # terminal says which step runs (abtest.commands.status), erased before the result prints
    with DelayedStatus(f"explain {a} -> {b}: comparing the iterations") as status:
        c = _run_comparison(a, b, store, workload, 0.05, 1.0, False, no_cache, (), tasks, jobs, progress=status.console)
        root = Path(store) if store else default_store_root()
        la, lb = resolve_label(a, root), resolve_label(b, root)
        exs = []
        for w in c.workloads:
            status.update(f"explain {a} -> {b}: decomposing the power change of {w.workload}")
            exs.append(explain_workload(c, la, lb, w.workload, channels=tuple(channels), platform=platform))
    print_explanations(exs, fmt, width)
    if fmt != "json":  # from the explanation to the timeline: the iterations behind it, side by side
        from abtest.report.timeline_links import explanation_timeline_lines

        for line in explanation_timeline_lines(c, store):
            click.echo(line)


COMMANDS = [explain]
