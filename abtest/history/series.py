"""Series of the results database: one per (device, workload, metric), one point per build in build order
(builds.date, then insertion order). A point is the build's aggregate of its iterations (the metric's declared
aggregation: mean, gmean on logarithms, median) with a 95 % confidence band (Student t on the iterations;
none with one iteration)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats
from sqlalchemy import Engine, and_, func, select
from sqlalchemy import true as sa_true

from abtest.history import schema as S


@dataclass(frozen=True)
class SeriesKey:
    """device, workload, metric (full key); unit, direction (lower/higher/none), aggregation of the metric."""

    device: str
    workload: str
    metric: str
    unit: str = ""
    direction: str = "none"
    aggregation: str = "mean"
    metric_id: int = 0

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "workload": self.workload,
            "metric": self.metric,
            "unit": self.unit,
            "direction": self.direction,
            "aggregation": self.aggregation,
        }


@dataclass(frozen=True)
class Point:
    """One build of a series: value (aggregate, metric unit), ci_low / ci_high (95 %, None with n = 1), n
    iterations; build identity for labels and links."""

    build_id: int
    label: str
    store: str
    date: str
    git_revision: str
    kernel_release: str
    value: float
    ci_low: float | None
    ci_high: float | None
    n: int

    def to_json(self) -> dict:
        return {
            "build_id": self.build_id,
            "label": self.label,
            "store": self.store,
            "date": self.date,
            "git_revision": self.git_revision,
            "kernel_release": self.kernel_release,
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
        }


def list_series(
    engine: Engine, *, metrics: tuple[str, ...] = (), devices: tuple[str, ...] = (), workloads: tuple[str, ...] = ()
) -> list[SeriesKey]:
    """Every (device, workload, metric) with values, filtered by exact names or shell patterns of metrics."""
    from fnmatch import fnmatchcase

    # (device, workload) pairs x metrics that have a value there: index lookups, not a scan of every value
    it, m, mv = S.iterations, S.metrics, S.metric_values
    pairs = select(it.c.device, it.c.workload).distinct()
    if devices:
        pairs = pairs.where(it.c.device.in_(devices))
    if workloads:
        pairs = pairs.where(it.c.workload.in_(workloads))
    pairs = pairs.subquery("pairs")
    i2 = it.alias("i2")
    has_value = (
        select(mv.c.metric_id)
        .select_from(mv.join(i2, mv.c.iteration_id == i2.c.id))
        .where(mv.c.metric_id == m.c.id, i2.c.device == pairs.c.device, i2.c.workload == pairs.c.workload)
        .exists()
    )
    q = (
        select(pairs.c.device, pairs.c.workload, m.c.key, m.c.unit, m.c.direction, m.c.aggregation, m.c.id)
        .select_from(pairs.join(m, sa_true()))
        .where(has_value)
        .order_by(pairs.c.device, pairs.c.workload, m.c.key)
    )
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    out = [SeriesKey(*r) for r in rows]
    if metrics:
        out = [k for k in out if any(fnmatchcase(k.metric, m) for m in metrics)]
    return out


def series_key(engine: Engine, device: str, workload: str, metric: str) -> SeriesKey | None:
    """The series of one (device, workload, metric key), None when it has no value. One indexed lookup (the
    metric by its unique key, then any value of it on that device and workload), not a scan of all series."""
    m, it, mv = S.metrics, S.iterations, S.metric_values
    has_value = (
        select(mv.c.metric_id)
        .select_from(mv.join(it))
        .where(mv.c.metric_id == m.c.id, it.c.device == device, it.c.workload == workload)
        .exists()
    )
    q = select(m.c.key, m.c.unit, m.c.direction, m.c.aggregation, m.c.id).where(m.c.key == metric, has_value)
    with engine.connect() as conn:
        row = conn.execute(q).first()
    return SeriesKey(device, workload, *row) if row is not None else None


def aggregate(values: np.ndarray, aggregation: str) -> tuple[float, float | None, float | None]:
    """(aggregate, ci_low, ci_high) of one build's iteration values."""
    n = len(values)
    logs = aggregation == "gmean" and bool((values > 0).all())
    v = np.log(values) if logs else values
    centre = float(np.median(v)) if aggregation == "median" else float(v.mean())
    lo = hi = None
    if n > 1:
        half = float(stats.t.ppf(0.975, n - 1) * v.std(ddof=1) / math.sqrt(n))
        lo, hi = centre - half, centre + half
    if logs:
        return math.exp(centre), (math.exp(lo) if lo is not None else None), (math.exp(hi) if hi is not None else None)
    return centre, lo, hi


