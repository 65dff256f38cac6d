#!/usr/bin/env python3
"""Cross-check abtest's analyses against LISA 3.1.0 (ARM-software/lisa, `lisa-linux` on PyPI) on the shared traces.

    python bench/crosscheck_lisa.py [--venv DIR] [--markdown docs/lisa-crosscheck.md] [--traces DIR]

LISA lives in its own virtualenv (default ~/.cache/abtest/lisa-3.1.0-venv, created on first use with the versions
that import on Python 3.11: numpy 1.24.4, pandas 2.0.3, pyarrow 12.0.1, scipy 1.10.1, matplotlib 3.7.5, bokeh
3.1.1, holoviews 1.16.2, panel 1.1.1, param 1.13.0, nest_asyncio). This script runs itself there with
``--lisa-side`` for LISA's numbers (JSON on stdout) and computes abtest's in the calling interpreter (abtest's
environment), then prints one row per quantity: LISA's value, abtest's, and, where they differ, the documented
reason. Every reason is one of DIFFERENCES below; rows marked "=" agree to 1e-6 relative.

Not part of `make test` (minutes, needs the LISA environment). Results: docs/lisa-crosscheck.md.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISA_PINS = [
    "lisa-linux==3.1.0",
    "numpy==1.24.4",
    "pandas==2.0.3",
    "pyarrow==12.0.1",
    "scipy==1.10.1",
    "matplotlib==3.7.5",
    "bokeh==3.1.1",
    "holoviews==1.16.2",
    "panel==1.1.1",
    "param==1.13.0",
    "nest_asyncio",
]
DEFAULT_VENV = Path.home() / ".cache" / "abtest" / "lisa-3.1.0-venv"

# trace (relative to the traces dir) -> platform file (relative) or None: every shared trace with events both
# tools analyse (sched_switch + sched_wakeup, cpu_frequency or devlib's markers, cpu_idle, sched_pelt_*,
# sched_overutilized, thermal_temperature). langraph/trace.dat has no sched_wakeup (LISA's task states need it),
# the perfetto traces are not read by LISA.
TRACES = {
    "lisa/sched_load-trace.dat": "lisa/sched_load-plat_info.yml",
    "lisa/trace_txt-trace.txt": None,
    "x86-vm/x86-haltpoll-hackbench-cyclictest.dat": None,
    "x86-vm/x86-ladder-hackbench-cyclictest.dat": None,
    "x86-vm/x86-menu-hackbench-cyclictest.dat": None,
    "trappy/trace.txt": None,
    "trappy/trace_thermal.txt": None,
    "trappy/trace.dat": None,
    "trappy/trace_idle.dat": None,
}
TOP_TASKS = 4

# Why LISA and abtest may differ, by quantity. A row that differs cites one of these.
DIFFERENCES = {
    "preempt-flag": "LISA's preemption latency starts from switch-outs whose prev_state is exactly 0 (TASK_RUNNING); "
    "a preemption on 4.14+ kernels is flagged R+ (prev_state 0x100, TASK_REPORT_MAX; older kernels: "
    "TASK_STATE_MAX), which LISA leaves out. abtest counts every switch-out without a sleep bit.",
    "lisa-runtime": "LISA's df_tasks_runtime disagrees with LISA's own df_task_activation for tasks on a CPU when the "
    "trace ends (its window-end refit moves that last run); abtest's CPU time equals the sum of "
    "LISA's df_task_activation runs.",
    "idle-lead-in": "Before a CPU's first cpu_idle event abtest infers the state from that event (an entry: the CPU "
    "was active; an exit: idle in an unknown state); LISA counts from the first event on.",
    "lisa-parse": "LISA 3.1.0's text parser fails on this file: it drops sched_switch (MissingTraceEventError) and "
    "raises TypeError on the print lines (`print: 0xffff...s: cpu_frequency_devlib: ...`); abtest "
    "reads both (its numbers here are checked against the text in tests/).",
    "lisa-no-events": "LISA's df_cpu_idle_state_residency raises for a CPU without cpu_idle events (the x86 VM's "
    "CPU1, trappy's idle trace CPU4); abtest reports the whole window as unknown for it.",
}


# ----------------------------------------------------------------------------------------------- LISA side
def lisa_side(spec: dict) -> dict:
    """LISA's values for one trace: {quantity: {key: value}}; errors as {"error": text}."""
    import warnings

    warnings.filterwarnings("ignore")
    import shutil
    import tempfile

    from lisa.datautils import series_mean, series_refit_index
    from lisa.platforms.platinfo import PlatformInfo
    from lisa.trace import TaskID, Trace

    plat = PlatformInfo.from_yaml_map(spec["plat"]) if spec.get("plat") else None
    # LISA writes a ".<name>.lisa-swap" cache beside the trace it opens: give it a private copy, never the shared
    # traces (read-only data other tests glob)
    scratch = tempfile.mkdtemp(prefix="abtest-lisa-")
    path = shutil.copy(spec["trace"], scratch)
    t = Trace(path, plat_info=plat, normalize_time=False) if plat else Trace(path, normalize_time=False)
    win = (t.start, t.end)
    out: dict = {"window_s": [t.start, t.end]}

    def run(name, fn):
        try:
            out[name] = fn()
        except Exception as e:  # LISA raising is itself a result to report
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}

    cpus = spec.get("cpus", [])
    if spec.get("frequency"):
        run(
            "freq.transitions",
            lambda: {str(c): int(t.ana.frequency.df_cpu_frequency_transitions(c)["transitions"].sum()) for c in cpus},
        )
        run("freq.mean_khz", lambda: {str(c): float(t.ana.frequency.get_average_cpu_frequency(c)) for c in cpus})
        if plat is not None:

            def dom():
                res = {}
                for d in plat["freq-domains"]:
                    df = t.ana.frequency.df_domain_frequency_residency(d[0])
                    for khz, row in df.iterrows():
                        res[f"cpu{d[0]}@{int(khz)}"] = float(row["total_time"])
                return res

            run("freq.domain_residency_s", dom)
    if spec.get("idle"):

        def idle():
            res = {}
            for c in cpus:
                try:
                    df = t.ana.idle.df_cpu_idle_state_residency(c)
                except Exception as e:  # e.g. a CPU without cpu_idle events
                    res[f"cpu{c}"] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
                    continue
                for st, row in df.iterrows():
                    res[f"cpu{c}/state{int(st)}"] = float(row["time"])
            return res

        run("idle.residency_s", idle)
    if spec.get("pelt"):

        def pelt():
            df = t.ana.load_tracking.df_cpus_signal("util")
            return {
                str(int(c)): float(series_mean(series_refit_index(g["util"], window=win))) for c, g in df.groupby("cpu")
            }

        run("pelt.mean_util", pelt)
    if spec.get("overutilized"):
        run("overutilized.time_s", lambda: float(t.ana.status.get_overutilized_time()))
        run("overutilized.pct", lambda: float(t.ana.status.get_overutilized_pct()))
    if spec.get("thermal"):

        def therm():
            df = t.ana.thermal.df_thermal_zones_temperature()
            return {
                str(z): float(series_mean(series_refit_index(g["temp"], window=win))) / 1000.0
                for z, g in df.groupby("thermal_zone")
            }

        run("thermal.mean_c", therm)
    tasks = spec.get("tasks", {})
    if tasks and spec.get("latency"):

        def lat(kind):
            res = {}
            for comm, pids in tasks.items():
                vals = []
                for pid in pids:
                    df = (
                        t.ana.latency.df_latency_wakeup(TaskID(pid=pid, comm=None))
                        if kind == "wakeup"
                        else t.ana.latency.df_latency_preemption(TaskID(pid=pid, comm=None))
                    )
                    vals += list(df["wakeup_latency" if kind == "wakeup" else "preempt_latency"])
                res[comm] = {"count": len(vals), "mean_us": (sum(vals) / len(vals) * 1e6) if vals else None}
            return res

        run("latency.wakeup", lambda: lat("wakeup"))
        run("latency.preempt", lambda: lat("preempt"))
    if tasks:

        def runtime():
            df = t.ana.tasks.df_tasks_runtime()
            return {
                comm: float(df.loc[[p for p in pids if p in df.index], "runtime"].sum()) for comm, pids in tasks.items()
            }

        run("tasks.runtime_s", runtime)

        def acts():
            res = {}
            for comm, pids in tasks.items():
                n, dur = 0, 0.0
                for pid in pids:
                    df = t.ana.tasks.df_task_activation(TaskID(pid=pid, comm=None))
                    a = df[df["active"] == 1]
                    n += len(a)
                    dur += float(a["duration"].fillna(0).sum())
                res[comm] = {"count": n, "duration_s": dur}
            return res

        run("tasks.activations", acts)
    return out


