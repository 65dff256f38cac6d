"""BattOr power logs (abtest.trace.battor): reading, energy, clock alignment to a trace, Catapult zips.

STAND-IN: no BattOr exists here and no public BattOr log was found (searched the code/issues corpora: the
BattOr software repositories and catapult hold the writer and importer, no recorded log). The logs below
are written by the test in the exact format of Chromium's tools/battor_agent (`SamplesToString`: header
lines, then `time_ms current_mA voltage_mV [<sync id>]` with 2/1/1 decimals) and of the older aschulm/battor
`battor` tool (`# voltage range` with a space, no sample-rate line); their samples are synthetic. The
traces they are aligned to are real: a shared capture (catapult) and a trace recorded here (tracefs) whose
trace_marker carries a real clock-sync marker.
"""

from __future__ import annotations

import uuid
import zipfile

import numpy as np
import polars as pl
import pytest

from abtest.trace.battor import align_to_trace, read_battor
from abtest.trace.readers import read_trace

RATE = 2000.0


def battor_log(
    current_ma: np.ndarray,
    voltage_mv: float = 4012.5,
    *,
    sync: dict[int, str] | None = None,
    chromium_header: bool = True,
) -> bytes:
    """A BattOr log in the battor_agent's format (see the module docstring)."""
    sync = sync or {}
    head = ["# BattOr"]
    if chromium_header:
        head += [
            "# voltage_range [0.0, 6144.0] mV",
            "# current_range [0.0, 2275.5] mA",
            f"# sample_rate {int(RATE)} Hz, gain 5.0x",
        ]
    else:
        head += ["# voltage range [0.000000, 6144.000000] mV", "# current range [0.000000, 2275.500000] mA"]
    rows = []
    for i, c in enumerate(current_ma):
        row = f"{i * 1000.0 / RATE:.2f} {c:.1f} {voltage_mv:.1f}"
        if i in sync:
            row += f" <{sync[i]}>"
        rows.append(row)
    return ("\n".join(head + rows) + "\n").encode()


