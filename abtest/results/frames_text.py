"""Frame-rate results that Android writes outside the trace: `dumpsys SurfaceFlinger --latency` and
`dumpsys gfxinfo <pkg> framestats` text (pulled by the collectors, read by compare through metrics.json).

All times are ns on the device's CLOCK_MONOTONIC unless a column name says otherwise;
``*_ms`` columns are milliseconds, ``fps`` is frames per second.

SurfaceFlinger ``--latency <layer>`` text (FrameTracker dump): line 1 is the display refresh period
in ns; then up to 127 lines ``desiredPresentTime<TAB>actualPresentTime<TAB>frameReadyTime`` (ns).
All-zero lines are empty ring slots; an actualPresentTime of INT64_MAX means the present fence had
not signalled yet (frame still pending): both are dropped.

gfxinfo framestats: each window's block sits between two ``---PROFILEDATA---`` lines: a CSV
header (``Flags,IntendedVsync,...,FrameCompleted,...`` -- Android 12+ adds FrameTimelineVsyncId,
FrameDeadline, GpuCompleted...; the header ends with a comma) then one line per frame, ns.
Rows with Flags != 0 are frames Android itself excludes from its jank statistics (window layout
changes, first draw, ...): they are dropped here too.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from abtest.trace.errors import TraceFormatError

INT64_MAX = 9223372036854775807
PROFILEDATA = "---PROFILEDATA---"
DEFAULT_REFRESH_HZ = 60.0


def _read_text(src: str | os.PathLike) -> tuple[str, Path | str]:
    p = Path(src)
    try:
        return p.read_text(encoding="utf-8", errors="strict"), p
    except UnicodeDecodeError as e:
        raise TraceFormatError(p, f"not UTF-8 text ({e.reason})", offset=e.start, expected="dumpsys text") from e


def _lines_frame(text: str) -> pl.DataFrame:
    """Text -> frame (line_no 1-based, line stripped)."""
    lines = pl.Series("line", text.splitlines(), dtype=pl.Utf8)
    return pl.DataFrame({"line_no": pl.int_range(1, lines.len() + 1, eager=True), "line": lines.str.strip_chars()})


# --------------------------------------------------------------------------------------------
# SurfaceFlinger --latency
# --------------------------------------------------------------------------------------------
def parse_surfaceflinger_latency(path: str | os.PathLike) -> tuple[int, pl.DataFrame]:
    """`dumpsys SurfaceFlinger --latency <layer>` text -> (refresh_period_ns, frames).

    frames columns: desired_present_ns, actual_present_ns, frame_ready_ns (Int64, ns), one row per
    presented frame, sorted by actual_present_ns; empty slots and pending frames are dropped.
    Raises TraceFormatError (with the line number) on any malformed line.
    """
    text, p = _read_text(path)
    df = _lines_frame(text).filter(pl.col("line") != "")
    if df.is_empty() or not df["line"][0].isdigit():
        first = df["line"][0] if not df.is_empty() else "(empty file)"
        raise TraceFormatError(
            p,
            f"first line {first!r:.40} is not a refresh period",
            line=1,
            expected="the refresh period in ns on line 1",
        )
    refresh_ns = int(df["line"][0])
    body = df.slice(1).with_columns(pl.col("line").str.extract_groups(r"^(\d+)\s+(\d+)\s+(\d+)$").alias("g"))
    body = body.unnest("g")
    bad = body.filter(pl.col("1").is_null())
    if not bad.is_empty():
        r = bad.row(0, named=True)
        raise TraceFormatError(
            p,
            f"malformed frame line {r['line']!r:.60}",
            line=int(r["line_no"]),
            expected="three integers: desiredPresentTime actualPresentTime frameReadyTime (ns)",
        )
    frames = (
        body.select(
            pl.col("1").cast(pl.Int64).alias("desired_present_ns"),
            pl.col("2").cast(pl.Int64).alias("actual_present_ns"),
            pl.col("3").cast(pl.Int64).alias("frame_ready_ns"),
        )
        .filter(
            (pl.col("desired_present_ns") != 0)
            & (pl.col("actual_present_ns") != 0)
            & (pl.col("actual_present_ns") < INT64_MAX)
        )
        .sort("actual_present_ns")
    )
    return refresh_ns, frames


def df_present_intervals(frames: pl.DataFrame, refresh_period_ns: int) -> pl.DataFrame:
    """Per presented frame: actual_present_ns, interval_ns since the previous present (null for the
    first), and missed_vsync (interval > 1.5 refresh periods: at least one refresh without a new
    frame)."""
    return (
        frames.select("actual_present_ns")
        .with_columns(pl.col("actual_present_ns").diff().alias("interval_ns"))
        .with_columns((pl.col("interval_ns") > 1.5 * refresh_period_ns).alias("missed_vsync"))
    )


def surfaceflinger_metrics(path: str | os.PathLike) -> dict:
    """Frame-rate summary of a `dumpsys SurfaceFlinger --latency` dump.

    ``{"kind": "surfaceflinger_latency", "refresh_period_ns", "refresh_rate_hz", "frames",
    "span_s", "fps", "mean_frame_interval_ms", "max_frame_interval_ms", "missed_vsync_frames",
    "missed_vsync_pct"}``. fps = (frames - 1) / span between first and last actual present;
    missed_vsync_pct is over the (frames - 1) intervals.
    """
    refresh_ns, frames = parse_surfaceflinger_latency(path)
    if frames.height < 2:
        raise TraceFormatError(path, f"only {frames.height} presented frame(s)", expected="at least 2 presented frames")
    iv = df_present_intervals(frames, refresh_ns).drop_nulls("interval_ns")
    span_ns = int(frames["actual_present_ns"].max() - frames["actual_present_ns"].min())
    missed = int(iv["missed_vsync"].sum())
    return {
        "kind": "surfaceflinger_latency",
        "refresh_period_ns": refresh_ns,
        "refresh_rate_hz": 1e9 / refresh_ns if refresh_ns else None,
        "frames": frames.height,
        "span_s": span_ns / 1e9,
        "fps": (frames.height - 1) * 1e9 / span_ns if span_ns else None,
        "mean_frame_interval_ms": float(iv["interval_ns"].mean()) / 1e6,
        "max_frame_interval_ms": float(iv["interval_ns"].max()) / 1e6,
        "missed_vsync_frames": missed,
        "missed_vsync_pct": 100.0 * missed / iv.height,
    }


# --------------------------------------------------------------------------------------------
# gfxinfo framestats
# --------------------------------------------------------------------------------------------
def parse_gfxinfo_framestats(path: str | os.PathLike) -> pl.DataFrame:
    """`dumpsys gfxinfo <pkg> framestats` text -> one row per frame of every PROFILEDATA block.

    Columns: window (Utf8: the line naming the window/ViewRootImpl just before the block, else
    "block<N>"), block (Int32, 0-based), line_no (1-based line of the frame in the file), and every
    header column (Int64, ns, e.g. Flags, IntendedVsync, FrameCompleted). Raises TraceFormatError
    when no block is found, a header lacks IntendedVsync/FrameCompleted, or a row's width differs
    from its header.
    """
    text, p = _read_text(path)
    lines = text.splitlines()
    markers = [i for i, ln in enumerate(lines) if ln.strip() == PROFILEDATA]
    if len(markers) < 2:
        raise TraceFormatError(
            p,
            f"found {len(markers)} '{PROFILEDATA}' line(s)",
            line=(markers[0] + 1) if markers else None,
            expected=f"framestats blocks delimited by two '{PROFILEDATA}' lines",
        )
    blocks = []
    for b, (start, end) in enumerate(zip(markers[0::2], markers[1::2])):  # loop over blocks, not frames
        blocks.append(_parse_profiledata_block(p, lines, start, end, b))
    if len(markers) % 2:
        raise TraceFormatError(
            p, f"unterminated {PROFILEDATA} block", line=markers[-1] + 1, expected=f"a closing '{PROFILEDATA}' line"
        )
    return pl.concat(blocks, how="diagonal_relaxed")


def _window_name(lines: list[str], start: int, block: int) -> str:
    for ln in reversed(lines[max(0, start - 3) : start]):
        if ln.strip():
            return ln.strip()
    return f"block{block}"


def _parse_profiledata_block(p, lines: list[str], start: int, end: int, block: int) -> pl.DataFrame:
    header_idx = start + 1
    if header_idx >= end:
        raise TraceFormatError(p, "empty PROFILEDATA block", line=start + 1, expected="a CSV header line")
    header = [h.strip() for h in lines[header_idx].strip().rstrip(",").split(",")]
    for col in ("Flags", "IntendedVsync", "FrameCompleted"):
        if col not in header:
            raise TraceFormatError(
                p,
                f"framestats header lacks {col!r}: {lines[header_idx].strip()!r:.80}",
                line=header_idx + 1,
                expected="Flags,IntendedVsync,...,FrameCompleted header",
            )
    body = (
        pl.DataFrame({"line": lines[header_idx + 1 : end]}, schema={"line": pl.Utf8})
        .with_columns(
            pl.int_range(header_idx + 2, end + 1).alias("line_no"),
            pl.col("line").str.strip_chars().str.strip_chars_end(","),
        )
        .filter(pl.col("line") != "")
    )
    parts = body.with_columns(pl.col("line").str.split(",").alias("f"))
    wrong = parts.filter(pl.col("f").list.len() != len(header))
    if not wrong.is_empty():
        r = wrong.row(0, named=True)
        raise TraceFormatError(
            p,
            f"frame row has {len(r['f'])} fields, header has {len(header)}",
            line=int(r["line_no"]),
            expected="one integer per header column",
        )
    cols = [
        pl.col("f").list.get(i).str.strip_chars().cast(pl.Int64, strict=False).alias(h) for i, h in enumerate(header)
    ]
    out = parts.select(
        pl.lit(_window_name(lines, start, block)).alias("window"),
        pl.lit(block, pl.Int32).alias("block"),
        "line_no",
        *cols,
    )
    bad = out.filter(pl.any_horizontal([pl.col(h).is_null() for h in header]))
    if not bad.is_empty():
        raise TraceFormatError(
            p, "non-integer value in frame row", line=int(bad["line_no"][0]), expected="integers (ns)"
        )
    return out


def df_gfxinfo_frames(rows: pl.DataFrame, refresh_rate_hz: float = DEFAULT_REFRESH_HZ) -> pl.DataFrame:
    """Valid frames (Flags == 0) with their duration and jank flag.

    Columns: window, intended_vsync_ns, frame_completed_ns, frame_ms ((FrameCompleted -
    IntendedVsync) / 1e6), budget_ms (FrameDeadline - IntendedVsync when the header has
    FrameDeadline, else 1000 / refresh_rate_hz), janky (frame_ms > budget_ms).
    """
    valid = rows.filter(pl.col("Flags") == 0)
    if "FrameDeadline" in valid.columns:
        budget = (pl.col("FrameDeadline") - pl.col("IntendedVsync")) / 1e6
        budget = pl.when(pl.col("FrameDeadline") > 0).then(budget).otherwise(1000.0 / refresh_rate_hz)
    else:
        budget = pl.lit(1000.0 / refresh_rate_hz)
    return (
        valid.select(
            "window",
            pl.col("IntendedVsync").alias("intended_vsync_ns"),
            pl.col("FrameCompleted").alias("frame_completed_ns"),
            ((pl.col("FrameCompleted") - pl.col("IntendedVsync")) / 1e6).alias("frame_ms"),
            budget.alias("budget_ms"),
        )
        .with_columns((pl.col("frame_ms") > pl.col("budget_ms")).alias("janky"))
        .sort("frame_completed_ns")
    )


def gfxinfo_metrics(path: str | os.PathLike, refresh_rate_hz: float = DEFAULT_REFRESH_HZ) -> dict:
    """Frame summary of `dumpsys gfxinfo <pkg> framestats`.

    ``{"kind": "gfxinfo_framestats", "frames" (Flags == 0), "flagged_frames" (dropped),
    "fps" ((frames - 1) / span of FrameCompleted), "mean_frame_ms", "p50_frame_ms",
    "p90_frame_ms", "p95_frame_ms", "p99_frame_ms", "janky_frames", "jank_pct", "windows"}``.
    """
    rows = parse_gfxinfo_framestats(path)
    fr = df_gfxinfo_frames(rows, refresh_rate_hz)
    if fr.height < 2:
        raise TraceFormatError(path, f"only {fr.height} valid (Flags == 0) frame(s)", expected="at least 2 frames")
    span_ns = int(fr["frame_completed_ns"].max() - fr["frame_completed_ns"].min())
    ms = fr["frame_ms"]
    janky = int(fr["janky"].sum())
    return {
        "kind": "gfxinfo_framestats",
        "frames": fr.height,
        "flagged_frames": rows.height - fr.height,
        "fps": (fr.height - 1) * 1e9 / span_ns if span_ns else None,
        "mean_frame_ms": float(ms.mean()),
        "p50_frame_ms": float(ms.quantile(0.5, "linear")),
        "p90_frame_ms": float(ms.quantile(0.9, "linear")),
        "p95_frame_ms": float(ms.quantile(0.95, "linear")),
        "p99_frame_ms": float(ms.quantile(0.99, "linear")),
        "janky_frames": janky,
        "jank_pct": 100.0 * janky / fr.height,
        "windows": sorted(fr["window"].unique().to_list()),
    }