# ----------------------------------------------------------------------------------------------- abtest side
def abtest_side(path: Path, plat: Path | None) -> tuple[dict, dict]:
    """(spec for the LISA side, abtest's values in the same shape)."""
    import polars as pl

    from abtest import Trace
    from abtest.analysis import frequency, overutilized, tasks

    t = Trace(path, platform=plat) if plat else Trace(path)
    spec: dict = {"trace": str(path), "plat": str(plat) if plat else None}
    out: dict = {"window_s": [t.start_ns / 1e9, t.end_ns / 1e9]}
    cpus = list(range(t.cpus))
    spec["cpus"] = cpus
    if frequency.has_frequency(t):
        spec["frequency"] = True
        st = {r["cpu"]: r for r in t.frequency.df_frequency_stats().iter_rows(named=True)}
        out["freq.transitions"] = {str(c): st[c]["transitions"] for c in cpus if c in st}
        out["freq.mean_khz"] = {str(c): st[c]["time_weighted_khz"] for c in cpus if c in st}
        if plat:
            res = t.frequency.df_domain_opp_residency().filter(pl.col("frequency_khz").is_not_null())
            out["freq.domain_residency_s"] = {
                f"cpu{d}@{k}": ns / 1e9 for d, k, ns in res.select("domain", "frequency_khz", "time_ns").iter_rows()
            }
    if "cpu_idle" in t.tables:
        spec["idle"] = True
        res = t.idle.df_residency()
        out["idle.residency_s"] = {
            f"cpu{c}/state{s}": ns / 1e9
            for c, s, ns in res.filter(pl.col("state").is_not_null())  # -1 = active
            .select("cpu", "state", "time_ns")
            .iter_rows()
        }
    if "sched_pelt_cfs" in t.tables:
        spec["pelt"] = True
        out["pelt.mean_util"] = {
            str(r["cpu"]): r["mean_util"] for r in t.load_tracking.df_signal_means().iter_rows(named=True)
        }
    if any(n in t.tables for n in overutilized.EVENT_TABLES):
        spec["overutilized"] = True
        s = {v.key: v.value for v in overutilized.metrics(t)}
        out["overutilized.time_s"], out["overutilized.pct"] = s["overutilized.time_s"], s["overutilized.pct"]
    if "thermal_temperature" in t.tables:
        spec["thermal"] = True
        out["thermal.mean_c"] = {r["zone"]: r["mean_c"] for r in t.thermal.df_zone_stats().iter_rows(named=True)}
    if "sched_switch" in t.tables and "sched_wakeup" in t.tables:
        lat = t.latency.df_latency("wakeup")
        top = (
            lat.group_by("comm")
            .agg(pl.len().alias("n"), pl.col("pid").unique().sort())
            .sort(["n", "comm"], descending=[True, False])
            .head(TOP_TASKS)
        )
        spec["tasks"] = {c: [int(p) for p in pids] for c, _, pids in top.iter_rows()}
        spec["latency"] = True
        pre = t.latency.df_preemption_latency()
        out["latency.wakeup"], out["latency.preempt"] = {}, {}
        for comm, pids in spec["tasks"].items():  # the same threads on both sides (LISA selects by pid)
            for key, df in (("latency.wakeup", lat), ("latency.preempt", pre)):
                v = df.filter(pl.col("pid").is_in(pids))["latency_us"]
                out[key][comm] = {"count": v.len(), "mean_us": v.mean() if v.len() else None}
        iv = t.tasks.df_state_intervals()
        run = tasks.df_activations(iv)
        out["tasks.runtime_s"] = {}
        out["tasks.activations"] = {}
        for comm, pids in spec["tasks"].items():
            r = run.filter(pl.col("pid").is_in(pids))
            out["tasks.runtime_s"][comm] = r["dur"].sum() / 1e9
            out["tasks.activations"][comm] = {"count": r.height, "duration_s": r["dur"].sum() / 1e9}
    return spec, out


