"""Parallel per-iteration analysis (abtest.compare.parallel, `compare --jobs N`) on real traces: every
iteration's values equal the one-process run's, a broken iteration is reported with its path and does not
lose the others, and the per-iteration cache serves the second run."""

from __future__ import annotations

import os
import time

from abtest.analysis.registry import MetricOptions
from abtest.compare import parallel
from abtest.compare.metrics import METRICS_CACHE_FILE
from abtest.compare.parallel import analyse_iterations
from abtest.store.reader import load_label

TRACE = "x86-vm/x86-ladder-hackbench-cyclictest.dat"


def _store(tmp_path, traces, n: int = 3):
    for i in range(n):
        d = tmp_path / "A" / "hackbench" / str(i)
        d.mkdir(parents=True)
        (d / "trace.dat").symlink_to(traces / TRACE)
        (d / ".complete").touch()
    broken = tmp_path / "A" / "hackbench" / str(n)
    broken.mkdir()
    (broken / "trace.dat").write_bytes(b"\x17\x08Dtracing6\x00" + b"\xff" * 512)  # a truncated trace.dat
    (broken / ".complete").touch()
    return load_label(tmp_path / "A")


def test_parallel_equals_serial_and_isolates_a_broken_iteration(tmp_path, traces):
    label = _store(tmp_path, traces)
    work = [(it, MetricOptions()) for it in label.complete("hackbench")]
    assert len(work) == 4
    t0 = time.perf_counter()
    par = analyse_iterations(work, use_cache=False, jobs=2)
    serial = analyse_iterations(work, use_cache=False, jobs=1)
    assert set(par) == {str(it.path) for it, _ in work}
    good = [str(it.path) for it, _ in work[:3]]
    for p in good:
        vals, notes = par[p]
        assert "latency.gmean_us" in vals and "load_tracking.cpu.0.mean_util" in vals, sorted(vals)[:10]
        assert {k: v.value for k, v in vals.items()} == {k: v.value for k, v in serial[p][0].items()}
    vals, notes = par[str(work[3][0].path)]
    assert not vals
    assert len(notes) == 1 and "trace metrics unavailable" in notes[0] and "trace.dat" in notes[0], notes
    # the cache: a second run reads every good iteration's values back (the broken one is retried)
    t_cold = time.perf_counter() - t0
    analyse_iterations(work, use_cache=True, jobs=2)
    assert all((tmp_path / "A" / "hackbench" / str(i) / METRICS_CACHE_FILE).is_file() for i in range(3))
    t0 = time.perf_counter()
    again = analyse_iterations(work[:3], use_cache=True, jobs=2)
    assert time.perf_counter() - t0 < t_cold
    for p in good:
        assert {k: v.value for k, v in again[p][0].items()} == {k: v.value for k, v in serial[p][0].items()}


def test_worker_environment_is_set_for_the_workers_only_and_keeps_the_users(monkeypatch):
    """The workers are spawned with OpenBLAS on one thread unless the user chose; this process' environment is
    back as it was afterwards."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with parallel._worker_environment():
        assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    with parallel._worker_environment():
        assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3"


def test_memory_to_spare_follows_meminfo_and_the_cgroup_limit(tmp_path, monkeypatch):
    avail = parallel.available_memory_bytes()
    kb = next(int(x.split()[1]) for x in open("/proc/meminfo") if x.startswith("MemAvailable:"))
    slack = 256 << 20  # MemAvailable moves between two reads
    assert 0 <= avail <= kb * 1024 + slack
    fits = avail // parallel.KEEP_FREED_MIN_BYTES
    assert not parallel._memory_to_spare(fits + 2)
    if fits >= 2:
        assert parallel._memory_to_spare(fits - 1)
    # a memory cgroup limited to 3 GiB with 2 GiB used leaves 1 GiB: one worker does not keep its memory
    lim, use = tmp_path / "memory.max", tmp_path / "memory.current"
    lim.write_text(str(3 << 30))
    use.write_text(str(2 << 30))
    monkeypatch.setattr(parallel, "_cgroup_memory_files", lambda: [(lim, use)])
    assert parallel.available_memory_bytes() == min(1 << 30, kb * 1024)
    assert not parallel._memory_to_spare(1)
    lim.write_text("max")
    assert abs(parallel.available_memory_bytes() - kb * 1024) < slack
