"""Mutation fuzzing of every trace reader, over mutants of the real shared traces.

    python bench/fuzz.py --execs 100000                 # every reader, 100,000 cases each
    python bench/fuzz.py --reader perfetto --seconds 600
    python bench/fuzz.py --replay trace.dat:1234:987654  # rerun one case (reader:seed-index:case-seed)
    python bench/fuzz.py --execs 600 --analyze           # every reader, then `abtest analyze` on what reads

Readers (what `abtest trace info` dispatches to): trace.dat, perfetto, ftrace text, systrace HTML, atrace
(plain and `atrace -z`), and the gzip/zip/zstd wrappers around them. Seeds are the real traces in
../shared/traces (MANIFEST.md); the wrapper seeds are made here from them (gzip, zip, zstd of a real trace).

Mutations (seeded, reproducible from reader, seed index and case seed): truncation, byte flips, zeroed ranges,
duplicated ranges, swapped ranges, huge length fields (0xFFFFFFFF, 0x7FFFFFFF, 2^63 and 2^64-1 written as
little-endian u32/u64 at a random aligned offset, or a 10-byte varint for protobuf), and 1-4 of them stacked.

Each case runs `abtest.trace.readers.read_trace` (the decoder, canonicalisation and the event counts `trace info`
prints) in a worker process (`--worker`: imports and warms up once, then reads case after case) whose address
space is capped (RLIMIT_AS = its warm size + --mem-mb), with a wall-clock bound per case (--timeout-s: the worker
is killed and replaced) and a bound on how far the peak RSS rises during the case (--rss-mb, VmHWM reset through
/proc/self/clear_refs before each case). A worker that dies or runs out of memory is replaced. The rule: a case passes
when the
reader returns, or raises TraceFormatError naming the file and an offset or line (the bad-input error `abtest`
turns into exit 2). Any other exception, a signal (abort, segfault), a timeout, a MemoryError / failed allocation
under the limit, or a peak RSS over --rss-mb is a failure, printed with its replay id. A timeout or a signal is
confirmed by running the case again in a fresh worker; one that does not repeat (a stalled machine, a signal
sent from outside) is counted as `stall`, not as a failure.

With --analyze, a case that reads is also analysed as `abtest analyze` does (`analyze_dict`: every analysis
of the registry, one thread): an analysis that fails on the mutant (listed under "failed", which `abtest
analyze` reports as exit 2 and "analysis X failed") or an exception out of analyze_dict is a failure of kind
`analysis`; the time and RSS bounds cover the read and the analysis together. Cases whose analysis ran count
as `analysed`, cases rejected by the reader as `rejected`. The worker's cap is then on its data segment
(RLIMIT_DATA, warm size + --mem-mb: the perfetto frame timeline's wasm engine reserves GiBs of address space
that it does not use), and a failed case is rerun in a fresh worker (one that does not repeat counts as `stall`).
One worker analyses case after case, as a comparison's worker does: memory one case leaves behind shows.

Output: per reader the number of executions, passes (read / rejected), failures by kind, executions per second.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import json
import os
import random
import re
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from shared_data import TRACES  # noqa: E402  ../shared/traces beside the checkout

# reader -> real seed traces (paths under ../shared/traces); wrapper seeds are built from the named inner file
READER_SEEDS: dict[str, tuple[str, ...]] = {
    "trace.dat": (
        "trappy/trace.dat",
        "trappy/trace_idle.dat",
        "lisa/sched_load-trace.dat",
        "x86-vm/x86-menu-hackbench-cyclictest.dat",
        "langraph/trace.dat",
    ),
    "perfetto": (
        "systing/trace.pb",
        "nowinandroid/trace.perfetto-trace",
        "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace",
    ),
    "ftrace-text": (
        "trappy/trace_sched.txt",
        "trappy/trace_idle_unsorted.txt",
        "trappy/raw_trace.txt",
        "trappy/trace_equals.txt",
        "trappy/trace_failed_to_parse.txt",
        "catapult/android_systrace.txt",
        "tracecompass/trace-android-sched",
        "tracecompass/trace-func-graph",
        "trappy/trace_filesystem.txt",
    ),
    "systrace-html": (
        "trappy/trace_systrace.html",
        "trappy/trace_legacy_systrace.html",
        "catapult/trivial_systrace.html",
        "catapult/counter_tracks.html",
    ),
    "atrace": ("catapult/compressed_atrace_data.txt", "catapult/atrace_data", "catapult/atrace_data_raw"),
    "wrapped": (
        "gzip:trappy/trace_sched.txt",
        "zip:trappy/trace_idle_unsorted.txt",
        "gzip:trappy/trace.dat",
        "zip:systing/trace.pb",
        "zstd:trappy/trace_equals.txt",
    ),
}
READERS = tuple(READER_SEEDS)
HUGE_U32 = (0xFFFFFFFF, 0x7FFFFFFF, 0x80000000)
HUGE_U64 = (2**63, 2**64 - 1, 2**63 - 1, 0xFFFFFFFF)

EXIT_OK, EXIT_REJECTED, EXIT_UNCLEAR, EXIT_OTHER, EXIT_MEMORY = 0, 2, 3, 4, 5


def seed_bytes(spec: str) -> bytes:
    """Bytes of one seed: a shared trace, or `gzip:|zip:|zstd:<trace>` wrapped here."""
    wrap, _, name = spec.rpartition(":") if ":" in spec else ("", "", spec)
    data = (TRACES / name).read_bytes()
    if wrap == "gzip":
        return gzip.compress(data, mtime=0)
    if wrap == "zip":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(Path(name).name, data)
        return buf.getvalue()
    if wrap == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return data


# -- known reader bugs (issue 27; owned by the ingest and native rewrites) --------------------------------
# A failure matching one is counted apart ("known"); tests/test_fuzz_readers.py keeps one xfail reproducer
# per entry. Remove an entry when its reproducer passes.
@dataclass(frozen=True)
class KnownBug:
    readers: tuple[str, ...]
    kind: str  # fuzz outcome kind
    pattern: str  # regex on the failure detail
    owner: str
    reason: str
    replay: str  # one reproducer: reader:seed-index:case-seed, or reader:b64:<bytes> (found by fuzz_atheris.py)

    def matches(self, reader: str, kind: str, detail: str) -> bool:
        return reader in self.readers and kind == self.kind and re.search(self.pattern, detail) is not None


# Reader bugs the fuzzer found and that are fixed: their reproducers must keep passing (tests/test_fuzz_readers.py).
FIXED_BUGS = (
    KnownBug(
        ("ftrace-text", "systrace-html", "atrace"),
        "exception",
        r"(?s)builtins\.TypeError.*'<' not supported between instances of '(NoneType|int)' and '(int|NoneType)'",
        "ingest",
        "text reader: a mangled line (here a u32 0xffffffff written into it) raises TypeError from a "
        "comparison with None instead of being counted in import_errors (issue 27 item 1 class)",
        "ftrace-text:4:1000430",
    ),
    KnownBug(
        ("wrapped",),
        "exception",
        r"zipfile\.BadZipFile|zlib\.error|Error -\d+ while decompressing|zipfile\.py|in _unwrap",
        "ingest",
        "zip wrapper: a corrupt archive or member raises from zipfile past the reader (BadZipFile, zlib.error, "
        "NotImplementedError, ValueError: negative seek, IndexError from an empty member name; issue 27 item 5)",
        "wrapped:3:1000006",
    ),
    KnownBug(
        ("wrapped",),
        "unclear-error",
        r"corrupt or truncated gzip stream|corrupt zstd stream|corrupt zip archive|zip archive holds no trace|"
        r"wrapper holds no recognisable trace",
        "ingest",
        "gzip/zip/zstd wrapper: the TraceFormatError names the file but no offset (readers._unwrap)",
        "wrapped:2:1000005",
    ),
    KnownBug(
        ("ftrace-text", "systrace-html", "atrace", "wrapped"),
        "exception",
        r"in _fill_span",
        "ingest",
        "readers._fill_span: a table whose ts values are all null (a text line with a mangled timestamp) "
        "makes int(min(...)) raise TypeError (found by bench/fuzz_atheris.py first, then 4 times in the "
        "100,000-case bench run)",
        "ftrace-text:8:100026552",
    ),
    KnownBug(
        ("ftrace-text", "systrace-html", "atrace", "wrapped"),
        "exception",
        r"text_lines\.py:\d+ in _event_frame",
        "ingest",
        "text reader: a number that does not fit its column (1111111111111111662 for an i32) fails the strict "
        "cast in text_lines._event_frame (issue 27 item 2)",
        "wrapped:4:100027949",
    ),
    # the five trace.dat bugs, fixed by the native decoder rewrite (issue 26; issue 27 items 7-9)
    KnownBug(
        ("trace.dat", "wrapped"),
        "exception",
        r"(?s)builtins\.ValueError.*tracedat_format\.py.*(unparsable field line|invalid literal for int)",
        "native",
        "trace.dat header: a malformed event format (field line, id) raises ValueError from "
        "tracedat_format.py instead of TraceFormatError (issue 27 item 8)",
        "trace.dat:0:27000821",
    ),
    KnownBug(
        ("trace.dat", "wrapped"),
        "exception",
        r"_constant_strings",
        "native",
        "trace.dat: a printk format pointer column that is not an address (a mangled format or a "
        "string field) fails the strict UInt64 cast in tracedat._constant_strings",
        "trace.dat:0:100015545",
    ),
    KnownBug(
        ("trace.dat", "wrapped"),
        "exception",
        r"(?s)builtins\.OverflowError.*int too big to convert",
        "native",
        "trace.dat: a header value past 64 bits' reach in Python is handed to _native.tracedat_fused, which "
        "raises OverflowError instead of TraceFormatError",
        "trace.dat:4:100072934",
    ),
    KnownBug(
        ("trace.dat", "wrapped"),
        "signal",
        r"memory allocation of \d+ bytes failed",
        "native",
        "trace.dat v7: the Rust inflater trusts a chunk's size field for its allocation (2 GiB here) and "
        "aborts under the memory bound (issue 27 item 7)",
        "trace.dat:4:100023754",
    ),
    KnownBug(
        ("trace.dat",),
        "unclear-error",
        r"compressed chunk \d+, byte \d+|no HEADER_INFO option|unsupported compression algorithm",
        "native",
        "trace.dat v7: errors inside a compressed chunk name the chunk and the byte in the inflated chunk "
        "but set no file offset; a missing HEADER_INFO option and an unknown compression name (found by "
        "bench/fuzz_atheris.py) set none either",
        "trace.dat:4:1000512",
    ),
    KnownBug(
        ("trace.dat",),
        "unclear-error",
        r"no HEADER_INFO option|no BUFFER option",
        "native",
        "trace.dat v7 (native decoder): options sections without a HEADER_INFO (or BUFFER) option gave an error "
        "without an offset (the 100,000-case run of 2026-11-26 on the native decoder found it 22 times, its only "
        "failures); it now names the first options section's offset",
        "trace.dat:3:100003718",
    ),
)

# Reader bugs the fuzzer found that are not fixed yet (none today): counted apart, reproducers xfail.
KNOWN_BUGS: tuple = ()


def known_bug(reader: str, kind: str, detail: str) -> KnownBug | None:
    """The known bug a failure is an instance of, or None for a new one."""
    return next((b for b in KNOWN_BUGS if b.matches(reader, kind, detail)), None)


# -- mutations ------------------------------------------------------------------------------------------
def _span(rng: random.Random, n: int) -> tuple[int, int]:
    """A random range [a, b) of a buffer of n bytes, short ranges more often (1..64 B, then up to n/4)."""
    length = rng.randint(1, 64) if rng.random() < 0.7 else rng.randint(1, max(1, n // 4))
    a = rng.randrange(0, max(1, n - length))
    return a, min(n, a + length)


def mutate_once(rng: random.Random, data: bytearray) -> str:
    """Apply one mutation in place; return its description."""
    n = len(data)
    if n < 2:
        data.extend(b"\0" * 8)
        return "grow"
    kind = rng.choice(("truncate", "flip", "flip", "zero", "duplicate", "swap", "huge", "huge"))
    if kind == "truncate":
        cut = rng.randrange(1, n)
        del data[cut:]
        return f"truncate@{cut}"
    if kind == "flip":
        count = rng.randint(1, 8)
        for _ in range(count):
            i = rng.randrange(n)
            data[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
        return f"flip x{count}"
    a, b = _span(rng, n)
    if kind == "zero":
        data[a:b] = bytes(b - a)
        return f"zero[{a}:{b}]"
    if kind == "duplicate":
        data[b:b] = data[a:b]
        return f"duplicate[{a}:{b}]"
    if kind == "swap":
        c, d = _span(rng, n)
        if c < a:
            a, b, c, d = c, d, a, b
        if b <= c:
            data[a:d] = data[c:d] + data[b:c] + data[a:b]
            return f"swap[{a}:{b}]<->[{c}:{d}]"
        return "swap(overlap: none)"
    # huge length field: u32 / u64 little-endian at an aligned offset, or a 10-byte protobuf varint
    width = rng.choice((4, 8, 10))
    if width == 10:
        i = rng.randrange(0, max(1, n - 10))
        data[i : i + 10] = b"\xff" * 9 + b"\x01"
        return f"varint2^64@{i}"
    i = rng.randrange(0, max(1, n - width)) // width * width
    value = rng.choice(HUGE_U32 if width == 4 else HUGE_U64)
    data[i : i + width] = struct.pack("<I" if width == 4 else "<Q", value)
    return f"u{width * 8}={value:#x}@{i}"


def make_case(seed: bytes, case_seed: int) -> tuple[bytes, list[str]]:
    """The mutant for case_seed: 1-4 stacked mutations of seed (deterministic)."""
    rng = random.Random(case_seed)
    data = bytearray(seed)
    done = [mutate_once(rng, data) for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4)))]
    return bytes(data), done


# -- running one case -----------------------------------------------------------------------------------
def _classify_exception(e: BaseException, path: str) -> tuple[str, str]:
    from abtest.trace.errors import TraceFormatError

    if isinstance(e, TraceFormatError):
        if e.path == path and (e.offset is not None or e.line is not None) and path in str(e):
            return "rejected", ""
        return "unclear-error", f"TraceFormatError without file and offset/line: {e}"
    if isinstance(e, MemoryError):
        return "memory", "MemoryError"
    # type first, then every frame (file, line, function: compact), then the message: a long binary message
    # cannot push what identifies the bug out of the detail
    frames = "\n".join(
        f"  {Path(fr.filename).name}:{fr.lineno} in {fr.name}" for fr in traceback.extract_tb(e.__traceback__)
    )
    return "exception", f"{type(e).__module__}.{type(e).__qualname__}\n{frames}\n{str(e)[:1500]}"


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _analyse(path: str, data) -> tuple[str, str]:
    """`abtest analyze` of a case that read: ("analysed", "") or ("analysis", what failed)."""
    from abtest.commands.analyze import analyze_dict
    from abtest.session import Trace
    from abtest.trace import perfetto_engine

    try:
        d = analyze_dict(Trace(path, _data=data), threads=1)
    except BaseException as e:  # noqa: BLE001 - every outcome is classified
        kind, detail = _classify_exception(e, path)
        return ("analysis" if kind == "exception" else kind), detail
    finally:  # the frame timeline's trace_processor sessions (cached per path): one case's memory, not two
        perfetto_engine.close_all()
    if d["failed"]:
        return "analysis", "; ".join(f"{k}: {why}" for k, why in sorted(d["failed"].items()))[:1500]
    return "analysed", ""


def worker_main(mem_mb: int, analyse: bool = False) -> None:
    """The worker process: warm up, cap its address space at its warm size + mem_mb, then read the case paths
    that arrive on stdin (one per line) and answer each with one JSON line {kind, detail, seconds, rss_mb}
    (rss_mb: how far the peak RSS rose above the RSS at the case's start; the peak is reset through
    /proc/self/clear_refs before each case). analyse: run `abtest analyze`'s analyses on each case that reads."""
    from abtest.trace.readers import read_trace

    for spec in (
        "trappy/trace_sched.txt",
        "systing/trace.pb",
        "trappy/trace_idle.dat",
        "catapult/compressed_atrace_data.txt",
        "trappy/trace_systrace.html",
    ):
        data = read_trace(TRACES / spec)  # starts polars' thread pool and every lazy import before the cap
        if analyse:
            _analyse(str(TRACES / spec), data)
    if analyse:
        # the perfetto frame timeline runs trace_processor in wasmtime, which reserves several GiB of address
        # space per instance (not memory): the cap is on the data segment (private writable mappings) instead
        limit = _status_kib("VmData") * 1024 + mem_mb * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    else:
        limit = _status_kib("VmSize") * 1024 + mem_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    out = sys.stdout
    for line in sys.stdin:
        path = line.rstrip("\n")
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass
        rss0 = _status_kib("VmRSS")
        t0 = time.monotonic()
        kind, detail = "read", ""
        try:
            data = read_trace(path)
        except BaseException as e:  # noqa: BLE001 - every outcome is classified
            kind, detail = _classify_exception(e, path)
        else:
            if analyse:
                kind, detail = _analyse(path, data)
            del data
        res = {
            "kind": kind,
            "detail": detail,
            "seconds": time.monotonic() - t0,
            "rss_mb": (_status_kib("VmHWM") - rss0) / 1024,
        }
        out.write(json.dumps(res) + "\n")
        out.flush()


