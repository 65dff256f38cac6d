"""abtest.analysis.boost.df_boost_requests written with frames (intervals + as-of joins): the oracle of the
compiled one (native/sim/src/boost.rs)."""

from __future__ import annotations

import polars as pl

from abtest.analysis.boost import HEADROOM, _platform_frames
from abtest.analysis.intervals import df_intervals, window_of


def df_boost_requests(
    signals: pl.DataFrame, platform: dict, *, start_ns: int | None = None, end_ns: int | None = None
) -> pl.DataFrame:
    """As abtest.analysis.boost.df_boost_requests: domain, ts, dur (ns), util_request_khz, boost_request_khz,
    util_khz, boost_khz."""
    cpus, opps = _platform_frames(platform)
    fmax = opps.group_by("domain").agg(pl.col("opp_khz").max().alias("fmax"))
    sig = signals.select(
        pl.col("cpu").cast(pl.Int32), "ts", pl.col("util").cast(pl.Float64), pl.col("runnable").cast(pl.Float64)
    )
    start_ns, end_ns = window_of(sig, start_ns, end_ns)
    iv = df_intervals(sig, ["util", "runnable"], keys="cpu", start_ns=start_ns, end_ns=end_ns, merge_equal=False)
    iv = iv.join(cpus, on="cpu").join(fmax, on="domain")
    k = HEADROOM * pl.col("fmax") / pl.col("capacity")
    iv = iv.with_columns(
        (k * pl.col("util")).alias("util_req"),
        (k * pl.max_horizontal("util", pl.coalesce("runnable", "util"))).alias("boost_req"),
    )
    # domain request = max over its CPUs at every instant: evaluate every CPU at every cut of its domain
    cuts = iv.select("domain", "ts").unique()
    grid = cuts.join(cpus.select("cpu", "domain"), on="domain").sort("ts")
    vals = iv.select("cpu", "ts", (pl.col("ts") + pl.col("dur")).alias("_end"), "util_req", "boost_req").sort("ts")
    grid = grid.join_asof(vals, on="ts", by="cpu", strategy="backward", check_sortedness=False).with_columns(
        [pl.when(pl.col("ts") < pl.col("_end")).then(pl.col(c)).alias(c) for c in ("util_req", "boost_req")]
    )
    dom = (
        grid.group_by("domain", "ts")
        .agg(pl.col("util_req").max().alias("util_request_khz"), pl.col("boost_req").max().alias("boost_request_khz"))
        .sort("domain", "ts")
    )
    dom = dom.with_columns((pl.col("ts").shift(-1).over("domain").fill_null(end_ns) - pl.col("ts")).alias("dur"))
    dom = dom.filter(pl.col("dur") > 0)

    def clamp(col: str, out: str) -> pl.DataFrame:
        known = dom.filter(pl.col(col).is_not_null()).sort(col)
        up = known.join_asof(
            opps.with_columns(pl.col("opp_khz").cast(pl.Float64)),
            left_on=col,
            right_on="opp_khz",
            by="domain",
            strategy="forward",
            check_sortedness=False,
        )
        up = up.join(fmax, on="domain").with_columns(pl.coalesce("opp_khz", "fmax").cast(pl.Int64).alias(out))
        return up.select("domain", "ts", out)

    return (
        dom.join(clamp("util_request_khz", "util_khz"), on=["domain", "ts"], how="left")
        .join(clamp("boost_request_khz", "boost_khz"), on=["domain", "ts"], how="left")
        .select("domain", "ts", "dur", "util_request_khz", "boost_request_khz", "util_khz", "boost_khz")
        .sort("domain", "ts")
    )
