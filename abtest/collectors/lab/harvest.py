"""A finished LAVA job + its artifacts -> one run-store iteration (or a reason it cannot be one).

Checks, in order; the first that fails rejects the attempt (the caller retries or reports it, the
iteration directory is discarded, nothing is mixed in):
- the job finished with health Complete;
- the iteration script of *this* attempt started (ABTEST-BEGIN key=<key>) and ended with status=ok;
- every file in the console manifest arrived (through the log, or uploaded to the receiver) with the
  manifest's size and sha256;
- the kernel that ran matches the label's `expect_release` glob;
- the workload exited 0 and its output parses into metrics.
Then it writes, into the IterationWriter's temp directory: trace.dat, power.csv (when sampled),
workload.log, lava-job.yaml (the definition, upload token redacted), lava-job.log (the LAVA log with
the base64 data lines left out), lava-script.sh (what ran on the device), metrics.json, meta.json
(kernel/hardware as the ssh collectors record them, plus `lab`: URL, job id and page, device, worker,
times), and commits (`.complete` last).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from abtest.collectors.ftrace import FtraceSession
from abtest.collectors.lab import guest_script as gs
from abtest.collectors.lab.backends import JobStatus
from abtest.collectors.lab.job import redact
from abtest.collectors.lab.lava_log import (
    DEFAULT_MAX_DATA_BYTES,
    LogProblems,
    action_durations,
    job_errors,
    parse_log,
    read_guest_report,
    sha256_bytes,
    strip_data_blocks,
    target_lines,
)
from abtest.collectors.meta import parse_meta_output, power_meta, tools_meta, workload_log
from abtest.collectors.power import read_discovery, sampled_power, write_power_csv
from abtest.collectors.workloads.base import Workload, WorkloadError
from abtest.collectors.workloads.base import metrics as workload_metrics
from abtest.store.writer import IterationWriter
from abtest.targets.base import RunResult
from abtest.trace.errors import TraceFormatError


class AttemptFailed(Exception):
    """This attempt cannot become an iteration; `reason` says why (goes to the journal and the report)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class HarvestContext:
    """What harvest needs besides the job itself."""

    lab: dict  # LabConfig.describe()
    job_url: str | None
    worker: str | None
    target_name: str
    target_file: str | None
    emulated: bool
    label_name: str
    boot: dict | None  # the label's [boot.X] entry (vars) and images
    expect_release: str
    workload: Workload
    events_requested: list[str]
    analyses: list[str] | None
    power: dict | None  # [power] table when sampling
    platform: dict | None
    definition: str
    script: str
    failed_attempts: list[dict]
    max_log_data_bytes: int = DEFAULT_MAX_DATA_BYTES  # bound on what the log's data blocks inflate to


def _text(files: dict[str, bytes], name: str) -> str:
    return files.get(name, b"").decode(errors="replace")


def collect_files(rep, received: dict[str, dict]) -> dict[str, bytes | Path]:
    """Every manifest file, checked: bytes (from the log) or a Path (uploaded). AttemptFailed on a
    missing file or a size / sha256 mismatch."""
    out: dict[str, bytes | Path] = {}
    for name, (size, sha) in rep.manifest.items():
        if name in rep.data:
            data = rep.data[name]
            if len(data) != size or sha256_bytes(data) != sha:
                raise AttemptFailed(
                    f"{name} through the job log: {len(data)} bytes sha256 {sha256_bytes(data)[:12]}, "
                    f"manifest says {size} bytes sha256 {sha[:12]}"
                )
            out[name] = data
        elif name in received:
            got = received[name]
            if got["size"] != size or got["sha256"] != sha:
                raise AttemptFailed(
                    f"{name} uploaded: {got['size']} bytes sha256 {got['sha256'][:12]}, manifest "
                    f"says {size} bytes sha256 {sha[:12]}"
                )
            out[name] = Path(got["path"])
        else:
            why = rep.upload_failed.get(name, "neither in the log nor uploaded")
            raise AttemptFailed(f"{name} did not arrive: {why}")
    return out


