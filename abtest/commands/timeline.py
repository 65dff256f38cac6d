"""`abtest timeline`: a trace and abtest's derived signals (or kernel A's and B's iterations side by side) as one
perfetto trace for the Perfetto UI (thin over abtest.timeline; docs/timeline.md)."""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path

import click

from abtest.commands.compare import BadInput


def _print_summary(s) -> None:
    kinds: dict[str, int] = {}
    for kind in s.tracks.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    click.echo(f"wrote {s.path} ({s.size / 1e6:.2f} MB in {s.seconds:.1f} s)")
    click.echo(
        f"  scheduling data: {s.source_packets}"
        + (f" ({', '.join(f'{k} {v}' for k, v in s.ftrace_rows.items())})" if s.ftrace_rows else "")
    )
    click.echo(
        f"  derived tracks: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}; "
        f"{', '.join(f'{v} {k}' for k, v in s.events.items()) or 'no events'}"
    )
    click.echo(f"  {s.clock}")
    for n in s.notes:
        click.echo(f"  not shown: {n}")
    click.echo(
        "  open it in the Perfetto UI (https://ui.perfetto.dev, Open trace file; or a local UI), or query it: "
        f'abtest sql {shlex.quote(str(s.path))} "select name from track"'
    )


def _window_view(trace, window: tuple[float, float] | None):
    if not window:
        return trace
    start = trace.start_ns
    if start is None:
        raise BadInput(f"{trace.path}: no events, no window to cut")
    lo, hi = window
    if hi <= lo:
        raise BadInput(f"--window {lo} {hi}: the end must be after the start")
    return trace.window(start + int(lo * 1e9), start + int(hi * 1e9))


def _median_iteration(w, side: str, metric) -> int:
    """Index of the iteration whose value of ``metric`` is nearest the side's median (first such)."""
    measured = w.measured_a if side == "a" else w.measured_b
    vals = [(i, m[metric.name].value) for i, m in enumerate(measured) if metric.name in m]
    if not vals:
        return 0
    med = statistics.median(v for _, v in vals)
    return min(vals, key=lambda iv: (abs(iv[1] - med), iv[0]))[0]


def _pick(label, workload: str, name: str):
    """The Iteration of ``label`` named ``name`` in ``workload``."""
    its = label.workloads.get(workload, [])
    for it in its:
        if it.name == name or str(it.index) == str(name):
            return it
    raise BadInput(f"{label.name}/{workload}: no iteration {name!r} (have {', '.join(i.name for i in its) or 'none'})")


def _ab(store, a, b, workload, iteration, out, platform, top_tasks, no_cache) -> None:
    from abtest import Trace
    from abtest.commands.compare import _labels, _run_comparison
    from abtest.compare.summary import deciding_metrics, metric_label
    from abtest.timeline.ab import write_ab_timeline

    la, lb = _labels(a, b, store)
    if iteration is not None:  # no comparison needed
        common = [x for x in la.workloads if x in lb.workloads and workload in (None, x)]
        if not common:
            raise BadInput(f"{a} and {b} share no workload" + (f" named {workload!r}" if workload else ""))
        wname = common[0]
        ia, ib = _pick(la, wname, iteration), _pick(lb, wname, iteration)
        why = f"iteration {iteration}"
    else:
        c = _run_comparison(a, b, store, workload, 0.05, 1.0, False, no_cache, labels=(la, lb))
        if not c.workloads:
            raise BadInput(f"{a} and {b} share no workload with usable iterations")
        w = next((x for x in c.workloads if workload in (None, x.workload)), c.workloads[0])
        wname = w.workload
        dec = deciding_metrics(w, limit=1)
        if not dec:
            raise BadInput(f"{w.workload}: no deciding metric to pick iterations by: pass --iteration K")
        m = dec[0]
        na, nb = w.iterations_a[_median_iteration(w, "a", m)], w.iterations_b[_median_iteration(w, "b", m)]
        ia, ib = _pick(la, wname, na), _pick(lb, wname, nb)
        why = f"nearest the median of {metric_label(m)}"
    for it in (ia, ib):
        if it.trace_path is None:
            raise BadInput(f"{it.path}: the iteration has no trace")
    ta = Trace(ia.trace_path, platform=platform or ia.platform_path)
    tb = Trace(ib.trace_path, platform=platform or ib.platform_path)
    # the rail mapping compare uses for each iteration: the store's abtest.toml, the target file's, the platform's
    from abtest.analysis import power_source
    from abtest.analysis.registry import MetricOptions
    from abtest.store.config import load_store_config

    options = MetricOptions(rail_channels=load_store_config(store).rail_channels)
    mappings = tuple(power_source.mapping_of(options, it, t) for it, t in ((ia, ta), (ib, tb)))
    click.echo(f"{wname}: {la.name} iteration {ia.name} vs {lb.name} iteration {ib.name} ({why})")
    s = write_ab_timeline(
        ta,
        tb,
        out,
        label_a=la.name,
        label_b=lb.name,
        what_a=f"{wname} iteration {ia.name}",
        what_b=f"{wname} iteration {ib.name}",
        top_tasks=top_tasks,
        mappings=mappings,
    )
    _print_summary(s)


@click.command("timeline")
@click.argument("inputs", nargs=-1, required=True, metavar="TRACE | A B")
@click.option(
    "-o", "--output", "out", required=True, type=click.Path(dir_okay=False), help="The .perfetto-trace file to write."
)
@click.option(
    "--platform",
    "platform_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Platform file (capacities, OPPs, idle states, energy model) for the derived tracks.",
)
@click.option(
    "--window",
    nargs=2,
    type=float,
    metavar="START_S END_S",
    default=None,
    help="Only this span, in seconds from the trace's start (perfetto inputs keep all their packets; "
    "the derived tracks cover the span).",
)
@click.option(
    "--top-tasks",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="Per-task util and window demand tracks for this many tasks (most CPU time).",
)
@click.option(
    "--store",
    default=None,
    type=click.Path(file_okay=False),
    help="Compare mode: A and B are labels of this run store; their iterations side by side.",
)
@click.option("--workload", default=None, help="Compare mode: the workload (default: the first in common).")
@click.option(
    "--iteration",
    default=None,
    metavar="K",
    help="Compare mode: this iteration on both sides (default: each side's iteration nearest its median "
    "of the deciding metric).",
)
@click.option("--no-cache", is_flag=True, help="Compare mode: recompute per-iteration metrics.")
def timeline(inputs, out, platform_file, window, top_tasks, store, workload, iteration, no_cache):
    """Write TRACE's scheduling data and abtest's derived tracks (PELT util/runnable, window demand, boost
    what-if, idle misses, slow wakeups, overutilized spans, power per channel and rail) as one perfetto trace
    for the Perfetto UI; with --store, kernel A's and B's iterations side by side, aligned at their start."""
    if store is not None or len(inputs) == 2:
        if len(inputs) != 2:
            raise BadInput("compare mode takes two labels: abtest timeline --store STORE A B -o OUT")
        _ab(store, inputs[0], inputs[1], workload, iteration, out, platform_file, top_tasks, no_cache)
        return
    if len(inputs) != 1:
        raise BadInput("one trace (abtest timeline TRACE -o OUT) or two labels with --store")
    from abtest import Trace
    from abtest.timeline.builder import write_timeline

    path = Path(inputs[0])
    trace = _window_view(Trace(path, platform=platform_file), window)
    _print_summary(write_timeline(trace, out, top_tasks=top_tasks))


COMMANDS = [timeline]
