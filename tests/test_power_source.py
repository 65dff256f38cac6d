"""One power-source resolver (abtest.analysis.power_source, issue 39 item 2): every command gets its power samples
and its rail -> channel mapping from one place, and names both. On the real Pixel 7 Pro trace with ODPM rails
(../shared/traces/PerfettoTraceScript): the mapping's precedence (store abtest.toml > target file > platform file >
built in), the same values through `Trace.metrics` and through compare's per-iteration path, and one power source
per iteration (power.csv over the trace's own rails, with a note)."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from abtest.analysis import power_source, registry
from abtest.compare.metrics import iteration_metrics
from abtest.session import Trace
from abtest.store.power import write_power_csv
from abtest.store.reader import load_label
from abtest.store.writer import write_iteration

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
LITTLE = "S4M_VDD_CPUCL0"  # built in: CPU-Little
BIG = "S2M_VDD_CPUCL2"  # built in: CPU-Big

PLATFORM = f"""name: pixel7pro-rails
domains:
  - {{id: 0, cpus: [0, 1, 2, 3]}}
  - {{id: 1, cpus: [4, 5]}}
  - {{id: 2, cpus: [6, 7]}}
rail_channels:
  CPU-Big: [{LITTLE}]
"""


@pytest.fixture(scope="module")
def rails(traces):
    """{rail: mW} of the real trace (every rail, as power.rail.<RAIL>)."""
    t = Trace(traces / PIXEL)
    m = t.metrics(["power"])
    return {
        r["group"]: r["value"] for r in m.filter(pl.col("key_template") == "power.rail.{rail}").iter_rows(named=True)
    }


def _iteration(tmp_path, traces, *, meta=None, platform=False, power_csv=False):
    d = write_iteration(tmp_path / "lab" / "w" / "0", {}, meta or {}, complete=False)
    shutil.copy(traces / PIXEL, d / "trace.perfetto-trace")
    if platform:
        (d / "platform.yml").write_text(PLATFORM)
    if power_csv:  # a power.csv whose only rail is a constant 1 W (1,000,000 uJ per s)
        frame = pl.DataFrame(
            {
                "ts_ns": [0, 10**9, 2 * 10**9],
                "rail": ["VDD_X"] * 3,
                "subsystem": ["x"] * 3,
                "energy_uj": [0.0, 1e6, 2e6],
            }
        )
        write_power_csv(frame, d / "power.csv")
    (d / ".complete").touch()
    return load_label(tmp_path / "lab").complete("w")[0]


def test_built_in_mapping_is_named(tmp_path, traces, rails):
    vals, notes = iteration_metrics(_iteration(tmp_path, traces), use_cache=False)
    big = vals["power.CPU-Big"]
    assert big.value == pytest.approx(rails[BIG], rel=1e-12)
    assert big.source == "trace:power_rail; built-in mapping for Google Pixel 6/7/8 (Tensor ODPM rail names)"
    assert not any("one power source" in n for n in notes)


def test_platform_file_mapping_applies_in_compare_as_in_trace_metrics(tmp_path, traces, rails):
    """A platform file's rail_channels (carried by load_platform) apply in compare exactly as in Trace.metrics."""
    it = _iteration(tmp_path, traces, platform=True)
    vals, _ = iteration_metrics(it, use_cache=False)
    assert vals["power.CPU-Big"].value == pytest.approx(rails[LITTLE], rel=1e-12)
    assert vals["power.CPU-Big"].source == f"trace:power_rail; explicit mapping ({power_source.PLATFORM_MAPPING})"
    t = Trace(it.trace_path, platform=it.platform_path)
    m = t.metrics(["power"]).filter(pl.col("key") == "power.CPU-Big")
    assert m["value"].to_list() == [pytest.approx(vals["power.CPU-Big"].value, rel=1e-12)]


def test_target_file_mapping_wins_over_the_platform_file(tmp_path, traces, rails):
    meta = {"platform": {"rails": {"CPU-Big": [BIG, LITTLE]}}}
    vals, _ = iteration_metrics(_iteration(tmp_path, traces, meta=meta, platform=True), use_cache=False)
    assert vals["power.CPU-Big"].value == pytest.approx(rails[BIG] + rails[LITTLE], rel=1e-12)
    assert vals["power.CPU-Big"].source.endswith(f"explicit mapping ({power_source.TARGET_MAPPING})")


def test_store_mapping_wins_over_target_and_platform(tmp_path, traces, rails):
    meta = {"platform": {"rails": {"CPU-Big": [BIG, LITTLE]}}}
    it = _iteration(tmp_path, traces, meta=meta, platform=True)
    options = registry.MetricOptions(rail_channels={"CPU-Big": (BIG,)})
    vals, _ = iteration_metrics(it, options, use_cache=False)
    assert vals["power.CPU-Big"].value == pytest.approx(rails[BIG], rel=1e-12)
    assert vals["power.CPU-Big"].source.endswith(f"explicit mapping ({power_source.STORE_MAPPING})")


def test_one_source_per_iteration_power_csv_first(tmp_path, traces):
    vals, notes = iteration_metrics(_iteration(tmp_path, traces, power_csv=True), use_cache=False)
    assert vals["power.rail.VDD_X"].value == pytest.approx(1000.0)
    assert vals["power.Total"].value == pytest.approx(1000.0) and vals["power.Total"].source.startswith("power.csv")
    assert f"power.rail.{BIG}" not in vals  # the trace's rails are not mixed in
    assert "power from power.csv; the trace's own power rails were not used (one power source per iteration)" in notes
    assert "idle.too_deep_pct" in vals or any(k.startswith("frequency.") for k in vals)  # the trace's analyses run


def test_cache_key_names_the_mapping_origin(tmp_path, traces):
    """The per-iteration cache key holds the mapping and its origin, so a value computed under one mapping is
    never served for another (the key is complete: issue 39 item 2)."""
    from abtest.compare.metrics import cache_key

    it = _iteration(tmp_path, traces, platform=True)
    plain = power_source.with_mapping(registry.MetricOptions(), it)
    store = power_source.with_mapping(registry.MetricOptions(rail_channels={"CPU-Big": (BIG,)}), it)
    assert cache_key(it, plain, True) != cache_key(it, store, True)
    assert cache_key(it, store, True)["rail_channels_source"] == power_source.STORE_MAPPING