# ----------------------------------------------------------------------------------------------- compare
def _flat(prefix: str, v) -> dict:
    if isinstance(v, dict) and "error" not in v:
        out = {}
        for k, x in v.items():
            out.update(_flat(f"{prefix}[{k}]", x))
        return out
    return {prefix: v}


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict) and "error" in v:
        return "error: " + v["error"][:80]
    return "" if v is None else str(v)


def compare(name: str, lisa: dict, ab: dict, conv: dict) -> list[list[str]]:
    """Rows [trace, key, LISA, abtest, =|≠, reason] over every key either side has. A difference is explained when
    LISA could not compute the value (lisa-parse / lisa-no-events) or when abtest's own data under LISA's documented
    convention (``conv``: key -> (value, reason)) gives LISA's number; otherwise it is UNEXPLAINED."""
    fa: dict = {}
    fl: dict = {}
    for q in ab:
        if q != "window_s" and not q.startswith("_"):
            fa.update(_flat(q, ab[q]))
            fl.update(_flat(q, lisa.get(q)))
    rows = []
    for k in sorted(set(fa) | set(fl)):
        a, b = fl.get(k), fa.get(k)
        if a is None:  # LISA failed for a whole quantity or CPU: find the error entry covering this key
            a = next(
                (v for kk, v in fl.items() if isinstance(v, dict) and "error" in v and k.startswith(kk.rstrip("]"))),
                None,
            )
        if _same(a, b):
            rows.append([name, k, _fmt(a), _fmt(b), "=", ""])
            continue
        if isinstance(a, dict) and "error" in a:
            why = "lisa-no-events" if "refit the index of an empty" in a["error"] else "lisa-parse"
        elif k in conv and len(conv[k]) == 3 and _same(conv[k][0], b):
            why = f"{conv[k][1]} (LISA's own df_task_activation runs sum to abtest's {_fmt(b)})"
        elif k in conv and len(conv[k]) == 2 and _same(conv[k][0], a):
            why = f"{conv[k][1]} (abtest's data under LISA's convention: {_fmt(conv[k][0]) or 'none'})"
        else:
            why = "UNEXPLAINED"
        rows.append([name, k, _fmt(a), _fmt(b), "≠", why])
    return rows


