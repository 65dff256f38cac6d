"""Record a real trace on this machine: tracefs event switches, a workload, `trace-cmd extract`.

`trace-cmd record` is not usable here (EPERM on set_ftrace_filter), so events are enabled through
tracefs files and the ring buffers are read with `trace-cmd extract` (trace.dat v7, zstd). The caller
must hold the tracefs lock (fixture `tracefs_lock`): tracefs is global. Every tracefs setting touched
is restored afterwards, also when the workload or the extraction fails.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def _read(path: Path) -> str:
    return path.read_text()


def kernel_lost(stats: dict) -> dict[str, int]:
    """{CPU as a string: events its ring buffer lost (overwritten, refused, commit overrun)} as the kernel
    counted them, from the per-CPU tracefs `stats` texts that `record(..., stats=)` collects."""
    out = {}
    for cpu, text in stats.items():
        c = stats_counters(text)
        out[str(cpu)] = c["overrun"] + c.get("dropped events", 0) + c.get("commit overrun", 0)
    return out


def stats_counters(text: str) -> dict[str, int]:
    """The `overrun: 12` lines of a tracefs per-CPU stats file."""
    return {k: int(v) for k, v in re.findall(r"^([a-z ]+): (\d+)$", text, re.M)}


def current_clock(fs: Path) -> str:
    """The trace clock tracefs `fs` uses now (the bracketed name in `trace_clock`): `trace-cmd extract`
    writes it into the file. It is the machine's default unless something set it (`local` on a kernel
    booted without `trace_clock=`)."""
    return re.search(r"\[([^\]]+)\]", _read(fs / "trace_clock")).group(1)


def _enabled_events(fs: Path) -> list[Path]:
    """The enable files of every event that is on now."""
    return [p for p in (fs / "events").glob("*/*/enable") if _read(p).strip() == "1"]


def record(
    fs: Path,
    out: Path,
    events: list[str] | None,
    buffer_kb: int,
    commands: list[list[str]],
    text_copy: Path | None = None,
    stats: dict[int, str] | None = None,
    overwrite: bool = True,
) -> Path:
    """Trace `commands` (run one after the other) into `out`.

    events: tracefs event paths such as "sched/sched_switch" (those missing on this kernel are skipped),
    or None for every event the kernel has (`events/enable`). buffer_kb: per-CPU ring buffer size.
    text_copy: where to save the kernel's own `trace` text of the same buffer (before extraction
    consumes it). stats: filled with each CPU's tracefs `per_cpu/cpuN/stats` text, read before the
    extraction. overwrite: the ring buffer's mode (`options/overwrite`; False: a full buffer refuses
    new events instead of overwriting the oldest)."""
    saved_on = _read(fs / "tracing_on").strip()
    saved_kb = _read(fs / "buffer_size_kb").split()[0]
    saved_overwrite = _read(fs / "options" / "overwrite").strip()
    saved_enabled = _enabled_events(fs)
    switches = (
        [fs / "events" / "enable"]
        if events is None
        else [fs / "events" / e / "enable" for e in events if (fs / "events" / e / "enable").exists()]
    )
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text(str(buffer_kb))
        (fs / "options" / "overwrite").write_text("1" if overwrite else "0")
        for s in switches:
            s.write_text("1")
        (fs / "tracing_on").write_text("1")
        for cmd in commands:
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        (fs / "tracing_on").write_text("0")
        if text_copy is not None:
            text_copy.write_text(_read(fs / "trace"))
        if stats is not None:
            for p in (fs / "per_cpu").glob("cpu*/stats"):
                stats[int(p.parent.name[3:])] = _read(p)
        subprocess.run(["trace-cmd", "extract", "-o", str(out)], check=True, capture_output=True, timeout=120)
        return out
    finally:
        (fs / "tracing_on").write_text("0")
        (fs / "events" / "enable").write_text("0")
        for p in saved_enabled:
            p.write_text("1")
        (fs / "trace").write_text("")
        (fs / "buffer_size_kb").write_text(saved_kb)
        (fs / "options" / "overwrite").write_text(saved_overwrite)
        (fs / "tracing_on").write_text(saved_on)


def record_instances(
    fs: Path,
    out: Path,
    top_events: list[str],
    instances: dict[str, dict],
    commands: list[list[str]],
    stats: dict[str | None, dict[int, str]] | None = None,
    with_top: bool = True,
) -> Path:
    """Trace `commands` into the top buffer (`top_events`) and into named trace instances at once, then
    `trace-cmd extract [-t] -B NAME...` into `out` (which also removes the instances).

    instances: {name: {"events": [...], "buffer_kb": int, "clock": str | None, "marker": str | None,
    "overwrite": bool}}; an instance's `marker` text is written to its own trace_marker during the
    recording; overwrite False: its full buffer refuses new events. with_top=False
    extracts only the instances (no -t: the file then has no top buffer). stats: filled with every
    buffer's per-CPU tracefs stats ({None: top, name: instance}), read before the extraction."""
    saved_on = _read(fs / "tracing_on").strip()
    saved_enabled = _enabled_events(fs)
    dirs = {name: fs / "instances" / name for name in instances}
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        for e in top_events:
            (fs / "events" / e / "enable").write_text("1")
        for name, spec in instances.items():
            d = dirs[name]
            d.mkdir()
            (d / "tracing_on").write_text("0")
            (d / "buffer_size_kb").write_text(str(spec.get("buffer_kb", 1024)))
            if spec.get("clock"):
                (d / "trace_clock").write_text(spec["clock"])
            if spec.get("overwrite") is False:
                (d / "options" / "overwrite").write_text("0")
            for e in spec["events"]:
                (d / "events" / e / "enable").write_text("1")
        for d in dirs.values():
            (d / "tracing_on").write_text("1")
        (fs / "tracing_on").write_text("1")
        for cmd in commands:
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        for name, spec in instances.items():
            if spec.get("marker"):
                (dirs[name] / "trace_marker").write_text(spec["marker"])
        (fs / "tracing_on").write_text("0")
        for d in dirs.values():
            (d / "tracing_on").write_text("0")
        if stats is not None:
            for key, base in [(None, fs)] + list(dirs.items()):
                stats[key] = {int(p.parent.name[3:]): _read(p) for p in (base / "per_cpu").glob("cpu*/stats")}
        cmd = ["trace-cmd", "extract"] + (["-t"] if with_top else [])
        for name in instances:
            cmd += ["-B", name]
        subprocess.run(cmd + ["-o", str(out)], check=True, capture_output=True, timeout=120)
        return out
    finally:
        (fs / "tracing_on").write_text("0")
        for name, d in dirs.items():
            if d.exists():
                (d / "tracing_on").write_text("0")
                for e in instances[name]["events"]:
                    (d / "events" / e / "enable").write_text("0")
                d.rmdir()
        (fs / "events" / "enable").write_text("0")
        for p in saved_enabled:
            p.write_text("1")
        (fs / "trace").write_text("")
        (fs / "tracing_on").write_text(saved_on)
