"""Reference values from the real `trace-cmd report` (the Debian trace-cmd package), for trace.dat tests.

`trace-cmd report -R -t` prints one line per event with full-ns timestamps and raw field values
(`name=value` in format order, no print-fmt transformation), which is what the raw tables hold.
"""
from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from functools import lru_cache

_LINE = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<s>\d+)\.(?P<ns>\d{9}):\s+"
                   r"(?P<event>[\w:]+):\s?(?P<rest>.*)$")


@lru_cache(maxsize=32)
def report_lines(path: str, raw: bool = True) -> tuple[str, ...]:
    """Output lines of `trace-cmd report [-R] -t -i path` (stderr dropped)."""
    cmd = ["trace-cmd", "report", "-t"] + (["-R"] if raw else []) + ["-i", path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, errors="replace").stdout
    return tuple(out.splitlines())


def events(path: str, raw: bool = True) -> dict[str, list[tuple[int, int, int, str]]]:
    """{event: [(ts_ns, cpu, common_pid, rest-of-line)]} in report order."""
    out: dict[str, list] = defaultdict(list)
    for line in report_lines(path, raw):
        m = _LINE.match(line)
        if m:
            ts = int(m.group("s")) * 1_000_000_000 + int(m.group("ns"))
            out[m.group("event")].append((ts, int(m.group("cpu")), int(m.group("pid")), m.group("rest").rstrip()))
    return dict(out)


def parse_fields(rest: str, names: list[str]) -> list[str] | None:
    """Split `a=1 b=x y c=3` knowing the field order (values may contain spaces)."""
    pat = " ".join(f"{re.escape(n)}=(.*?)" for n in names)
    m = re.fullmatch(pat, rest.rstrip())
    return list(m.groups()) if m else None
