"""Reference values from the real `trace-cmd report` (the Debian trace-cmd package), for trace.dat tests.

`trace-cmd report -R -t` prints one line per event with full-ns timestamps and raw field values
(`name=value` in format order, no print-fmt transformation), which is what the raw tables hold.
"""

from __future__ import annotations

import bisect
import re
import struct
import subprocess
from collections import defaultdict
from functools import lru_cache

import polars as pl

# `-t` prints "secs.nanosecs" for clocks trace-cmd knows to be in ns (local, global, perf, ...) and the
# raw counter value without a decimal point for the others (e.g. boot): both are parsed to an int.
# Events of a named trace instance are prefixed with `NAME:` and padding.
_LINE = re.compile(
    r"^(?:(?P<inst>[^\s:]+):\s{2,})?\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s*"
    r"(?P<s>\d+)(?:\.(?P<ns>\d{9}))?:\s+(?P<event>[\w:]+):\s?(?P<rest>.*)$"
)


@lru_cache(maxsize=32)
def report_lines(path: str, raw: bool = True) -> tuple[str, ...]:
    """Output lines of `trace-cmd report [-R] -t -i path` (stderr dropped)."""
    cmd = ["trace-cmd", "report", "-t"] + (["-R"] if raw else []) + ["-i", path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, errors="replace").stdout
    return tuple(out.splitlines())


def events(path: str, raw: bool = True, with_instance: bool = False) -> dict[str, list[tuple]]:
    """{event: [(ts_ns, cpu, common_pid, rest-of-line)]} in report order; with_instance: a fifth item, the
    trace instance whose buffer held the event (None for the top buffer)."""
    out: dict[str, list] = defaultdict(list)
    for line in report_lines(path, raw):
        m = _LINE.match(line)
        if m:
            ns = m.group("ns")
            ts = int(m.group("s")) * 1_000_000_000 + int(ns) if ns is not None else int(m.group("s"))
            row = (ts, int(m.group("cpu")), int(m.group("pid")), m.group("rest").rstrip())
            out[m.group("event")].append(row + (m.group("inst"),) if with_instance else row)
    return dict(out)


def parse_fields(rest: str, names: list[str]) -> list[str] | None:
    """Split `a=1 b=x y c=3` knowing the field order (values may contain spaces)."""
    pat = " ".join(f"{re.escape(n)}=(.*?)" for n in names)
    m = re.fullmatch(pat, rest.rstrip())
    return list(m.groups()) if m else None


def _ours_as_text(value, dtype) -> str:
    if isinstance(dtype, pl.List):  # trace-cmd -R prints arrays as their bytes: ARRAY[5f, 2e, ...]
        width = {pl.UInt8: 1, pl.Int8: 1, pl.UInt16: 2, pl.Int16: 2, pl.UInt32: 4, pl.Int32: 4}.get(dtype.inner, 8)
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}[width]
        raw = b"".join(struct.pack("<" + code, v & ((1 << (8 * width)) - 1)) for v in value)
        return "ARRAY[" + ", ".join(f"{b:02x}" for b in raw) + "]"
    return str(value)


def _event_pairs(raw: dict, path: str):
    """Every event of `trace-cmd report -R -t path` except bprint (whose raw form is the binary argument
    block) with its row of the raw table, matched in (ts, cpu) order: yields (event, field names, their
    dtypes, our row (ts, cpu, common_pid, fields...), trace-cmd's field texts). Asserts equal counts per
    event and equal ts, cpu and common_pid."""
    for ev, rows in events(path).items():
        if ev == "bprint":
            continue
        df = raw[ev]
        cpu_col = "buffer_cpu" if "buffer_cpu" in df.columns else "cpu"
        names = [
            c
            for c in df.columns
            if c not in ("ts", "buffer_cpu", "common_pid", "instance")
            and not (c == "cpu" and cpu_col == "cpu")
            and not c.startswith("common_")
        ]
        dtypes = [df.schema[c] for c in names]
        # (ts, cpu, pid): events of two buffers (trace instances) may share ts and cpu
        ours = sorted(
            zip(
                df["ts"].to_list(), df[cpu_col].to_list(), df["common_pid"].to_list(), *[df[c].to_list() for c in names]
            ),
            key=lambda r: (r[0], r[1], r[2]),
        )
        theirs = sorted(rows, key=lambda r: (r[0], r[1], r[2]))
        assert len(ours) == len(theirs), ev
        for mine, their in zip(ours, theirs):
            assert mine[:3] == their[:3], (ev, mine[:3], their)
            values = parse_fields(their[3].strip(), names)
            assert values is not None, (ev, names, their[3])
            yield ev, names, dtypes, mine, values


