"""abtest.analysis.energy: power rails on the real Pixel 7 Pro trace, power.csv, energy-model estimates.
Expected values are computed in the test by hand (first/last samples, explicit arithmetic)."""

from __future__ import annotations

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import energy as en
from abtest.analysis import power as pw
from abtest.analysis import registry
from abtest.analysis.platform import load_platform
from abtest.store.power import read_power_csv
from abtest.trace.errors import MissingEventsError, TraceFormatError

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"


@pytest.fixture(scope="module")
def pixel(traces):
    return Trace(traces / PIXEL)


@pytest.mark.parametrize("rail", ["S4M_VDD_CPUCL0", "VSYS_PWR_DISPLAY"])
def test_pixel_rail_average_power_by_hand(pixel, rail):
    samples = pixel.df("power_rail").filter(pl.col("rail").cast(pl.Utf8) == rail).sort("ts")
    (t0, e0), (t1, e1) = samples.select("ts", "energy_uj").row(0), samples.select("ts", "energy_uj").row(-1)
    by_hand_mw = (e1 - e0) / ((t1 - t0) / 1e9) / 1000.0  # uJ / s = uW -> mW
    got = pixel.energy.df_power_per_rail().filter(rail=rail).row(0, named=True)
    assert got["avg_power_mw"] == pytest.approx(by_hand_mw, rel=1e-9)
    assert got["energy_j"] == pytest.approx((e1 - e0) * 1e-6, rel=1e-9)
    assert got["samples"] == 240 and got["resets"] == 0
    # samples cover all but the tail of the trace: coverage is reported, not hidden
    assert got["coverage_pct"] == pytest.approx(100.0 * (t1 - t0) / (pixel.end_ns - pixel.start_ns))


def test_pixel_channels(pixel):
    per_rail = pixel.energy.df_power_per_rail()
    ch = {r["channel"]: r for r in pixel.energy.df_power_per_channel().iter_rows(named=True)}
    assert ch["CPU-Little"]["rails"] == ["S4M_VDD_CPUCL0"]
    assert ch["CPU-Mid"]["rails"] == ["S3M_VDD_CPUCL1"]
    assert ch["CPU-Big"]["rails"] == ["S2M_VDD_CPUCL2"]
    assert ch["GPU"]["rails"] == ["S2S_VDD_G3D", "S8S_VDD_G3D_L2"]
    assert ch["Display"]["rails"] == ["VSYS_PWR_DISPLAY"]
    assert len(ch["Total"]["rails"]) == 24
    mw = dict(per_rail.select("rail", "avg_power_mw").iter_rows())
    assert ch["CPU"]["avg_power_mw"] == pytest.approx(
        mw["S4M_VDD_CPUCL0"] + mw["S3M_VDD_CPUCL1"] + mw["S2M_VDD_CPUCL2"]
    )
    assert ch["Total"]["avg_power_mw"] == pytest.approx(sum(mw.values()))
    custom = pw.df_channel_power(per_rail, pw.rail_mapping(list(mw), {"Modem+RF": ["VSYS_PWR_MODEM", "VSYS_PWR_RFFE"]}))
    assert custom.filter(channel="Modem+RF")["avg_power_mw"][0] == pytest.approx(
        mw["VSYS_PWR_MODEM"] + mw["VSYS_PWR_RFFE"]
    )
    ev = registry.evaluate(registry.POWER, pixel)  # what `abtest analyze` prints
    assert {v.key: v.value for v in ev.values}["power.Display"] == pytest.approx(mw["VSYS_PWR_DISPLAY"])
    (source,) = set(ev.tables["channels"]["mapping"])
    assert source.startswith("built-in mapping for Google Pixel")
    assert dict(ev.tables["rails"].select("rail", "avg_power_mw").iter_rows()) == pytest.approx(mw)


