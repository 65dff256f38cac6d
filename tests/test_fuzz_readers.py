"""Bounded mutation fuzz of every trace reader (bench/fuzz.py; the long run is `python bench/fuzz.py --execs 100000`).

Each reader gets a fixed, reproducible set of mutants of the real shared traces (truncations, byte flips,
zeroed / duplicated / swapped ranges, huge length fields), each read by `read_trace` in a worker process under
an address-space cap (+1 GiB), a 10 s bound per case and a peak-RSS bound (+1 GiB). A case passes when the
reader returns or raises TraceFormatError naming the file and an offset or line; anything else fails the test.

Known reader bugs go in KNOWN_BUGS: the fuzz tests count them apart and do not fail on them, and each has its
own reproducer below, marked xfail(strict=False): when a fix lands, that reproducer passes (XPASS) and the
entry moves to FIXED_BUGS, whose reproducers must keep passing. None is open today: the ten found so far
(issue 27) were fixed by the ingest rewrite (text readers, wrappers) and the native decoders (trace.dat).
Budget: about 1.5 min on an idle 2-core machine for the six readers.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_bench_fuzz():
    spec = importlib.util.spec_from_file_location("abtest_bench_fuzz", ROOT / "bench" / "fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fuzz = _load_bench_fuzz()

CI_SEED = 27  # base seed of the CI cases (the bench run uses others)
CI_EXECS = {
    "trace.dat": 1200,
    "perfetto": 2500,
    "ftrace-text": 2500,
    "systrace-html": 2000,
    "atrace": 2000,
    "wrapped": 2500,
}


KNOWN_BUGS = fuzz.KNOWN_BUGS
known_bug = fuzz.known_bug


@pytest.mark.parametrize("reader", fuzz.READERS)
def test_fuzz_reader(reader, tmp_path):
    stats = fuzz.fuzz_reader(
        reader,
        execs=CI_EXECS[reader],
        base_seed=CI_SEED,
        timeout_s=10.0,
        mem_mb=1024,
        rss_mb=1024,
        keep=CI_EXECS[reader],
        workdir=tmp_path,
    )
    assert stats.execs == CI_EXECS[reader]
    assert stats.counts.get("read", 0) + stats.counts.get("rejected", 0) > 0
    unknown = [
        f"{replay} {out.kind} {mutations}: {out.detail.strip()[-600:]}" for replay, mutations, out in stats.failures
    ]
    print(f"{reader}: {stats.as_dict()['counts']} in {stats.seconds:.1f} s; known-bug cases {stats.as_dict()['known']}")
    assert not unknown, f"{len(unknown)} new reader failures (replay with bench/fuzz.py --replay ID):\n" + "\n".join(
        unknown[:10]
    )


# `bench/fuzz.py --analyze`: the same mutants, and `abtest analyze`'s analyses on every one that reads (issue 43
# deliverable 6; the campaign of 3,600 cases is in docs/robustness.md). Budget: ~1-2 min for the six readers.
CI_ANALYSE_SEED = 4343
CI_ANALYSE_EXECS = 50


@pytest.mark.parametrize("reader", fuzz.READERS)
def test_fuzz_reader_and_analyze(reader, tmp_path):
    stats = fuzz.fuzz_reader(
        reader,
        execs=CI_ANALYSE_EXECS,
        base_seed=CI_ANALYSE_SEED,
        timeout_s=20.0,
        mem_mb=1024,
        rss_mb=1024,
        keep=CI_ANALYSE_EXECS,
        workdir=tmp_path,
        analyse=True,
    )
    assert stats.execs == CI_ANALYSE_EXECS
    print(f"{reader} + analyze: {stats.as_dict()['counts']} in {stats.seconds:.1f} s")
    assert stats.counts.get("analysed", 0) + stats.counts.get("rejected", 0) > 0, stats.counts
    unknown = [
        f"{replay} {out.kind} {mutations}: {out.detail.strip()[-600:]}" for replay, mutations, out in stats.failures
    ]
    assert not unknown, f"{len(unknown)} new failures (replay with bench/fuzz.py --analyze --replay ID):\n" + "\n".join(
        unknown[:10]
    )


if KNOWN_BUGS:  # none open now: the test exists only while a reproducer does (no empty, skipped parameter set)

    @pytest.mark.parametrize(
        "bug",
        KNOWN_BUGS,
        ids=[b.replay if ":b64:" not in b.replay else b.replay.split(":b64:")[0] + ":saved-input" for b in KNOWN_BUGS],
    )
    @pytest.mark.xfail(strict=False, reason="known reader bug, see KNOWN_BUGS (issue 27); owned by ingest/native")
    def test_known_reader_bug_reproducer(bug, tmp_path):
        out = fuzz.replay(bug.replay, str(tmp_path / "case"), timeout_s=10.0, mem_mb=1024, rss_mb=1024)
        assert out.kind not in fuzz.FAILURES, f"{bug.reason}: {out.kind}: {out.detail.strip()[-800:]}"


@pytest.mark.parametrize("bug", fuzz.FIXED_BUGS, ids=[b.replay for b in fuzz.FIXED_BUGS])
def test_fixed_reader_bug_stays_fixed(bug, tmp_path):
    """Reproducers of reader bugs the fuzzer found and the ingest work fixed (issue 27 items 1, 2, 5)."""
    out = fuzz.replay(bug.replay, str(tmp_path / "case"), timeout_s=10.0, mem_mb=1024, rss_mb=1024)
    assert out.kind not in fuzz.FAILURES, f"{bug.reason}: {out.kind}: {out.detail.strip()[-800:]}"


@pytest.mark.parametrize("reader", fuzz.READERS)
def test_rejected_mutant_exits_2_naming_the_file(reader, tmp_path):
    """The CLI contract behind the fuzz rule: the first rejected mutant of each reader's CI cases makes
    `abtest trace info --json --no-cache` exit 2 with the file (and where) on stderr, and no traceback."""
    seeds = [fuzz.seed_bytes(s) for s in fuzz.READER_SEEDS[reader]]
    worker = fuzz.Worker(timeout_s=10.0, mem_mb=1024, rss_mb=1024)
    case = tmp_path / "mutant"
    try:
        for i in range(200):
            data, _ = fuzz.make_case(seeds[i % len(seeds)], CI_SEED * 1_000_003 + i)
            case.write_bytes(data)
            if worker.run(str(case)).kind == "rejected":
                break
        else:
            pytest.fail(f"no rejected mutant among the first 200 {reader} cases")
    finally:
        worker.close()
    res = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(case)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert str(case) in res.stderr and "Traceback" not in res.stderr
    assert re.search(r"at (byte offset|line) \d+", res.stderr), res.stderr
