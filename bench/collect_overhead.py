"""Per-iteration collection overhead of `abtest collect` (iteration time minus workload time) on the local
target and over ssh to a local sshd (real OpenSSH on 127.0.0.1), optionally on the QEMU target.

    .venv/bin/python bench/collect_overhead.py [-n 5] [--qemu]

Workload: `sleep 1` (its own duration is measured on the target). Prints per target the median / min /
max of meta.json timings.overhead_s and the phases (start_s = meta + ftrace start, workload_call_s,
stop_pull_s = stop + trace-cmd extract + pull).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.standins.local_sshd import LocalSshd  # noqa: E402


def collect(target: str, store: Path, n: int, *extra: str) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "abtest.cli",
        "collect",
        "--target",
        target,
        "--workload",
        "shell:name=sleep1,cmd='sleep 1'",
        "-n",
        str(n),
        "--store",
        str(store),
        "--no-progress",
        *extra,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"collect on {target} failed: {r.stderr[-2000:]}")
    return [json.loads(p.read_text())["timings"] for p in sorted(store.glob("*/*/*/meta.json"))]


def report(name: str, timings: list[dict]) -> None:
    def stat(key: str) -> str:
        vals = [t[key] for t in timings if key in t]
        return f"{statistics.median(vals):6.3f} [{min(vals):.3f}..{max(vals):.3f}]"

    print(
        f"{name:8s} n={len(timings)}  overhead_s {stat('overhead_s')}  start_s {stat('start_s')}  "
        f"workload_call_s {stat('workload_call_s')}  stop_pull_s {stat('stop_pull_s')}  "
        f"workload_s {stat('workload_s')}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--qemu", action="store_true")
    args = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average before: {' '.join(load)} (cpus: {os.cpu_count()})")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        report("local", collect("localhost", tmp / "local", args.n, "--label", "x", "--cooldown-s", "0"))
        sshd = LocalSshd(tmp / "sshd").start()
        try:
            (tmp / "ssh.toml").write_text(sshd.target_toml())
            report("ssh", collect(str(tmp / "ssh.toml"), tmp / "ssh", args.n, "--label", "x"))
        finally:
            sshd.stop()
        if args.qemu:
            report("qemu", collect("qemu-debian", tmp / "qemu", args.n, "--kernel", "kernelA"))
    print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