def _current(n: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 150.0 + np.cumsum(rng.normal(0, 0.5, n)).clip(-100, 100)


def test_read_battor_samples_and_energy():
    cur = _current(4000)
    frame, meta = read_battor(battor_log(cur))
    assert frame.columns[:4] == ["ts", "rail", "subsystem", "energy_uj"]
    assert frame.schema["ts"] == pl.Int64 and frame.schema["rail"] == pl.Categorical
    assert frame.height == 4000 and meta["samples"] == 4000 and meta["sample_rate_hz"] == RATE
    assert frame["ts"][1] == 500_000 and meta["duration_s"] == pytest.approx(3999 / RATE)
    printed = np.round(cur, 1)
    # energy: each sample's power held until the next (mA x mV = uW; x seconds = uJ), from the printed values
    expected = np.concatenate([[0.0], np.cumsum(printed[:-1] * 4012.5 * (1 / RATE))])
    assert np.allclose(frame["energy_uj"].to_numpy(), expected, rtol=1e-9)
    assert meta["voltage_range_mv"] == [0.0, 6144.0] and meta["gain"] == 5.0
    assert meta["clock"]["method"] == "unaligned"


def test_read_battor_old_header_and_bad_rows():
    log = battor_log(_current(100), chromium_header=False).replace(b"0.50 ", b"0.50 x", 1)
    frame, meta = read_battor(log)
    assert frame.height == 99 and meta["sample_rate_hz"] == RATE  # measured from the times
    assert meta["import_errors"]["battor_row"]["examples"][0]["line"] == 5  # 3 header lines, then 0.00, 0.50


def test_negative_current_is_counted_and_excluded_not_integrated():
    """Rows stay (their ts and current serve the clock alignment); their energy is null, and the energy holds the
    previous usable sample's power over their interval. Before issue 43 they were integrated as negative energy,
    which the power analysis then read as a counter reset."""
    cur = _current(200)
    cur[50:60] = -20.0
    frame, meta = read_battor(battor_log(cur))
    assert frame.height == 200 and meta["negative_current_samples"] == 10
    assert frame["energy_uj"].is_null().to_list() == [50 <= i < 60 for i in range(200)]
    printed = np.round(cur, 1)
    held = printed.copy()
    held[50:60] = printed[49]  # sample 49 held until sample 60
    e = frame["energy_uj"].to_numpy()
    assert e[60] == pytest.approx(np.sum(held[:60]) * 4012.5 / RATE, rel=1e-9)
    assert any("excluded from the energy" in w for w in meta["warnings"])


def test_one_negative_current_sample_in_a_store_is_excluded_and_noted(tmp_path):
    """A steady 246.2 mA at 4012.5 mV (987.9 mW) for 1 s with one -230 mA sample in the middle: before the fix
    the net energy stepped back, the power analysis took it for a counter reset, and power.Total read 1480.9 mW."""
    from abtest.compare.metrics import iteration_metrics
    from abtest.store.reader import load_label
    from abtest.store.writer import write_iteration

    cur = np.full(2001, 246.2)
    cur[1000] = -230.0
    d = write_iteration(tmp_path / "A" / "w" / "0", {}, {}, complete=False)
    (d / "battor.txt").write_bytes(battor_log(cur))
    (d / ".complete").touch()
    m, notes = iteration_metrics(load_label(tmp_path / "A").complete("w")[0], use_cache=False, with_trace=False)
    assert m["power.Total"].value == pytest.approx(246.2 * 4012.5 / 1000, rel=1e-9)
    assert notes == [
        (
            "battor.txt (BattOr, clock unaligned): power rail BattOr (Total): 1 sample(s) without a usable "
            "reading excluded (null/NaN energy; BattOr: negative current)"
        )
    ]


def test_catapult_zip_without_sync_keeps_the_battor_clock(traces, tmp_path):
    """A real capture and a BattOr log in one zip, no clock-sync marker: the trace's tables get power_rail on
    the BattOr's own clock, and the metadata says the samples are not aligned (never pretended)."""
    path = tmp_path / "catapult.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("battor.txt", battor_log(_current(2000)))  # first: the old reader took it as the trace
        zf.writestr("systrace.txt", (traces / "catapult/atrace_data").read_bytes())
    data = read_trace(path)
    assert data.meta["events"] == read_trace(traces / "catapult/atrace_data").meta["events"]
    assert data.meta["samples"] == {"power_rail": 2000}
    clock = data.meta["battor"][0]["clock"]
    assert clock["method"] == "unaligned" and "no clock-sync marker" in clock["reason"]
    assert data.tables["power_rail"]["ts"][0] == 0
    assert any("not aligned" in w for w in data.meta["warnings"])
    # the trace's span is the events', not stretched back to the BattOr's clock origin
    plain = read_trace(traces / "catapult/atrace_data").meta
    assert (data.meta["start_ns"], data.meta["end_ns"]) == (plain["start_ns"], plain["end_ns"])


def test_explicit_sync_with_a_live_marker(tracefs_lock, tmp_path):
    """Recorded here: a real trace_marker write `trace_event_clock_sync: name=<id>` (systrace's clock-sync
    protocol); the BattOr log carries the same id on sample 1234. The aligned samples put that sample at the
    marker's time exactly."""
    fs = tracefs_lock
    sync_id = str(uuid.uuid4())
    saved_on = (fs / "tracing_on").read_text().strip()
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "tracing_on").write_text("1")
        (fs / "trace_marker").write_text(f"trace_event_clock_sync: name={sync_id}")
        (fs / "tracing_on").write_text("0")
        text = (fs / "trace").read_text()
        (fs / "trace").write_text("")
    finally:
        (fs / "tracing_on").write_text(saved_on)
    assert f"name={sync_id}" in text
    path = tmp_path / "catapult.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("battor.txt", battor_log(_current(4000), sync={1234: sync_id}))
        zf.writestr("trace.txt", text)
    data = read_trace(path)
    marker_ts = data.tables["marker"].filter(pl.col("text").str.contains(sync_id))["ts"][0]
    power = data.tables["power_rail"]
    assert power["ts"][1234] == marker_ts
    clock = data.meta["battor"][0]["clock"]
    assert clock["method"] == "explicit_sync" and clock["offset_ns"] == marker_ts - 1234 * 500_000


