"""Power samplers and importers on files in the real formats (ODPM iio text, RAPL energy_uj with a wrap,
hwmon, Monsoon CSV with its quirks, generic CSV); the target-side sampling loop runs for real on this
machine over counter files it reads while they change."""

from __future__ import annotations

import threading
import time

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import power as pw
from abtest.collectors.power import (
    PowerSampler,
    parse_generic_csv,
    parse_monsoon_csv,
    parse_odpm_enabled_rails,
    parse_odpm_energy,
    parse_sysfs_samples,
    rapl_from_samples,
    unwrap_counter,
    write_power_csv,
)
from abtest.compare.metrics import iteration_metrics
from abtest.store.reader import load_label
from abtest.store.writer import write_iteration
from abtest.targets.local import LocalTarget
from abtest.trace.errors import TraceFormatError

ENABLED_RAILS = """CH0[S4M_VDD_CPUCL0]:CPU(LITTLE)
CH1[S3M_VDD_CPUCL1]:CPU(MID)
CH2[S2M_VDD_CPUCL2]:CPU(BIG)
CH3[S2S_VDD_G3D]:GPU
"""
ENERGY_T1 = """t=1234567
CH0(T=1234567)[S4M_VDD_CPUCL0], 1000000
CH1(T=1234567)[S3M_VDD_CPUCL1], 2000000
CH2(T=1234567)[S2M_VDD_CPUCL2], 3000000
CH3(T=1234567)[S2S_VDD_G3D], 400
"""
ENERGY_T2 = """t=1235567
CH0(T=1235567)[S4M_VDD_CPUCL0], 1150000
CH1(T=1235567)[S3M_VDD_CPUCL1], 2300000
CH2(T=1235567)[S2M_VDD_CPUCL2], 3900000
CH3(T=1235567)[S2S_VDD_G3D], 400
"""


