"""Containers by content: gzip / zstd / bzip2 / xz streams, zip and tar archives -> their members, classified.

The rule (docs/ingest-policy.md, "Archives"):
1. Every member is opened (under the inflate limits of abtest.trace.limits; a member compressed on its
   own, e.g. ``trace.dat.gz`` inside a zip or a ``.tar.gz``, is unwrapped too, up to 3 levels) and
   classified by its content, never by its name or position:
   ``trace`` (trace.dat, perfetto, systrace HTML, atrace, atrace -z, ftrace text holding event lines,
   ``perf script`` text of tracepoints),
   ``battor`` (a BattOr power log), ``json`` (Chrome JSON trace events: not read), ``other`` (README,
   images, logs: text without event lines, unknown binary), ``corrupt`` (the member does not inflate or
   fails its CRC).
2. The trace read is the trace member of the richest format (trace.dat, then perfetto, systrace HTML,
   atrace -z, atrace, ftrace text, perf script text); between members of the same format the largest; then
   archive order.
3. BattOr members become the trace's ``power_rail`` table (abtest.trace.battor, clock alignment there).
4. Every other member is accounted in the metadata: trace members not read and JSON traces under
   ``import_errors`` (``archive_member_not_imported``), corrupt members under ``import_errors``
   (``archive_member_corrupt``), the rest under ``non_event_content`` (``archive_member``); the full list
   with each member's role is ``meta["archive"]["members"]``.
5. An archive with no readable trace member is refused, naming every member and what it is.
"""

from __future__ import annotations

import io
import lzma
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

from abtest.trace.detect import ARCHIVES, STREAM_CODECS, detect_format
from abtest.trace.errors import TraceFormatError
from abtest.trace.inflate import inflate
from abtest.trace.limits import Limits, current, inflate_error

MAX_DEPTH = 3
# what the standard library's zip / tar readers raise on damaged archives (a damaged central directory
# can give an empty member name: IndexError in ZipInfo.is_dir; a damaged LZMA-method member: LZMAError)
# (tarfile.TarError is added where a tar is read: tarfile is imported only then, ~30 ms of every CLI start-up)
_ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    OSError,
    EOFError,
    IndexError,
    KeyError,
    struct.error,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    lzma.LZMAError,
    OverflowError,
    UnicodeDecodeError,
)
TRACE_FORMATS = ("trace.dat", "perfetto", "systrace-html", "atrace-z", "atrace", "ftrace-text", "perf-script")
# an event line (`comm-pid [cpu] sec.frac:`), a function_graph line (` 0)  ...|`), an ftrace header
_TEXT_TRACE_RE = re.compile(
    rb"(?m)(?:-\d+\s+(?:\(\s*[-\d]+\)\s+)?\[\d+\][^\n]{0,40}?\d+(?:\.\d+)?:\s|^\s*\d+\)\s[^\n]*\||^#\s*tracer:)"
)


@dataclass
class Member:
    """One member of a container: its name, inflated content and role (see the module docstring)."""

    name: str
    data: bytes = b""
    format: str | None = None
    role: str = "other"
    wrapper: str = ""
    error: str | None = None
    size: int = 0
    nested: list = field(default_factory=list)

    def summary(self) -> dict:
        out = {"name": self.name, "role": self.role, "format": self.format, "size": self.size}
        if self.error:
            out["error"] = self.error
        return out


def looks_like_text_trace(data: bytes) -> bool:
    """A text member holds ftrace event lines (or a function_graph / ftrace header) in its first 256 KiB."""
    return _TEXT_TRACE_RE.search(data[: 1 << 18]) is not None


def _classify(member: Member) -> None:
    fmt = detect_format(member.data[:8192])
    member.format = fmt
    if fmt == "battor":
        member.role = "battor"
    elif fmt == "json":
        member.role = "json"
    elif fmt in TRACE_FORMATS and (fmt != "ftrace-text" or looks_like_text_trace(member.data)):
        member.role = "trace"
    else:
        member.role = "other"


def _unwrap(path, member: Member, depth: int, limits: Limits, budget: list[int]) -> list[Member]:
    """A member whose content is itself a container -> its leaf members (names joined with '/')."""
    fmt = detect_format(member.data[:8192])
    if depth >= MAX_DEPTH or (fmt not in STREAM_CODECS and fmt not in ARCHIVES):
        _classify(member)
        return [member]
    what = f"{fmt} stream" + (f" of member {member.name}" if member.name else "")
    if fmt in STREAM_CODECS:
        try:
            inflated = inflate(path, member.data, STREAM_CODECS[fmt], what=what, limits=limits)
        except TraceFormatError as e:
            if "inflates beyond" in str(e):
                raise
            member.role, member.error = "corrupt", str(e).split(": ", 1)[-1]
            return [member]
        _charge(path, budget, len(inflated.data), limits)
        inner = Member(member.name, inflated.data, wrapper=_join(member.wrapper, fmt), size=len(inflated.data))
        return _unwrap(path, inner, depth + 1, limits, budget)
    members = _open_archive(path, member, fmt, limits, budget)
    out = []
    for m in members:
        out += [m] if m.role == "corrupt" else _unwrap(path, m, depth + 1, limits, budget)
    return out


