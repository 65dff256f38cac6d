"""Collecting through LAVA, for real (issue 28), at two levels:

(a) `lava-run`, LAVA's dispatcher alone, with a QEMU device dictionary rendered by LAVA's own qemu.jinja2:
    one real job per kernel (Debian 6.1 and 6.12) boots abtest's initramfs under TCG, runs hackbench
    with ftrace, and sends everything back through the job log (artifacts = "log": no network between
    device and abtest); the iterations land in a store that `abtest compare` reads.
(b) the whole LAVA stack on 127.0.0.1 (PostgreSQL, lava-server under gunicorn, lava-publisher,
    lava-scheduler, one lava-worker with two QEMU devices; tests/lava_stack.py): an A/B of 6.1 vs 6.12,
    2 iterations each, submitted through the REST API, images fetched by the worker over HTTP from
    abtest's receiver, traces uploaded to it from the devices; then `abtest compare`. Every process
    the test started is stopped by PID, also on failure, and checked gone.

Both need the Debian packages `make setup` installs (lava-server, lava-dispatcher, postgresql,
qemu-system-x86) and root (lava-run refuses to run otherwise). The kernels come from apt through
abtest.targets.qemu (cached in ~/.cache/abtest/qemu, shared with the qemu target tests).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lava_stack import LavaStack, stack_missing

from abtest import Trace

ROOT = Path(__file__).resolve().parent.parent
DICTIONARY = ROOT / "tests" / "data" / "lava" / "qemu-tcg.jinja2"
KERNELS = """
[trace]
buffer_size_kb = 2048
clock = "boot"

[boot.kernelA]
package = "linux-image-6.1.0-*-amd64"
expect_release = "6.1.*"

[boot.kernelB]
package = "linux-image-6.12.*+deb12-amd64"
expect_release = "6.12.*"
"""
WORKLOAD = "hackbench:groups=1,loops=20,timeout_s=300"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(stack_missing() is not None, reason=str(stack_missing()))]


def _abtest(args: list[str], env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _our_processes(marker: str) -> list[str]:
    """Command lines of living processes that mention `marker` (a path only this test uses)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                out.append(f"{d.name}: {cmd[:200]}")
    return out


def _check_iteration(d: Path, release_glob: str) -> dict:
    meta = json.loads((d / "meta.json").read_text())
    assert (d / ".complete").is_file()
    assert Path(meta["kernel"]["release"]).match(release_glob), meta["kernel"]["release"]
    assert meta["target"]["kind"] == "lava" and meta["target"]["emulated"] is True
    lab = meta["lab"]
    assert lab["health"] == "Complete" and isinstance(lab["job_id"], int) and lab["device"]
    files = lab["files"]
    assert files["trace.dat"]["size"] == (d / "trace.dat").stat().st_size
    t = Trace(d / "trace.dat")
    assert t.events.get("sched_switch", 0) > 100
    assert meta["trace"]["lost_events"] == 0 or meta.get("warnings")
    markers = t.df("marker")["text"].to_list()
    assert any("abtest_workload_begin" in m for m in markers) and any("abtest_workload_end" in m for m in markers)
    assert json.loads((d / "metrics.json").read_text())["metrics"]["hackbench_time_s"]["value"] > 0
    # the stored LAVA log keeps the console but not the base64 of the files kept beside it
    assert "base64 data for meta.txt left out" in (d / "lava-job.log").read_text()
    definition = (d / "lava-job.yaml").read_text()
    assert not re.search(r"/upload/[0-9a-f]{32}", definition)  # upload tokens redacted
    if lab["transport"] == "upload":
        assert "/upload/<token>" in definition
    return meta