def aggregate_groups(
    values: np.ndarray, starts: np.ndarray, aggregation: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`aggregate` of many builds at once: values holds each build's iteration values one build after the
    other, starts the index of each build's first value. Returns (aggregate, ci_low, ci_high, n) per build;
    the CI bounds are NaN where a build has one iteration."""
    n = np.diff(np.append(starts, len(values)))
    group = np.repeat(np.arange(len(starts)), n)
    logs = np.zeros(len(starts), dtype=bool)
    if aggregation == "gmean":  # logarithms only for builds whose values are all positive (as `aggregate`)
        logs = np.minimum.reduceat(values, starts) > 0
    v = np.where(logs[group], np.log(np.where(logs[group], values, 1.0)), values)
    mean = np.add.reduceat(v, starts) / n
    if aggregation == "median":
        order = np.lexsort((v, group))  # sorted within each build
        s = v[order]
        centre = (s[starts + (n - 1) // 2] + s[starts + n // 2]) / 2
    else:
        centre = mean
    sq = np.add.reduceat((v - mean[group]) ** 2, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(sq / (n - 1))
        half = np.where(n > 1, stats.t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(n), np.nan)
    lo, hi = centre - half, centre + half
    return (np.where(logs, np.exp(centre), centre), np.where(logs, np.exp(lo), lo), np.where(logs, np.exp(hi), hi), n)


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def points(engine: Engine, key: SeriesKey, *, up_to_build: int | None = None) -> list[Point]:
    """The series' builds in order (oldest first). up_to_build: stop at this build (included).
    One query; the per-build aggregates and CI bands are computed for all builds at once (numpy)."""
    q = (
        select(
            S.builds.c.id,
            S.builds.c.label,
            S.builds.c.store,
            S.builds.c.date,
            S.builds.c.git_revision,
            S.builds.c.kernel_release,
            S.metric_values.c.value,
        )
        .select_from(S.metric_values.join(S.iterations).join(S.builds))
        .where(
            and_(
                S.metric_values.c.metric_id == key.metric_id,
                S.iterations.c.device == key.device,
                S.iterations.c.workload == key.workload,
            )
        )
        .order_by(S.builds.c.date, S.builds.c.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    if not rows:
        return []
    build_ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    starts = np.flatnonzero(np.r_[True, build_ids[1:] != build_ids[:-1]])
    if up_to_build is not None:
        hit = np.flatnonzero(build_ids[starts] == up_to_build)
        if len(hit):
            ends = np.append(starts[1:], len(rows))
            rows, starts = rows[: ends[hit[0]]], starts[: hit[0] + 1]
    values = np.fromiter((r[6] for r in rows), dtype=float, count=len(rows))
    value, lo, hi, n = aggregate_groups(values, starts, key.aggregation)
    return [
        Point(b[0], b[1], b[2], b[3], b[4], b[5], float(v), _opt(low), _opt(high), int(k))
        for b, v, low, high, k in zip((rows[i] for i in starts), value.tolist(), lo.tolist(), hi.tolist(), n.tolist())
    ]


def newest_build(engine: Engine) -> int | None:
    """The id of the newest build (latest date, then latest added)."""
    with engine.connect() as conn:
        row = conn.execute(
            select(S.builds.c.id).order_by(S.builds.c.date.desc(), S.builds.c.id.desc()).limit(1)
        ).first()
    return row[0] if row else None


def count_builds(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(S.builds)).scalar_one()