def _join(wrapper: str, part: str) -> str:
    return f"{wrapper}+{part}" if wrapper else part


def _charge(path, budget: list[int], n: int, limits: Limits) -> None:
    """All members of one file together stay within the file's inflate limit."""
    budget[0] -= n
    if budget[0] < 0:
        raise inflate_error(path, "the archive's members together", budget[1], None, limits)


def _open_archive(path, member: Member, fmt: str, limits: Limits, budget: list[int]) -> list[Member]:
    prefix = f"{member.name}/" if member.name else ""
    if fmt == "zip":
        return _zip_members(path, member, prefix, limits, budget)
    return _tar_members(path, member, prefix, limits, budget)


def _zip_members(path, member: Member, prefix: str, limits: Limits, budget: list[int]) -> list[Member]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(member.data))
        infos = [i for i in zf.infolist() if not i.is_dir()]
    except _ARCHIVE_ERRORS as e:
        raise TraceFormatError(
            path,
            f"corrupt zip archive{' ' + member.name if member.name else ''} ({e})",
            offset=0,
            expected="a zip archive with a readable central directory",
        ) from None
    wrapper = _join(member.wrapper, "zip")
    out = []
    for info in infos:
        name = prefix + info.filename
        m = Member(name, wrapper=wrapper, size=info.file_size)
        limit = limits.max_inflated(max(info.compress_size, 1))
        if info.file_size > min(limit, budget[0]):
            raise inflate_error(
                path,
                f"zip member {info.filename} (declared {info.file_size} bytes)",
                info.compress_size,
                info.header_offset,
                limits,
            )
        try:
            with zf.open(info) as f:
                chunks, total = [], 0
                while chunk := f.read(1 << 22):
                    total += len(chunk)
                    if total > limit:
                        raise inflate_error(
                            path, f"zip member {info.filename}", info.compress_size, info.header_offset, limits
                        )
                    chunks.append(chunk)
            m.data = b"".join(chunks)
        except TraceFormatError:
            raise
        except _ARCHIVE_ERRORS as e:
            m.role, m.error = "corrupt", f"{type(e).__name__}: {e}"
            out.append(m)
            continue
        _charge(path, budget, len(m.data), limits)
        m.size = len(m.data)
        out.append(m)
    return out


def _tar_members(path, member: Member, prefix: str, limits: Limits, budget: list[int]) -> list[Member]:
    import tarfile

    tar_errors = (*_ARCHIVE_ERRORS, tarfile.TarError)
    wrapper = _join(member.wrapper, "tar")
    out = []
    try:
        with tarfile.open(fileobj=io.BytesIO(member.data), mode="r:") as tf:
            for info in tf:
                if not info.isfile():
                    continue
                m = Member(prefix + info.name, wrapper=wrapper, size=info.size)
                try:
                    f = tf.extractfile(info)
                    m.data = f.read() if f is not None else b""
                except tar_errors as e:
                    m.role, m.error = "corrupt", f"{type(e).__name__}: {e}"
                    out.append(m)
                    continue
                if len(m.data) != info.size:
                    m.role, m.error = "corrupt", f"truncated tar member ({len(m.data)} of {info.size} bytes)"
                out.append(m)
    except tar_errors as e:
        if not out:
            raise TraceFormatError(path, f"corrupt tar archive ({e})", offset=0, expected="a tar archive") from None
        out.append(Member(f"{prefix}(rest of archive)", role="corrupt", wrapper=wrapper, error=str(e)))
    return out


RANK = {fmt: i for i, fmt in enumerate(TRACE_FORMATS)}


def open_members(path, data, limits: Limits | None = None) -> list[Member]:
    """Every leaf member of the container held in `data` (a single compressed stream gives one member named
    ""), inflated and classified."""
    limits = limits or current()
    budget = [limits.max_inflated(len(data)), len(data)]
    return _unwrap(path, Member("", bytes(data), size=len(data)), 0, limits, budget)


def choose_trace(members: list[Member]) -> Member | None:
    """The trace member read (rule 2 of the module docstring), or None."""
    traces = [(RANK[m.format], -len(m.data), i, m) for i, m in enumerate(members) if m.role == "trace"]
    return min(traces)[3] if traces else None


def wrapper_name(m: Member) -> str:
    """How meta["wrapper"] names the way to the member: "gzip", "zip:trace.html", "gzip+tar:dir/trace.dat"."""
    return f"{m.wrapper}:{m.name}" if m.name else m.wrapper


def describe(members: list[Member]) -> str:
    return (
        ", ".join(
            f"{m.name or '(stream)'} ({m.role}{', ' + m.format if m.format and m.role != 'corrupt' else ''})"
            for m in members
        )
        or "(empty archive)"
    )