def test_window_prorating_wrap_and_reset():
    # rail A: 100 uJ per 10 ns, then a reset (counter back to 50); rail B counts steadily
    pr = pl.DataFrame(
        {
            "ts": [0, 10, 20, 30] * 2,
            "rail": ["A"] * 4 + ["B"] * 4,
            "subsystem": ["x"] * 8,
            "energy_uj": [0.0, 100, 200, 50, 0, 10, 20, 30],
        }
    )
    r = {x["rail"]: x for x in pw.df_power_per_rail(pr, start_ns=5, end_ns=40).iter_rows(named=True)}
    # A: [5,10) 50 uJ + [10,20) 100 uJ + reset interval counts the new value 50 uJ; [30,40) uncovered
    assert r["A"]["energy_j"] == pytest.approx(200e-6) and r["A"]["resets"] == 1
    assert r["A"]["covered_ns"] == 25 and r["A"]["coverage_pct"] == pytest.approx(100 * 25 / 35)
    assert r["A"]["avg_power_mw"] == pytest.approx(200e-6 / 25e-9 * 1e3)
    assert r["B"]["energy_j"] == pytest.approx(25e-6)
    # with a known counter range the drop is a wrap when the wrapped delta is plausible (issue 43):
    # range 249 -> 50 - 200 + 249 + 1 = 100 uJ, the rail's usual 100 uJ per 10 ns
    w = pw.df_power_per_rail(pr, start_ns=5, end_ns=40, wrap_uj={"A": 249}).filter(rail="A").row(0, named=True)
    assert w["energy_j"] == pytest.approx((50 + 100 + 100) * 1e-6) and w["wraps"] == 1 and w["resets"] == 0
    # range 1000 -> 851 uJ in 10 ns, 8.5 x the rail's peak: not a wrap; the new value 50 is near zero: a reset
    w = pw.df_power_per_rail(pr, start_ns=5, end_ns=40, wrap_uj={"A": 1000}).filter(rail="A").row(0, named=True)
    assert w["energy_j"] == pytest.approx(200e-6) and w["wraps"] == 0 and w["resets"] == 1


