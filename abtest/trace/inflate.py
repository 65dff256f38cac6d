"""Bounded decompression of one stream (gzip, zlib, zstd, bzip2, xz) under abtest.trace.limits.

`inflate()` never holds more than the allowed inflated size: it inflates in chunks and stops with a
TraceFormatError naming the file, the compressed offset reached and the limit as soon as the output would
exceed it. A corrupt or truncated stream is a TraceFormatError too (a partial trace is never presented as
a complete one). gzip files of several members (concatenated gzip) are inflated member after member.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from dataclasses import dataclass

from abtest.trace.errors import TraceFormatError
from abtest.trace.limits import Limits, current, inflate_error

_CHUNK = 1 << 22
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Inflated:
    """An inflated stream: the bytes, how many compressed bytes it used, and what followed it."""

    data: bytes
    consumed: int
    trailing: bytes = b""


def _zlib_like(path, data, what: str, wbits: int, limits: Limits, base_offset: int) -> Inflated:
    """zlib (wbits 15) or gzip (wbits 31, every member) with the size limit."""
    limit = limits.max_inflated(len(data))
    out = bytearray()
    pos = 0
    view = memoryview(data)
    while True:
        d = zlib.decompressobj(wbits)
        tail = view[pos:]
        try:
            while True:
                chunk = d.decompress(tail, _CHUNK)
                out += chunk
                if len(out) > limit:
                    consumed = len(data) - len(d.unconsumed_tail) - len(d.unused_data)
                    raise inflate_error(path, what, len(data), base_offset + consumed, limits)
                tail = d.unconsumed_tail
                if not tail or d.eof:
                    break
            if not d.eof:
                out += d.flush()
        except zlib.error as e:
            raise TraceFormatError(
                path, f"corrupt {what} ({e})", offset=base_offset + pos, expected=f"a complete {what}"
            ) from e
        if not d.eof:
            raise TraceFormatError(
                path,
                f"truncated {what}: it ends after {len(data) - pos} compressed bytes "
                f"without its end marker ({len(out)} bytes inflated so far)",
                offset=base_offset + len(data),
                expected=f"a complete {what}",
            )
        rest = d.unused_data
        pos = len(data) - len(rest)
        if wbits == 31 and rest[:2] == GZIP_MAGIC:  # concatenated gzip members
            continue
        return Inflated(bytes(out), pos, bytes(rest))


def _chunked(path, data, what: str, decomp, limits: Limits, base_offset: int, errors: tuple) -> Inflated:
    """bz2 / lzma decompressor objects (decompress(data, max_length), .eof, .needs_input, .unused_data)."""
    limit = limits.max_inflated(len(data))
    out = bytearray()
    feed = bytes(data)
    try:
        while True:
            chunk = decomp.decompress(feed, _CHUNK)
            feed = b""
            out += chunk
            if len(out) > limit:
                raise inflate_error(path, what, len(data), None, limits)
            if decomp.eof or (decomp.needs_input and not chunk):
                break
    except errors as e:
        raise TraceFormatError(path, f"corrupt {what} ({e})", offset=base_offset, expected=f"a complete {what}") from e
    if not decomp.eof:
        raise TraceFormatError(
            path,
            f"truncated {what} ({len(out)} bytes inflated before the data ended)",
            offset=base_offset + len(data),
            expected=f"a complete {what}",
        )
    rest = decomp.unused_data
    return Inflated(bytes(out), len(data) - len(rest), bytes(rest))


def _zstd(path, data, what: str, limits: Limits, base_offset: int) -> Inflated:
    import io

    import zstandard

    limit = limits.max_inflated(len(data))
    out = bytearray()
    source = io.BytesIO(bytes(data))
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True, read_size=1 << 16)
        while True:
            chunk = reader.read(_CHUNK)
            if not chunk:
                break
            out += chunk
            if len(out) > limit:  # the compressed offset: what the reader has taken from the source so far
                raise inflate_error(path, what, len(data), base_offset + source.tell(), limits)
    except zstandard.ZstdError as e:
        raise TraceFormatError(
            path,
            f"corrupt or truncated {what} ({e})",
            offset=base_offset + source.tell(),
            expected=f"a complete {what}",
        ) from e
    return Inflated(bytes(out), len(data))


CODECS = ("gzip", "zlib", "zstd", "bz2", "xz")
_NAMES = {"gzip": "gzip stream", "zlib": "zlib stream", "zstd": "zstd stream", "bz2": "bzip2 stream", "xz": "xz stream"}


def inflate(
    path, data, codec: str, *, what: str | None = None, limits: Limits | None = None, base_offset: int = 0
) -> Inflated:
    """Inflate one `codec` stream held in `data` (bytes-like) under `limits` (default: the environment's).

    what: how errors name the stream ("atrace -z zlib stream", "zip member trace.txt"); base_offset: the
    stream's offset in the file, so error offsets are file offsets."""
    limits = limits or current()
    what = what or _NAMES[codec]
    if codec == "gzip":
        return _zlib_like(path, data, what, 31, limits, base_offset)
    if codec == "zlib":
        return _zlib_like(path, data, what, 15, limits, base_offset)
    if codec == "zstd":
        return _zstd(path, data, what, limits, base_offset)
    if codec == "bz2":
        return _chunked(path, data, what, bz2.BZ2Decompressor(), limits, base_offset, (OSError, ValueError))
    if codec == "xz":
        return _chunked(path, data, what, lzma.LZMADecompressor(), limits, base_offset, (lzma.LZMAError,))
    raise ValueError(f"unknown codec {codec!r}")
