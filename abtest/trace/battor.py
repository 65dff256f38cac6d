"""BattOr power-monitor logs -> power samples shaped like the canonical ``power_rail`` table, and their clock
alignment to a trace.

The format (Chromium tools/battor_agent ``SamplesToString``; the older aschulm/battor ``battor`` tool prints
``# voltage range`` with a space and no sample-rate line)::

    # BattOr
    # voltage_range [0.0, 6144.0] mV
    # current_range [0.0, 2275.5] mA
    # sample_rate 2000 Hz, gain 5.0x
    0.00 184.3 4012.5
    0.50 185.1 4012.4 <ABCDEF-01234>       <- optional: the clock-sync id the BattOr received at this sample

Columns: time in ms since the BattOr started sampling (its own clock), current in mA, voltage in mV.

`read_battor(path_or_bytes) -> (frame, meta)`:
    frame: ts (Int64 ns on the BattOr's clock: time_ms x 1e6, rounded), rail (Categorical "BattOr"),
    subsystem (Categorical "battery": the whole device at its battery terminals), energy_uj (Float64:
    cumulative energy since the first sample, sum of current x voltage x interval with each usable sample held
    until the next usable one, uJ; null on a sample with a negative current or voltage, which is counted and
    excluded, never integrated), then current_ma, voltage_mv, power_mw (Float64, instantaneous).
    meta: sample_rate_hz (header, else the median sampling interval), samples, duration_s,
    voltage_range_mv / current_range_ma / gain (header), sync_markers ([{"id", "ts"}] of the sample lines
    carrying a sync id), negative_current_samples (excluded from the energy), clock (see below), import_errors.

`align_to_trace(frame, meta, tables, trace_meta) -> (frame, clock)` puts the samples on the trace clock when
the trace says how, and returns the method used (also left in meta["clock"]):

``explicit_sync``
    a sample carries ``<ID>`` and the trace holds a marker ``trace_event_clock_sync: name=ID`` (systrace's
    clock-sync protocol: the same id sent to the device's trace_marker and to the BattOr). offset = marker
    ts - sample ts. Error: not measurable from the files: the two writes are separated by the host -> device
    (adb) and host -> BattOr (serial) latencies, typically milliseconds; with several ids their spread is
    reported (``spread_ns``) and the median offset used.
``regulator_correlation``
    two markers ``trace_event_clock_sync: name=battor regulator=R`` enclose a sync signal: the regulator R
    (a camera-flash boost regulator in the BattOr scripts) switched on and off in a random bit pattern,
    visible in the trace as ``regulator_enable`` / ``regulator_disable`` events of R and in the BattOr's
    current. The on/off signal is resampled at the BattOr's rate and cross-correlated (normalised) with the
    current samples; the peak gives the offset. Error: one sampling interval (0.5 ms at 2 kHz) plus the
    regulator's switching latency (not in the files); the peak correlation and its margin over the next
    best peak (more than a bit period away) are reported, and a weak peak (< 0.5, or a margin < 0.1) is
    refused rather than trusted.
``unaligned``
    neither is possible (the reason is given): the samples stay on the BattOr's own clock (ts from 0 at its
    first sample) and nothing pretends otherwise.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import polars as pl

from abtest.trace import import_log

RAIL = "BattOr"
SUBSYSTEM = "battery"
_RANGE_RE = re.compile(r"^#\s*(voltage|current)[ _]range\s*\[\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\]\s*(\w+)")
_RATE_RE = re.compile(r"^#\s*sample_rate\s+([0-9.]+)\s*Hz(?:\s*,\s*gain\s+([0-9.]+)\s*x)?")
_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_ROW_RE = rf"^\s*({_NUM})\s+({_NUM})\s+({_NUM})(?:\s+<([^>\s]+)>|\s+(\S+))?\s*$"
CLOCK_SYNC_RE = r"trace_event_clock_sync:\s*name=(\S+)(?:\s+regulator=(\S+))?"
MIN_PEAK, MIN_MARGIN = 0.5, 0.1


def read_battor(path_or_bytes: str | os.PathLike | bytes) -> tuple[pl.DataFrame, dict]:
    """A BattOr log (a path, or its bytes) -> (power samples frame, metadata): see the module docstring."""
    data = (
        path_or_bytes if isinstance(path_or_bytes, (bytes, bytearray, memoryview)) else Path(path_or_bytes).read_bytes()
    )
    text = bytes(data).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = (
        pl.DataFrame({"text": text.split("\n")})
        .with_row_index("_line", offset=1)
        .with_columns(pl.col("_line").cast(pl.Int64))
    )
    meta: dict = {"format": "battor", "warnings": []}
    header = lines.filter(pl.col("text").str.strip_chars().str.starts_with("#"))["text"].to_list()
    if not header or not header[0].strip().startswith("# BattOr"):
        meta["warnings"].append("no '# BattOr' header line")
    for h in header:
        if m := _RANGE_RE.match(h.strip()):
            meta[f"{m.group(1)}_range_{m.group(4).lower()}"] = [float(m.group(2)), float(m.group(3))]
        elif m := _RATE_RE.match(h.strip()):
            meta["sample_rate_hz"] = float(m.group(1))
            if m.group(2):
                meta["gain"] = float(m.group(2))
    body = lines.filter(
        ~pl.col("text").str.strip_chars().str.starts_with("#") & (pl.col("text").str.strip_chars() != "")
    )
    g = (
        body.with_columns(pl.col("text").str.extract_groups(_ROW_RE).alias("g"))
        .unnest("g")
        .with_columns(
            (pl.col("1").cast(pl.Float64, strict=False) * 1e6).round().cast(pl.Int64, strict=False).alias("_ts"),
            pl.col("2").cast(pl.Float64, strict=False).alias("_i"),
            pl.col("3").cast(pl.Float64, strict=False).alias("_v"),
        )
    )
    usable = pl.col("_ts").is_not_null() & pl.col("_i").is_finite() & pl.col("_v").is_finite()
    bad = g.filter(~usable.fill_null(False))
    if bad.height:
        import_log.add_error_lines(
            meta,
            "battor_row",
            bad.select("_line", "text"),
            detail="expected 'time_ms current_mA voltage_mV [<sync id>]'",
        )
    rows = g.filter(usable.fill_null(False)).select(
        "_line",
        pl.col("_ts").alias("ts"),
        pl.col("_i").alias("current_ma"),
        pl.col("_v").alias("voltage_mv"),
        pl.col("4").alias("_sync"),
    )
    out_of_order = int(rows.select((pl.col("ts").diff() < 0).sum()).item() or 0)
    if out_of_order:
        meta["warnings"].append(f"{out_of_order} BattOr samples go back in time: sorted by time")
        rows = rows.sort("ts", maintain_order=True)
    frame = _energy_frame(rows)
    meta["samples"] = frame.height
    if frame.height > 1:
        step = float(rows["ts"].diff().drop_nulls().median())
        meta["duration_s"] = (int(frame["ts"][-1]) - int(frame["ts"][0])) / 1e9
        meta.setdefault("sample_rate_hz", round(1e9 / step, 3) if step > 0 else None)
        meta["measured_sample_rate_hz"] = round(1e9 / step, 3) if step > 0 else None
    meta["sync_markers"] = [
        {"id": i, "ts": int(t)} for i, t in rows.filter(pl.col("_sync").is_not_null()).select("_sync", "ts").iter_rows()
    ]
    negative = int(frame["energy_uj"].is_null().sum())
    if negative:
        meta["negative_current_samples"] = negative
        meta["warnings"].append(
            f"{negative} BattOr sample(s) with a negative current or voltage (a glitch, or a "
            "device charging) excluded from the energy: the previous usable sample's power is "
            "held over their interval"
        )
    meta["clock"] = {
        "method": "unaligned",
        "offset_ns": None,
        "error_ns": None,
        "reason": "not aligned to any trace yet: ts is the BattOr's own clock (ms since its first sample)",
    }
    return frame, meta


USABLE = (pl.col("current_ma") >= 0) & (pl.col("voltage_mv") >= 0)  # a sample the energy integrates


def _energy_frame(rows: pl.DataFrame) -> pl.DataFrame:
    """Every row kept (ts, current and voltage stay for the clock alignment); energy_uj (uJ, cumulative) sums
    the usable samples' power, each held until the next usable sample; null on a sample with a negative current
    or voltage (not integrated: the power analysis counts it as a sample without a reading)."""
    power_mw = pl.col("current_ma") * pl.col("voltage_mv") / 1000.0
    dt_s = (pl.col("ts").shift(-1) - pl.col("ts")).cast(pl.Float64) / 1e9
    step_uj = (power_mw * 1000.0 * dt_s).shift(1).fill_null(0.0)  # usable sample k held until usable sample k+1
    rows = rows.with_row_index("_row")
    energy = rows.filter(USABLE).select("_row", step_uj.cum_sum().alias("energy_uj"))
    return (
        rows.join(energy, on="_row", how="left")
        .sort("_row")
        .select(
            "ts",
            pl.lit(RAIL).cast(pl.Categorical).alias("rail"),
            pl.lit(SUBSYSTEM).cast(pl.Categorical).alias("subsystem"),
            "energy_uj",
            "current_ma",
            "voltage_mv",
            power_mw.alias("power_mw"),
        )
    )


def _markers(tables: dict) -> pl.DataFrame:
    """(ts, name, regulator) of the trace's clock-sync markers."""
    marker = tables.get("marker")
    if marker is None or "text" not in marker.columns:
        return pl.DataFrame(schema={"ts": pl.Int64, "name": pl.Utf8, "regulator": pl.Utf8})
    g = pl.col("text").str.extract_groups(CLOCK_SYNC_RE)
    return (
        marker.select("ts", g.alias("g"))
        .unnest("g")
        .rename({"1": "name", "2": "regulator"})
        .filter(pl.col("name").is_not_null())
    )


