"""Format detection from the first bytes of a file (magic numbers and content sniffing)."""

from __future__ import annotations

import re

TRACEDAT_MAGIC = b"\x17\x08\x44tracing"
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZIP2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
TAR_MAGIC_OFFSET = 257  # "ustar" (POSIX / GNU tar header)
BATTOR_HEADER = b"# BattOr"
# the containers readers.py unwraps (abtest.trace.archive): compressed single streams and archives
STREAM_CODECS = {"gzip": "gzip", "zstd": "zstd", "bzip2": "bz2", "xz": "xz"}
ARCHIVES = ("zip", "tar")


def _looks_like_perfetto(head: bytes) -> bool:
    """A perfetto Trace is a sequence of `repeated TracePacket packet = 1` (tag 0x0a, then varint len)."""
    if len(head) < 2 or head[0] != 0x0A:
        return False
    # varint length must decode within 5 bytes
    for i in range(1, min(6, len(head))):
        if head[i] & 0x80 == 0:
            return True
    return False


# a `perf script` tracepoint sample head (abtest.trace.perf_script): COMM TID [CPU] SEC.FRAC: SYSTEM:EVENT:
_PERF_SCRIPT_HEAD = re.compile(
    rb"(?m)^[ \t]*\S[^\n]*?[ \t]-?\d+(?:/\d+)?[ \t]+\[\d+\][ \t]+\d+\.\d{1,9}:[ \t]+"
    rb"(?:\d+[ \t]+)?[A-Za-z0-9_]+:[A-Za-z0-9_]+:"
)
# an ftrace event head (COMM-PID [CPU] ... SEC.FRAC:): a text holding one is ftrace text
_FTRACE_HEAD = re.compile(rb"(?m)-\d+[ \t]+(?:\([ \t]*[-\d]+\)[ \t]+)?\[\d+\][^\n]{0,40}?\d+(?:\.\d+)?:[ \t]")


def _looks_like_perf_script(head: bytes) -> bool:
    """`perf script` text: its first sample heads carry `SYSTEM:EVENT:` after the time, and no line of the
    head is an ftrace event line."""
    text = head[:8192]
    return len(_PERF_SCRIPT_HEAD.findall(text)) >= 1 and _FTRACE_HEAD.search(text) is None


def detect_format(head: bytes) -> str | None:
    """Return one of: trace.dat, gzip, zip, zstd, bzip2, xz, tar, perfetto, systrace-html, atrace-z, atrace,
    battor (a BattOr power log), json (Chrome JSON trace events: not read), perf-script (`perf script` text of
    tracepoints), ftrace-text; or None when nothing matches (empty or binary garbage).

    `head` is the first few KiB of the file.
    """
    if not head:
        return None
    if head.startswith(TRACEDAT_MAGIC):
        return "trace.dat"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(BZIP2_MAGIC) and head[3:4].isdigit():
        return "bzip2"
    if head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == b"ustar":
        return "tar"
    stripped = head.lstrip()
    if stripped.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
        stripped = stripped[3:].lstrip()
    if stripped.startswith(BATTOR_HEADER):
        return "battor"
    low = stripped[:1024].lower()
    if low.startswith(b"<!doctype html") or low.startswith(b"<html") or (low.startswith(b"<!--") and b"<html" in low):
        return "systrace-html"
    # atrace: a "TRACE:" line at the top or after a preamble ("capturing trace... done", adb messages)
    trace_line = re.search(rb"(?:^|\n)TRACE:[ \t\r]*\n", stripped[:8192])
    if trace_line is not None:
        if stripped[trace_line.end() :].lstrip(b"\r\n")[:1] == b"\x78":  # zlib header (CMF 0x78)
            return "atrace-z"
        return "atrace"
    # text: mostly printable bytes (checked before the perfetto sniff: a text trace that starts
    # with a blank line begins with 0x0a, like a perfetto packet tag)
    sample = head[:4096].rstrip(b"\x00")  # NUL padding after the text (a file padded to a block size)
    printable = sum(1 for b in sample if b in (9, 10, 13) or 32 <= b < 127 or b >= 128)
    is_text = bool(sample) and printable >= 0.95 * len(sample)
    no_control_bytes = not any(b < 9 or 13 < b < 32 or b == 11 or b == 12 for b in sample)
    if _looks_like_perfetto(head) and not (is_text and no_control_bytes):
        return "perfetto"
    if is_text:
        if stripped[:1] in (b"{", b"[") and re.match(rb'[\[{]\s*(?:\{\s*)?"', stripped):
            return "json"
        if _looks_like_perf_script(head):
            return "perf-script"
        return "ftrace-text"
    return None
