"""Workload metrics: Jankbench results DB and Geekbench JSON export (scores and frame times).

Frame-rate text from SurfaceFlinger / gfxinfo lives in abtest.results.frames_text, frames from trace
markers in abtest.analysis.frames; `read_workload_metrics(path)` dispatches on the file's content.

Every metric name carries its unit (``_ms``, ``_pct``, ``_fps``; scores are unitless points).

Jankbench (Android UI benchmark) results DB, table ``ui_results`` with one row per frame:
    _id, name (benchmark, e.g. "list_view"), run_id, iteration, timestamp, unknown_delay, input,
    animation, layout, draw, sync, command_issue, swap_buffers, total_duration (all stage columns in
    ms), jank_frame (0/1), device_charging (0/1).

Geekbench JSON export: top-level ``score`` (single-core), ``multicore_score`` and ``sections``, a
list of ``{"name", "score", "workloads": [{"name", "score"}, ...]}``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import polars as pl

from abtest.results.frames_text import gfxinfo_metrics, surfaceflinger_metrics
from abtest.trace.errors import TraceFormatError

JANKBENCH_TABLE = "ui_results"
JANKBENCH_COLUMNS = (
    "_id",
    "name",
    "run_id",
    "iteration",
    "timestamp",
    "unknown_delay",
    "input",
    "animation",
    "layout",
    "draw",
    "sync",
    "command_issue",
    "swap_buffers",
    "total_duration",
    "jank_frame",
    "device_charging",
)
_JANKBENCH_REQUIRED = ("name", "iteration", "total_duration", "jank_frame")
_SQLITE_MAGIC = b"SQLite format 3\x00"


# --------------------------------------------------------------------------------------------
# Jankbench
# --------------------------------------------------------------------------------------------
def read_jankbench_db(path: str | os.PathLike) -> pl.DataFrame:
    """Jankbench results DB -> one row per frame (the ``ui_results`` table as a polars frame).

    Columns: those of ui_results that exist in the file (see module docstring); stage durations
    and total_duration in ms (Float64), jank_frame as Boolean, name as Utf8.

    Raises TraceFormatError when the file is not an sqlite DB, lacks ui_results, or lacks one of
    the columns the metrics need (name, iteration, total_duration, jank_frame).
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(16)
    if head != _SQLITE_MAGIC:
        raise TraceFormatError(
            path,
            f"not an sqlite database (first bytes {head!r})",
            offset=0,
            expected="a Jankbench results DB (SQLite format 3)",
        )
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if JANKBENCH_TABLE not in tables:
            raise TraceFormatError(
                path,
                f"no table {JANKBENCH_TABLE!r} (tables: {sorted(tables)})",
                expected="Jankbench's ui_results table",
            )
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({JANKBENCH_TABLE})")]
        missing = [c for c in _JANKBENCH_REQUIRED if c not in cols]
        if missing:
            raise TraceFormatError(
                path,
                f"table ui_results lacks columns {missing} (has {cols})",
                expected=f"columns {list(JANKBENCH_COLUMNS)}",
            )
        wanted = [c for c in JANKBENCH_COLUMNS if c in cols]
        quoted = ", ".join(f'"{c}"' for c in wanted)
        rows = con.execute(f"SELECT {quoted} FROM {JANKBENCH_TABLE} ORDER BY rowid").fetchall()
    finally:
        con.close()
    df = pl.DataFrame(rows, schema=wanted, orient="row", infer_schema_length=None)
    stage_cols = [
        c
        for c in (
            "unknown_delay",
            "input",
            "animation",
            "layout",
            "draw",
            "sync",
            "command_issue",
            "swap_buffers",
            "total_duration",
        )
        if c in wanted
    ]
    return df.with_columns(
        [pl.col(c).cast(pl.Float64) for c in stage_cols]
        + [pl.col("name").cast(pl.Utf8), pl.col("jank_frame").cast(pl.Int64).cast(pl.Boolean)]
    )


def df_jankbench(frames: pl.DataFrame, *, per_iteration: bool = False) -> pl.DataFrame:
    """Jank % and frame-time statistics per benchmark (optionally per iteration).

    Args:
        frames: output of read_jankbench_db (one row per frame).
        per_iteration: group by (name, iteration) instead of name only.

    Returns one row per group: name, [iteration], iterations, frames, jank_frames,
    jank_pct (100 * jank_frames / frames), mean_frame_ms, p50_frame_ms, p90_frame_ms,
    p95_frame_ms, p99_frame_ms (of total_duration, ms).
    """
    keys = ["name", "iteration"] if per_iteration else ["name"]
    dur = pl.col("total_duration")
    return (
        frames.group_by(keys)
        .agg(
            pl.col("iteration").n_unique().alias("iterations"),
            pl.len().alias("frames"),
            pl.col("jank_frame").sum().cast(pl.Int64).alias("jank_frames"),
            dur.mean().alias("mean_frame_ms"),
            dur.quantile(0.5, "linear").alias("p50_frame_ms"),
            dur.quantile(0.9, "linear").alias("p90_frame_ms"),
            dur.quantile(0.95, "linear").alias("p95_frame_ms"),
            dur.quantile(0.99, "linear").alias("p99_frame_ms"),
        )
        .with_columns((100.0 * pl.col("jank_frames") / pl.col("frames")).alias("jank_pct"))
        .select(
            keys
            + [
                "iterations",
                "frames",
                "jank_frames",
                "jank_pct",
                "mean_frame_ms",
                "p50_frame_ms",
                "p90_frame_ms",
                "p95_frame_ms",
                "p99_frame_ms",
            ]
        )
        .sort(keys)
    )


