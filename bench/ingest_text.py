"""Throughput of abtest's ftrace text reader, with reference parsers measured in the same run.

Usage: .venv/bin/python bench/ingest_text.py [--repeat N] [--target-mb MB] [--traces DIR]

Inputs (built in a temp dir from the real traces in ../shared/traces, each >= --target-mb):
  - trace-cmd report: `trace-cmd report` text of the three x86-vm trace.dat files (plugin format:
    ``comm:pid [prio] S ==> ...``), concatenated until the size is reached;
  - tracefs text: the Android tracefs text tracecompass/trace-android-sched (flags column,
    kernel-format key=value payloads), its event lines repeated until the size is reached.
Repeated lines repeat timestamps: these files measure throughput only.

For each input it prints, best of N runs, in-process (interpreter start-up and imports excluded):
  - abtest: abtest.trace.ftrace_text.read -> raw polars tables (every event, every field typed);
  - python re loop: a straightforward per-line `re.match` parser into Python lists (the way most
    Python ftrace-text readers work), fields left as strings - the reference for ratio;
  - trace-cmd report: time for `trace-cmd report` to *produce* the x86 text from the trace.dat files
    (events/s of the reference decoder of the same events; different work, shown for scale).
"cpu" is the calling process's CPU time (user+sys, all threads): robust to other load on the machine.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from abtest.trace import ftrace_text  # noqa: E402

X86 = [
    "x86-vm/x86-menu-hackbench-cyclictest.dat",
    "x86-vm/x86-ladder-hackbench-cyclictest.dat",
    "x86-vm/x86-haltpoll-hackbench-cyclictest.dat",
]
ANDROID = "tracecompass/trace-android-sched"

_LINE = re.compile(r"^\s*(.*?)-(\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(\d+)\]\s+(?:\S+\s+)?(\d+)\.(\d+):\s+(\w+):\s*(.*)$")
_PAIR = re.compile(r"(\w+)=(\S+)")


def python_re_loop(data: bytes) -> int:
    """Reference: per-line regex, fields as dict of strings per event; returns the event count."""
    tables: dict[str, list] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        comm, pid, cpu, sec, frac, event, payload = m.groups()
        tables.setdefault(event, []).append(
            (int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")), int(cpu), int(pid), comm, dict(_PAIR.findall(payload)))
        )
    return sum(len(v) for v in tables.values())


def _best(fn, repeat: int) -> tuple[float, float, object]:
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def build_inputs(traces: Path, tmp: Path, target: int) -> tuple[dict[str, Path], float, int]:
    """-> input files, seconds trace-cmd report took for one pass over the x86 files, events in it."""
    reports, seconds, events = [], 0.0, 0
    for name in X86:
        t0 = time.perf_counter()
        out = subprocess.run(["trace-cmd", "report", str(traces / name)], capture_output=True, check=True).stdout
        seconds += time.perf_counter() - t0
        events += sum(1 for ln in out.splitlines() if b"]" in ln and b": " in ln)
        reports.append(out)
    tc = b"".join(reports)
    tc_path = tmp / "tracecmd-report.txt"
    tc_path.write_bytes(tc * max(1, -(-target // len(tc))))
    lines = (traces / ANDROID).read_bytes().splitlines(keepends=True)
    header = [ln for ln in lines if ln.startswith(b"#")]
    body = b"".join(ln for ln in lines if not ln.startswith(b"#"))
    fs_path = tmp / "tracefs.txt"
    fs_path.write_bytes(b"".join(header) + body * max(1, -(-target // len(body))))
    return {"trace-cmd report text": tc_path, "tracefs text": fs_path}, seconds, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target-mb", type=float, default=10.0)
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="abtest-bench-text-") as tmp:
        inputs, tc_seconds, tc_events = build_inputs(args.traces, Path(tmp), int(args.target_mb * 1e6))
        print(
            f"trace-cmd report (reference decoder, trace.dat -> text): {tc_events} events in {tc_seconds:.3f} s "
            f"= {tc_events / tc_seconds / 1e6:.2f} M events/s"
        )
        for label, path in inputs.items():
            data = path.read_bytes()
            mb = len(data) / 1e6
            wall, cpu, (raw, _meta) = _best(lambda p=path, d=data: ftrace_text.read(p, d, "ftrace-text"), args.repeat)
            n = sum(df.height for df in raw.values())
            ref_wall, ref_cpu, ref_n = _best(lambda d=data: python_re_loop(d), args.repeat)
            print(f"\n{label}: {path.name} {mb:.1f} MB, {n} events")
            print(
                f"  abtest ftrace_text.read : {wall:.3f} s wall ({mb / wall:.1f} MB/s, {n / wall / 1e6:.2f} M ev/s), "
                f"{cpu:.3f} s cpu ({mb / cpu:.1f} MB/s)"
            )
            print(
                f"  python re loop (ref)    : {ref_wall:.3f} s wall ({mb / ref_wall:.1f} MB/s, "
                f"{ref_n / ref_wall / 1e6:.2f} M ev/s), {ref_cpu:.3f} s cpu; events {ref_n}"
            )
            print(f"  ratio abtest / re loop  : {ref_wall / wall:.1f}x wall, {ref_cpu / cpu:.1f}x cpu")
            print(f"  ratio abtest / trace-cmd report events/s: {(n / wall) / (tc_events / tc_seconds):.1f}x")
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\npeak RSS of this process: {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
