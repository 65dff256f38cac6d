"""Wattson (Perfetto's power model, run by the real trace_processor wasm v52) beside abtest's energy model and
the measured rails, on the real Pixel 7 Pro trace (Tensor G2, 24 ODPM rails).

Honest coverage: Wattson does not cover the Pixel 7 Pro ("cheetah"); v52 maps only oriole/raven/bluejay
(Tensor G1) and eos/aurora (monaco). The what-if test patches the codename to "bluejay" (same length) in a
temporary copy so that Wattson runs with Tensor G1 curves: a check that Wattson and abtest's energy model
agree on the same curves and the same activity, NOT a power estimate for the Pixel 7 Pro.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest

from abtest.interop.wattson import codename_of, compare_estimates
from abtest.trace import perfetto_engine as pe

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"


def test_codename_of():
    assert codename_of("google/cheetah/cheetah:13/TD1A.220804.009.A2/8940162:user/release-keys") == "cheetah"
    assert codename_of(None) is None and codename_of("garbage") is None


def test_pixel7pro_is_not_covered(traces, platforms):
    r = compare_estimates(traces / PIXEL, engine="wasm", curves_dir=platforms / "perfetto-wattson")
    assert r["device"] == "cheetah" and not r["covered"] and r["wattson_cpu_mw"] is None
    assert r["tp_device_map"] == {
        "oriole": "Tensor",
        "raven": "Tensor",
        "bluejay": "Tensor",
        "eos": "monaco",
        "aurora": "monaco",
    }
    assert "not in this trace_processor's Wattson device map" in r["coverage"]
    # nor does Perfetto publish Tensor G2 curves (the shared copy of its curve directory)
    assert not any("G2" in p.name for p in (platforms / "perfetto-wattson").iterdir())
    # measured CPU rails: abtest's per-rail average vs trace_processor's (android.power_rails) on the same rails
    rails = dict(zip(r["rails_mw"]["rail"], r["rails_mw"]["avg_power_mw"]))
    tp = pe.analyze(traces / PIXEL, engine="wasm")["power_rails"]
    tp_mw = dict(zip(tp["raw_rail"], tp["average_power_mw"]))
    for rail in ("S4M_VDD_CPUCL0", "S3M_VDD_CPUCL1", "S2M_VDD_CPUCL2"):
        # same energy; abtest divides by the packet-time span, TP by the HAL-time span (ms apart over 60 s)
        assert rails[rail] == pytest.approx(tp_mw[rail], rel=5e-3), rail
    assert r["rails_cpu_total_mw"] == pytest.approx(28.19, abs=0.01)


def test_what_if_tensor_g1_curves(traces, platforms):
    before = set(Path(tempfile.gettempdir()).glob("*-as-bluejay.perfetto-trace"))
    r = compare_estimates(
        traces / PIXEL, engine="wasm", assume_device="bluejay", curves_dir=platforms / "perfetto-wattson"
    )
    assert set(Path(tempfile.gettempdir()).glob("*-as-bluejay.perfetto-trace")) == before  # temp copy removed
    assert any(n.startswith("WHAT-IF") for n in r["notes"])
    w = r["wattson_cpu_mw"]
    assert w["component"].to_list() == [f"cpu{i}" for i in range(8)] + ["dsu_scu"]
    span_ns = 59.9e9
    assert (w["known_ns"] > 0.99 * span_ns).all()
    assert (w["avg_mw"] >= 0).all() and r["wattson_cpu_total_mw"] > 0
    # same curves (Tensor cpu_1d: policies 4 and 6), same activity: abtest's model vs Wattson per domain
    model = r["energy_model"]
    mid_model = model.filter(pl.col("cpus") == "4,5")["avg_power_mw"][0]
    mid_wattson = w.filter(pl.col("component").is_in(["cpu4", "cpu5"]))["avg_mw"].sum()
    rail_mw = r["rails_mw"].filter(pl.col("channel") == "CPU-Mid")["avg_power_mw"][0]
    print(
        f"\nmid cluster (CPUs 4-5), Tensor G1 curves: Wattson {mid_wattson:.3f} mW, abtest model "
        f"{mid_model:.3f} mW, measured CPUCL1 rail {rail_mw:.3f} mW"
    )
    assert 0.5 < mid_model / mid_wattson < 2.0


def test_assume_device_needs_same_length(traces):
    with pytest.raises(ValueError, match="same length"):
        compare_estimates(traces / PIXEL, engine="wasm", assume_device="oriole")


def test_cli_json(traces):
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "wattson", str(traces / PIXEL), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["covered"] is False and doc["device"] == "cheetah"
    assert {row["channel"] for row in doc["rails_mw"]} == {"CPU-Little", "CPU-Mid", "CPU-Big"}
