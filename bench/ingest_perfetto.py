"""Throughput of abtest's perfetto protobuf reader, with a reference decoder measured in the same run.

Usage: .venv/bin/python bench/ingest_perfetto.py [--repeat N] [--target-mb MB] [--traces DIR]

For each perfetto trace in ../shared/traces, and for one larger file made by concatenating them
(a concatenation of whole Trace files is itself a valid Trace: `repeated TracePacket packet = 1`),
it prints, best of N runs, in-process (interpreter start-up and imports excluded):
  - native:    abtest._native.perfetto_decode (the compiled decoder, one thread: Arrow tables + metadata)
  - decode:    abtest.trace.perfetto.read (the above + polars raw tables)
  - read_trace: abtest.trace.readers.read_trace (the above + canonicalisation, what `Trace()` runs)
  - reference: the protobuf runtime's parse of the same bytes with perfetto's generated classes
    (perfetto_trace_pb2.Trace.FromString; upb, C) - parsing only, no tables - when the perfetto
    package is installed. Perfetto's trace_processor cannot run here (it downloads its engine).
MB/s is wall time; "cpu" divides by the process's CPU time over all its threads instead, which
stays meaningful when other work loads the machine (wall time then includes waiting for a core).
The concatenated file repeats timestamps and is only a throughput measurement, not a trace to analyse.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = ROOT.parent / "shared" / "traces"
SHARED = [
    "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace",
    "systing/trace.pb",
    "nowinandroid/trace.perfetto-trace",
]


def _best(fn, repeat: int) -> tuple[float, float, object]:
    """(best wall s, best process-CPU s (all threads), last result) over `repeat` runs."""
    wall = cpu = float("inf")
    result = None
    for _ in range(repeat):
        result = None
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        c1, t1 = time.process_time(), time.perf_counter()
        wall, cpu = min(wall, t1 - t0), min(cpu, c1 - c0)
    return wall, cpu, result


def _row(label: str, size: int, events: int, wall: float, cpu: float) -> str:
    return (
        f"  {label:<11} {wall * 1e3:9.1f} ms  {size / wall / 1e6:8.1f} MB/s  (cpu {size / cpu / 1e6:7.1f} MB/s)"
        f"  {events / wall / 1e6:7.2f} M events/s"
    )


def bench_file(path: Path, repeat: int, note: str = "") -> dict:
    from abtest.trace import perfetto
    from abtest.trace.readers import read_trace

    data = path.read_bytes()
    size = len(data)
    from abtest import _native
    from abtest.trace import limits

    lim = limits.current()
    perfetto.read(path, data)  # warm-up: imports
    w_nat, c_nat, _ = _best(
        lambda: _native.perfetto_decode(data, lim.inflate_ratio, lim.inflate_floor, lim.inflated_bytes), repeat
    )
    w_dec, c_dec, (raw, _meta) = _best(lambda: perfetto.read(path, data), repeat)
    events = sum(df.height for df in raw.values())
    del raw
    w_all, c_all, _ = _best(lambda: read_trace(path), repeat)
    print(f"{path.name}{note}: {size / 1e6:.1f} MB, {events:,} events (rows of all raw tables)")
    print(_row("native", size, events, w_nat, c_nat) + "   [compiled decoder -> Arrow tables + meta]")
    print(_row("decode", size, events, w_dec, c_dec))
    print(_row("read_trace", size, events, w_all, c_all))
    out = {
        "size": size,
        "events": events,
        "native_wall": w_nat,
        "native_cpu": c_nat,
        "decode_wall": w_dec,
        "decode_cpu": c_dec,
        "read_trace_wall": w_all,
        "read_trace_cpu": c_all,
    }
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError:
        print("  reference   (perfetto package not installed: no reference measurement)")
        return out
    w_ref, c_ref, _ = _best(lambda: pb.Trace.FromString(data), repeat)
    print(_row("reference", size, events, w_ref, c_ref) + "   [protobuf parse only, no tables]")
    print(f"  ratio       decode is {w_ref / w_dec:.1f}x the reference parse; read_trace {w_ref / w_all:.1f}x")
    out["reference_wall"] = w_ref
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="runs per measurement on the concatenated file (best is kept; shared traces: >= 20)",
    )
    ap.add_argument("--target-mb", type=float, default=128, help="size of the concatenated file, MB")
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = ap.parse_args()

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; best of {args.repeat}")
    files = [args.traces / rel for rel in SHARED if (args.traces / rel).exists()]
    for f in files:  # small files: more runs, a few ms each (fixed costs dominate and load adds noise)
        bench_file(f, max(args.repeat, 20))

    blob = b"".join(f.read_bytes() for f in files)
    copies = max(1, int(args.target_mb * 1e6 // len(blob)))
    with tempfile.TemporaryDirectory(prefix="abtest-bench-") as tmp:
        big = Path(tmp) / "concatenated.perfetto-trace"
        with open(big, "wb") as f:
            for _ in range(copies):
                f.write(blob)
        res = bench_file(
            big,
            args.repeat,
            note=f" ({copies} copies of the {len(files)} shared traces concatenated: "
            f"a valid Trace, throughput measurement only)",
        )
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {rss_mb:.0f} MB; load average after: {os.getloadavg()[0]:.2f}")
    mb = res["size"] / 1e6
    print(
        f"SUMMARY on {mb:.0f} MB (target >= 200 MB/s), wall / cpu: "
        f"native {mb / res['native_wall']:.0f} / {mb / res['native_cpu']:.0f} MB/s, "
        f"decode {mb / res['decode_wall']:.0f} / {mb / res['decode_cpu']:.0f} MB/s, "
        f"read_trace {mb / res['read_trace_wall']:.0f} / {mb / res['read_trace_cpu']:.0f} MB/s"
    )


if __name__ == "__main__":
    main()