@dataclass
class Outcome:
    kind: str  # read | rejected | stall (not reproduced) | unclear-error | exception | memory | signal | timeout | rss
    detail: str = ""
    seconds: float = 0.0
    rss_mb: float = 0.0


class Worker:
    """A `bench/fuzz.py --worker` process; restarted after a case kills it or runs over the time bound."""

    def __init__(self, *, timeout_s: float, mem_mb: int, rss_mb: int, analyse: bool = False):
        self.timeout_s, self.mem_mb, self.rss_mb, self.analyse = timeout_s, mem_mb, rss_mb, analyse
        self.proc: subprocess.Popen | None = None
        self.warm = False

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--mem-mb", str(self.mem_mb)]
            + (["--analyze"] if self.analyse else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )

    def _stop(self) -> str:
        """Kill the worker (ours, by PID); return the tail of its stderr."""
        p, self.proc, self.warm = self.proc, None, False
        if p is None:
            return ""
        if p.poll() is None:
            p.kill()
        try:
            _, err = p.communicate(timeout=30)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            err = ""
        return (err or "")[-3000:]

    def run(self, path: str) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        p = self.proc
        t0 = time.monotonic()
        try:
            p.stdin.write(path + "\n")
            p.stdin.flush()
        except (BrokenPipeError, OSError):
            return Outcome("exception", "worker died before the case: " + self._stop())
        # the first case of a new worker waits for its warm-up too (imports, five reads: a few seconds)
        ready, _, _ = select.select([p.stdout], [], [], self.timeout_s + (0 if self.warm else 120))
        if not ready:
            self._stop()
            return Outcome("timeout", f"over {self.timeout_s} s", time.monotonic() - t0)
        line = p.stdout.readline()
        if not line:  # the worker died on this case
            p.wait()
            err = self._stop()
            code = p.returncode
            if code < 0:
                return Outcome("signal", f"killed by {signal.Signals(-code).name}: {err}", time.monotonic() - t0)
            return Outcome(
                "memory" if "memory allocation" in err or "MemoryError" in err else "exception",
                f"worker exited {code}: {err}",
                time.monotonic() - t0,
            )
        self.warm = True
        res = json.loads(line)
        out = Outcome(res["kind"], res["detail"], res["seconds"], res["rss_mb"])
        if out.seconds > self.timeout_s and out.kind not in FAILURES:
            out = Outcome("timeout", f"{out.seconds:.2f} s > {self.timeout_s} s", out.seconds, out.rss_mb)
        if out.rss_mb > self.rss_mb and out.kind not in FAILURES:
            out = Outcome("rss", f"peak RSS {out.rss_mb:.0f} MiB > {self.rss_mb} MiB", out.seconds, out.rss_mb)
        if out.kind == "memory":
            self._stop()  # a fresh worker for the next case
        return out

    def close(self) -> None:
        self._stop()