def _compare(store: Path) -> dict:
    r = _abtest(["compare", "kernelA", "kernelB", "--store", str(store), "--format", "json"], timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def test_lava_run_jobs_land_in_a_store_that_compare_reads(tmp_path):
    store = tmp_path / "store"
    target = tmp_path / "lava-run.toml"
    target.write_text(
        f'name = "lava-run-qemu"\nkind = "qemu"\n[lab]\nurl = "lava-run:{DICTIONARY}"\n'
        f'artifacts = "log"\nretries = 1\njob_timeout_min = 10\nmax_in_flight = 2\n' + KERNELS
    )
    t0 = time.monotonic()
    # a smaller hackbench: every byte of the trace crosses the emulated serial console (~0.1 MB/s)
    r = _abtest(
        [
            "collect",
            "--target",
            str(target),
            "--kernel",
            "kernelA",
            "--kernel",
            "kernelB",
            "--workload",
            "hackbench:groups=1,loops=5,timeout_s=300",
            "-n",
            "2",
            "--store",
            str(store),
            "--no-progress",
            "--json",
        ]
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["done"] == 4 and not summary["failed"], summary
    for label, glob in (("kernelA", "6.1.*"), ("kernelB", "6.12.*")):
        for it in (1, 2):
            meta = _check_iteration(store / label / "hackbench" / str(it), glob)
            assert meta["lab"]["url"] == f"lava-run:{DICTIONARY}" and meta["lab"]["transport"] == "log"
            assert meta["lab"]["files"]["trace.dat"]["via"] == "log"  # no network between device and abtest
    cmp = _compare(store)
    w = cmp["workloads"][0]
    assert (w["workload"], w["n_a"], w["n_b"]) == ("hackbench", 2, 2)
    assert {m["name"] for m in w["metrics"]} >= {"hackbench_time_s", "duration_s"}
    assert not _our_processes(str(store)), "lava-run or qemu left running"
    jobs = [(j["job_id"], j["job_s"]) for j in summary["jobs"]]
    print(f"lava-run level: 4 jobs, 2 at a time, in {wall:.1f} s; jobs: {jobs}")


@pytest.fixture
def lava_stack():
    """The private LAVA stack; stopped (every PID) whatever happens in the test."""
    stack = LavaStack(["qemu01", "qemu02"], DICTIONARY.read_text())
    try:
        stack.start()
        yield stack
    finally:
        pids = stack.pids()
        stack.stop()
        left = [
            p
            for p in pids
            if Path(f"/proc/{p}").exists() and b"zombie" not in Path(f"/proc/{p}/status").read_bytes().lower()
        ]
        assert not left, f"LAVA stack processes left running: {left}"


def test_whole_lava_stack_ab_of_two_kernels(lava_stack, tmp_path):
    stack = lava_stack
    print(f"LAVA stack up: {json.dumps({k: round(v, 1) for k, v in stack.timings.items()})}")
    store = tmp_path / "store"
    target = tmp_path / "lab.toml"
    target.write_text(
        'name = "lab-qemu"\nkind = "qemu"\n[lab]\ntoken_env = "ABTEST_E2E_LAVA_TOKEN"\n'
        'device_type = "qemu"\nartifacts = "upload"\nimages = "http"\nretries = 2\n'
        "job_timeout_min = 10\npoll_s = 1.0\n" + KERNELS
    )
    argv = [
        sys.executable,
        "-m",
        "abtest.cli",
        "collect",
        "--target",
        str(target),
        "--lab",
        stack.url,
        "--kernel",
        "kernelA",
        "--kernel",
        "kernelB",
        "--workload",
        WORKLOAD,
        "-n",
        "2",
        "--store",
        str(store),
        "--no-progress",
        "--json",
    ]
    env = {**os.environ, "ABTEST_E2E_LAVA_TOKEN": stack.token}
    # 1. interrupted (Ctrl-C) once jobs run: abtest cancels its jobs in the lab and keeps nothing of them
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = store / ".lab" / "journal.json"
    try:
        running = []
        while time.monotonic() - t0 < 300 and proc.poll() is None and not running:
            time.sleep(1)
            if journal.exists():
                ids = [a["job_id"] for a in json.loads(journal.read_text())["attempts"] if a["job_id"]]
                running = [i for i in ids if stack.api(f"jobs/{i}/")["state"] == "Running"]
        assert running, "no job reached Running"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    canceled = [a for a in json.loads(journal.read_text())["attempts"] if a["state"] == "canceled"]
    assert {a["job_id"] for a in canceled} >= set(running)
    t1 = time.monotonic()
    while time.monotonic() - t1 < 120:
        states = {
            a["job_id"]: (lambda j: (j["state"], j["health"]))(stack.api(f"jobs/{a['job_id']}/")) for a in canceled
        }
        if all(st == "Finished" for st, _ in states.values()):
            break
        time.sleep(1)
    assert all(st == ("Finished", "Canceled") for st in states.values()), states
    assert not list(store.glob("kernel*/hackbench/*/.complete"))
    interrupted_s = time.monotonic() - t0
    # 2. --resume: everything is resubmitted and collected
    t0 = time.monotonic()
    r = _abtest(argv[3:] + ["--resume"], env={"ABTEST_E2E_LAVA_TOKEN": stack.token})
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:] + stack.log_tail("worker")
    summary = json.loads(r.stdout)
    assert summary["done"] == 4 and not summary["failed"], summary
    job_ids = set()
    for label, glob in (("kernelA", "6.1.*"), ("kernelB", "6.12.*")):
        for it in (1, 2):
            meta = _check_iteration(store / label / "hackbench" / str(it), glob)
            lab = meta["lab"]
            assert lab["url"] == stack.url and lab["worker"] == "worker1" and lab["device"] in ("qemu01", "qemu02")
            assert lab["files"]["trace.dat"]["via"] == "upload" and lab["images"] == "http"
            assert lab["job_url"] == f"{stack.url.rstrip('/')}/scheduler/job/{lab['job_id']}"
            # the lab agrees: that job ran on that device and completed
            job = stack.api(f"jobs/{lab['job_id']}/")
            assert (job["state"], job["health"], job["actual_device"]) == ("Finished", "Complete", lab["device"])
            job_ids.add(lab["job_id"])
            # the token never reaches the store
            for f in (store / label / "hackbench" / str(it)).iterdir():
                assert stack.token not in f.read_text(errors="replace"), f
    assert len(job_ids) == 4 and not job_ids & {a["job_id"] for a in canceled}  # canceled jobs never mixed in
    assert stack.token not in (store / ".lab" / "journal.json").read_text()
    cmp = _compare(store)
    w = cmp["workloads"][0]
    assert (w["workload"], w["n_a"], w["n_b"]) == ("hackbench", 2, 2)
    table = {m["name"]: m for m in w["metrics"]}
    assert table["hackbench_time_s"]["a"]["n"] == 2 and table["hackbench_time_s"]["b"]["n"] == 2
    md = _abtest(["compare", "kernelA", "kernelB", "--store", str(store), "--format", "markdown"], timeout=300)
    print(
        f"whole stack: interrupted run {interrupted_s:.1f} s ({len(canceled)} jobs canceled), then 4 jobs in "
        f"{wall:.1f} s (collect --resume; stack start excluded); jobs:"
    )
    for j in sorted(summary["jobs"], key=lambda j: j["job_id"]):
        print(
            f"  job {j['job_id']} {j['label']}/{j['iteration']} on {j['device']}: queued {j['queue_s']} s, "
            f"ran {j['job_s']} s"
        )
    lines = md.stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("### Summary"))
    end = next(i for i in range(start + 2, len(lines)) if not lines[i].strip())
    print("\n".join(lines[start:end]))