def ensure_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run(
            [sys.executable if sys.version_info[:2] == (3, 11) else "python3", "-m", "venv", str(venv)], check=True
        )
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *LISA_PINS], check=True)
    return py


def tasks_of(lisa: dict) -> dict:
    return lisa.get("_tasks", {})


def lisa_conventions(path: Path, plat: Path | None, lisa: dict) -> dict:
    """abtest's own data under LISA's conventions, key -> (value, reason), to confirm each explained difference:
    means with the first value extended back to the window start; the last of consecutive wakeups; runs and waits
    still open at the window end cut at the task's last event."""
    import polars as pl

    from abtest import Trace
    from abtest.analysis.intervals import df_intervals

    t = Trace(path, platform=plat) if plat else Trace(path)
    out: dict = {}
    lo, hi = t.start_ns, t.end_ns

    def backfilled_mean(ev: pl.DataFrame, key: str, val: str) -> dict:
        first = ev.sort("ts").group_by(key).first().with_columns(pl.lit(lo - 1).alias("ts"))
        iv = df_intervals(pl.concat([first.select(ev.columns), ev]), val, keys=key, start_ns=lo, end_ns=hi)
        return {
            str(k): v
            for k, v in iv.group_by(key)
            .agg(((pl.col(val).cast(pl.Float64) * pl.col("dur")).sum() / pl.col("dur").sum()).alias("m"))
            .iter_rows()
        }

    if "freq.mean_khz" in lisa:
        ch = t.frequency.df_frequency_changes()
        kern = ch.filter(pl.col("source") == "kernel") if (ch["source"] == "kernel").any() else ch
        for k, v in backfilled_mean(kern.select("ts", "cpu", "frequency_khz"), "cpu", "frequency_khz").items():
            out[f"freq.mean_khz[{k}]"] = (v, "lead-in")
    if "pelt.mean_util" in lisa:
        sig = t.load_tracking.df_cpu_signals(source="kernel").select("ts", "cpu", "util")
        for k, v in backfilled_mean(sig, "cpu", "util").items():
            out[f"pelt.mean_util[{k}]"] = (v, "lead-in")
    if isinstance(lisa.get("latency.preempt"), dict) and "error" not in lisa["latency.preempt"]:
        from abtest.analysis.latency import df_preemption_latency

        sw = t.df("sched_switch", windowed=False)
        ps = pl.col("prev_state").cast(pl.Int64)
        only_zero = sw.with_columns(pl.when(((ps & 0xFF) == 0) & (ps != 0)).then(1).otherwise(ps).alias("prev_state"))
        pre = df_preemption_latency(only_zero, start_ns=lo, end_ns=hi)
        for comm, pids in tasks_of(lisa).items():
            v = pre.filter(pl.col("pid").is_in(pids))["latency_us"]
            out[f"latency.preempt[{comm}][count]"] = (v.len(), "preempt-flag")
            if v.len():
                out[f"latency.preempt[{comm}][mean_us]"] = (v.mean(), "preempt-flag")
    acts = lisa.get("tasks.activations")
    if isinstance(acts, dict) and "error" not in acts:
        for comm, a in acts.items():  # LISA's own per-run durations: explains a difference when abtest equals them
            out[f"tasks.runtime_s[{comm}]"] = (a["duration_s"], "lisa-runtime", "abtest")
    if "idle.residency_s" in lisa and "cpu_idle" in t.tables:
        iv = t.idle.df_intervals()
        first = (
            t.df("cpu_idle", windowed=False).group_by(pl.col("cpu").cast(pl.Int32)).agg(pl.col("ts").min().alias("_f"))
        )
        since = (
            iv.join(first, on="cpu")
            .filter(pl.col("ts") >= pl.col("_f"))
            .drop_nulls("state")
            .group_by("cpu", "state")
            .agg(pl.col("dur").sum())
        )
        got = {f"idle.residency_s[cpu{c}/state{st}]": d / 1e9 for c, st, d in since.iter_rows()}
        for c, st, _d in iv.drop_nulls("state").select("cpu", "state", "dur").iter_rows():
            k = f"idle.residency_s[cpu{c}/state{st}]"
            out[k] = (got.get(k), "idle-lead-in")
    if "thermal.mean_c" in lisa:
        temps = t.thermal.df_zone_temperatures().select("ts", "zone", "temp_c")
        for k, v in backfilled_mean(temps, "zone", "temp_c").items():
            out[f"thermal.mean_c[{k}]"] = (v, "lead-in")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--traces", type=Path, default=None, help="the shared traces directory (default: ../shared/traces)")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")
    ap.add_argument("--lisa-side", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.lisa_side:
        print(json.dumps(lisa_side(json.loads(args.lisa_side))))
        return 0
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    from shared_data import TRACES as SHARED

    traces = args.traces or SHARED
    py = ensure_venv(args.venv)
    all_rows: list[list[str]] = []
    for rel, plat_rel in TRACES.items():
        path = traces / rel
        plat = traces / plat_rel if plat_rel else None
        spec, ab = abtest_side(path, plat)
        res = subprocess.run(
            [str(py), str(Path(__file__).resolve()), "--lisa-side", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if res.returncode != 0:
            all_rows.append([rel, "LISA", "error: " + res.stderr.strip()[-200:], "", "", ""])
            continue
        lisa = json.loads(res.stdout.strip().splitlines()[-1])
        lisa["_tasks"] = spec.get("tasks", {})
        conv = lisa_conventions(path, plat, lisa)
        all_rows += compare(rel, lisa, ab, conv)
    head = ["trace", "quantity", "LISA 3.1.0", "abtest", "", "reason (see below)"]
    widths = [max(len(r[i]) for r in all_rows + [head]) for i in range(len(head))]
    for r in [head] + all_rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    for k, v in DIFFERENCES.items():
        print(f"{k}: {v}")
    n_eq = sum(r[4] == "=" for r in all_rows)
    print(f"\n{n_eq} of {len(all_rows)} values equal; {sum('UNEXPLAINED' in r[5] for r in all_rows)} unexplained")
    if args.markdown:
        import platform as _pf

        n_eq = sum(r[4] == "=" for r in all_rows)
        md = [
            "# abtest vs LISA 3.1.0 on the shared traces",
            "",
            "Generated by `nice python bench/crosscheck_lisa.py --markdown docs/lisa-crosscheck.md` (LISA in its own "
            f"virtualenv: {', '.join(LISA_PINS)}; Python {_pf.python_version()}). One row per value both tools "
            "compute: LISA's (its analysis API, on the same file), abtest's, `=` when they agree to 1e-6 relative, "
            "else the reason. A reason is confirmed, not asserted: either LISA could not compute the value (the "
            "error is shown), or abtest's own data recomputed under LISA's convention gives LISA's number (shown).",
            "",
            "Per-task rows pool the same threads on both sides (LISA selects tasks by pid: the threads abtest "
            f"saw under that name at their wakeups; the {TOP_TASKS} most woken names). abtest's metrics pool by the "
            "name at each event instead, so a wakeup_new made before exec() counts under the parent's name there.",
            "",
            f"**{n_eq} of {len(all_rows)} values equal; {sum('UNEXPLAINED' in r[5] for r in all_rows)} unexplained.**",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        md += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in all_rows]
        md += ["", "## Reasons", ""] + [f"- **{k}**: {v}" for k, v in DIFFERENCES.items()]
        md += [
            "",
            "## Definitions that coincide on these traces but differ in general",
            "",
            "- Wakeup latency, several wakeups before one switch-in: LISA measures from the last (a TASK_WAKING row "
            "followed by another TASK_WAKING is dropped), abtest from the first (the task was runnable from it). "
            "No such sequence occurs in these traces (all wakeup rows above are equal).",
            "- abtest's default wakeup latency is LISA's (sched_wakeup / sched_wakeup_new -> switch-in); abtest "
            "also reports the sched_waking-based one (latency.waking.*), which LISA does not compute.",
            "- Frequency transitions: both count a CPU's first cpu_frequency event (equal above); abtest does not "
            "count a kernel event equal to a value devlib wrote into the trace before it.",
        ]
        args.markdown.write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