FAILURES = ("unclear-error", "exception", "analysis", "memory", "signal", "timeout", "rss")


@dataclass
class ReaderStats:
    reader: str
    execs: int = 0
    counts: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # new failures: (replay id, mutations, outcome)
    known: dict = field(default_factory=dict)  # known bug (its reproducer id) -> [count, first replay id]
    seconds: float = 0.0

    def add(self, replay: str, mutations: list[str], out: Outcome, keep: int) -> None:
        self.execs += 1
        self.counts[out.kind] = self.counts.get(out.kind, 0) + 1
        if out.kind not in FAILURES:
            return
        bug = known_bug(self.reader, out.kind, out.detail)
        if bug is not None:
            entry = self.known.setdefault(bug.replay, [0, replay])
            entry[0] += 1
        elif len(self.failures) < keep:
            self.failures.append((replay, mutations, out))

    @property
    def failed(self) -> int:
        """Failures of any kind (known bugs included)."""
        return sum(v for k, v in self.counts.items() if k in FAILURES)

    @property
    def failed_new(self) -> int:
        return self.failed - sum(n for n, _ in self.known.values())

    def as_dict(self) -> dict:
        return {
            "reader": self.reader,
            "execs": self.execs,
            "counts": self.counts,
            "failed": self.failed,
            "failed_new": self.failed_new,
            "known": {k: {"count": n, "first": first} for k, (n, first) in self.known.items()},
            "seconds": round(self.seconds, 1),
            "execs_per_s": round(self.execs / self.seconds, 1) if self.seconds else None,
            "failures": [
                {
                    "replay": r,
                    "mutations": m,
                    "kind": o.kind,
                    "detail": o.detail[-1500:],
                    "seconds": round(o.seconds, 3),
                    "rss_mb": round(o.rss_mb, 1),
                }
                for r, m, o in self.failures
            ],
        }


