"""Limits on what a reader inflates or allocates because a file says so (decompression bombs, hostile input).

Inflated size (gzip, zstd, bzip2, xz, zip members, atrace -z zlib streams):
    a stream may inflate to at most ``max(ratio x compressed size, floor)`` bytes and never more than the
    absolute limit. Defaults: ratio 250, floor 64 MiB, absolute 8 GiB. Real traces stay far below the
    ratio (ftrace text gzips 8-15x, zstd up to ~30x); a 32 KiB zstd bomb that would inflate to 1 GiB stops
    at 64 MiB, a 1 MiB gzip bomb at 250 MiB. Exceeding a limit is a TraceFormatError naming the file, the
    compressed offset reached and the limit.
Text lines:
    at most ``max_fields`` ``key=value`` fields are split out of one event's payload (default 512; the
    kernel's widest events have a few dozen fields); an event with more keeps its payload whole in ``buf``
    and is counted in import_errors (``too_many_fields``). A line longer than ``max_line_bytes`` (default
    1 MiB) is not parsed and is counted (``line_too_long``). The lines of one event whose payloads name
    more than 1024 different keys (abtest.trace.text_fields.parse_key_values: not an event's format) keep
    their payloads whole in ``buf`` (``too_many_field_names``). Parsing stays linear in the input: payloads
    of many different layouts, or of more than 48 keys with spaces inside values, are split by one
    explode/pivot pass instead of a regular expression per layout.

Configuration: environment variables ABTEST_MAX_INFLATE_RATIO, ABTEST_MAX_INFLATE_FLOOR_BYTES,
ABTEST_MAX_INFLATED_BYTES, ABTEST_MAX_FIELDS_PER_LINE, ABTEST_MAX_LINE_BYTES (read at each call), or
`Limits(...)` passed where a function accepts one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from abtest.trace.errors import TraceFormatError

_ENV = {
    "inflate_ratio": "ABTEST_MAX_INFLATE_RATIO",
    "inflate_floor": "ABTEST_MAX_INFLATE_FLOOR_BYTES",
    "inflated_bytes": "ABTEST_MAX_INFLATED_BYTES",
    "max_fields": "ABTEST_MAX_FIELDS_PER_LINE",
    "max_line_bytes": "ABTEST_MAX_LINE_BYTES",
}


@dataclass(frozen=True)
class Limits:
    """Reader limits (see the module docstring). Sizes in bytes."""

    inflate_ratio: float = 250.0
    inflate_floor: int = 64 << 20
    inflated_bytes: int = 8 << 30
    max_fields: int = 512
    max_line_bytes: int = 1 << 20

    def max_inflated(self, compressed_size: int) -> int:
        """Largest inflated size allowed for a stream of `compressed_size` bytes."""
        return int(min(self.inflated_bytes, max(self.inflate_ratio * compressed_size, self.inflate_floor)))


def current() -> Limits:
    """Limits from the environment (unset or unparsable variables keep their defaults)."""
    values = {}
    for field, var in _ENV.items():
        raw = os.environ.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            values[field] = float(raw) if field == "inflate_ratio" else int(raw, 0)
        except ValueError:
            continue
    return Limits(**values)


def inflate_error(path, what: str, compressed_size: int, offset: int | None, limits: Limits) -> TraceFormatError:
    """The error for a stream that inflates beyond its limit."""
    limit = limits.max_inflated(compressed_size)
    which = (
        "the absolute limit"
        if limit == limits.inflated_bytes
        else f"{limits.inflate_ratio:g} x its {compressed_size} compressed bytes"
        if limit > limits.inflate_floor
        else "the small-input floor"
    )
    return TraceFormatError(
        path,
        f"{what} inflates beyond {limit} bytes ({which}; a decompression bomb or an unexpectedly large "
        f"trace). Raise ABTEST_MAX_INFLATE_RATIO / ABTEST_MAX_INFLATE_FLOOR_BYTES / ABTEST_MAX_INFLATED_BYTES "
        f"(bytes) to read it",
        offset=offset,
        expected=f"at most {limit} inflated bytes",
    )


# Memory a text trace takes to read, per byte of text (issue 43; docs/robustness.md "Long text traces"): a text
# longer than ftrace_text.TEXT_BLOCK_BYTES is read block by block (peak RSS ~1.8 x its size, address space
# ~5 x: polars' allocator keeps the address space it reserved), a shorter one whole (~10 x). Measured on a
# 10 M-event one-CPU `trace-cmd report` text of 1.01 GB: peak RSS 1.83 GB, peak address space 5.7 GB.
TEXT_BLOCK_RSS_PER_BYTE, TEXT_BLOCK_AS_PER_BYTE, TEXT_WHOLE_PER_BYTE = 1.9, 5.0, 10.0


class TraceTooLargeError(MemoryError):
    """The trace needs more memory than this process may have (address-space limit or available memory): said
    before reading it, rather than dying half-way in an allocation that aborts the process."""


def _status_bytes(key: str, path: str = "/proc/self/status") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_limits() -> tuple[int | None, int | None]:
    """(address-space limit RLIMIT_AS in bytes or None when unlimited, MemAvailable of /proc/meminfo or None)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = None if soft == resource.RLIM_INFINITY else soft
    return limit, _status_bytes("MemAvailable", "/proc/meminfo")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_text_memory(path, size: int, *, blocks: bool) -> None:
    """Refuse a text trace of `size` bytes that cannot be read within this process' address-space limit
    (`ulimit -v`, RLIMIT_AS) or the memory available (MemAvailable), with a TraceTooLargeError naming the size,
    the estimate and the limit. blocks: the text is read block by block (else whole)."""
    rss = size * (TEXT_BLOCK_RSS_PER_BYTE if blocks else TEXT_WHOLE_PER_BYTE)
    space = size * (TEXT_BLOCK_AS_PER_BYTE if blocks else TEXT_WHOLE_PER_BYTE) + (_status_bytes("VmSize") or 0)
    limit, available = memory_limits()
    what = f"{path}: a text trace of {size:,} bytes needs about"
    if limit is not None and space > limit:
        raise TraceTooLargeError(
            f"{what} {_gib(space)} of address space to read, over this process' address-space limit "
            f"(ulimit -v / RLIMIT_AS) of {_gib(limit)}: raise the limit (ulimit -v), or convert the trace to "
            f"trace.dat (`trace-cmd record`), which is read in bounded memory"
        )
    if available is not None and rss > available:
        raise TraceTooLargeError(
            f"{what} {_gib(rss)} of memory to read, more than the {_gib(available)} available "
            f"(MemAvailable in /proc/meminfo): free memory, or convert the trace to trace.dat, read in bounded memory"
        )
