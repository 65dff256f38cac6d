"""Declarations of the metrics workloads report themselves (written to metrics.json by the collectors'
workload plugins, or by a user's own scripts under the same keys).

These are the "workload" analysis of the metric registry (abtest.analysis.registry): compare, the seed
tables and the gate read unit, direction and aggregation from here; a plugin writes a value with
`entry(spec, value)`, never a unit of its own.
"""

from __future__ import annotations

from abtest.metric_spec import Aggregation, Direction, Grouping, MetricSpec

LOWER, HIGHER, NONE = Direction.LOWER, Direction.HIGHER, Direction.NONE
MEAN, GMEAN = Aggregation.MEAN, Aggregation.GMEAN

# -- frames (YouTube, games, Jankbench) ---------------------------------------------------------
FPS = MetricSpec(
    "fps",
    "frames/s",
    HIGHER,
    MEAN,
    title="FPS",
    headline=True,
    description="Frames presented per second over the workload (SurfaceFlinger --latency, gfxinfo "
    "framestats or doFrame markers): (frames - 1) / span between the first and last.",
)
JANK_PCT = MetricSpec(
    "jank_pct",
    "%",
    LOWER,
    MEAN,
    title="jank",
    headline=True,
    description="Janky frames / all frames x 100 (Jankbench jank_frame; gfxinfo frames over their "
    "deadline; SurfaceFlinger intervals longer than 1.5 refresh periods).",
)
MEAN_FRAME_MS = MetricSpec(
    "mean_frame_ms",
    "ms",
    LOWER,
    MEAN,
    title="mean frame time",
    description="Mean frame duration (Jankbench total_duration, gfxinfo FrameCompleted - "
    "IntendedVsync) or mean present interval (SurfaceFlinger).",
)
P95_FRAME_MS = MetricSpec(
    "p95_frame_ms",
    "ms",
    LOWER,
    MEAN,
    title="p95 frame time",
    description="95th percentile of the frame durations (linear interpolation).",
)

# -- scores ---------------------------------------------------------------------------------------
GEEKBENCH_SINGLE = MetricSpec(
    "geekbench_single_core_score",
    "points",
    HIGHER,
    GMEAN,
    title="Geekbench single-core",
    headline=True,
    description="Geekbench single-core score (JSON export `score`).",
)
GEEKBENCH_MULTI = MetricSpec(
    "geekbench_multi_core_score",
    "points",
    HIGHER,
    GMEAN,
    title="Geekbench multi-core",
    headline=True,
    description="Geekbench multi-core score (JSON export `multicore_score`).",
)
PCMARK = MetricSpec(
    "pcmark_{benchmark}",
    "points",
    HIGHER,
    GMEAN,
    Grouping.BENCHMARK,
    title="PCMark score",
    description="PCMark for Android score of one test (its Result.xml).",
)

# -- Linux benchmarks -----------------------------------------------------------------------------
HACKBENCH_TIME = MetricSpec(
    "hackbench_time_s",
    "s",
    LOWER,
    MEAN,
    title="hackbench time",
    headline=True,
    description="hackbench's reported `Time:` for its groups x loops of messages.",
)
BOGO_OPS = MetricSpec(
    "bogo_ops",
    "ops",
    HIGHER,
    MEAN,
    title="stress-ng bogo ops",
    description="stress-ng bogo operations completed (its metrics-brief total).",
)
BOGO_OPS_PER_S = MetricSpec(
    "bogo_ops_per_s",
    "ops/s",
    HIGHER,
    MEAN,
    title="stress-ng bogo ops/s",
    headline=True,
    description="stress-ng bogo operations per second of real time.",
)
EVENTS_PER_S = MetricSpec(
    "events_per_s",
    "events/s",
    HIGHER,
    MEAN,
    title="sysbench events/s",
    headline=True,
    description="sysbench events per second (its 'events per second', else total / time).",
)
SYSBENCH_LAT_AVG = MetricSpec(
    "latency_avg_ms", "ms", LOWER, MEAN, title="sysbench latency avg", description="sysbench's average event latency."
)
SYSBENCH_LAT_P95 = MetricSpec(
    "latency_p95_ms",
    "ms",
    LOWER,
    MEAN,
    title="sysbench latency p95",
    description="sysbench's 95th percentile event latency.",
)
CYCLICTEST_AVG = MetricSpec(
    "latency_avg_us",
    "us",
    LOWER,
    MEAN,
    title="cyclictest latency avg",
    headline=True,
    description="cyclictest's average timer latency, mean over its threads.",
)
CYCLICTEST_MAX = MetricSpec(
    "latency_max_us",
    "us",
    LOWER,
    MEAN,
    title="cyclictest latency max",
    description="cyclictest's maximum timer latency over its threads.",
)
CYCLICTEST_MIN = MetricSpec(
    "latency_min_us",
    "us",
    LOWER,
    MEAN,
    title="cyclictest latency min",
    description="cyclictest's minimum timer latency over its threads.",
)
BUILD_TIME = MetricSpec(
    "build_time_s",
    "s",
    LOWER,
    MEAN,
    title="build time",
    headline=True,
    description="Wall time of the kernel build command (make -jN), from the host's clock.",
)
DURATION = MetricSpec(
    "duration_s",
    "s",
    NONE,
    MEAN,
    title="workload wall time",
    description="Wall time of the workload command as the collector measured it (no direction: for "
    "fixed-duration workloads it only documents the run).",
)

WORKLOAD_METRICS: tuple[MetricSpec, ...] = (
    FPS,
    JANK_PCT,
    MEAN_FRAME_MS,
    P95_FRAME_MS,
    GEEKBENCH_SINGLE,
    GEEKBENCH_MULTI,
    PCMARK,
    HACKBENCH_TIME,
    BOGO_OPS,
    BOGO_OPS_PER_S,
    EVENTS_PER_S,
    SYSBENCH_LAT_AVG,
    SYSBENCH_LAT_P95,
    CYCLICTEST_AVG,
    CYCLICTEST_MAX,
    CYCLICTEST_MIN,
    BUILD_TIME,
    DURATION,
)


def entry(spec: MetricSpec, value: float, group: str | None = None) -> tuple[str, dict]:
    """(full key, metrics.json entry) for one value of a declared workload metric."""
    return spec.full_key(group), {"value": float(value), "unit": spec.unit, "lower_is_better": spec.lower_is_better}