def jankbench_metrics(path: str | os.PathLike) -> dict:
    """JSON-serialisable Jankbench summary.

    ``{"kind": "jankbench", "frames", "jank_pct", "mean_frame_ms", "benchmarks":
    {name: {"frames", "iterations", "jank_pct", "mean_frame_ms", "p95_frame_ms"}}}`` -- the
    top-level jank_pct / mean_frame_ms pool all frames of all benchmarks.
    """
    frames = read_jankbench_db(path)
    if frames.is_empty():
        raise TraceFormatError(path, "ui_results holds no frames", expected="at least one frame row")
    per = df_jankbench(frames)
    benchmarks = {
        r["name"]: {
            "frames": r["frames"],
            "iterations": r["iterations"],
            "jank_pct": r["jank_pct"],
            "mean_frame_ms": r["mean_frame_ms"],
            "p95_frame_ms": r["p95_frame_ms"],
        }
        for r in per.iter_rows(named=True)  # one row per benchmark, not per event
    }
    return {
        "kind": "jankbench",
        "frames": frames.height,
        "jank_pct": float(100.0 * frames["jank_frame"].sum() / frames.height),
        "mean_frame_ms": float(frames["total_duration"].mean()),
        "benchmarks": benchmarks,
    }


# --------------------------------------------------------------------------------------------
# Geekbench
# --------------------------------------------------------------------------------------------
def read_geekbench_json(path: str | os.PathLike) -> dict:
    """Geekbench JSON export -> scores.

    Returns ``{"kind": "geekbench", "single_core_score", "multi_core_score",
    "sections": {section name: score}, "workloads": {"<section>/<workload>": score}}``
    (scores in Geekbench points; a score absent from the file is None).

    Raises TraceFormatError for invalid JSON or when neither ``score`` nor ``multicore_score``
    is present.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise TraceFormatError(path, f"not UTF-8 text ({e})", offset=e.start, expected="Geekbench JSON") from e
    except json.JSONDecodeError as e:
        raise TraceFormatError(path, f"invalid JSON: {e.msg}", line=e.lineno, expected="a Geekbench JSON export") from e
    if not isinstance(doc, dict) or ("score" not in doc and "multicore_score" not in doc):
        keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise TraceFormatError(
            path,
            f"no 'score' or 'multicore_score' key (found {keys})",
            expected="a Geekbench JSON export with score / multicore_score",
        )
    sections: dict[str, float | None] = {}
    workloads: dict[str, float | None] = {}
    for sec in doc.get("sections") or []:
        if not isinstance(sec, dict) or "name" not in sec:
            raise TraceFormatError(
                path, f"sections[] entry without a name: {sec!r:.80}", expected="sections[] = {name, score, workloads}"
            )
        sections[str(sec["name"])] = _num(sec.get("score"))
        for wl in sec.get("workloads") or []:
            if isinstance(wl, dict) and "name" in wl:
                workloads[f"{sec['name']}/{wl['name']}"] = _num(wl.get("score"))
    return {
        "kind": "geekbench",
        "single_core_score": _num(doc.get("score")),
        "multi_core_score": _num(doc.get("multicore_score")),
        "sections": sections,
        "workloads": workloads,
    }


def _num(v) -> float | None:
    return None if v is None else float(v)


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------
def read_workload_metrics(path: str | os.PathLike) -> dict:
    """Detect the result file's kind from its content and return its metrics dict.

    Kinds: Jankbench sqlite DB, Geekbench JSON, `dumpsys SurfaceFlinger --latency` text,
    `dumpsys gfxinfo <pkg> framestats` text. Raises TraceFormatError for anything else.
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(_SQLITE_MAGIC):
        return jankbench_metrics(path)
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return read_geekbench_json(path)
    if re.search(rb"(?m)^[ \t]*---PROFILEDATA---[ \t]*\r?$", path.read_bytes()):
        return gfxinfo_metrics(path)
    first = stripped.split(b"\n", 1)[0].strip()
    if first.isdigit():
        return surfaceflinger_metrics(path)
    raise TraceFormatError(
        path,
        f"unrecognised workload result file (first bytes {head[:24]!r})",
        offset=0,
        expected="Jankbench DB, Geekbench JSON, SurfaceFlinger --latency or gfxinfo framestats text",
    )