def test_odpm_text():
    rails = parse_odpm_enabled_rails(ENABLED_RAILS)
    assert rails["S2S_VDD_G3D"] == "GPU" and len(rails) == 4
    df = parse_odpm_energy(ENERGY_T1 + ENERGY_T2, rails)
    assert df.columns == ["ts_ns", "rail", "subsystem", "energy_uj"]
    big = df.filter(pl.col("rail") == "S2M_VDD_CPUCL2")
    assert big["ts_ns"].to_list() == [1234567 * 1_000_000, 1235567 * 1_000_000]  # ms (CLOCK_BOOTTIME) -> ns
    assert big["subsystem"].to_list() == ["CPU(BIG)"] * 2
    # 0.9 J over 1 s on the big cluster = 900 mW
    assert (big["energy_uj"][1] - big["energy_uj"][0]) / 1.0 / 1000 == pytest.approx(900.0)
    with pytest.raises(TraceFormatError, match="line 2"):
        parse_odpm_energy("t=1\nCH0(T=1)[X] 12\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        parse_odpm_enabled_rails("CH0 S4M_VDD_CPUCL0 CPU\n")


def test_rapl_wrap_is_unwrapped():
    max_range = 262143328850.0  # max_energy_range_uj of a real package domain
    text = (
        f"@ 100.00\n/sys/class/powercap/intel-rapl:0/energy_uj {int(max_range) - 2_000_000}\n"
        f"@ 101.00\n/sys/class/powercap/intel-rapl:0/energy_uj {int(max_range) - 500_000}\n"
        "@ 102.00\n/sys/class/powercap/intel-rapl:0/energy_uj 1000000\n"
        "@ 103.00\n/sys/class/powercap/intel-rapl:0/energy_uj 3000000\n"
    )
    samples = parse_sysfs_samples(text)
    df = rapl_from_samples(
        samples, {"/sys/class/powercap/intel-rapl:0/energy_uj": "package-0:0"}, {"package-0:0": max_range}
    )
    e = df["energy_uj"].to_list()
    steps = [b - a for a, b in zip(e, e[1:])]
    assert steps == [1_500_000, 500_000 + 1 + 1_000_000, 2_000_000]  # wrap at max_range (+1 to reach 0)
    assert df["ts_ns"].to_list() == [100_000_000_000, 101_000_000_000, 102_000_000_000, 103_000_000_000]
    # two rails, one wrapping, one not: per-rail unwrap
    two = pl.DataFrame(
        {
            "ts_ns": [1, 2, 1, 2],
            "rail": ["a", "a", "b", "b"],
            "subsystem": [""] * 4,
            "energy_uj": [90.0, 10.0, 5.0, 50.0],
        }
    )
    out = unwrap_counter(two, {"a": 99.0, "b": 99.0})
    assert out.filter(pl.col("rail") == "a")["energy_uj"].to_list() == [90.0, 110.0]
    assert out.filter(pl.col("rail") == "b")["energy_uj"].to_list() == [5.0, 50.0]


def test_monsoon_csv(tmp_path):
    p = tmp_path / "monsoon.csv"
    # the power tool's export: Time(ms) actually in seconds, a trailing comma on every row
    p.write_text(
        "Time(ms),Main(mA),Main Voltage(V),USB(mA),USB Voltage(V),\n"
        "0.0000,100.0,4.0,0.0,0.0,\n0.5000,100.0,4.0,0.0,0.0,\n1.0000,300.0,4.0,0.0,0.0,\n"
    )
    df = parse_monsoon_csv(p, start_ts_ns=5_000_000_000)
    main = df.filter(pl.col("rail") == "Main")
    assert main["ts_ns"].to_list() == [5_000_000_000, 5_500_000_000, 6_000_000_000]
    # 400 mW for 0.5 s + trapezoid 400..1200 mW over 0.5 s = 0.2 J + 0.4 J
    assert main["energy_uj"].to_list() == pytest.approx([0.0, 200_000.0, 600_000.0])
    bad = tmp_path / "bad.csv"
    bad.write_text("Time(ms),Main(mA),\n0,1,\n")
    with pytest.raises(TraceFormatError, match="Voltage"):
        parse_monsoon_csv(bad)


def test_generic_csv_and_power_csv_roundtrip(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("ts_s,rail,power_mw\n0,cpu,1000\n1,cpu,1000\n2,cpu,3000\n")
    df = parse_generic_csv(p)
    assert df["energy_uj"].to_list() == pytest.approx([0.0, 1e6, 3e6])
    out = write_power_csv(df, tmp_path / "power.csv")
    back = pl.read_csv(out)
    assert back.columns == ["ts_ns", "rail", "subsystem", "energy_uj"]
    assert back["ts_ns"].to_list() == [0, 1_000_000_000, 2_000_000_000]
    e = tmp_path / "e.csv"
    e.write_text("ts_ns,rail,subsystem,energy_uj\n10,gpu,GPU,5\n20,gpu,GPU,7\n")
    assert parse_generic_csv(e)["subsystem"].to_list() == ["GPU", "GPU"]
    with pytest.raises(TraceFormatError, match="ts_ns or ts_s"):
        (tmp_path / "x.csv").write_text("t,rail,energy_uj\n1,a,2\n")
        parse_generic_csv(tmp_path / "x.csv")


def test_sampler_loop_runs_on_target_over_changing_counters(tmp_path):
    """The RAPL sampling loop (shell, as run on a target) reads counter files while a writer makes them
    wrap; the pulled samples come back monotonic."""
    counter = tmp_path / "energy_uj"
    max_range = 1_000_000
    counter.write_text("985000\n")
    sampler = PowerSampler(LocalTarget(), "rapl", period_s=0.05, remote_dir=str(tmp_path))
    sampler.names = {str(counter): "package-0:0"}
    sampler.max_range = {"package-0:0": float(max_range)}
    stop = threading.Event()

    def writer():
        v = 985000  # +30000 per s: wraps ~0.5 s in
        while not stop.is_set():
            v = (v + 300) % (max_range + 1)
            tmp = counter.with_suffix(".new")
            tmp.write_text(f"{v}\n")
            tmp.replace(counter)  # atomic, like a sysfs read
            time.sleep(0.01)

    th = threading.Thread(target=writer)
    th.start()
    try:
        sampler.launch()
        time.sleep(1.5)
    finally:
        stop.set()
        th.join()
    df = sampler.stop(tmp_path / "raw.txt")
    assert df.height >= 5
    e = df["energy_uj"].to_list()
    assert all(b >= a for a, b in zip(e, e[1:])), e
    assert e[-1] > max_range  # the counter wrapped during sampling and was unwrapped
    ts = df["ts_ns"].to_list()
    assert all(b > a for a, b in zip(ts, ts[1:]))  # CLOCK_BOOTTIME stamps from /proc/uptime


# -- counter checks on the real Pixel 7 Pro rails (issue 43): one defect injected into a real recording -----------
PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
RAIL = "S4M_VDD_CPUCL0"  # 240 samples ~250 ms apart, ~4.8 mJ a step, the counter at ~97 J


@pytest.fixture(scope="module")
def pixel_rails(traces):
    """(power_rail, start_ns, end_ns) of the real trace; its rails are clean (96 exact repeats, nothing else)."""
    t = Trace(traces / PIXEL)
    return t.df("power_rail", windowed=False).select("ts", "rail", "subsystem", "energy_uj"), t.start_ns, t.end_ns


def _rail_row(pr, window, rail=RAIL) -> dict:
    per = pw.df_power_per_rail(pr, start_ns=window[0], end_ns=window[1])
    return per.filter(pl.col("rail") == rail).row(0, named=True)


def _edit(pr: pl.DataFrame, k: int, *, ts=None, energy=None, rail=RAIL) -> pl.DataFrame:
    """The k-th sample (by ts) of `rail` with its ts and/or energy replaced."""
    idx = pr.with_row_index("_i").filter(pl.col("rail") == rail).sort("ts")["_i"][k]
    return (
        pr.with_row_index("_i")
        .with_columns(
            pl.when(pl.col("_i") == idx)
            .then(pl.lit(ts) if ts is not None else pl.col("ts"))
            .otherwise("ts")
            .alias("ts"),
            pl.when(pl.col("_i") == idx)
            .then(pl.lit(energy, pl.Float64) if energy is not None else pl.col("energy_uj"))
            .otherwise("energy_uj")
            .alias("energy_uj"),
        )
        .drop("_i")
    )


def _sample(pr, k, rail=RAIL) -> tuple[int, float]:
    return pr.filter(pl.col("rail") == rail).sort("ts").select("ts", "energy_uj").row(k)


def test_real_rails_are_unchanged_by_the_checks(pixel_rails):
    pr, *win = pixel_rails
    per = pw.df_power_per_rail(pr, start_ns=win[0], end_ns=win[1])
    assert per.height == 24 and per["duplicates"].sum() == 96  # exact repeats in the recording: collapsed
    assert per.select(pl.sum_horizontal(list(pw.EXCLUDED) + list(pw.BELIEVED))).to_series().sum() == 0
    assert pw.power_metrics(pr, start_ns=win[0], end_ns=win[1]).checks == []


@pytest.mark.parametrize("defect", ["glitch", "repeated_ts", "conflicting", "negative"])
def test_one_bad_sample_is_excluded_counted_and_changes_nothing(pixel_rails, defect):
    """A +10 mJ glitch, a sample stamped with the time of the sample 3 before it, a second row at a sample's time
    with another value, a negative value: the energy between the good samples around it is still known, so the
    rail's power is the clean one exactly. Before the fix the backward step was a reset counting the whole ~97 J
    counter (x ~1500 the rail's energy), or a negative energy."""
    pr, *win = pixel_rails
    clean = _rail_row(pr, win)
    k = 120
    ts_k, e_k = _sample(pr, k)
    if defect == "glitch":
        bad, column, n = _edit(pr, k, energy=e_k + 10_000.0), "glitches", 1
    elif defect == "repeated_ts":
        bad, column, n = _edit(pr, k, ts=_sample(pr, k - 3)[0]), "conflicting", 2
    elif defect == "conflicting":
        extra = pr.filter((pl.col("rail") == RAIL) & (pl.col("ts") == ts_k)).with_columns(
            pl.lit(e_k + 10_000.0).alias("energy_uj")
        )
        bad, column, n = pl.concat([pr, extra]), "conflicting", 2
    else:
        bad, column, n = _edit(pr, k, energy=-e_k), "negative", 1
    got = _rail_row(bad, win)
    assert got[column] == n and got["resets"] == 0 and got["drops"] == 0
    assert got["avg_power_mw"] == pytest.approx(clean["avg_power_mw"], rel=1e-12)
    assert got["covered_ns"] == clean["covered_ns"]
    (check,) = pw.power_metrics(bad, start_ns=win[0], end_ns=win[1]).checks
    assert check.rail == RAIL and check.channels == ("CPU-Little", "CPU", "Total") and check.counts == {column: n}
    assert check.note().startswith(f"power rail {RAIL} (CPU-Little, CPU, Total): {n} ")


def test_plausible_reset_wrap_and_implausible_drop(pixel_rails):
    pr, *win = pixel_rails
    clean = _rail_row(pr, win)
    (t1, e1), (t2, e2) = _sample(pr, 99), _sample(pr, 100)
    on_rail = pl.col("rail") == RAIL
    later = on_rail & (pl.col("ts") >= t2)
    # reset to 0 half-way through a step: the new value is half a step, near zero -> believed, half a step lost
    origin = e1 + (e2 - e1) / 2
    reset = pr.with_columns(pl.when(later).then(pl.col("energy_uj") - origin).otherwise("energy_uj").alias("energy_uj"))
    r = _rail_row(reset, win)
    assert r["resets"] == 1 and r["drops"] == 0
    assert r["energy_j"] == pytest.approx(clean["energy_j"] - (e2 - e1) / 2 * 1e-6, rel=1e-9)
    (check,) = pw.power_metrics(reset, start_ns=win[0], end_ns=win[1]).checks
    assert "1 counter reset(s) believed" in check.note()
    # the counter falls back by 50 J and goes on from there: not near zero -> that interval is not counted
    drop = pr.with_columns(pl.when(later).then(pl.col("energy_uj") - 50e6).otherwise("energy_uj").alias("energy_uj"))
    d = _rail_row(drop, win)
    assert d["drops"] == 1 and d["resets"] == 0 and d["covered_ns"] == clean["covered_ns"] - (t2 - t1)
    assert d["energy_j"] == pytest.approx(clean["energy_j"] - (e2 - e1) * 1e-6, rel=1e-9)
    # a counter of a declared width (RAPL: wraps at max_energy_range_uj + 1) wrapping inside that step
    width = origin
    wrapped = pr.with_columns(
        pl.when(later).then(pl.col("energy_uj") - (width + 1)).otherwise("energy_uj").alias("energy_uj")
    )
    w = (
        pw.df_power_per_rail(wrapped, start_ns=win[0], end_ns=win[1], wrap_uj={RAIL: width})
        .filter(rail=RAIL)
        .row(0, named=True)
    )
    assert w["wraps"] == 1 and w["resets"] == 0 and w["energy_j"] == pytest.approx(clean["energy_j"], rel=1e-9)


def test_glitch_in_a_store_power_csv_reaches_the_iteration_notes(pixel_rails, tmp_path):
    """The real rails written as a run store's power.csv, one sample glitched: the iteration's power values equal
    the clean iteration's and its notes name the rail, its channels and the exclusion."""
    pr, *_ = pixel_rails
    k = 120
    for name, frame in (("clean", pr), ("glitched", _edit(pr, k, energy=_sample(pr, k)[1] + 10_000.0))):
        d = write_iteration(tmp_path / name / "w" / "0", {}, {}, complete=False)
        write_power_csv(frame.select(pl.col("ts").alias("ts_ns"), "rail", "subsystem", "energy_uj"), d / "power.csv")
        (d / ".complete").touch()
    (clean, clean_notes), (got, notes) = [
        iteration_metrics(load_label(tmp_path / n).complete("w")[0], use_cache=False, with_trace=False)
        for n in ("clean", "glitched")
    ]
    assert clean_notes == []
    assert got["power.CPU-Little"].value == pytest.approx(clean["power.CPU-Little"].value, rel=1e-12)
    assert got["power.Total"].value == pytest.approx(clean["power.Total"].value, rel=1e-12)
    assert notes == [
        (
            f"power.csv: power rail {RAIL} (CPU-Little, CPU, Total): 1 glitch sample(s) out of line with "
            "both neighbours excluded"
        )
    ]
