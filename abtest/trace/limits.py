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
