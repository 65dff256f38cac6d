"""From the reports to the timeline: the `abtest timeline` command that opens a trace file (or a span of it),
for compare's outlier notes and explain's top items (abtest.report names it, the HTML report links the file)."""

from __future__ import annotations

import shlex
from pathlib import Path

TIMELINE_SUFFIX = ".timeline.perfetto-trace"


def timeline_output(trace_path: str | Path) -> Path:
    """Where the timeline of ``trace_path`` is written by default: beside it, <name>.timeline.perfetto-trace."""
    p = Path(trace_path)
    return p.with_name(p.name + TIMELINE_SUFFIX)


def timeline_command(
    trace_path: str | Path, window_s: tuple[float, float] | None = None, out: str | Path | None = None
) -> str:
    """The `abtest timeline` command line that writes the timeline of ``trace_path`` (optionally the span
    ``window_s``, seconds from the trace's start) to ``out`` (default: timeline_output)."""
    cmd = ["abtest", "timeline", str(trace_path), "-o", str(out or timeline_output(trace_path))]
    if window_s:
        cmd += ["--window", f"{window_s[0]:.3f}", f"{window_s[1]:.3f}"]
    return shlex.join(cmd)