def _regulator_tables(t0: int, bits: np.ndarray, bit_ns: int, regulator: str) -> dict:
    """Canonical tables of a trace holding the two battor markers and the regulator switching `bits`."""
    switch_ts = t0 + np.arange(len(bits)) * bit_ns
    marker = pl.DataFrame(
        {
            "ts": [t0 - 5_000_000, int(switch_ts[-1]) + 5_000_000],
            "cpu": [0, 0],
            "pid": [1, 1],
            "text": [f"trace_event_clock_sync: name=battor regulator={regulator}"] * 2,
        }
    )
    on = pl.DataFrame({"ts": switch_ts[bits == 1], "name": [regulator] * int(bits.sum())})
    off = pl.DataFrame({"ts": switch_ts[bits == 0], "name": [regulator] * int((bits == 0).sum())})
    return {"marker": marker, "regulator_enable": on, "regulator_disable": off}


def test_regulator_correlation_recovers_the_offset():
    """The correlation method on a sync signal: a random 64-bit pattern of 10 ms bits switching a regulator
    (what the BattOr sync script did with the camera flash), seen in the current 300 mA higher while on,
    under noise; the BattOr started 1.2345 s (plus a fraction of a sample) before the trace's pattern."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2, 64)
    bits[0] = 1
    bit_ns, t0 = 10_000_000, 50_000_000_000
    n = int(RATE * 4)
    cur = _current(n) + rng.normal(0, 20, n)
    start = 2469  # the pattern starts at BattOr sample 2469 (1.2345 s)
    per_bit = int(bit_ns * RATE / 1e9)
    for k, b in enumerate(bits):
        cur[start + k * per_bit : start + (k + 1) * per_bit] += 300.0 * b
    frame, meta = read_battor(battor_log(cur))
    aligned, clock = align_to_trace(frame, meta, _regulator_tables(t0, bits, bit_ns, "8941_smbb_boost"))
    assert clock["method"] == "regulator_correlation"
    assert abs(clock["offset_ns"] - (t0 - start * 500_000)) <= clock["error_ns"] == 500_000
    assert clock["peak_correlation"] > 0.9
    # the pattern's first sample lands on the first regulator switch
    assert abs(int(aligned["ts"][start]) - t0) <= 500_000


def test_regulator_correlation_refuses_a_weak_peak():
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2, 64)
    bits[0] = 1
    frame, meta = read_battor(battor_log(_current(8000) + rng.normal(0, 20, 8000)))  # no pattern in the current
    aligned, clock = align_to_trace(frame, meta, _regulator_tables(10**9, bits, 10_000_000, "flash"))
    assert clock["method"] == "unaligned" and "too weak" in clock["reason"]
    assert aligned["ts"].equals(frame["ts"])


def test_markers_without_regulator_events_say_why():
    frame, meta = read_battor(battor_log(_current(1000)))
    tables = _regulator_tables(10**9, np.array([1, 0, 1]), 10_000_000, "flash")
    del tables["regulator_enable"], tables["regulator_disable"]
    _aligned, clock = align_to_trace(frame, meta, tables)
    assert clock["method"] == "unaligned" and "no regulator_enable" in clock["reason"]


def test_battor_log_in_a_run_store_is_a_power_source(tmp_path):
    """A battor.txt beside each iteration's data gives power.Total (and the BattOr rail) through the same power
    path as power.csv: 250 mA at 4012.5 mV for 1 s = 1003.1 mW; B draws 10 % more current."""
    from abtest.compare.comparison import compare_labels
    from abtest.store.reader import load_label
    from abtest.store.writer import write_iteration

    for label, ma in (("A", 250.0), ("B", 275.0)):
        for i, s in enumerate((0.99, 1.0, 1.01)):
            d = write_iteration(tmp_path / label / "w" / str(i), {}, {}, complete=False)
            (d / "battor.txt").write_bytes(battor_log(np.full(2001, ma * s)))
            (d / ".complete").touch()
    c = compare_labels(load_label(tmp_path / "A"), load_label(tmp_path / "B"), with_trace=False, jobs=1)
    m = c.workloads[0].metric("power.Total")
    assert m.value_a == pytest.approx(250.0 * 4012.5 / 1000, rel=1e-3)
    assert m.delta_pct == pytest.approx(10.0, rel=1e-3) and m.verdict.verdict == "regression"
    assert m.source.startswith("battor.txt (BattOr, clock unaligned)")
