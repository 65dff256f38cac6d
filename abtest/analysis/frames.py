"""Frame slices from atrace markers (``B|pid|Choreographer#doFrame`` ... ``E``) in a trace, and the
perfetto frame timeline. The dumpsys text parsers (SurfaceFlinger --latency, gfxinfo framestats) live in
abtest.results.frames_text.

All times are ns on the trace clock unless a column name says otherwise; ``*_ms`` columns are
milliseconds, ``fps`` is frames per second.
"""

from __future__ import annotations

import os

import polars as pl

from abtest.metric_spec import TableSpec
from abtest.trace.errors import AnalysisNotApplicable

EVENTS = ("marker",)  # frame slices from atrace markers (tracing_mark_write / print)


# --------------------------------------------------------------------------------------------
# Frame slices from atrace markers in a trace
# --------------------------------------------------------------------------------------------
def df_marker_slices(marker: pl.DataFrame) -> pl.DataFrame:
    """atrace begin/end markers -> complete slices, matched per thread with proper nesting.

    marker: canonical ``marker`` table (ts, cpu, pid = writing thread, text).
    Texts ``B|<tgid>|<name>`` open a slice on the writing thread, ``E`` / ``E|<tgid>`` close the
    innermost open one. Returns tid, tgid, name, ts (begin, ns), dur_ns, depth (0 = outermost);
    unclosed slices are dropped.
    """
    ev = (
        marker.select("ts", pl.col("pid").alias("tid"), "text")
        .filter(pl.col("text").str.starts_with("B|") | (pl.col("text") == "E") | pl.col("text").str.starts_with("E|"))
        .with_columns(
            pl.col("text").str.starts_with("B").alias("is_begin"),
        )
        .sort(["tid", "ts"], maintain_order=True)
        .with_columns(pl.when(pl.col("is_begin")).then(1).otherwise(-1).cum_sum().over("tid").alias("depth_after"))
        .with_columns(
            # a begin opens level depth_after; an end closes level depth_after + 1
            pl.when(pl.col("is_begin")).then(pl.col("depth_after")).otherwise(pl.col("depth_after") + 1).alias("level")
        )
        .filter(pl.col("level") > 0)
    )
    paired = ev.with_columns(
        pl.col("ts").shift(-1).over(["tid", "level"]).alias("end_ts"),
        pl.col("is_begin").shift(-1).over(["tid", "level"]).alias("next_is_begin"),
    ).filter(pl.col("is_begin") & (pl.col("next_is_begin") == False))  # noqa: E712 (polars expr)
    parts = pl.col("text").str.splitn("|", 3)
    return paired.select(
        "tid",
        parts.struct.field("field_1").cast(pl.Int32, strict=False).alias("tgid"),
        parts.struct.field("field_2").alias("name"),
        "ts",
        (pl.col("end_ts") - pl.col("ts")).alias("dur_ns"),
        (pl.col("level") - 1).alias("depth"),
    ).sort("ts")


def df_frames_from_markers(marker: pl.DataFrame, slice_name: str = "Choreographer#doFrame") -> pl.DataFrame:
    """Per process (tgid): frames (count of `slice_name` slices), span_s, fps ((frames - 1) / span
    between first and last frame start), mean_frame_ms and p95_frame_ms (slice duration, ms).

    slice_name matches the start of the slice name (Android appends the vsync id:
    "Choreographer#doFrame 123456")."""
    s = df_marker_slices(marker).filter(pl.col("name").str.starts_with(slice_name))
    return (
        s.group_by("tgid")
        .agg(
            pl.len().alias("frames"),
            ((pl.col("ts").max() - pl.col("ts").min()) / 1e9).alias("span_s"),
            (pl.col("dur_ns").mean() / 1e6).alias("mean_frame_ms"),
            (pl.col("dur_ns").quantile(0.95, "linear") / 1e6).alias("p95_frame_ms"),
        )
        .with_columns(pl.when(pl.col("span_s") > 0).then((pl.col("frames") - 1) / pl.col("span_s")).alias("fps"))
        .sort("frames", descending=True)
    )


# --------------------------------------------------------------------------------------------
# Perfetto frame timeline (SurfaceFlinger FrameTimeline data source)
# --------------------------------------------------------------------------------------------
_FRAME_TIMELINE_SQL = """
select a.ts as ts, a.dur as dur_ns, a.layer_name as layer_name, a.jank_type as jank_type,
       a.present_type as present_type, a.on_time_finish as on_time_finish, p.pid as pid
from actual_frame_timeline_slice a left join process p using (upid)
order by a.ts
"""