def fuzz_reader(
    reader: str,
    *,
    execs: int | None = None,
    seconds: float | None = None,
    base_seed: int = 1,
    timeout_s: float = 10.0,
    mem_mb: int = 1024,
    rss_mb: int = 1024,
    keep: int = 20,
    workdir: Path | None = None,
    log=None,
    analyse: bool = False,
) -> ReaderStats:
    """Run `execs` cases (or until `seconds` passed) of one reader; cases cycle over its seeds.
    Case i uses seed i % len(seeds) and case seed base_seed * 1_000_003 + i. analyse: `abtest analyze` too."""
    seeds = [seed_bytes(s) for s in READER_SEEDS[reader]]
    stats = ReaderStats(reader)
    own_dir = workdir is None
    workdir = Path(
        workdir or tempfile.mkdtemp(prefix="abtest-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    path = str(workdir / f"case-{reader.replace('.', '_')}")
    worker = Worker(timeout_s=timeout_s, mem_mb=mem_mb, rss_mb=rss_mb, analyse=analyse)
    t0 = time.monotonic()
    i = 0
    try:
        while (execs is None or i < execs) and (seconds is None or time.monotonic() - t0 < seconds):
            si = i % len(seeds)
            case_seed = base_seed * 1_000_003 + i
            data, mutations = make_case(seeds[si], case_seed)
            with open(path, "wb") as f:
                f.write(data)
            out = worker.run(path)
            if analyse and out.kind in FAILURES and out.kind not in ("timeout", "signal"):
                worker.close()  # rerun below in a fresh worker: a failure that does not repeat there is a `stall`
            if out.kind in ("timeout", "signal") or (analyse and out.kind in FAILURES):
                # a machine that stalls (2 shared cores) or a signal from outside must not count as a reader
                # bug: the case runs again in a fresh worker; only a repeat counts as a failure
                again = worker.run(path)
                if again.kind not in FAILURES:
                    out = Outcome(
                        "stall",
                        f"{out.kind} once ({out.detail[:200]}), then {again.kind} on rerun",
                        out.seconds,
                        out.rss_mb,
                    )
            stats.add(f"{reader}:{si}:{case_seed}", mutations, out, keep)
            if log and out.kind == "stall":
                log(f"STALL {reader}:{si}:{case_seed} {out.detail[:300]}")
            if log and out.kind in FAILURES and not known_bug(reader, out.kind, out.detail):
                last = out.detail.strip().splitlines()[-1:] or [""]
                log(f"FAIL {reader}:{si}:{case_seed} {out.kind} {mutations} {last[0][:300]}")
            i += 1
            if log and i % 5000 == 0:
                log(f"{reader}: {i} execs, {stats.counts}, {i / (time.monotonic() - t0):.1f}/s")
    finally:
        worker.close()
        stats.seconds = time.monotonic() - t0
        Path(path).unlink(missing_ok=True)
        if own_dir:
            workdir.rmdir()
    return stats


def replay(
    spec: str, out_path: str | None, *, timeout_s: float, mem_mb: int, rss_mb: int, analyse: bool = False
) -> Outcome:
    """Rebuild case `reader:seed-index:case-seed`, write it to out_path (or a temp file), run it once."""
    path = out_path or tempfile.mkstemp(prefix="abtest-fuzz-case-")[1]
    reader, kind, rest = spec.split(":", 2)
    if kind == "b64":  # an input saved by bench/fuzz_atheris.py (libFuzzer prints it as Base64)
        Path(path).write_bytes(base64.b64decode(rest))
        print(f"{reader}: saved input of {Path(path).stat().st_size} bytes written to {path}")
    else:
        si, case_seed = int(kind), int(rest)
        data, mutations = make_case(seed_bytes(READER_SEEDS[reader][si]), case_seed)
        Path(path).write_bytes(data)
        print(f"{spec}: seed {READER_SEEDS[reader][si]}, mutations {mutations}, case written to {path}")
    worker = Worker(timeout_s=timeout_s, mem_mb=mem_mb, rss_mb=rss_mb, analyse=analyse)
    try:
        return worker.run(path)
    finally:
        worker.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reader", action="append", choices=READERS, help="reader(s) to fuzz (default: all)")
    ap.add_argument("--execs", type=int, default=None, help="cases per reader")
    ap.add_argument("--seconds", type=float, default=None, help="time per reader [s]")
    ap.add_argument("--seed", type=int, default=1, help="base seed (cases are reproducible from it)")
    ap.add_argument("--timeout-s", type=float, default=10.0, help="wall-clock bound per case [s]")
    ap.add_argument("--mem-mb", type=int, default=1024, help="address space a case may add [MiB] (RLIMIT_AS)")
    ap.add_argument("--rss-mb", type=int, default=1024, help="peak RSS bound per case [MiB]")
    ap.add_argument("--json", dest="json_out", help="write the per-reader results to this JSON file")
    ap.add_argument("--replay", help="rerun one case: reader:seed-index:case-seed (or reader:b64:<bytes>)")
    ap.add_argument("--write-case", help="with --replay: where to write the mutant")
    ap.add_argument("--analyze", action="store_true", help="also run `abtest analyze`'s analyses on cases that read")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.mem_mb, args.analyze)
        return 0
    if args.replay:
        out = replay(
            args.replay,
            args.write_case,
            timeout_s=args.timeout_s,
            mem_mb=args.mem_mb,
            rss_mb=args.rss_mb,
            analyse=args.analyze,
        )
        print(f"outcome: {out.kind} ({out.seconds:.3f} s, peak RSS {out.rss_mb:.0f} MiB)\n{out.detail}")
        return 0 if out.kind not in FAILURES else 1
    if args.execs is None and args.seconds is None:
        args.execs = 1000
    results = []
    for reader in args.reader or READERS:
        st = fuzz_reader(
            reader,
            execs=args.execs,
            seconds=args.seconds,
            base_seed=args.seed,
            timeout_s=args.timeout_s,
            mem_mb=args.mem_mb,
            rss_mb=args.rss_mb,
            log=lambda m: print(m, file=sys.stderr, flush=True),
            analyse=args.analyze,
        )
        d = st.as_dict()
        results.append(d)
        print(
            f"{reader:14s} {d['execs']:8d} execs  {d['execs_per_s']}/s  failed {d['failed']} "
            f"(new {d['failed_new']}, known {d['known']})  {d['counts']}",
            flush=True,
        )
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["failed_new"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
