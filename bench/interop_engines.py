"""abtest's readers vs Perfetto's trace_processor (wasm v52 under wasmtime) on the shared traces.

Prints, per perfetto / ftrace-text / systrace file: per-event counts from both engines for sched_switch,
sched_waking, sched_wakeup, cpu_idle, cpu_frequency (TP's number as it reports it, plus what it skipped),
and the wall time of each engine to decode the file (abtest: Trace(path, use_cache=False); TP: instantiate +
parse). Then the wasm engine's start-up: in-memory, disk-cached and (with --cold) a fresh cranelift compile.

    .venv/bin/python bench/interop_engines.py [--cold] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
EVENTS = ("sched_switch", "sched_waking", "sched_wakeup", "cpu_idle", "cpu_frequency")


def tp_counts(path: Path) -> tuple[dict | None, str, float]:
    from abtest.trace import perfetto_engine as pe

    t0 = time.perf_counter()
    try:
        s = pe.open_session(path, "wasm")
    except pe.EngineQueryError as e:
        reason = str(e).rsplit(": ", 1)[-1]  # the parser's own words, e.g. "Unknown trace type provided (ERR:fmt)"
        return None, reason[:70], time.perf_counter() - t0
    dt = time.perf_counter() - t0
    try:
        ftrace = dict(s.query("select name, count(*) from ftrace_event group by name").iter_rows())
        counters = dict(
            s.query(
                "select t.name, count(*) from counter c join cpu_counter_track t on c.track_id = t.id group by t.name"
            ).iter_rows()
        )
        stats = dict(s.query("select name, value from stats where name like 'compact_sched_%skipped'").iter_rows())
    finally:
        s.close()
    out = {e: ftrace.get(e, 0) for e in EVENTS}
    if not ftrace.get("cpu_idle") and counters.get("cpuidle"):  # text importer: counters, not ftrace_event
        out["cpu_idle"] = counters["cpuidle"]
    if not ftrace.get("cpu_frequency") and counters.get("cpufreq") and not ftrace:
        out["cpu_frequency"] = counters["cpufreq"]
    skipped = {
        "sched_switch": stats.get("compact_sched_switch_skipped", 0),
        "sched_waking": stats.get("compact_sched_waking_skipped", 0),
    }
    return {"counts": out, "skipped": skipped}, "", dt


def abtest_counts(path: Path) -> tuple[dict | None, float]:
    from abtest.session import Trace

    t0 = time.perf_counter()
    t = Trace(path, use_cache=False)
    return t.events, time.perf_counter() - t0


def startup(cold: bool) -> list[tuple[str, float]]:
    code = (
        "import time; t=time.perf_counter(); from abtest.trace.wasm_engine import WasmTraceProcessor;"
        "tp=WasmTraceProcessor(); print(tp.startup.source, tp.startup.seconds, tp.instantiate_seconds,"
        " time.perf_counter()-t)"
    )
    rows = []
    runs = []
    if cold:
        tmp = tempfile.mkdtemp(prefix="abtest-wasm-cold-")
        runs += [
            ("cold (compile + serialise)", {"ABTEST_WASM_CACHE_DIR": tmp}),
            ("warm (deserialise cached)", {"ABTEST_WASM_CACHE_DIR": tmp}),
        ]
    else:
        runs += [("warm (deserialise cached)", {})]
    for name, env in runs:
        r = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True
        )
        source, module_s, inst_s, total_s = r.stdout.split()
        rows.append(
            (
                f"{name}: module {float(module_s):.3f} s ({source}), instantiate {float(inst_s):.3f} s, "
                f"process total incl. imports",
                float(total_s),
            )
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="also measure a fresh compile (~10-20 s)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    manifest = json.loads((TRACES / "manifest.json").read_text())
    files = [
        rel for rel, e in sorted(manifest.items()) if not e.get("format", "").startswith(("trace.dat", "platform-info"))
    ]
    print("| file | event | abtest | TP | TP skipped | abtest s | TP s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    tot_a = tot_t = 0.0
    for rel in files:
        tp, err, tp_s = tp_counts(TRACES / rel)
        ours, ab_s = abtest_counts(TRACES / rel)
        tot_a += ab_s
        tot_t += tp_s
        if tp is None:
            print(f"| {rel} | (TP cannot open: {err}) | | | | {ab_s:.3f} | |")
            continue
        shown = [e for e in EVENTS if ours.get(e) or tp["counts"].get(e)]
        for i, e in enumerate(shown or ["-"]):
            a = ours.get(e, 0) if e != "-" else ""
            t = tp["counts"].get(e, 0) if e != "-" else ""
            sk = tp["skipped"].get(e, "") or ""
            times = f"{ab_s:.3f} | {tp_s:.3f}" if i == 0 else " | "
            print(f"| {rel if i == 0 else ''} | {e} | {a} | {t} | {sk} | {times} |")
    print(
        f"\ntotal decode wall time: abtest {tot_a:.2f} s, trace_processor (wasm) {tot_t:.2f} s, "
        f"ratio TP/abtest {tot_t / max(tot_a, 1e-9):.2f}"
    )
    print("\nwasm engine start-up (separate processes):")
    for name, secs in startup(args.cold):
        print(f"  {name}: {secs:.2f} s")


if __name__ == "__main__":
    main()