def test_read_power_csv(tmp_path):
    p = tmp_path / "power.csv"
    p.write_text(
        "ts_ns,rail,subsystem,energy_uj\n1000000000,S4M_VDD_CPUCL0,CPU(LITTLE),100\n"
        "2000000000,S4M_VDD_CPUCL0,CPU(LITTLE),350.5\n1000000000,VSYS_PWR_DISPLAY,Display,0\n"
        "2000000000,VSYS_PWR_DISPLAY,Display,200000\n"
    )
    df = read_power_csv(p)
    assert df.columns == ["ts", "rail", "subsystem", "energy_uj"] and df.height == 4
    per = dict(pw.df_power_per_rail(df).select("rail", "avg_power_mw").iter_rows())
    assert per == {"S4M_VDD_CPUCL0": pytest.approx(0.2505), "VSYS_PWR_DISPLAY": pytest.approx(200.0)}
    bad = tmp_path / "bad.csv"
    bad.write_text("ts_ns,rail,subsystem,energy_uj\n1,A,x,5\n2,A,x,five\n")
    with pytest.raises(TraceFormatError, match=r"bad.csv at line 3.*'five'"):
        read_power_csv(bad)
    hdr = tmp_path / "hdr.csv"
    hdr.write_text("time,rail,uj\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        read_power_csv(hdr)


TOY = {
    "name": "toy",
    "energy_model_source": "toy model",
    "domains": [
        {
            "cpus": [0, 1],
            "capacity": 512,
            "opps": [
                {"frequency_khz": 500_000, "power_mw": 100.0, "static_mw": 10.0},
                {"frequency_khz": 1_000_000, "power_mw": 300.0, "static_mw": 20.0},
            ],
            "idle_states": [{"name": "WFI", "power_mw": 5.0}, {"name": "off", "power_mw": 0.0}],
        }
    ],
}


def test_energy_estimate_by_hand():
    plat = load_platform(TOY)
    # 0..100 ms: cpu0 at 500 MHz, then 1 GHz (and 700 MHz: mapped up to the 1 GHz OPP on cpu1)
    freq = pl.DataFrame({"ts": [0, 50_000_000, 0], "cpu": [0, 0, 1], "frequency_khz": [500_000, 1_000_000, 700_000]})
    # cpu0: active 0-20 ms, WFI 20-60, active 60-100; cpu1: off (state 1) 0-100 ms except active 30-40 ms
    idle = pl.DataFrame(
        {
            "ts": [0, 20_000_000, 60_000_000, 0, 30_000_000, 40_000_000],
            "cpu": [0, 0, 0, 1, 1, 1],
            "state": [-1, 0, -1, 1, -1, 1],
        }
    )
    est = en.df_energy_estimate(freq, plat, cpu_idle=idle, start_ns=0, end_ns=100_000_000).row(0, named=True)
    active_mj = 100 * 20 + 300 * 40 + 300 * 10  # mW x ms: cpu0 500MHz 20ms, 1GHz 40ms; cpu1 1GHz 10ms
    idle_mj = 5 * 40 + 0 * 90
    # static while >= 1 CPU busy: 0-20 at 500 MHz (10 mW); 30-40 max(OPP) = 1 GHz on cpu1 (20 mW); 60-100 (20 mW)
    static_mj = 10 * 20 + 20 * 10 + 20 * 40
    assert est["active_j"] == pytest.approx(active_mj * 1e-6)
    assert est["idle_j"] == pytest.approx(idle_mj * 1e-6)
    assert est["static_j"] == pytest.approx(static_mj * 1e-6)
    assert est["avg_power_mw"] == pytest.approx((active_mj + idle_mj + static_mj) / 100)
    assert est["unmodelled_ns"] == 0 and est["source"] == "toy model"


def test_static_power_is_the_highest_among_the_cpus_busy_at_each_moment():
    """Issue 39: while cpu0 stays busy at 1 GHz (static 20 mW), cpu1 going busy at 500 MHz (static 10 mW) must not
    lower the domain's static power; the old rule carried the latest busy start's value forward (1500 mW ms)."""
    plat = load_platform(TOY)
    freq = pl.DataFrame({"ts": [0, 0], "cpu": [0, 1], "frequency_khz": [1_000_000, 500_000]})
    # cpu0 busy 0-100 ms; cpu1 idle (state 0) except busy 50-80 ms
    idle = pl.DataFrame({"ts": [0, 0, 50_000_000, 80_000_000], "cpu": [0, 1, 1, 1], "state": [-1, 0, -1, 0]})
    est = en.df_energy_estimate(freq, plat, cpu_idle=idle, start_ns=0, end_ns=100_000_000).row(0, named=True)
    assert est["static_j"] == pytest.approx(20 * 100 * 1e-6)
    # and the static power drops to cpu1's only once cpu0 is idle: cpu0 idle from 60 ms, cpu1 busy 50-80 ms
    idle2 = pl.DataFrame(
        {"ts": [0, 60_000_000, 0, 50_000_000, 80_000_000], "cpu": [0, 0, 1, 1, 1], "state": [-1, 0, 0, -1, 0]}
    )
    est2 = en.df_energy_estimate(freq, plat, cpu_idle=idle2, start_ns=0, end_ns=100_000_000).row(0, named=True)
    assert est2["static_j"] == pytest.approx((20 * 60 + 10 * 20) * 1e-6)


def test_juno_estimate_matches_residency_times_power(traces):
    plat = traces / "lisa" / "sched_load-plat_info.yml"
    t = Trace(traces / "lisa" / "sched_load-trace.dat", platform=plat)
    est = t.energy.df_energy_estimate()
    assert set(est["source"]) == {"LISA plat_info.yml (juno)"}
    # independent path: per-CPU active residency (frequency module) x the file's per-OPP power
    res = t.frequency.df_opp_residency().filter(pl.col("frequency_khz").is_not_null())
    p = load_platform(plat)
    power = {(c, o["frequency_khz"]): o["power_mw"] for d in p["domains"] for o in d["opps"] for c in d["cpus"]}
    dom = {c["cpu"]: c["domain"] for c in p["cpus"]}
    expect = {}
    for cpu, khz, active_ns in res.select("cpu", "frequency_khz", "active_ns").iter_rows():
        expect[dom[cpu]] = expect.get(dom[cpu], 0.0) + power[(cpu, khz)] * active_ns * 1e-12
    got = dict(est.select("domain", "active_j").iter_rows())
    assert got == pytest.approx(expect, rel=1e-9)
    # the time before the first cpu_frequency event is unknown and reported, not priced
    assert (est["unmodelled_ns"] > 0).all()
    ev = registry.evaluate(registry.ENERGY_MODEL, t)
    assert set(ev.tables["domains"]["energy_model"]) == {"LISA plat_info.yml (juno)"}
    with pytest.raises(MissingEventsError):  # no meter in this trace: no made-up rail numbers
        registry.evaluate(registry.POWER, t)
