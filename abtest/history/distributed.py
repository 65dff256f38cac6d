"""Evaluate many iterations at once on Dask distributed: a LocalCluster of worker processes by default, or the
scheduler of a real cluster (`tcp://host:8786`). Results stream back as they finish (progress bar on stderr).

Why Dask and not Ray: Dask distributed is pure-Python wheels (no 60+ MB native runtime), starts a local cluster
of processes in about a second, ships work as pickled Python objects (an Iteration and its MetricOptions) and
connects to a cluster by one address; Ray's object store and raylet processes buy nothing for a job of
independent, file-reading tasks. The workers must see the stores under the same paths (a shared filesystem).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from abtest.analysis.registry import MetricOptions
from abtest.history.evaluate import Evaluated, evaluate
from abtest.store.model import Iteration


def evaluate_all(
    work: list[tuple[Iteration, MetricOptions]],
    *,
    with_trace: bool = True,
    use_cache: bool = True,
    workers: int = 1,
    scheduler: str | None = None,
    progress: bool = False,
) -> Iterator[Evaluated]:
    """Evaluated values of every (iteration, options), in completion order.

    workers: 1 and no scheduler: in this process. Otherwise a Dask LocalCluster of `workers` processes (one
    thread each: the analyses use polars' own threads), or the cluster at `scheduler`."""
    if not work:
        return
    bar = _Bar(len(work)) if progress else None
    try:
        if scheduler is None and workers <= 1:
            for it, options in work:
                ev = evaluate(it, options, with_trace, use_cache)
                _advance(bar, ev)
                yield ev
            return
        for ev in _on_dask(work, with_trace, use_cache, workers, scheduler):
            _advance(bar, ev)
            yield ev
    finally:
        if bar is not None:
            bar.stop()


def _on_dask(work, with_trace: bool, use_cache: bool, workers: int, scheduler: str | None) -> Iterable[Evaluated]:
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        )
    client = Client(scheduler or cluster)
    try:
        futures = client.map(
            evaluate,
            [it for it, _ in work],
            [o for _, o in work],
            [with_trace] * len(work),
            [use_cache] * len(work),
            pure=False,
        )
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _Bar:
    """A rich progress bar on stderr (nothing when stderr is not a terminal and not forced)."""

    def __init__(self, total: int, force: bool = False):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True, force_terminal=force or None)
        self.p = Progress(
            TextColumn("history add"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=not force,
            disable=not (force or sys.stderr.isatty()),
        )
        self.task = self.p.add_task("", total=total)
        self.p.start()

    def advance(self) -> None:
        self.p.update(self.task, advance=1)

    def stop(self) -> None:
        self.p.stop()


def _advance(bar: _Bar | None, _ev: Evaluated) -> None:
    if bar is not None:
        bar.advance()