def compare_fields(raw: dict, path: str) -> int:
    """Assert that every event in `trace-cmd report -R -t path` (except bprint, whose raw form is the
    binary argument block) has the same ts, cpu, common_pid and field values in the raw tables.
    Returns the number of events checked."""
    checked = 0
    for ev, names, dtypes, mine, values in _event_pairs(raw, path):
        for name, dt, v_mine, v_ref in zip(names, dtypes, mine[3:], values):
            if ev == "kernel_stack" and name == "caller":
                # the table holds the `size` real entries; trace-cmd prints the declared 8 slots,
                # reading past a shorter record: compare the entries both have
                size = mine[3 + names.index("size")]
                assert len(v_mine) == size, (ev, v_mine, size)
                ours_txt = _ours_as_text(v_mine[:8], dt)[len("ARRAY[") : -1]
                assert v_ref[len("ARRAY[") : -1].startswith(ours_txt), (ev, ours_txt, v_ref)
            elif name == "buf" and ev == "print":
                assert v_mine.rstrip("\n") == v_ref, (ev, v_mine, v_ref)
            elif name == "ip" and not v_ref.lstrip("-").isdigit() and not v_ref.startswith("0x"):
                continue  # trace-cmd prints the symbol name of an ip; the table keeps the address
            elif v_ref.startswith("0x") and isinstance(v_mine, int):
                assert v_mine == int(v_ref, 16), (ev, name, v_mine, v_ref)
            elif isinstance(v_mine, int):  # e.g. target_cpu is printed as %03d
                assert v_mine == int(v_ref, 10), (ev, name, v_mine, v_ref)
            else:
                assert _ours_as_text(v_mine, dt) == v_ref, (ev, name, v_mine, v_ref, mine[:3])
        checked += 1
    return checked


def _printed_integer_matches(value: int, text: str, bits: int) -> bool:
    """True when `text`, as `trace-cmd report -R` prints a field through its print format (decimal,
    0x-hex, bare hex such as `%llx`, octal such as `%o`, `(nil)`), is `value`, compared as `bits`-bit
    two's complement (a u64 -1 prints as -1 or 0xffffffffffffffff)."""
    mask = (1 << bits) - 1
    if text == "(nil)":
        return value == 0
    for base in (10, 16, 8):
        try:
            if (int(text, base) & mask) == (value & mask):
                return True
        except ValueError:
            pass
    return False


_INT_BITS = {pl.Int8: 8, pl.UInt8: 8, pl.Int16: 16, pl.UInt16: 16, pl.Int32: 32, pl.UInt32: 32}


def printk_and_symbols(path) -> tuple[dict[int, str], Symbols]:
    """The file's printk formats ({address: format text}) and kernel symbols, as the decoder reads them."""
    from pathlib import Path

    from abtest.trace import tracedat

    printk, kallsyms = tracedat.printk_and_kallsyms(path, Path(path).read_bytes())
    return ({a: f.decode("utf-8", "replace") for a, f in printk.items()}, Symbols(kallsyms.decode("utf-8", "replace")))


class Symbols:
    """Kernel symbol lookup over the kallsyms text a trace.dat carries (`addr type name [module]` lines)."""

    def __init__(self, kallsyms: str):
        pairs = sorted((int(a, 16), n) for a, _t, n, *_ in (ln.split() for ln in kallsyms.splitlines()) if int(a, 16))
        self.addrs = [a for a, _ in pairs]
        self.names = [n for _, n in pairs]

    def printed(self, addr: int) -> set[str]:
        """How trace-cmd may print `addr`: the symbol at the nearest address at or below it, as `name` (`%ps`)
        or `name+0xoff` (`%pS`, also `+0x0`), for every symbol at that address."""
        i = bisect.bisect_right(self.addrs, addr)
        if i == 0:
            return set()
        at = self.addrs[i - 1]
        lo = bisect.bisect_left(self.addrs, at)
        off = addr - at
        return set(self.names[lo:i]) | {f"{n}+0x{off:x}" for n in self.names[lo:i]}


