#!/usr/bin/env python3
"""Analysis benchmark: `abtest analyze` and `abtest compare` on the bench trace, measured in one run.

    .venv/bin/python bench/analyze.py [--trace FILE] [--repeat 3] [--lisa] [--compare] [--iterations 10]
                                      [--jobs 2] [--reference]

Without --trace it uses the ingest bench's trace (bench/ingest.py: ~/.cache/abtest/bench/hackbench-sched-power.dat,
recorded with hackbench when it holds fewer than --min-events events; recording needs tracefs and takes the
tracefs lock). Printed, per round (best and median over --repeat rounds):

- the trace: events, tables in memory (all tables / those `abtest analyze` reads);
- each analysis' evaluation (registry.evaluate: its metric values, which `abtest compare` uses too, and its
  declared tables; what `abtest analyze` prints) in one process after the tables are loaded: time, input
  events (rows of the tables it reads) per second;
- the compiled simulators alone: PELT (per-CPU segments with tasks' jumps; and aggregated into contention, as
  load_tracking uses it), window demand, wakeup-latency matching: input events/s; with --reference also the
  Python frame implementations they replaced (slow);
- peak RSS (VmHWM) of one analysis in a fresh process, over the loaded tables, and the interpreter baseline;
- end to end: the `abtest analyze --json FILE` command, first open (an empty cache: decode, cache write,
  analyse) and cached, and `abtest analyze --windows --window-s --jobs 1` cached (the bounded-memory path),
  wall time and peak RSS of the process; the peak RSS of `abtest analyze` on a small shared trace (the floor:
  interpreter, libraries, imports) is printed beside them (bench/analyze_cli.py: the cached command against
  `trace-cmd report` of the same trace, interleaved, with CPU times and the ratio of issue 38);
- the targets of issue 24, met / NOT met, from this run's figures;
- --lisa: LISA 3.1.0 (its own virtualenv, bench/crosscheck_lisa.py's) on the same trace, the analyses LISA has
  for the same metrics, and the ratio;
- --compare: a generated store (2 labels x --iterations iterations, each a symlink to the bench trace) compared
  with `abtest compare A B --jobs N` cold (no per-iteration metrics cache, empty parquet cache) and cached.

The machine is shared: run it when it is quiet, or read the spread of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ABTEST = (
    [str(ROOT / ".venv" / "bin" / "abtest")]
    if (ROOT / ".venv" / "bin" / "abtest").exists()
    else [sys.executable, "-m", "abtest.cli"]
)
# the tables `abtest analyze` reads on a scheduler trace (the others are left on disk)
READ_BY_ANALYZE = (
    "sched_switch",
    "sched_waking",
    "sched_wakeup",
    "sched_wakeup_new",
    "sched_migrate_task",
    "cpu_idle",
    "cpu_idle_miss",
    "cpu_frequency",
    "sched_pelt_cfs",
    "sched_pelt_se",
    "sched_process_fork",
    "power_rail",
)


# ----------------------------------------------------------------------------------------------- helpers
def _stats(xs: list[float]) -> str:
    return f"best {min(xs):7.3f}  median {statistics.median(xs):7.3f}"


def _run_child(cmd: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit status) of a child process, measured by GNU time (the child's own peak:
    a child forked from this process would also count this process' pages until it execs)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        p = subprocess.run(
            ["/usr/bin/time", "-o", tf.name, "-f", "%M", *cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        wall = time.perf_counter() - t0
        rss_kb = int(tf.read().strip().splitlines()[-1])
    if p.returncode:
        print(
            f"  ! {' '.join(cmd[-4:])} exited {p.returncode}: {p.stderr.decode(errors='replace').strip()[-300:]}",
            file=sys.stderr,
        )
    return wall, rss_kb / 1024, p.returncode


def _vm(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _events_of(t, names) -> int:
    return sum(t.df(n, windowed=False).height for n in names if n in t.tables)


# ----------------------------------------------------------------------------------------------- in process
def in_process(path: Path, repeat: int, reference: bool) -> dict:
    import polars as pl

    from abtest import Trace
    from abtest.analysis import latency, pelt_sim, registry, window_sim

    t = Trace(path)
    total = sum(t.events.values())
    all_mb = sum(t.df(n, windowed=False).estimated_size() for n in t.tables) / 2**20
    read = [n for n in READ_BY_ANALYZE if n in t.tables]
    read_mb = sum(t.df(n, windowed=False).estimated_size() for n in read) / 2**20
    print(
        f"trace: {path}\n  {total:,} events, {(t.end_ns - t.start_ns) / 1e9:.1f} s, {len(t.tables)} tables "
        f"({all_mb:.0f} MB in memory); analyze reads {', '.join(read)} ({read_mb:.0f} MB, "
        f"{_events_of(t, read):,} rows)"
    )
    out = {"events": total, "tables_mb": all_mb, "read_mb": read_mb, "analyses": {}}
    print("per analysis (tables loaded; s; input events/s = rows of the tables it reads / time):")
    for a in registry.ANALYSES:
        if a.compute is None and not a.tables:
            continue
        n_in = _events_of(t, a.all_events)
        what = "evaluate"  # registry.evaluate: the metric values and the declared tables, as `abtest analyze`
        times = []
        for _ in range(repeat):
            view = t.window(t.start_ns, t.end_ns)  # a fresh Trace object: nothing memoised from the last round
            t0 = time.perf_counter()
            try:
                registry.evaluate(a, view, registry.MetricOptions())
            except Exception as e:  # noqa: BLE001 - an analysis that does not apply: say why
                times = None
                why = f"{type(e).__name__}: {str(e).splitlines()[0][:70]}"
                break
            times.append(time.perf_counter() - t0)
        if times is None:
            print(f"  {a.name:14s} {what:8s} skipped ({why})")
            continue
        rate = f"{n_in / min(times) / 1e6:7.1f} M ev/s" if n_in and min(times) > 1e-3 else " " * 12
        print(f"  {a.name:14s} {what:8s} {_stats(times)}  {rate}  ({n_in:,} rows)")
        out["analyses"].setdefault(a.name, {})[what] = {
            "best_s": min(times),
            "median_s": statistics.median(times),
            "input_rows": n_in,
        }
    # the compiled simulators alone
    lt = t.load_tracking
    sw = t.df("sched_switch", windowed=False)
    args = lt._sim_cpu_args(lt._df("sched_pelt_cfs"))
    n_pelt = (
        sw.height
        + sum(w.height for w in args["wakeups"])
        + (args["sched_migrate_task"].height if args["sched_migrate_task"] is not None else 0)
        + (args["cpu_frequency"].height if args["cpu_frequency"] is not None else 0)
    )
    wk = lt._wakeups()
    wu = t.latency.df_wakeups() if "sched_switch" in t.tables else None
    kernels = [
        ("PELT cpu segments + task jumps", n_pelt, lambda: pelt_sim.df_pelt_sim_cpu(sw, **args)),
        ("PELT aggregated (contention)", n_pelt, lambda: pelt_sim.df_cpu_contention(sw, **args)),
        (
            "PELT tasks (all, segments)",
            sw.height + sum(w.height for w in wk),
            lambda: pelt_sim.df_pelt_sim_task(sw, wakeups=wk, start_ns=t.start_ns, end_ns=t.end_ns),
        ),
        ("window demand", sw.height, lambda: window_sim.df_window_demand(sw, start_ns=t.start_ns, end_ns=t.end_ns)),
        (
            "wakeup latency matching",
            sw.height + (wu.height if wu is not None else 0),
            lambda: latency.df_wakeup_latency(wu, sw, start_ns=t.start_ns, end_ns=t.end_ns),
        ),
    ]
    if reference:
        sys.path.insert(0, str(ROOT / "tests"))  # the frame-written oracles (tests/oracles/)
        from oracles import latency as latency_oracle
        from oracles import pelt_sim as pelt_oracle
        from oracles import window_sim as window_sim_oracle

        kernels += [
            ("PELT cpu, python reference", n_pelt, lambda: pelt_oracle.df_pelt_sim_cpu(sw, **args)),
            (
                "window demand, python reference",
                sw.height,
                lambda: window_sim_oracle.df_window_demand(sw, start_ns=t.start_ns, end_ns=t.end_ns),
            ),
            (
                "latency matching, python reference",
                sw.height + wu.height,
                lambda: latency_oracle.df_wakeup_latency(wu, sw, start_ns=t.start_ns, end_ns=t.end_ns),
            ),
        ]
    print("compiled simulators alone (frames in, frames out; s; input events/s):")
    out["kernels"] = {}
    for name, n, fn in kernels:
        times = []
        for _ in range(1 if "reference" in name else repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print(f"  {name:36s} {_stats(times)}  {n / min(times) / 1e6:7.1f} M ev/s  ({n:,} events)")
        out["kernels"][name] = {"best_s": min(times), "median_s": statistics.median(times), "events": n}
    del pl
    return out


def one_analysis_rss(path: Path, name: str) -> None:
    """Child: load the tables analyze reads, then one analysis (registry.evaluate); print JSON RSS figures (MB)."""
    from abtest import Trace
    from abtest.analysis import registry

    base = _vm("VmRSS")
    t = Trace(path)
    for n in READ_BY_ANALYZE:
        if n in t.tables:
            t.df(n, windowed=False)
    loaded = _vm("VmRSS")
    _reset_peak()
    a = registry.BY_NAME[name]
    try:
        registry.evaluate(a, t, registry.MetricOptions())
    except Exception:  # noqa: BLE001 - not applicable here
        pass
    print(json.dumps({"baseline": base, "loaded": loaded, "peak": _vm("VmHWM")}))


def per_analysis_rss(path: Path) -> dict:
    from abtest.analysis import registry

    print("peak RSS of one analysis (registry.evaluate) in a fresh process (MB; over the loaded tables):")
    out = {}
    for a in registry.ANALYSES:
        if a.compute is None and not a.tables:
            continue
        res = subprocess.run(
            [sys.executable, __file__, "--rss-child", a.name, "--trace", str(path)], capture_output=True, text=True
        )
        if res.returncode:
            print(f"  {a.name}: failed: {res.stderr.strip()[-200:]}")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        out[a.name] = r
        print(
            f"  {a.name:14s} interpreter+imports {r['baseline']:5.0f}  tables loaded {r['loaded']:5.0f}  "
            f"peak {r['peak']:5.0f}  (+{r['peak'] - r['loaded']:.0f})"
        )
    return out


# ----------------------------------------------------------------------------------------------- end to end
def end_to_end(path: Path, repeat: int, window_s: float) -> dict:
    print("end to end: `abtest analyze --json FILE` (a fresh process each; s, peak RSS MB):")
    first, cached, rss_first, rss_cached, win, rss_win = [], [], [], [], [], []
    version = _run_child(ABTEST + ["--version"])
    windowed = ["--windows", f"{window_s:g}", "--jobs", "1"]
    for _ in range(repeat):
        cache = Path(tempfile.mkdtemp(prefix="abtest-bench-cache-"))
        env = {**os.environ, "ABTEST_CACHE_DIR": str(cache)}
        try:
            w, r, _ = _run_child(ABTEST + ["analyze", "--json", str(path)], env)
            first.append(w)
            rss_first.append(r)
            w, r, _ = _run_child(ABTEST + ["analyze", "--json", str(path)], env)
            cached.append(w)
            rss_cached.append(r)
            w, r, _ = _run_child(ABTEST + ["analyze", *windowed, str(path)], env)
            win.append(w)
            rss_win.append(r)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    floor = _floor_rss()
    print(f"  first open (decode + convert + analyse)  {_stats(first)} s   peak RSS {max(rss_first):.0f} MB")
    print(f"  cached                                   {_stats(cached)} s   peak RSS {max(rss_cached):.0f} MB")
    print(f"  cached, {' '.join(windowed):22s}   {_stats(win)} s   peak RSS {max(rss_win):.0f} MB")
    print(
        f"  (`abtest --version`: {version[0]:.2f} s, {version[1]:.0f} MB: interpreter start-up + imports; "
        f"`abtest analyze` of a {FLOOR_TRACE.name} ({FLOOR_TRACE.stat().st_size / 1e3:.0f} kB): "
        f"{floor:.0f} MB, what any analyze holds: interpreter, libraries, imports)"
        if floor
        else ""
    )
    return {
        "first_s": first,
        "cached_s": cached,
        "first_rss_mb": rss_first,
        "cached_rss_mb": rss_cached,
        "windows": windowed,
        "windowed_s": win,
        "windowed_rss_mb": rss_win,
        "version_s": version[0],
        "version_rss_mb": version[1],
        "floor_rss_mb": floor,
    }


# a small real trace (the shared corpus): `abtest analyze` on it measures the memory every analyze holds
FLOOR_TRACE = ROOT.parent / "shared" / "traces" / "lisa" / "trace_txt-trace.txt"


def _floor_rss() -> float | None:
    """Peak RSS (MB) of `abtest analyze --json` on FLOOR_TRACE, cached (None when the trace is absent)."""
    if not FLOOR_TRACE.exists():
        return None
    cache = Path(tempfile.mkdtemp(prefix="abtest-bench-cache-"))
    env = {**os.environ, "ABTEST_CACHE_DIR": str(cache)}
    try:
        _run_child(ABTEST + ["analyze", "--json", str(FLOOR_TRACE)], env)
        return _run_child(ABTEST + ["analyze", "--json", str(FLOOR_TRACE)], env)[1]
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def print_targets(res: dict) -> None:
    """Issue 24's targets against this run's figures (met / NOT met)."""

    def line(what: str, measured: str, ok: bool) -> None:
        print(f"  {what:48s} {measured:54s} {'met' if ok else 'NOT met'}")

    e, tables = res["end_to_end"], res["in_process"]["tables_mb"]
    print(f"targets (issue 24; tables {tables:.0f} MB in memory):")
    line("abtest analyze, cached <= 1.5 s", f"best {min(e['cached_s']):.3f} s", min(e["cached_s"]) <= 1.5)
    line("abtest analyze, first open <= 2.5 s", f"best {min(e['first_s']):.3f} s", min(e["first_s"]) <= 2.5)
    pelt = res["in_process"]["kernels"].get("PELT cpu segments + task jumps")
    if pelt:
        rate = pelt["events"] / pelt["best_s"] / 1e6
        line("PELT simulation >= 10 M events/s", f"{rate:.1f} M events/s (segments out)", rate >= 10)
    whole, win, floor = max(e["cached_rss_mb"]), max(e["windowed_rss_mb"]), e["floor_rss_mb"]

    def rss(mb: float) -> str:
        above = f"; {(mb - floor) / tables:.2f}x above the {floor:.0f} MB floor" if floor else ""
        return f"{mb:.0f} MB = {mb / tables:.2f}x{above}"

    line("peak RSS <= 2x the tables, whole trace", rss(whole), whole <= 2 * tables)
    line(f"peak RSS <= 2x the tables, {' '.join(e['windows'])}", rss(win), win <= 2 * tables)
    if "compare" in res:
        c = res["compare"]
        line(
            f"compare {c['iterations']} iterations cold < 30 s",
            f"{c['cold_s']:.2f} s (cached {c['cached_s']:.2f} s)",
            c["cold_s"] < 30,
        )


# ----------------------------------------------------------------------------------------------- compare
def compare_bench(path: Path, iterations: int, jobs: int) -> dict:
    from compare import make_bench_store  # bench/compare.py: the same store its bench-size part times

    tmp = Path(tempfile.mkdtemp(prefix="abtest-bench-store-"))
    store = make_bench_store(tmp, path, iterations)
    cache = Path(tempfile.mkdtemp(prefix="abtest-bench-cache-"))
    try:
        env = {**os.environ, "ABTEST_CACHE_DIR": str(cache)}
        cmd = ABTEST + ["compare", "A", "B", "--store", str(store), "--jobs", str(jobs), "--format", "json"]
        print(f"compare: 2 labels x {iterations} iterations (symlinks to the bench trace), --jobs {jobs}:")
        cold, rss_cold, _ = _run_child(cmd, env)
        cached, rss_cached, _ = _run_child(cmd, env)
        n = len(list(store.rglob(".abtest-metrics.json")))
        print(f"  cold (no metrics cache, empty parquet cache)  {cold:7.2f} s  peak RSS {rss_cold:.0f} MB")
        print(f"  cached ({n} per-iteration metrics caches)      {cached:7.2f} s  peak RSS {rss_cached:.0f} MB")
        print(
            "  (the iterations link to one file; a comparison decodes each iteration again, without the table "
            "cache, so 20 links cost what 20 files would, less the page cache)"
        )
        return {
            "cold_s": cold,
            "cached_s": cached,
            "cold_rss_mb": rss_cold,
            "cached_rss_mb": rss_cached,
            "iterations": 2 * iterations,
            "jobs": jobs,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- LISA
def lisa_text(path: Path, out: Path) -> float:
    """The trace as text LISA's TxtTraceParser reads (what LISA's own trace.dat path asks trace-cmd for:
    `trace-cmd report -N -t`), with two fixes LISA 3.1.0 needs on this trace: timestamps written as seconds
    (trace-cmd prints this trace clock's raw nanoseconds, "[000]5793495658850:"), and spaces inside task names
    (rustc's "lto cgu.0.rcgu." threads) replaced by "_" in the comm fields (LISA's parser drops every
    sched_switch otherwise). Returns the seconds it took (reported apart from LISA's own time)."""
    import re

    stamp = re.compile(rb"^(.{16}-[0-9]+ +\[[0-9]+\]) *([0-9]+)([0-9]{9}):")
    comm = re.compile(rb"(\w*comm=)(.*?)(?= \w+=|$)")
    t0 = time.perf_counter()
    rep = subprocess.Popen(
        ["trace-cmd", "report", "-N", "-t", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    with open(out, "wb") as f:
        for line in rep.stdout:
            line = stamp.sub(rb"\1 \2.\3:", line, count=1)
            if b"comm=" in line:
                cut = line.find(b":", line.find(b"]") + 1)
                cut = line.find(b":", cut + 1) + 1
                body = comm.sub(lambda m: m.group(1) + m.group(2).replace(b" ", b"_"), line[cut:].rstrip(b"\n"))
                line = line[:cut] + body + b"\n"
            f.write(line)
    rep.wait()
    return time.perf_counter() - t0


def lisa_side(text: str, pelt_tasks: int) -> None:
    """In LISA's virtualenv: time LISA on the analyses it has for abtest analyze's metrics; JSON on stdout."""
    import warnings

    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    from lisa.pelt import simulate_pelt
    from lisa.trace import TaskID, Trace

    times: dict = {"import": time.perf_counter() - t0}
    counts: dict = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001 - LISA raising is a result
            times[name] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            return None
        times[name] = time.perf_counter() - t0
        print("STEP " + json.dumps({"step": name, "s": times[name], "counts": counts}), file=sys.stderr, flush=True)
        return r

    t = timed("open", lambda: Trace(text, normalize_time=False))
    for ev in ("sched_switch", "sched_waking", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task", "cpu_idle"):
        df = timed(f"parse {ev}", lambda ev=ev: t.df_event(ev))
        counts[ev] = 0 if df is None else len(df)
    cpus = list(range(t.cpus_count))
    timed("idle residency (per CPU)", lambda: [t.ana.idle.df_cpu_idle_state_residency(c) for c in cpus])
    rt = timed("task runtime (df_tasks_runtime)", lambda: t.ana.tasks.df_tasks_runtime())
    woken = sorted(set(t.df_event("sched_wakeup")["pid"])) if counts.get("sched_wakeup") else []
    counts["woken tasks"] = len(woken)

    def latencies():
        n = 0
        for pid in woken:
            n += len(t.ana.latency.df_latency_wakeup(TaskID(pid=int(pid), comm=None)))
        counts["wakeup latencies"] = n

    timed("wakeup latency (every woken task)", latencies)
    pids = list(rt.index) if rt is not None else []
    counts["tasks"] = len(pids)

    def residency():
        for pid in pids:
            t.ana.tasks.df_task_total_residency(TaskID(pid=int(pid), comm=None))

    timed("task residency per CPU (every task)", residency)

    busiest = list(rt.sort_values("runtime", ascending=False).index[:pelt_tasks]) if rt is not None else []
    counts["PELT tasks"] = len(busiest)

    def pelt():
        for pid in busiest:
            act = t.ana.tasks.df_task_activation(TaskID(pid=int(pid), comm=None))
            if len(act):
                simulate_pelt(act["active"])

    timed(f"PELT util of the {len(busiest)} busiest tasks (activations + simulate_pelt)", pelt)
    print(json.dumps({"times": times, "counts": counts}))


def lisa_bench(path: Path, venv: Path, abtest_s: float, pelt_tasks: int, timeout_s: float) -> dict:
    from crosscheck_lisa import ensure_venv

    py = ensure_venv(venv)
    scratch = Path(tempfile.mkdtemp(prefix="abtest-bench-lisa-"))
    try:
        text = scratch / "trace.txt"
        t_text = lisa_text(path, text)
        cmd = [str(py), __file__, "--lisa-side", str(text), "--lisa-pelt-tasks", str(pelt_tasks)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            steps = [json.loads(ln[5:]) for ln in err.splitlines() if ln.startswith("STEP ")]
            print(f"LISA 3.1.0 on the same trace: stopped after {timeout_s:.0f} s (--lisa-timeout); steps done (s):")
            for st in steps:
                print(f"  {st['step']:56s} {st['s']:8.2f}")
            done = sum(st["s"] for st in steps)
            print(
                f"  the next step did not finish; LISA > {timeout_s:.0f} s ({done:.1f} s in finished steps) vs abtest "
                f"analyze (cached, end to end) {abtest_s:.2f} s: > {timeout_s / abtest_s:.0f}x"
            )
            return {"timeout_s": timeout_s, "steps": steps, "ratio_at_least": timeout_s / abtest_s}
        if res.returncode:
            print(f"LISA failed: {res.stderr.strip()[-500:]}")
            return {"error": res.stderr[-500:]}
        r = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"LISA 3.1.0 ({venv}) on the same trace (s):")
    print(f"  trace-cmd report -N -t to text, fixed for LISA (its input; not counted below)  {t_text:8.2f}")
    total = 0.0
    for k, v in r["times"].items():
        if isinstance(v, dict):
            print(f"  {k:56s} error: {v['error']}")
        else:
            total += v
            print(f"  {k:56s} {v:8.2f}")
    print(f"  counts: {r['counts']}")
    print(
        f"  LISA total {total:.1f} s vs abtest analyze (cached, end to end) {abtest_s:.2f} s: {total / abtest_s:.0f}x"
    )
    return {**r, "text_s": t_text, "total_s": total, "ratio": total / abtest_s}


# ----------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--min-events", type=int, default=3_300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reference", action="store_true", help="also time the Python implementations replaced")
    ap.add_argument("--lisa", action="store_true")
    ap.add_argument("--lisa-venv", type=Path, default=Path.home() / ".cache" / "abtest" / "lisa-3.1.0-venv")
    ap.add_argument(
        "--lisa-pelt-tasks",
        type=int,
        default=20,
        help="LISA's PELT simulation runs per task (pandas, slow): on this many of the busiest tasks",
    )
    ap.add_argument(
        "--lisa-timeout",
        type=float,
        default=900.0,
        help="stop LISA after this many seconds and print the steps it finished",
    )
    ap.add_argument(
        "--window-s",
        type=float,
        default=2.0,
        help="end to end: also `abtest analyze --windows SECONDS --jobs 1` once cached (bounded memory)",
    )
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument("--rss-child", help=argparse.SUPPRESS)
    ap.add_argument("--lisa-side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.lisa_side:
        lisa_side(args.lisa_side, args.lisa_pelt_tasks)
        return
    if args.rss_child:
        one_analysis_rss(args.trace, args.rss_child)
        return
    if args.trace is None:
        from ingest import BENCH_TRACE, ensure_bench_trace

        path, _ = ensure_bench_trace(BENCH_TRACE, args.min_events)
    else:
        path = args.trace
    with open("/proc/loadavg") as f:
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f.read().split()[:3])} at start")
    res: dict = {"trace": str(path)}
    # the in-process figures read a cache entry this code writes (an older entry may hold its tables in
    # other record batches, and numpy would then copy columns that this code reads in place)
    fresh = Path(tempfile.mkdtemp(prefix="abtest-bench-cache-"))
    os.environ["ABTEST_CACHE_DIR"] = str(fresh)
    try:
        subprocess.run(
            [sys.executable, "-c", f"from abtest import Trace; Trace({str(path)!r})"],
            check=True,
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )
        res["in_process"] = in_process(path, args.repeat, args.reference)
        res["rss"] = per_analysis_rss(path)
    finally:
        del os.environ["ABTEST_CACHE_DIR"]
        shutil.rmtree(fresh, ignore_errors=True)
    res["end_to_end"] = end_to_end(path, args.repeat, args.window_s)
    if args.lisa:
        res["lisa"] = lisa_bench(
            path, args.lisa_venv, min(res["end_to_end"]["cached_s"]), args.lisa_pelt_tasks, args.lisa_timeout
        )
    if args.compare:
        res["compare"] = compare_bench(path, args.iterations, args.jobs)
    print_targets(res)
    with open("/proc/loadavg") as f:
        print(f"load average {' '.join(f.read().split()[:3])} at the end")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
