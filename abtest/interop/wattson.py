"""Perfetto Wattson CPU power estimates beside abtest's energy model and the measured power rails.

Wattson is Perfetto's power model (stdlib module `wattson.estimates`, curves under
src/trace_processor/plugins/wattson/data/<device>/). trace_processor decides whether a trace is covered from
the Android build fingerprint's device codename and its device map (`_wattson_device_map`; in the wasm
build v52: oriole, raven, bluejay -> "Tensor" (Tensor G1, Pixel 6/6 Pro/6a); eos, aurora -> "monaco").
A device outside that map gets no estimate: the Pixel 7 Pro ("cheetah", Tensor G2) is NOT covered, and
Perfetto publishes no Tensor_G2 curves.

`compare_estimates(path)` reports, for one trace:
  * coverage: codename, Wattson device, covered or not and why;
  * wattson_cpu_mw: Wattson's time-weighted average power per CPU and the DSU/SCU (mW), when covered;
  * energy_model: abtest.analysis.energy's estimate per frequency domain (mW) from a platform with an
    energy model: `platform=` (any file abtest.analysis.platform.load_platform reads) or the Wattson
    cpu_1d.csv curves of the Wattson device found under `curves_dir` / $ABTEST_WATTSON_CURVES;
  * rails_mw: the measured CPU rails (average mW per rail, from abtest's own power_rail table).

`assume_device=CODENAME` is a labelled what-if: the trace is copied with its fingerprint's codename
replaced by another of the same length (e.g. cheetah -> bluejay) so that Wattson runs with that device's
curves. It is a check of the machinery (Wattson vs abtest's model on the same curves), NOT a power
estimate for the real device.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl

from abtest.trace import perfetto_engine as pe

CURVES_ENV = "ABTEST_WATTSON_CURVES"


def _fingerprint(s: pe.Session) -> str | None:
    df = s.query("select str_value from metadata where name = 'android_build_fingerprint'")
    return df["str_value"][0] if df.height else None


def codename_of(fingerprint: str | None) -> str | None:
    """Device codename from an Android build fingerprint 'brand/product/device:release/...' (the device field)."""
    if not fingerprint or "/" not in fingerprint:
        return None
    parts = fingerprint.split("/")
    return parts[2].split(":", 1)[0] if len(parts) > 2 else None


def wattson_device_map(s: pe.Session) -> dict[str, str]:
    """Codename -> Wattson device, as this trace_processor build knows it."""
    df = s.query("include perfetto module wattson.device_infos; select device, wattson_device from _wattson_device_map")
    return dict(df.iter_rows())


def df_wattson_cpu_mw(s: pe.Session) -> pl.DataFrame:
    """Wattson's estimate: component (cpuN | dsu_scu), avg_mw (time-weighted over the time it is known, mW),
    known_ns (time with an estimate, ns). Empty when the device is not covered."""
    est = s.query("include perfetto module wattson.estimates; select * from _cpu_estimates_mw")
    comps = [c for c in est.columns if c.endswith("_mw")]
    if est.is_empty() or not comps:
        return pl.DataFrame(schema={"component": pl.String, "avg_mw": pl.Float64, "known_ns": pl.Int64})
    rows = []
    for c in comps:  # one row per component column (a handful), each a vectorised reduction
        known = est.filter(pl.col(c).is_not_null())
        known_ns = int(known["dur"].sum())
        avg = float((known[c] * known["dur"]).sum() / known_ns) if known_ns else None
        rows.append({"component": c[:-3], "avg_mw": avg, "known_ns": known_ns})
    return pl.DataFrame(rows, schema={"component": pl.String, "avg_mw": pl.Float64, "known_ns": pl.Int64})


def _patched_copy(path: Path, old: str, new: str) -> Path:
    """Copy of `path` whose fingerprint codename `old` is replaced by `new` (same length: no proto re-encoding)."""
    if len(old) != len(new):
        raise ValueError(
            f"cannot substitute device {old!r} with {new!r}: codenames must have the same length "
            "(the fingerprint is patched in place, without re-encoding the protobuf)"
        )
    data = path.read_bytes()
    needle = f"/{old}/{old}".encode()
    if needle not in data:
        raise ValueError(f"{path}: fingerprint with device {old!r} not found")
    fd, tmp = tempfile.mkstemp(suffix=f"-as-{new}.perfetto-trace")
    with os.fdopen(fd, "wb") as f:
        f.write(data.replace(needle, f"/{new}/{new}".encode()))
    return Path(tmp)


def _rails_mw(trace) -> pl.DataFrame | None:
    """Measured CPU rails: rail, channel (CPU-Little/Mid/Big per abtest.analysis.power.rail_mapping),
    avg_power_mw over the time the samples cover."""
    if "power_rail" not in trace.tables:
        return None
    from abtest.analysis.power import CPU_CHANNELS, df_power_per_rail, rail_mapping

    per_rail = df_power_per_rail(trace.df("power_rail"))
    mapping = rail_mapping(per_rail["rail"].to_list())
    rail_channel = {r: ch for ch in CPU_CHANNELS for r in mapping.channels.get(ch, ())}
    return (
        per_rail.with_columns(
            pl.col("rail").replace_strict(rail_channel, default=None, return_dtype=pl.String).alias("channel")
        )
        .filter(pl.col("channel").is_not_null())
        .select("rail", "channel", "avg_power_mw")
        .sort("rail")
    )


def _energy_model(
    trace, platform, wattson_device: str | None, curves_dir: Path | None
) -> tuple[pl.DataFrame | None, str]:
    from abtest.analysis.energy import df_energy_estimate
    from abtest.analysis.platform import load_platform

    if platform is None:
        if wattson_device is None or curves_dir is None:
            return None, (
                "no energy model: give platform= (an energy-model platform file) or the Wattson curves "
                f"directory (curves_dir= or ${CURVES_ENV}) for a covered device"
            )
        curve = curves_dir / wattson_device / "cpu_1d.csv"
        if not curve.is_file():
            return None, f"no energy model: {curve} does not exist"
        platform = curve
    plat = load_platform(platform, cpus_count=trace.cpus or None) if not isinstance(platform, dict) else platform
    if not trace.has_events("cpu_frequency"):
        return None, "no energy model estimate: the trace has no cpu_frequency events"
    cpu_idle = trace.df("cpu_idle") if trace.has_events("cpu_idle") else None
    sched_switch = trace.df("sched_switch") if cpu_idle is None and trace.has_events("sched_switch") else None
    est = df_energy_estimate(trace.df("cpu_frequency"), plat, cpu_idle=cpu_idle, sched_switch=sched_switch)
    cpus = {d["id"]: d["cpus"] for d in plat["domains"]}
    est = est.with_columns(
        pl.col("domain")
        .map_elements(lambda d: ",".join(map(str, cpus.get(d, []))), return_dtype=pl.String)
        .alias("cpus")
    )
    notes = "; ".join(plat.get("notes") or [])
    return est.select("domain", "cpus", "avg_power_mw", "unmodelled_ns", "source"), notes


def compare_estimates(
    path: str | os.PathLike,
    *,
    engine: str | None = None,
    assume_device: str | None = None,
    platform=None,
    curves_dir: str | os.PathLike | None = None,
) -> dict:
    """Wattson (trace_processor) vs abtest's energy model vs measured CPU rails for one trace.

    Returns a dict: device, fingerprint, wattson_device, covered (bool), coverage (sentence), assumed_device,
    wattson_cpu_mw (DataFrame component/avg_mw/known_ns or None), wattson_cpu_total_mw, energy_model
    (DataFrame domain/cpus/avg_power_mw/unmodelled_ns/source or None), energy_model_total_mw,
    rails_mw (DataFrame rail/channel/avg_power_mw or None), rails_cpu_total_mw, tp_device_map, notes.
    """
    from abtest.session import Trace

    path = Path(path)
    curves = Path(curves_dir) if curves_dir else (Path(os.environ[CURVES_ENV]) if os.environ.get(CURVES_ENV) else None)
    notes: list[str] = []
    s = pe.open_session(path, engine)
    tmp = None
    try:
        fingerprint = _fingerprint(s)
        device = codename_of(fingerprint)
        dmap = wattson_device_map(s)
        wdev = dmap.get(device or "")
        covered = wdev is not None
        coverage = (
            f"device {device!r} is covered by Wattson ({wdev})"
            if covered
            else f"device {device!r} is not in this trace_processor's Wattson device map "
            f"({', '.join(f'{k}->{v}' for k, v in sorted(dmap.items()))}): no Wattson estimate"
            if device
            else "no Android build fingerprint in the trace: Wattson cannot pick a device"
        )
        wattson_session = s
        if assume_device:
            if assume_device not in dmap:
                raise ValueError(f"assume_device {assume_device!r} is not in the Wattson device map {sorted(dmap)}")
            if device is None:
                raise ValueError(f"{path}: no fingerprint to substitute")
            tmp = _patched_copy(path, device, assume_device)
            wattson_session = pe.open_session(tmp, engine)
            wdev = dmap[assume_device]
            notes.append(
                f"WHAT-IF: Wattson ran with {assume_device!r} ({wdev}) curves on a {device!r} trace: a check "
                "of the machinery, not a power estimate for this device"
            )
        wattson = df_wattson_cpu_mw(wattson_session) if (covered or assume_device) else None
        if wattson_session is not s:
            wattson_session.close()
    finally:
        s.close()
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    trace = Trace(path)
    model, model_note = _energy_model(trace, platform, wdev if (covered or assume_device) else None, curves)
    if model_note:
        notes.append(model_note)
    rails = _rails_mw(trace)
    if rails is None:
        notes.append("no power rails in the trace")
    return {
        "path": str(path),
        "device": device,
        "fingerprint": fingerprint,
        "wattson_device": wdev if covered else None,
        "covered": covered,
        "coverage": coverage,
        "assumed_device": assume_device,
        "tp_device_map": dmap,
        "wattson_cpu_mw": wattson,
        "wattson_cpu_total_mw": float(wattson["avg_mw"].sum()) if wattson is not None and wattson.height else None,
        "energy_model": model,
        "energy_model_total_mw": float(model["avg_power_mw"].sum()) if model is not None else None,
        "rails_mw": rails,
        "rails_cpu_total_mw": float(rails["avg_power_mw"].sum()) if rails is not None and rails.height else None,
        "notes": notes,
    }