def read_frame_timeline(path: str | os.PathLike, engine: str | None = None) -> pl.DataFrame:
    """Actual frame timeline slices of a perfetto trace, through Perfetto's trace_processor
    (abtest.trace.perfetto_engine; abtest's own perfetto reader does not decode FrameTimelineEvent
    packets). One row per frame: ts (ns, frame start), dur_ns, layer_name (null = SurfaceFlinger's
    display frame), jank_type ("None" = on time; else e.g. "App Deadline Missed", "Buffer Stuffing"),
    present_type, on_time_finish, pid.

    Raises abtest.trace.perfetto_engine.EngineUnavailableError when no engine is available.
    """
    from abtest.trace import perfetto_engine

    return perfetto_engine.query(path, _FRAME_TIMELINE_SQL, engine=engine)


def df_frame_timeline_stats(frames: pl.DataFrame) -> pl.DataFrame:
    """Per (pid, layer): frames, span_s, fps ((frames - 1) / span between first and last frame start),
    mean_frame_ms (slice duration), janky_frames (jank_type != "None"), jank_pct,
    app_deadline_missed (jank_type mentions "App Deadline Missed"). layer "<display>" = SurfaceFlinger's
    display frames. Sorted by frames, descending."""
    f = frames.with_columns(pl.col("layer_name").fill_null("<display>").alias("layer"))
    return (
        f.group_by(["pid", "layer"])
        .agg(
            pl.len().alias("frames"),
            ((pl.col("ts").max() - pl.col("ts").min()) / 1e9).alias("span_s"),
            (pl.col("dur_ns").mean() / 1e6).alias("mean_frame_ms"),
            (pl.col("jank_type").fill_null("None") != "None").sum().cast(pl.Int64).alias("janky_frames"),
            pl.col("jank_type")
            .fill_null("")
            .str.contains("App Deadline Missed")
            .sum()
            .cast(pl.Int64)
            .alias("app_deadline_missed"),
        )
        .with_columns(
            pl.when(pl.col("span_s") > 0).then((pl.col("frames") - 1) / pl.col("span_s")).alias("fps"),
            (100.0 * pl.col("janky_frames") / pl.col("frames")).alias("jank_pct"),
        )
        .sort(["frames", "layer"], descending=[True, False])
    )


def _process_rows(trace) -> pl.DataFrame:
    """Frames per process from atrace Choreographer#doFrame markers (MissingEventsError without markers,
    AnalysisNotApplicable when they hold no doFrame slice)."""
    from abtest.trace.errors import MissingEventsError

    if "marker" not in trace.tables or not trace.df("marker", windowed=False).height:
        raise MissingEventsError("frames", ["tracing_mark_write"], str(trace.path))
    per = df_frames_from_markers(trace.df("marker"))
    if not per.height:
        raise AnalysisNotApplicable("no Choreographer#doFrame slices in the trace's markers")
    return per


def _layer_rows(trace) -> pl.DataFrame | None:
    """Frames per layer from the perfetto frame timeline (the 10 layers with most frames; None for other
    formats; AnalysisNotApplicable when no Perfetto engine can read it)."""
    if trace.meta.get("format") != "perfetto":
        return None
    from abtest.trace.perfetto_engine import EngineQueryError, EngineUnavailableError

    try:
        ft = read_frame_timeline(trace.path)
    except (EngineUnavailableError, EngineQueryError) as e:  # say so; the markers may still answer
        raise AnalysisNotApplicable(f"perfetto frame timeline not read ({type(e).__name__}: {e})") from e
    if not ft.height:
        return None
    if (trace.start_ns, trace.end_ns) != (trace.meta.get("start_ns"), trace.meta.get("end_ns")):
        ft = ft.filter((pl.col("ts") >= trace.start_ns) & (pl.col("ts") < trace.end_ns))  # frames starting inside
    return df_frame_timeline_stats(ft).head(10)


TABLES = (
    TableSpec(
        "processes",
        "Frames per process (atrace Choreographer#doFrame slices)",
        "tgid frames fps[frames/s] mean_frame_ms[ms] p95_frame_ms[ms]",
        _process_rows,
    ),
    TableSpec(
        "layers",
        "Frames per layer (perfetto frame timeline, the 10 layers with most frames)",
        "pid layer frames fps[frames/s] mean_frame_ms[ms] janky_frames jank_pct[%] app_deadline_missed",
        _layer_rows,
        keys=2,
    ),
)