def _regulator_signal(tables: dict, regulator: str, lo: int, hi: int) -> pl.DataFrame:
    """(ts, on) switch events of `regulator` in [lo, hi] from regulator_enable / regulator_disable."""
    parts = []
    for table, on in (("regulator_enable", 1.0), ("regulator_disable", 0.0)):
        df = tables.get(table)
        if df is None or "name" not in df.columns:
            continue
        parts.append(
            df.filter((pl.col("name").cast(pl.Utf8) == regulator) & pl.col("ts").is_between(lo, hi)).select(
                "ts", pl.lit(on).alias("on")
            )
        )
    if not parts:
        return pl.DataFrame(schema={"ts": pl.Int64, "on": pl.Float64})
    return pl.concat(parts).sort("ts")


def _explicit(frame_meta: dict, markers: pl.DataFrame) -> dict | None:
    ids = {m["id"]: m["ts"] for m in frame_meta.get("sync_markers", [])}
    hits = markers.filter(pl.col("name").is_in(list(ids)))
    if hits.is_empty():
        return None
    offsets = [int(ts) - ids[name] for ts, name in hits.select("ts", "name").iter_rows()]
    spread = max(offsets) - min(offsets)
    return {
        "method": "explicit_sync",
        "offset_ns": int(np.median(offsets)),
        "markers": len(offsets),
        "spread_ns": spread,
        "error_ns": None,
        "error_note": "not measurable from the files (host->device and host->BattOr write latencies, typically "
        "milliseconds)" + (f"; the {len(offsets)} sync ids agree within {spread} ns" if len(offsets) > 1 else ""),
    }