def ftrace_session(start: str, stop: str, requested_kb: int, requested_clock: str) -> FtraceSession:
    """The iteration script's ftrace reports -> FtraceSession (meta.json "trace", as the ssh collector
    records it)."""
    return (
        FtraceSession(clock=requested_clock, buffer_size_kb=requested_kb)
        .read_start(start, requested_clock)
        .read_stop(stop)
    )


def power_frame(power: dict, discover: str, samples: str, where: str):
    """The sampler's discovery + samples text -> power frame (collectors.power parsers)."""
    kind = power["sampler"]
    found = read_discovery(kind, discover, f"{where}:{gs.POWER_DISCOVER_FILE}")
    return sampled_power(kind, samples, *found, f"{where}:{gs.POWER_FILE}")


def harvest(
    writer: IterationWriter,
    ctx: HarvestContext,
    status: JobStatus,
    log_text: str,
    received: dict[str, dict],
    *,
    key: str,
    iteration: int,
    attempt: int,
    buffer_size_kb: int,
    clock: str,
) -> Path:
    """Check the attempt and write it as an iteration (see the module docstring). Returns the final
    iteration directory; raises AttemptFailed (the writer's temp directory is left to the caller)."""
    problems = LogProblems()
    records = parse_log(log_text, problems)
    rep = read_guest_report(target_lines(records), key, max_data_bytes=ctx.max_log_data_bytes)
    lava_errors = job_errors(records)
    if status.health != "Complete":
        why = status.failure_comment or "; ".join(lava_errors) or "no reason given"
        raise AttemptFailed(f"LAVA job {status.job_id} {status.health.lower()}: {why}"[:600])
    if rep.key is None:
        raise AttemptFailed(
            f"LAVA job {status.job_id}: the iteration script never started "
            f"(no ABTEST-BEGIN key={key} in the log){': ' + '; '.join(lava_errors) if lava_errors else ''}"
        )
    if rep.over_limit:
        raise AttemptFailed(f"LAVA job {status.job_id}: {rep.over_limit}")
    if rep.status != "ok":
        detail = "; ".join(rep.errors + [f"upload of {n} failed: {r}" for n, r in rep.upload_failed.items()])
        raise AttemptFailed(
            f"LAVA job {status.job_id}: the iteration script reported status "
            f"{rep.status or 'none (no ABTEST-END)'}{': ' + detail if detail else ''}"[:600]
        )
    files = collect_files(rep, received)
    small = {n: (v if isinstance(v, bytes) else v.read_bytes()) for n, v in files.items() if n != gs.TRACE_FILE}
    meta = parse_meta_output(_text(small, gs.META_FILE))
    release = meta["kernel"]["release"]
    if ctx.expect_release and not fnmatch.fnmatch(release, ctx.expect_release):
        raise AttemptFailed(
            f"LAVA job {status.job_id}: the device ran kernel {release!r}, label "
            f"{ctx.label_name} expects {ctx.expect_release!r}"
        )
    stdout, stderr = _text(small, gs.STDOUT_FILE), _text(small, gs.STDERR_FILE)
    rc = rep.rc if rep.rc is not None else -1
    wall = _text(small, gs.WALL_FILE).split()
    workload_s = (int(wall[2]) - int(wall[1])) / 1e9 if len(wall) == 3 and wall[0] == "ABTEST_WALL_NS" else None
    cmd = ctx.workload.command(gs.GUEST_DIR)
    (writer.tmp / "workload.log").write_text(workload_log(cmd, stdout, stderr, rc))
    if rc != 0:
        raise AttemptFailed(
            f"LAVA job {status.job_id}: workload {ctx.workload.name} exited {rc}: "
            f"{(stderr or stdout).strip()[-300:] or '(no output)'}"
        )
    try:
        metrics = ctx.workload.parse(RunResult(rc, stdout, stderr, workload_s or 0.0))
    except WorkloadError as e:
        raise AttemptFailed(f"LAVA job {status.job_id}: {e}") from None
    if workload_s is not None:
        metrics.update(workload_metrics((ctx.workload.DURATION_METRIC, workload_s)))
    session = None
    if ctx.events_requested:
        session = ftrace_session(
            _text(small, gs.FTRACE_START_FILE), _text(small, gs.FTRACE_STOP_FILE), buffer_size_kb, clock
        )
        trace = files.get(gs.TRACE_FILE)
        if trace is None:
            raise AttemptFailed(f"LAVA job {status.job_id}: tracing was requested but no {gs.TRACE_FILE} arrived")
        dest = writer.tmp / gs.TRACE_FILE
        if isinstance(trace, bytes):
            dest.write_bytes(trace)
        else:
            Path(trace).replace(dest)
        os.chmod(dest, 0o600)  # owner-only, as the ssh/adb collectors keep trace.dat (kernel addresses)
    if ctx.power and gs.POWER_FILE in small:
        try:
            frame = power_frame(
                ctx.power, _text(small, gs.POWER_DISCOVER_FILE), _text(small, gs.POWER_FILE), f"job {status.job_id}"
            )
        except TraceFormatError as e:
            raise AttemptFailed(f"LAVA job {status.job_id}: power samples unreadable: {e}") from None
        write_power_csv(frame, writer.tmp / "power.csv")
    (writer.tmp / "lava-job.yaml").write_text(redact(ctx.definition))
    (writer.tmp / "lava-job.log").write_text(redact(strip_data_blocks(log_text)))
    (writer.tmp / "lava-script.sh").write_text(ctx.script)
    actions = action_durations(records)
    session_meta = session.as_meta() if session else {}
    meta.update(
        {
            "label": ctx.label_name,
            "workload": ctx.workload.name,
            "iteration": iteration,
            "attempt": attempt,
            "target": {"name": ctx.target_name, "kind": "lava", "file": ctx.target_file, "emulated": ctx.emulated},
            "boot": ctx.boot,
            "settings": {
                "label": {},
                "applied": {},
                "workload": ctx.workload.describe(),
                "events_requested": ctx.events_requested,
                "analyses": ctx.analyses,
            },
            "trace": session_meta,
            "power": power_meta(ctx.power, session_meta),
            "lab": {
                **ctx.lab,
                "job_id": status.job_id,
                "job_url": ctx.job_url,
                "device": status.device,
                "worker": ctx.worker,
                "health": status.health,
                "attempt_key": key,
                "submit_time": status.submit_time,
                "start_time": status.start_time,
                "end_time": status.end_time,
                "failed_attempts": ctx.failed_attempts,
                "files": {
                    n: {
                        "size": rep.manifest[n][0],
                        "sha256": rep.manifest[n][1],
                        "via": "log" if n in rep.data else "upload",
                    }
                    for n in rep.manifest
                },
                "log_problems": problems.as_meta() | rep.problems.as_meta(),
            },
            "tools": tools_meta(meta),
            "timestamps": {
                "start_utc": status.start_time,
                "end_utc": status.end_time,
                "harvested_utc": datetime.now(UTC).isoformat(),
            },
            "timings": {
                "workload_s": round(workload_s, 4) if workload_s is not None else None,
                "queue_s": status.seconds("submit_time", "start_time"),
                "job_s": status.seconds("start_time", "end_time"),
                **{f"lava_{k.replace('-', '_')}_s": v for k, v in actions.items()},
            },
            "platform": ctx.platform,
        }
    )
    warnings = list(session.warnings) if session else []
    if problems.counts or rep.problems.counts:
        warnings.append(
            f"LAVA log: {sum(problems.counts.values()) + sum(rep.problems.counts.values())} "
            f"unparsed lines (see lab.log_problems)"
        )
    if session_meta.get("lost_events"):
        warnings.append(f"{session_meta['lost_events']} trace events lost")
    if warnings:
        meta["warnings"] = warnings
    return writer.commit(metrics, meta)
