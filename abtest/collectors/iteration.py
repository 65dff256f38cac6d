"""One iteration on a connected target: under the target lock apply the label's settings, cool down, start
tracing (+ power sampling, trace annotations), run the workload between trace markers, stop, put tracefs and the
settings back, pull, and commit metrics.json + meta.json into the store (abtest.store.writer)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from abtest.collectors.annotate import TraceAnnotator
from abtest.collectors.cooldown import cooldown
from abtest.collectors.meta import (
    META_SCRIPT,
    collect_target_meta,
    parse_meta_output,
    power_meta,
    tools_meta,
    workload_log,
)
from abtest.collectors.plan import CollectConfig, LabelSpec
from abtest.collectors.power import PowerSampler, write_power_csv
from abtest.collectors.target_state import TargetState
from abtest.collectors.workloads.base import Workload, WorkloadError
from abtest.collectors.workloads.base import metrics as workload_metrics
from abtest.store.writer import IterationWriter
from abtest.targets.base import TargetError
from abtest.targets.shell import quote


def workload_script(wl: Workload, marker: str | None, tag: str, remote_dir: str) -> str:
    """Workload command between trace markers, timed on the target (ns; /proc/uptime fallback)."""
    mark = (lambda text: f"echo {quote(text)} > {quote(marker)} 2>/dev/null") if marker else (lambda text: ":")
    return "\n".join(
        [
            f"cd {quote(remote_dir)} || exit 97",
            "abtest_now() { t=$(/usr/bin/date +%s%N 2>/dev/null || date +%s%N 2>/dev/null); case \"$t\" in *N*|'') "
            "t=$(awk '{printf \"%.0f\", $1*1000000000}' /proc/uptime);; esac; echo $t; }",
            mark(f"abtest_workload_begin {tag}"),
            "abtest_s=$(abtest_now)",
            f"( {wl.command(remote_dir)} )",
            "abtest_rc=$?",
            "abtest_e=$(abtest_now)",
            mark(f"abtest_workload_end {tag}"),
            "echo ABTEST_WALL_NS $abtest_s $abtest_e >&2",
            "exit $abtest_rc",
        ]
    )


def run_iteration(
    st: TargetState,
    cc: CollectConfig,
    label: LabelSpec,
    wl: Workload,
    it: int,
    attempt: int,
    writer: IterationWriter,
    boot_meta: dict | None,
) -> None:
    """One iteration into writer.tmp; commits on success. Raises on any failure (caller retries).

    Under the target lock (this machine: the tracefs lock): apply the label's settings, cool down, start
    tracing, run the workload, stop, put tracefs and the settings back. Round trips to the target: settings
    (1-2 per file, when the label has settings) and their restore (1), tracefs snapshot (first iteration
    only), meta + ftrace start (1), workload between markers (1), ftrace stop + extract + tracefs restore (1),
    pull (SFTP/adb), plus the workload's own prepare (first time) and collect.
    """
    t, cfg = st.target, cc.target_cfg
    start_utc = datetime.now(UTC).isoformat()
    remote_dir = st.remote_dir
    if wl.name not in st.prepared:
        wl.prepare(t, remote_dir)
        st.prepared.add(wl.name)
    tag = f"label={label.name} workload={wl.name} iteration={it}"
    collector = st.collector
    session_meta: dict = {}
    sampler = None
    annotator = None
    phases = {}
    lock_t0 = time.monotonic()
    with st.lock:
        phases["lock_wait_s"] = time.monotonic() - lock_t0  # other collections / tests on this target
        try:
            a = time.monotonic()
            settings_now = st.settings.apply(label.settings) if label.settings else {}
            phases["settings_s"] = time.monotonic() - a
            cool = cooldown(t, cc)
            t_work0 = time.monotonic()  # collection overhead is counted from here (cool-down excluded)
            a = time.monotonic()
            if collector is not None and getattr(collector, "original", False) is None:
                original = collector.snapshot()  # first change of tracefs in this run: journal it first
                if st.journal:
                    st.journal.record_tracefs(original)
            if collector:
                _, out = collector.start(preamble=META_SCRIPT)
                meta = parse_meta_output(out)
                annotator = TraceAnnotator.from_settings(t, collector, cfg.trace)  # cgroups + thermal into the trace
                if annotator:
                    annotator.start()
            else:
                meta = collect_target_meta(t)
            kind = cfg.power.get("sampler", "none")
            if kind != "none":
                sampler = PowerSampler(
                    t,
                    kind,
                    period_s=float(cfg.power.get("period_s", 0.5)),
                    remote_dir=remote_dir,
                    sysfs=cfg.power.get("sysfs", "/sys"),
                )
                sampler.start()
            phases["start_s"] = time.monotonic() - a
            a = time.monotonic()
            script = workload_script(wl, collector.marker_path if collector else None, tag, remote_dir)
            res = t.run(script, wl.timeout_s, as_root=True)
            phases["workload_call_s"] = time.monotonic() - a
            wl_stderr = "".join(ln for ln in res.stderr.splitlines(True) if not ln.startswith("ABTEST_WALL_NS "))
            (writer.tmp / "workload.log").write_text(
                workload_log(wl.command(remote_dir), res.stdout, wl_stderr, res.exit_code)
            )
            if res.exit_code != 0:
                raise WorkloadError(
                    f"{t.name}: workload {wl.name} exited {res.exit_code}: "
                    f"{(wl_stderr or res.stdout).strip()[-400:] or '(no output)'}"
                )
            wall = [ln.split() for ln in res.stderr.splitlines() if ln.startswith("ABTEST_WALL_NS ")]
            workload_s = (
                ((int(wall[-1][2]) - int(wall[-1][1])) / 1e9) if wall and len(wall[-1]) == 3 else res.duration_s
            )
            a = time.monotonic()
            if sampler:
                power = sampler.stop(writer.tmp / ".power-raw.txt")
                (writer.tmp / ".power-raw.txt").unlink(missing_ok=True)
                write_power_csv(power, writer.tmp / "power.csv")
            if annotator:
                annotator.stop()
            if collector:
                session_meta = collector.stop(writer.tmp / getattr(collector, "trace_name", "trace.dat")).as_meta()
            phases["stop_pull_s"] = time.monotonic() - a
        except BaseException:
            if annotator:
                try:
                    annotator.stop()
                except TargetError:
                    pass
            if collector:
                collector.reset()
            if sampler and sampler.pid:
                try:
                    t.run(f"kill {int(sampler.pid)} 2>/dev/null", 30, as_root=True)
                except TargetError:
                    pass
            try:  # best effort here: the original error is the one to report; the journal keeps the originals
                st.settings.restore()
            except (TargetError, OSError, EOFError):
                pass
            raise
        a = time.monotonic()
        st.settings.restore()  # before the lock goes: the next holder finds the original values
        phases["settings_s"] += time.monotonic() - a
    metrics = wl.parse(res)
    metrics.update(wl.collect(t, writer.tmp, remote_dir))
    metrics.update(workload_metrics((wl.DURATION_METRIC, workload_s)))
    iteration_s = time.monotonic() - t_work0
    meta.update(
        {
            "label": label.name,
            "workload": wl.name,
            "iteration": it,
            "attempt": attempt,
            "target": {
                "name": cfg.name,
                "kind": cfg.kind,
                "file": str(cfg.path) if cfg.path else None,
                "emulated": cfg.kind == "qemu",
            },
            "boot": boot_meta,
            "settings": {
                "label": label.settings,
                "applied": settings_now,
                # values found before the change, put back after the iteration (state journal)
                "original": {p: st.settings.original.get(p) for p in settings_now},
                "workload": wl.describe(),
                "events_requested": collector.events if collector else [],
                "analyses": cc.analyses,
            },
            "trace": (
                {
                    **session_meta,
                    "tracefs_original": getattr(collector, "original", None),
                    **({"annotations": annotator.describe()} if annotator else {}),
                }
                if collector
                else session_meta
            ),
            "power": power_meta(cfg.power if sampler else None, session_meta),
            "cooldown": cool,
            "tools": tools_meta(meta),
            "timestamps": {"start_utc": start_utc, "end_utc": datetime.now(UTC).isoformat()},
            "timings": {
                "iteration_s": round(iteration_s, 4),
                "workload_s": round(workload_s, 4),
                "overhead_s": round(iteration_s - workload_s, 4),
                "cooldown_s": round(float(cool.get("waited_s", 0.0)), 4),
                **{k: round(v, 4) for k, v in phases.items()},
            },
            "platform": cfg.platform,
        }
    )
    if session_meta.get("lost_events"):
        meta.setdefault("warnings", []).append(f"{session_meta['lost_events']} trace events lost")
    writer.commit(metrics, meta)