def compare_fields_as_printed(raw: dict, path: str, printk: dict[int, str], syms: Symbols) -> dict[str, int]:
    """Like compare_fields, for files holding any kernel event: an integer field may be printed in the
    radix of its event's print format (see _printed_integer_matches), a `const char *` field as the
    constant string it points to or as its address (the table holds the string when every address of
    the field is one of the file's printk formats, `printk`: address -> text),
    a code address as its kernel symbol (looked up in the file's kallsyms, `syms`). Asserts on the
    first difference; returns counts: events checked, fields matched through printk formats and symbols."""
    checked = via_printk = via_symbol = 0
    for ev, names, dtypes, mine, values in _event_pairs(raw, path):
        for name, dt, v_mine, v_ref in zip(names, dtypes, mine[3:], values):
            if ev == "kernel_stack" and name == "caller":
                continue  # compared by compare_fields on the sched traces; trace-cmd reads past the record
            if isinstance(v_mine, str) and "\n" in v_mine.rstrip("\n"):
                # text with a newline inside (a printk message, a marker): trace-cmd prints the rest of it
                # on lines of its own, which `events` does not read
                assert v_mine.split("\n")[0] == v_ref, (ev, name, v_mine, v_ref)
            elif name == "buf" and ev == "print":
                assert v_mine.rstrip("\n") == v_ref, (ev, v_mine, v_ref)
            elif isinstance(v_mine, int) and v_mine in printk and printk[v_mine] == v_ref:
                via_printk += 1  # a constant-string pointer kept as its address, printed as the string
            elif (
                isinstance(v_mine, str) and re.fullmatch(r"0x[0-9a-f]+", v_ref) and printk.get(int(v_ref, 16)) == v_mine
            ):
                via_printk += 1  # resolved to its string here, printed as the address by trace-cmd
            elif isinstance(v_mine, int) and v_ref in syms.printed(v_mine & (1 << 64) - 1):
                via_symbol += 1
            elif isinstance(v_mine, int):
                assert _printed_integer_matches(v_mine, v_ref, _INT_BITS.get(dt, 64)), (ev, name, v_mine, v_ref)
            else:
                assert _ours_as_text(v_mine, dt) == v_ref, (ev, name, v_mine, v_ref, mine[:3])
        checked += 1
    return {"events": checked, "printk": via_printk, "symbols": via_symbol}


def dropped_per_cpu(path: str) -> tuple[dict[int, int], dict[int, int]]:
    """trace-cmd report's lost-event markers per CPU: (sum of the `CPU:N [M EVENTS DROPPED]` counts,
    number of `CPU:N [EVENTS DROPPED]` markers, printed for a page flagged as having lost events whose
    count the kernel had no room to store)."""
    counted: dict[int, int] = defaultdict(int)
    uncounted: dict[int, int] = defaultdict(int)
    for line in report_lines(path, raw=False):
        m = re.match(r"^\s*CPU:(\d+) \[(?:(\d+) )?EVENTS DROPPED\]", line)
        if m and m.group(2) is not None:
            counted[int(m.group(1))] += int(m.group(2))
        elif m:
            uncounted[int(m.group(1))] += 1
    return dict(counted), dict(uncounted)


def assert_v6_rewrite_matches(path, out, raw: dict) -> dict:
    """Rewrite trace.dat `path` as uncompressed v6 into `out` (`trace-cmd convert`), decode it and assert the
    raw tables equal `raw` (the decode of `path`). Returns the rewrite's meta."""
    from abtest.trace import tracedat

    subprocess.run(
        ["trace-cmd", "convert", "-i", str(path), "-o", str(out), "--file-version", "6", "--compression", "none"],
        check=True,
        capture_output=True,
    )
    raw6, meta6 = tracedat.read(out, out.read_bytes())
    assert sorted(raw6) == sorted(raw)
    for name in raw:
        assert raw6[name].equals(raw[name]), name
    return meta6
