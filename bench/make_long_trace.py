#!/usr/bin/env python3
"""Build a long trace.dat from a real recording: its per-CPU ring-buffer pages repeated N times, each copy
shifted in time by the recording's length plus a gap (a concatenation of real recordings, time-shifted).

    python bench/make_long_trace.py [--source FILE] [--events 100000000] [--gap-s 3] [--out FILE] [--v6]

The source (default: the analysis bench's trace, bench/ingest.py) is converted to an uncompressed trace.dat v6
with `trace-cmd convert`; the copies are written page by page: a page's header timestamp (the base of its
events' deltas) moves by k x (length + gap) for copy k, events are untouched (the copier checks that no page
holds an absolute-timestamp event, which would need shifting too). The CPU table of the flyrecord section is
rewritten for the longer data. Unless --v6, the result is converted to v7 with zstd (as the recording was).
Every copy has the same tasks (pids, names) as the source: a task of copy k runs again in copy k+1.
Check it with `trace-cmd report --stat`/`abtest trace info`.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RB_TIME_STAMP = 31  # ring buffer event type with an absolute timestamp
RB_TIME_EXTEND = 30
RB_PADDING = 29


def flyrecord_cpus(path: Path) -> list[tuple[int, int]]:
    """(offset, size) of each CPU's data, from `trace-cmd dump --flyrecord`."""
    out = subprocess.run(
        ["trace-cmd", "dump", "--flyrecord", str(path)], capture_output=True, text=True, check=True
    ).stdout
    cpus = [(int(o), int(s)) for o, s in re.findall(r"^\s*(\d+)\s+(\d+)\s+\[offset, size of cpu \d+\]", out, re.M)]
    if not cpus:
        raise SystemExit(f"no flyrecord CPU table in `trace-cmd dump --flyrecord {path}`:\n{out[:500]}")
    return cpus


def check_no_absolute_timestamps(data: bytes, page_size: int) -> int:
    """Walk every event of every page; refuse absolute-timestamp events. Returns the number of events."""
    n = 0
    for p in range(0, len(data), page_size):
        page = data[p : p + page_size]
        commit = struct.unpack_from("<Q", page, 8)[0] & ((1 << 30) - 1)  # bytes of data (flags in the top bits)
        pos, end = 16, 16 + commit
        while pos < end:
            (h,) = struct.unpack_from("<I", page, pos)
            type_len = h & 0x1F
            if type_len == RB_TIME_STAMP:
                raise SystemExit(f"page at offset {p}: an absolute-timestamp event; copies cannot be shifted")
            if type_len == RB_PADDING:
                if (h >> 5) == 0:  # padding up to the end of the page
                    break
                pos += 4 + struct.unpack_from("<I", page, pos + 4)[0]
            elif type_len == RB_TIME_EXTEND:
                pos += 8
            elif type_len == 0:
                pos += 4 + struct.unpack_from("<I", page, pos + 4)[0]
                n += 1
            else:
                pos += 4 + 4 * type_len
                n += 1
    return n


def build(source: Path, out: Path, copies: int, shift_ns: int, v6: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="abtest-long-", dir=out.parent))
    try:
        src6 = work / "source-v6.dat"
        subprocess.run(
            [
                "trace-cmd",
                "convert",
                "--file-version",
                "6",
                "--compression",
                "none",
                "-i",
                str(source),
                "-o",
                str(src6),
            ],
            check=True,
            capture_output=True,
        )
        cpus = flyrecord_cpus(src6)
        raw = src6.read_bytes()
        # header: \x17\x08\x44 "tracing" version "6\0", endianness (1 byte), long size (1 byte), page size (u32)
        ver_end = raw.index(b"\0", 10)
        page_size = struct.unpack_from("<I", raw, ver_end + 3)[0]
        table = b"".join(struct.pack("<QQ", o, s) for o, s in cpus)
        at = raw.index(table)
        first = cpus[0][0]
        events = 0
        for o, s in cpus:
            if s % page_size:
                raise SystemExit(f"CPU data of {s} bytes is not a whole number of {page_size}-byte pages")
            events += check_no_absolute_timestamps(raw[o : o + s], page_size)
        offsets, off = [], first
        for _, s in cpus:
            offsets.append((off, s * copies))
            off += s * copies
        head = bytearray(raw[:first])
        head[at : at + len(table)] = b"".join(struct.pack("<QQ", o, s) for o, s in offsets)
        dest = work / "long-v6.dat" if not v6 else out
        with open(dest, "wb") as f:
            f.write(head)
            for o, s in cpus:
                pages = np.frombuffer(raw[o : o + s], dtype=np.uint8).reshape(-1, page_size)
                for k in range(copies):
                    shifted = pages.copy()
                    ts = shifted[:, :8].copy().view("<u8")
                    ts += np.uint64(k * shift_ns)
                    shifted[:, :8] = ts.view(np.uint8).reshape(-1, 8)
                    f.write(shifted.tobytes())
        print(
            f"{source}: {events:,} ring-buffer events on {len(cpus)} CPUs, x {copies} copies "
            f"({copies * events:,} events), each shifted by {shift_ns / 1e9:.3f} s",
            file=sys.stderr,
        )
        if not v6:
            res = subprocess.run(
                [
                    "trace-cmd",
                    "convert",
                    "--file-version",
                    "7",
                    "--compression",
                    "zstd",
                    "-i",
                    str(dest),
                    "-o",
                    str(out),
                ],
                capture_output=True,
                text=True,
            )
            if res.returncode:  # trace-cmd 3.1.6 refuses CPU sections of more than 2 GiB here (EINVAL)
                print(
                    f"trace-cmd convert to v7 failed ({res.returncode}: {res.stderr.strip()[-200:]}); "
                    "keeping the uncompressed v6 file",
                    file=sys.stderr,
                )
                shutil.move(dest, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path)
    ap.add_argument("--events", type=int, default=100_000_000, help="at least this many events")
    ap.add_argument("--gap-s", type=float, default=3.0, help="idle time between two copies (s)")
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "abtest" / "bench" / "long-100M.dat")
    ap.add_argument("--v6", action="store_true", help="leave the result as an uncompressed v6 file")
    args = ap.parse_args()
    if args.source is None:
        from ingest import BENCH_TRACE, ensure_bench_trace

        args.source, _ = ensure_bench_trace(BENCH_TRACE)
    from abtest.trace.readers import read_trace

    meta = read_trace(args.source).meta
    n = sum(meta["events"].values())
    copies = math.ceil(args.events / n)
    shift = int(meta["end_ns"] - meta["start_ns"] + args.gap_s * 1e9)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    build(args.source, args.out, copies, shift, args.v6)
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 2**20:.0f} MB): {copies} copies of {args.source} "
        f"({n:,} events each)"
    )


if __name__ == "__main__":
    main()
