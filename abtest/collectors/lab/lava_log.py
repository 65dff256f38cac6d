"""LAVA job logs -> records -> the target console lines -> what the iteration script reported.

A LAVA job log is one record per line: the server's `GET /api/v0.2/jobs/N/logs/` gives YAML list items
(`- {"dt": ..., "lvl": ..., "msg": ...}`), `lava-run` writes the same mappings without the `- `. Most
are valid JSON; some `results` records carry YAML tags (`"size": ! "8247232"`), so JSON is tried first
and YAML second. Lines that are neither are counted with examples (`LogProblems`), never silently
dropped. `lvl: target` records are the device's console output, one line each.

`read_guest_report` then follows the console protocol of guest_script.py: the manifest (name, size,
sha256 per file), files sent through the log (base64 of gzip between DATA-BEGIN/END), upload outcomes,
the workload exit code, errors and the final status. Console lines inside a data block that are not
base64 (a kernel message that slipped through) are counted, skipped, and the block is still checked
against its sha256.

Data blocks are inflated with a declared bound (`max_data_bytes` for the whole report, and each block at most
the size its manifest line announced): a block that would inflate beyond it is not inflated further, and the
report says so in `over_limit` (harvest turns that into a failed attempt) instead of a job log of a few MB
becoming GiBs in memory.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field

import yaml

_B64_LINE = re.compile(r"^[A-Za-z0-9+/=]+$")
# Decoded bytes all data blocks of one report may inflate to unless the caller declares its own bound: the
# default job log budget (8 MiB, [lab] log_max_mb) plus the small files of an upload job (9 x 64 KiB).
DEFAULT_MAX_DATA_BYTES = (8 << 20) + 9 * (64 << 10)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class LogProblems:
    """Unparseable content, per kind: {kind: count} and up to 3 examples per kind as (line, text)."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list] = field(default_factory=dict)

    def add(self, kind: str, line: int, text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        ex = self.examples.setdefault(kind, [])
        if len(ex) < 3:
            ex.append((line, text[:200]))

    def as_meta(self) -> dict:
        return {
            kind: {"count": n, "examples": [{"line": l, "text": t} for l, t in self.examples.get(kind, [])]}
            for kind, n in self.counts.items()
        }


@dataclass
class LogRecord:
    """One log record: line number in the log (1-based), dt (ISO time string), lvl, msg (str or dict)."""

    line: int
    dt: str
    lvl: str
    msg: object


def parse_log(text: str, problems: LogProblems | None = None) -> list[LogRecord]:
    """Server (YAML list) or lava-run (one mapping per line) log text -> records."""
    problems = problems if problems is not None else LogProblems()
    out = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        body = line[2:] if line.startswith("- ") else line
        try:
            rec = json.loads(body)
        except ValueError:
            try:
                rec = yaml.load(body, Loader=_YAML_LOADER)
            except yaml.YAMLError:
                problems.add("unparseable log line", i, line)
                continue
        if not isinstance(rec, dict) or "lvl" not in rec:
            problems.add("log line without a level", i, line)
            continue
        out.append(LogRecord(i, str(rec.get("dt", "")), str(rec["lvl"]), rec.get("msg")))
    return out


def target_lines(records: list[LogRecord]) -> list[tuple[int, str]]:
    """(log line, console text) of every `lvl: target` record."""
    return [(r.line, str(r.msg).rstrip("\r")) for r in records if r.lvl == "target"]


def action_durations(records: list[LogRecord]) -> dict[str, float]:
    """Seconds per top-level action from `end: N <name> (duration HH:MM:SS)` info lines."""
    out = {}
    for r in records:
        if r.lvl == "info" and isinstance(r.msg, str):
            m = re.match(r"end: (\d+) (\S+) \(duration (\d+):(\d+):(\d+)\)", r.msg)
            if m:
                out[m.group(2)] = int(m.group(3)) * 3600 + int(m.group(4)) * 60 + int(m.group(5))
    return out


def job_errors(records: list[LogRecord], limit: int = 5) -> list[str]:
    """The last `error` messages of the job (LAVA's own reasons for a failure)."""
    errs = [str(r.msg) for r in records if r.lvl in ("error", "exception")]
    return errs[-limit:]


@dataclass
class GuestReport:
    """What the iteration script reported on the console.

    key: attempt key from ABTEST-BEGIN (None when the script never started). manifest: {name: (size,
    sha256)}. data: {name: bytes} decoded from the log. uploaded / upload_failed: names (with reasons).
    rc: the workload's exit code. errors: ABTEST-ERROR lines. status: "ok" / "error" / None (no END).
    problems: damaged data blocks and stray lines inside them. over_limit: why a data block was not
    inflated whole (it would exceed the report's bound), or None.
    """

    key: str | None = None
    manifest: dict[str, tuple[int, str]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    uploaded: list[str] = field(default_factory=list)
    upload_failed: dict[str, str] = field(default_factory=dict)
    rc: int | None = None
    errors: list[str] = field(default_factory=list)
    status: str | None = None
    problems: LogProblems = field(default_factory=LogProblems)
    over_limit: str | None = None


def read_guest_report(
    lines: list[tuple[int, str]], key: str | None = None, *, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES
) -> GuestReport:
    """Console lines -> GuestReport. With `key`, only the section after `ABTEST-BEGIN key=<key>` counts
    (a device that printed an older attempt's lines cannot be mistaken for this one). `max_data_bytes`:
    bound on the bytes all data blocks together inflate to (see the module docstring)."""
    rep = GuestReport()
    budget = int(max_data_bytes)
    started = key is None
    block: str | None = None
    block_lines: list[str] = []
    for lineno, text in lines:
        s = text.strip()
        # the prompt can share a console line with output that followed it; the markers start lines
        idx = s.find("ABTEST-")
        if not started:
            m = re.search(r"ABTEST-BEGIN key=(\S+)", s)
            if m and m.group(1) == key:
                started, rep.key = True, key
            continue
        if block is not None:
            if s == f"ABTEST-DATA-END {block}":
                declared = rep.manifest.get(block, (budget, ""))[0]
                limit = min(declared, budget - sum(len(d) for d in rep.data.values()))
                data = _decode_block(block, block_lines, rep.problems, lineno, limit)
                if data is None:
                    rep.over_limit = rep.over_limit or (
                        f"data block of {block} (log line {lineno}) inflates beyond {max(limit, 0)} bytes "
                        f"(its manifest size, within the {budget}-byte bound on data through the log)"
                    )
                    data = b""
                rep.data[block] = data
                block, block_lines = None, []
            elif _B64_LINE.match(s):
                block_lines.append(s)
            elif s:
                rep.problems.add(f"stray console line inside the data of {block}", lineno, s)
            continue
        if idx < 0:
            continue
        s = s[idx:]
        parts = s.split()
        tag = parts[0]
        if tag == "ABTEST-BEGIN" and key is None:
            rep.key = s.partition("key=")[2] or None
        elif tag == "ABTEST-FILE" and len(parts) == 4 and parts[2].isdigit():
            rep.manifest[parts[1]] = (int(parts[2]), parts[3])
        elif tag == "ABTEST-DATA-BEGIN" and len(parts) == 2:
            block, block_lines = parts[1], []
        elif tag == "ABTEST-UPLOADED" and len(parts) == 2:
            rep.uploaded.append(parts[1])
        elif tag == "ABTEST-UPLOAD-FAILED" and len(parts) >= 2:
            rep.upload_failed[parts[1]] = " ".join(parts[2:])
        elif tag == "ABTEST-RESULT":
            m = re.search(r"rc=(-?\d+)", s)
            rep.rc = int(m.group(1)) if m else None
        elif tag == "ABTEST-ERROR":
            rep.errors.append(s[len("ABTEST-ERROR") :].strip())
        elif tag == "ABTEST-END":
            m = re.search(r"status=(\w+)", s)
            rep.status = m.group(1) if m else "error"
            break
    if block is not None:
        rep.problems.add("data block without its end line", lines[-1][0] if lines else 0, block)
    return rep


def _decode_block(name: str, b64_lines: list[str], problems: LogProblems, lineno: int, limit: int) -> bytes | None:
    """base64 of gzip -> bytes, inflating at most `limit` bytes; None when the data would inflate beyond it;
    b"" (and a problem) when it is damaged."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflate.decompress(base64.b64decode("".join(b64_lines), validate=True), max(limit, 0) + 1)
    except (binascii.Error, zlib.error) as e:
        problems.add(f"damaged data block of {name}", lineno, str(e))
        return b""
    if len(data) > limit:
        return None
    if not inflate.eof:
        problems.add(f"damaged data block of {name}", lineno, "gzip stream is truncated")
        return b""
    return data


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def strip_data_blocks(text: str) -> str:
    """The log text with the base64 lines of every data block replaced by one note line (the files are
    kept beside it, checked): what the store keeps as the job's log."""
    out = []
    in_block, count = None, 0
    for line in text.splitlines():
        if in_block is None:
            out.append(line)
            m = re.search(r"ABTEST-DATA-BEGIN (\S+?)[\"']", line)
            if m:
                in_block, count = m.group(1), 0
        elif f"ABTEST-DATA-END {in_block}" in line:
            out.append(
                f"# abtest: {count} log lines of base64 data for {in_block} left out (the file is kept "
                "beside this log, checked against its sha256)"
            )
            out.append(line)
            in_block = None
        else:
            count += 1
    return "\n".join(out) + "\n"