def _correlate(frame: pl.DataFrame, rate_hz: float, signal: pl.DataFrame, t0: int, t1: int) -> dict:
    """Normalised cross-correlation of the regulator on/off signal (trace clock) with the BattOr current."""
    period = 1e9 / rate_hz
    n_sig = int((t1 - t0) / period) + 1
    times = t0 + np.arange(n_sig) * period
    idx = np.searchsorted(signal["ts"].to_numpy(), times, side="right") - 1
    on = signal["on"].to_numpy()
    g = np.where(idx >= 0, on[np.clip(idx, 0, None)], 1.0 - on[0])  # before the first switch: the other state
    x = frame["current_ma"].to_numpy().astype(np.float64)
    n = len(x)
    if n < n_sig or g.std() == 0:
        return {
            "ok": False,
            "reason": "fewer BattOr samples than the sync signal lasts"
            if n < n_sig
            else "the regulator never changed state during the sync signal",
        }
    g0 = (g - g.mean()) / (g.std() * n_sig)
    size = 1 << int(np.ceil(np.log2(n + n_sig)))
    num = np.fft.irfft(np.fft.rfft(x, size) * np.conj(np.fft.rfft(g0, size)), size)[: n - n_sig + 1]
    c1 = np.concatenate([[0.0], np.cumsum(x)])
    c2 = np.concatenate([[0.0], np.cumsum(x * x)])
    win_mean = (c1[n_sig:] - c1[:-n_sig]) / n_sig
    win_var = np.maximum((c2[n_sig:] - c2[:-n_sig]) / n_sig - win_mean**2, 1e-12)
    r = num / np.sqrt(win_var)
    best = int(np.argmax(r))
    bit = max(1, int(0.02 * rate_hz))  # exclude the peak's own neighbourhood (20 ms) for the runner-up
    others = np.concatenate([r[: max(0, best - bit)], r[best + bit + 1 :]])
    second = float(others.max()) if len(others) else -1.0
    return {"ok": True, "shift": best, "peak": float(r[best]), "margin": float(r[best] - second)}


