"""Coverage-guided fuzzing of one trace reader with atheris (libFuzzer), optional beside bench/fuzz.py.

    pip install atheris            # not a project dependency: a dev tool for longer campaigns
    python bench/fuzz_atheris.py --reader ftrace-text -runs=100000 -timeout=10 -rss_limit_mb=3072

The corpus (--corpus, default ./atheris-corpus-<reader>, kept between runs as libFuzzer's corpora are) starts
from the reader's real seed traces (bench/fuzz.py READER_SEEDS); each input is read from an in-memory file
(memfd, /proc/self/fd/N), so nothing else is left behind. The mutator is bench/fuzz.py's structured one (truncations,
flips, zeroed / duplicated /
swapped ranges, huge length fields), with libFuzzer's coverage feedback from abtest's Python code (atheris
instruments abtest.* at import; the Rust decoders are not instrumented: their coverage is invisible here).
The rule is bench/fuzz.py's: returning, or TraceFormatError with the file and an offset or line, passes;
a known reader bug (bench/fuzz.py KNOWN_BUGS) is counted and passes; anything else raises, and libFuzzer
stops with the crashing input saved (crash-*); -timeout and -rss_limit_mb bound time and memory per input.
Arguments other than --reader and --corpus go to libFuzzer.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("abtest_bench_fuzz", ROOT / "bench" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fuzz
_spec.loader.exec_module(fuzz)

with atheris.instrument_imports(include=["abtest"]):
    from abtest.trace import ftrace_text, perfetto, tracedat  # noqa: F401  (instrumented before first use)
    from abtest.trace.errors import TraceFormatError
    from abtest.trace.readers import read_trace


class NewReaderBug(AssertionError):
    """A reader failure that is neither the clear bad-input error nor a known bug."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reader", choices=fuzz.READERS, required=True)
    ap.add_argument("--corpus", help="corpus directory (default ./atheris-corpus-<reader>)")
    args, libfuzzer_args = ap.parse_known_args()
    seeds = [fuzz.seed_bytes(s) for s in fuzz.READER_SEEDS[args.reader]]
    corpus = Path(args.corpus or f"atheris-corpus-{args.reader}")
    corpus.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(data)
    case_fd = os.memfd_create("abtest-fuzz-case")
    case = f"/proc/self/fd/{case_fd}"
    known: dict[str, int] = {}

    def count_known(bug) -> None:  # printed as it grows: libFuzzer ends the process without unwinding Python
        known[bug.replay] = known.get(bug.replay, 0) + 1
        n = known[bug.replay]
        if n == 1 or n % 1000 == 0:
            print(f"known reader bug {bug.replay[:60]}: {n} inputs so far", file=sys.stderr, flush=True)

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        buf = bytearray(data if data and rng.random() > 0.05 else seeds[seed % len(seeds)])
        for _ in range(rng.choice((1, 1, 2, 3))):
            fuzz.mutate_once(rng, buf)
        return bytes(buf[:max_size])

    def one_input(data: bytes) -> None:
        os.ftruncate(case_fd, 0)
        os.pwrite(case_fd, data, 0)
        try:
            read_trace(case)
        except TraceFormatError as e:
            if e.offset is None and e.line is None:
                detail = f"TraceFormatError without file and offset/line: {e}"
                bug = fuzz.known_bug(args.reader, "unclear-error", detail)
                if bug is None:
                    raise NewReaderBug(detail) from e
                count_known(bug)
        except Exception as e:  # noqa: BLE001 - classified like bench/fuzz.py
            kind, detail = fuzz._classify_exception(e, case)
            bug = fuzz.known_bug(args.reader, kind, detail)
            if bug is None:
                raise
            count_known(bug)

    atheris.Setup([sys.argv[0], *libfuzzer_args, str(corpus)], one_input, custom_mutator=mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
