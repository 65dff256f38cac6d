"""Analyse the iterations of a comparison, in parallel when asked: cached ones are read in this process, the
others go to a pool of `jobs` worker processes (spawned, so a worker never inherits polars' thread pool
mid-operation). A failure in one iteration is reported with its path and does not lose the others.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from abtest.analysis.registry import MetricOptions
from abtest.compare.metrics import cache_file, cache_key, iteration_metrics, read_cache
from abtest.store.model import Iteration


def _one(it: Iteration, options: MetricOptions, use_cache: bool, with_trace: bool):
    try:
        return iteration_metrics(it, options, use_cache=use_cache, with_trace=with_trace)
    except Exception as e:  # noqa: BLE001 - reported with the iteration's path, the others go on
        return {}, [f"analysis failed: {type(e).__name__}: {e}"]


# a worker keeps the memory it frees for reuse when each worker has this much of the machine's available memory
KEEP_FREED_MIN_BYTES = 2 << 30
# what the spawned workers are told beside their allocators' settings: OpenBLAS (scipy) on one thread instead of
# one spinning per core beside the worker pool (a value the user set is kept)
_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def _memory_to_spare(workers: int) -> bool:
    """Whether each of `workers` worker processes has KEEP_FREED_MIN_BYTES of the memory this process may still
    use: MemAvailable (/proc/meminfo), or less when its memory cgroup (v2 or v1) has a limit."""
    avail = available_memory_bytes()
    return avail is not None and avail >= workers * KEEP_FREED_MIN_BYTES


def available_memory_bytes() -> int | None:
    """MemAvailable, bounded by the limit of this process' memory cgroup minus its use (cgroup v2 memory.max /
    memory.current, v1 memory.limit_in_bytes / memory.usage_in_bytes); None when /proc/meminfo is unreadable."""
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    for limit_file, usage_file in _cgroup_memory_files():
        try:
            limit = limit_file.read_text().strip()
            if limit == "max" or int(limit) >= 1 << 60:  # no limit
                continue
            avail = min(avail, max(0, int(limit) - int(usage_file.read_text().strip())))
        except (OSError, ValueError):
            continue
    return avail


def _cgroup_memory_files() -> list[tuple[Path, Path]]:
    """(limit, usage) file pairs of this process' memory cgroup, v2 and v1, where they exist."""
    root = Path("/sys/fs/cgroup")
    out = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hid, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        rel = rel.lstrip("/")
        if hid == "0" and controllers == "":
            out.append((root / rel / "memory.max", root / rel / "memory.current"))
        elif "memory" in controllers.split(","):
            for base in (root / "memory" / rel, root / "memory"):  # the namespace may show its cgroup as the root
                out.append((base / "memory.limit_in_bytes", base / "memory.usage_in_bytes"))
    return [(lim, use) for lim, use in out if lim.is_file() and use.is_file()]


@contextlib.contextmanager
def _worker_environment():
    """The environment the workers are spawned with (_WORKER_ENV where the user set nothing), this process' own
    back afterwards (its libraries have read theirs already)."""
    added = {k: v for k, v in _WORKER_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _worker_start(keep: bool) -> None:
    """A worker's first step: with memory to spare, it keeps the memory it frees for the next iteration
    (abtest._native.keep_freed_memory: the 2 x 10 bench store compares in ~14.5 s instead of ~16 s, each worker
    holding up to ~0.8 GB instead of ~0.4 GB; docs/analysis-speed.md). polars' jemalloc keeps its setting (told to
    keep freed pages 30 s as well, the workers spent less system time but no less wall time: measured, not kept)."""
    if keep:
        from abtest import _native

        _native.keep_freed_memory()


def _is_cached(it: Iteration, options: MetricOptions, with_trace: bool) -> bool:
    return read_cache(cache_file(it.path), cache_key(it, options, with_trace)) is not None


def analyse_iterations(
    work: list[tuple[Iteration, MetricOptions]],
    *,
    use_cache: bool = True,
    with_trace: bool = True,
    jobs: int = 1,
    progress=False,
) -> dict:
    """{str(iteration path): (metrics by key, notes)} for every (iteration, options) in `work`. progress: True
    for a bar on stderr when it is a terminal, or the rich Console to draw it on (a command's spinner's, so
    that rich nests the two displays; abtest.commands.status)."""
    out: dict = {}
    todo = []
    for it, options in work:
        if (use_cache and _is_cached(it, options, with_trace)) or not (with_trace and it.trace_path):
            out[str(it.path)] = _one(it, options, use_cache, with_trace)
        else:
            todo.append((it, options))
    if not todo:
        return out
    bar = _progress(len(todo), None if progress is True else progress) if progress else None
    try:
        if jobs <= 1 or len(todo) == 1:
            for it, options in todo:
                out[str(it.path)] = _one(it, options, use_cache, with_trace)
                _advance(bar, it)
        else:
            ctx = multiprocessing.get_context("spawn")
            workers = min(jobs, len(todo))
            keep = _memory_to_spare(workers)
            with (
                _worker_environment(),
                ProcessPoolExecutor(
                    max_workers=workers, mp_context=ctx, initializer=_worker_start, initargs=(keep,)
                ) as pool,
            ):
                futures = {pool.submit(_one, it, options, use_cache, with_trace): it for it, options in todo}
                for fut in as_completed(futures):
                    it = futures[fut]
                    try:
                        out[str(it.path)] = fut.result()
                    except Exception as e:  # noqa: BLE001 - a worker that died: report, keep the others
                        out[str(it.path)] = ({}, [f"analysis failed: {type(e).__name__}: {e}"])
                    _advance(bar, it)
    finally:
        if bar is not None:
            bar[0].stop()
    return out


def _progress(total: int, console=None):
    if console is None and not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(
        TextColumn("analysing iterations"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console if console is not None else Console(stderr=True),
        transient=True,
    )
    task = p.add_task("", total=total)
    p.start()
    return p, task


def _advance(bar, it: Iteration) -> None:
    if bar is not None:
        bar[0].update(bar[1], advance=1, description=f"{it.label}/{it.workload}/{it.name}")
