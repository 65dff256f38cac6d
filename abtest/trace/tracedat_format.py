"""trace.dat metadata: event `format` text, header_page, printk formats, kallsyms, uname.

Pure text parsing (no event data): the per-event work happens in Rust (native/src/tracedat.rs),
driven by the field layouts built here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# Field kinds understood by the Rust decoder (must match native/src/tracedat.rs `Kind`).
KIND_INT = 0          # scalar integer of 1, 2, 4 or 8 bytes
KIND_CHAR_ARRAY = 1   # char name[N]: NUL-terminated text in a fixed slot -> Utf8
KIND_DATA_LOC_STR = 2  # __data_loc char[]: u32 (len << 16 | offset) -> Utf8
KIND_DATA_LOC_BIN = 3  # __data_loc <other>[]: -> Binary
KIND_NUM_ARRAY = 4    # fixed numeric array name[N] -> List(elem)
KIND_BYTES = 5        # anything else with a fixed slot -> Binary
KIND_REL_LOC_STR = 6  # __rel_loc char[]: offset relative to the end of the field -> Utf8
KIND_REL_LOC_BIN = 7  # __rel_loc <other>[] -> Binary
KIND_TAIL_STR = 8     # char name[] of size 0: text to the end of the record -> Utf8
KIND_TAIL_BIN = 9     # <other> name[] of size 0: bytes to the end of the record -> Binary
KIND_BPRINT_TEXT = 10  # bprint `buf`: printk-style format applied to the binary args -> Utf8
KIND_PRINTK_STR = 11  # bputs `str` / bprint-like pointer to a constant string -> Utf8
KIND_TAIL_LIST = 12   # integers to the end of the record (optionally capped by a count field) -> List
KIND_DATA_LOC_CAT = 13  # __data_loc char[] task names (comm, *_comm): dictionary-encoded -> Categorical

_FIELD_RE = re.compile(
    r"field:(?P<decl>[^;]*);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);(?:\s*signed:(?P<signed>-?\d+);)?"
)
_ARRAY_RE = re.compile(r"^(?P<name>\w+)\s*\[(?P<count>[^\]]*)\]$")
_CHAR_TYPES = {"char", "signed char", "const char"}


@dataclass
class Field:
    """One field of an event record. offset and size in bytes from the start of the record."""

    name: str
    type: str
    offset: int
    size: int
    signed: bool
    kind: int
    elem_size: int = 0  # bytes per element for KIND_NUM_ARRAY / scalar size for KIND_INT


@dataclass
class EventFormat:
    """An event type: numeric id, system (e.g. sched), name, fields in record order, print fmt."""

    id: int
    system: str
    name: str
    fields: list[Field] = field(default_factory=list)
    print_fmt: str = ""

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


def _classify(decl: str, offset: int, size: int, signed_txt: str | None) -> Field:
    """Turn `unsigned int prev_pid` / `char comm[16]` / `__data_loc char[] name` into a Field."""
    decl = " ".join(decl.split())
    data_loc = rel_loc = False
    if decl.startswith("__data_loc "):
        data_loc, decl = True, decl[len("__data_loc "):]
    elif decl.startswith("__rel_loc "):
        rel_loc, decl = True, decl[len("__rel_loc "):]
    # split "type name" (name may carry [N]); data_loc form is "char[] name"
    type_part, _, name = decl.rpartition(" ")
    type_part = type_part.strip()
    if name.startswith("*"):  # "const char *name": the stars belong to the type
        stars = len(name) - len(name.lstrip("*"))
        type_part, name = f"{type_part} {'*' * stars}".strip(), name[stars:]
    count_txt = None
    m = _ARRAY_RE.match(name)
    if m:
        name, count_txt = m.group("name"), m.group("count")
    elif type_part.endswith("[]"):
        type_part, count_txt = type_part[:-2].strip(), ""
    signed = bool(int(signed_txt)) if signed_txt is not None else not type_part.startswith(("unsigned", "u", "bool"))
    base = type_part.replace("const ", "").strip()
    is_char = base in _CHAR_TYPES or base == "char"
    if data_loc or rel_loc:
        if is_char:
            kind = KIND_DATA_LOC_STR if data_loc else KIND_REL_LOC_STR
        else:
            kind = KIND_DATA_LOC_BIN if data_loc else KIND_REL_LOC_BIN
        return Field(name, "__data_loc " + type_part + "[]" if data_loc else "__rel_loc " + type_part + "[]",
                     offset, size, signed, kind, 4)
    if count_txt is not None:
        if size == 0:
            return Field(name, type_part + "[]", offset, 0, signed, KIND_TAIL_STR if is_char else KIND_TAIL_BIN)
        if is_char:
            return Field(name, f"{type_part}[{count_txt}]", offset, size, signed, KIND_CHAR_ARRAY, 1)
        try:
            count = int(count_txt, 0)
        except ValueError:
            count = 0
        elem = size // count if count else 0
        if elem in (1, 2, 4, 8) and elem * count == size:
            return Field(name, f"{type_part}[{count_txt}]", offset, size, signed, KIND_NUM_ARRAY, elem)
        return Field(name, f"{type_part}[{count_txt}]", offset, size, signed, KIND_BYTES)
    if size == 0:  # old kernels: `char buf; size:0` = dynamic data to the end of the record
        return Field(name, type_part + "[]", offset, 0, signed, KIND_TAIL_STR if is_char else KIND_TAIL_BIN)
    if size in (1, 2, 4, 8):
        return Field(name, type_part, offset, size, signed, KIND_INT, size)
    return Field(name, type_part, offset, size, signed, KIND_BYTES)


def parse_event_format(text: str, system: str) -> EventFormat:
    """Parse one tracefs `format` file. Raises ValueError naming what is missing."""
    name = ev_id = None
    fields: list[Field] = []
    print_fmt = ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("name:"):
            name = s[5:].strip()
        elif s.startswith("ID:"):
            ev_id = int(s[3:].strip())
        elif s.startswith("field:"):
            m = _FIELD_RE.search(s)
            if not m:
                raise ValueError(f"unparsable field line {s!r}")
            fields.append(_classify(m.group("decl"), int(m.group("offset")), int(m.group("size")), m.group("signed")))
        elif s.startswith("print fmt:"):
            print_fmt = s[len("print fmt:"):].strip()
    if name is None or ev_id is None:
        raise ValueError("event format without name: or ID: line")
    return EventFormat(ev_id, system, name, fields, print_fmt)


@dataclass
class PageHeader:
    """Ring-buffer page header layout (bytes): timestamp, commit (flags in bits 30/31), data start."""

    ts_offset: int = 0
    ts_size: int = 8
    commit_offset: int = 8
    commit_size: int = 8
    data_offset: int = 16


def parse_header_page(text: str, long_size: int) -> PageHeader:
    """events/header_page: `field: u64 timestamp; offset:0; size:8; signed:0;` etc."""
    ph = PageHeader(commit_size=long_size, data_offset=8 + long_size)
    for m in _FIELD_RE.finditer(text):
        decl = m.group("decl").split()
        nm = decl[-1].split("[")[0] if decl else ""
        off, size = int(m.group("offset")), int(m.group("size"))
        if nm == "timestamp":
            ph.ts_offset, ph.ts_size = off, size
        elif nm == "commit":
            ph.commit_offset, ph.commit_size = off, size
        elif nm == "data":
            ph.data_offset = off
    return ph


_PRINTK_RE = re.compile(r'^\s*(0x[0-9a-fA-F]+)\s*:\s*"(.*)"\s*$')


def _unescape_c(s: str) -> str:
    """Undo the C escapes printk_formats uses (\\n, \\t, \\", \\\\)."""
    if "\\" not in s:
        return s
    out, i = [], 0
    table = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r", "a": "\a", "e": "\x1b"}
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            out.append(table.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_printk_formats(text: str) -> dict[int, str]:
    """printk_formats: `0xffffffc000a1b2c3 : "format\\n"` -> {address: format}."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = _PRINTK_RE.match(line)
        if m:
            out[int(m.group(1), 16)] = _unescape_c(m.group(2))
    return out


def parse_cmdlines(text: str) -> dict[int, str]:
    """saved_cmdlines: `pid comm` lines -> {pid: comm}."""
    out = {}
    for line in text.splitlines():
        pid, _, comm = line.strip().partition(" ")
        if pid.isdigit():
            out[int(pid)] = comm
    return out


def parse_uname(uname: str | None) -> dict:
    """`Linux host 5.15.0-50-generic #56-Ubuntu SMP ... x86_64` -> {sysname, node, release, version, arch}."""
    if not uname:
        return {}
    parts = uname.strip().split()
    if len(parts) < 4:
        return {"uname": uname.strip()}
    return {"uname": uname.strip(), "sysname": parts[0], "node": parts[1], "release": parts[2],
            "version": " ".join(parts[3:-1]), "arch": parts[-1]}


def parse_trace_clock(text: str | None) -> str | None:
    """trace_clock file content `[local] global counter` -> `local`; a bare name passes through."""
    if not text:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    if m:
        return m.group(1)
    t = text.strip().strip("\0")
    return t or None
