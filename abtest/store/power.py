"""Power samples of one iteration, whatever wrote them: the store's power.csv (read and write) and a
BattOr log beside the trace.

power.csv: one row per sample and rail, ``ts_ns`` (int, ns on the trace clock when the collector could
align it), ``rail``, ``subsystem`` (may be empty), ``energy_uj`` (the rail's cumulative energy counter as
sampled, uJ). Every reader returns the shape of the canonical ``power_rail`` table
(``ts`` Int64 ns, ``rail`` / ``subsystem`` Categorical, ``energy_uj`` Float64), so one integration
(abtest.analysis.power) serves power.csv, perfetto rails, ODPM, hwmon, RAPL, Monsoon and BattOr alike.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from abtest.trace.errors import TraceFormatError

POWER_SCHEMA = {"ts_ns": pl.Int64, "rail": pl.Utf8, "subsystem": pl.Utf8, "energy_uj": pl.Float64}


_POWER_CSV_COLUMNS = ("ts_ns", "rail", "subsystem", "energy_uj")


def read_power_csv(path: str | Path) -> pl.DataFrame:
    """Run-store ``power.csv`` (ts_ns, rail, subsystem, energy_uj cumulative uJ) -> power_rail-shaped frame
    ``ts (Int64 ns), rail (Categorical), subsystem (Categorical), energy_uj (Float64)`` sorted by ts.

    Raises TraceFormatError (file, line, what was expected) on a bad header or value.
    """
    path = Path(path)
    try:
        header = path.open().readline().strip()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read power samples: {exc}") from exc
    cols = [c.strip() for c in header.split(",")]
    missing = [c for c in ("ts_ns", "rail", "energy_uj") if c not in cols]
    if missing:
        raise TraceFormatError(
            path, f"header lacks {missing}", line=1, expected="CSV header ts_ns,rail,subsystem,energy_uj"
        )
    raw = pl.read_csv(path, infer_schema=False)  # all Utf8, so a bad value can be located
    raw = raw.with_row_index("_line", offset=2)
    parsed = raw.select(
        "_line",
        pl.col("ts_ns").str.strip_chars().cast(pl.Int64, strict=False).alias("ts"),
        pl.col("rail").str.strip_chars().alias("rail"),
        (pl.col("subsystem").fill_null("") if "subsystem" in raw.columns else pl.lit("")).alias("subsystem"),
        pl.col("energy_uj").str.strip_chars().cast(pl.Float64, strict=False).alias("energy_uj"),
        pl.col("ts_ns").alias("_ts_raw"),
        pl.col("energy_uj").alias("_e_raw"),
    )
    bad = parsed.filter(pl.col("ts").is_null() | pl.col("energy_uj").is_null() | pl.col("rail").is_null())
    if bad.height:
        row = bad.row(0, named=True)
        raise TraceFormatError(
            path,
            f"bad sample ts_ns={row['_ts_raw']!r} energy_uj={row['_e_raw']!r}",
            line=int(row["_line"]),
            expected="integer ts_ns, non-empty rail, numeric energy_uj",
        )
    return parsed.select(
        "ts", pl.col("rail").cast(pl.Categorical), pl.col("subsystem").cast(pl.Categorical), "energy_uj"
    ).sort("ts", maintain_order=True)


def write_power_csv(df: pl.DataFrame, path: str | Path) -> Path:
    """Write the run-store power.csv (columns ts_ns, rail, subsystem, energy_uj)."""
    df.select(list(POWER_SCHEMA)).write_csv(path)
    return Path(path)


def read_battor_samples(path: str | Path) -> tuple[pl.DataFrame, dict]:
    """A BattOr log beside a trace (battor.txt) as power_rail-shaped samples (rail "BattOr", the whole device
    through the battery) and the reader's metadata (abtest.trace.battor.read_battor: sample rate, clock — on its
    own clock unless aligned — and import_errors). Averages over the log's own span are what a power metric
    needs, so an unaligned clock is fine for power.<Channel>; the metadata says which clock it is."""
    from abtest.trace.battor import read_battor

    frame, meta = read_battor(path)
    usable = frame["energy_uj"].is_not_null().sum()  # null: a negative current / voltage, excluded
    if usable < 2:
        raise TraceFormatError(
            path,
            f"only {usable} usable BattOr sample(s)",
            expected="'time_ms current_mA voltage_mV' rows after the '# BattOr' header",
        )
    return frame.select(
        "ts",
        pl.col("rail").cast(pl.Categorical),
        pl.col("subsystem").cast(pl.Categorical),
        pl.col("energy_uj").cast(pl.Float64),
    ), meta