def align_to_trace(frame: pl.DataFrame, meta: dict, tables: dict) -> tuple[pl.DataFrame, dict]:
    """Put BattOr samples (from `read_battor`) on the clock of a trace whose canonical `tables` hold the
    clock-sync markers (see the module docstring). Returns (frame with ts shifted, or unchanged when
    unaligned; the clock description, also stored in meta["clock"])."""
    markers = _markers(tables)
    clock = _explicit(meta, markers)
    if clock is None:
        clock = _by_regulator(frame, meta, markers, tables)
    meta["clock"] = clock
    if clock["method"] == "unaligned":
        meta["warnings"].append(f"BattOr samples not aligned to the trace clock: {clock['reason']}")
        return frame, clock
    return frame.with_columns(pl.col("ts") + clock["offset_ns"]), clock


def _by_regulator(frame: pl.DataFrame, meta: dict, markers: pl.DataFrame, tables: dict) -> dict:
    sync = markers.filter(pl.col("name") == "battor")
    unaligned = {"method": "unaligned", "offset_ns": None, "error_ns": None}
    if sync.height < 2:
        reason = (
            "no clock-sync marker in the trace (trace_event_clock_sync: name=battor regulator=... or "
            "name=<id> matching a BattOr sample's <id>)"
            if markers.is_empty() and not meta.get("sync_markers")
            else "no BattOr sync id matches a trace marker, and fewer than two 'name=battor' markers"
        )
        return unaligned | {"reason": reason}
    regulator = sync["regulator"].drop_nulls()
    if regulator.is_empty():
        return unaligned | {"reason": "the 'name=battor' markers name no regulator"}
    regulator = regulator[0]
    t0, t1 = int(sync["ts"][0]), int(sync["ts"][1])
    signal = _regulator_signal(tables, regulator, t0, t1)
    if signal.is_empty():
        return unaligned | {
            "reason": f"the trace has the battor sync markers ({t0}..{t1} ns, regulator {regulator}) "
            f"but no regulator_enable / regulator_disable events of {regulator} between "
            f"them: the sync signal cannot be located in the power samples"
        }
    rate = meta.get("sample_rate_hz") or meta.get("measured_sample_rate_hz")
    if not rate:
        return unaligned | {"reason": "the BattOr log's sample rate is unknown"}
    start = int(signal["ts"][0])
    found = _correlate(frame, float(rate), signal, start, int(signal["ts"][-1]))
    if not found["ok"]:
        return unaligned | {"reason": found["reason"]}
    weak = found["peak"] < MIN_PEAK or found["margin"] < MIN_MARGIN
    detail = {
        "regulator": regulator,
        "switches": signal.height,
        "peak_correlation": round(found["peak"], 4),
        "peak_margin": round(found["margin"], 4),
    }
    if weak:
        return (
            unaligned
            | detail
            | {
                "reason": f"the cross-correlation peak is too weak to trust (peak "
                f"{found['peak']:.3f} < {MIN_PEAK} or margin {found['margin']:.3f} < "
                f"{MIN_MARGIN})"
            }
        )
    offset = start - int(frame["ts"][found["shift"]])
    return {
        "method": "regulator_correlation",
        "offset_ns": offset,
        "error_ns": int(round(1e9 / float(rate))),
        "error_note": "one BattOr sampling interval; the regulator's switching latency is not in the files",
        **detail,
    }
