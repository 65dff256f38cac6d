"""Workload Automation 3 (WA3) output directories as abtest run-store iterations.

A WA3 run directory (what `wa run agenda.yaml -d OUT` leaves)::

    OUT/result.json             run-level Result: status, metrics, artifacts, events, classifiers, metadata
    OUT/.run_state.json         RunState: status, jobs [{id, label, iteration, status, retries, timestamp}]
    OUT/__meta/run_info.json    RunInfo: uuid, run_name, project, project_stage, start_time, end_time, duration
    OUT/__meta/target_info.json TargetInfo: target, os, os_version, abi, kernel_release, kernel_version,
                                kernel_config, cpus, hostname, sched_features, page_size_kb ...
    OUT/__meta/jobs.json        {"jobs": [JobSpec pods: id, workload_name, label, classifiers, iterations,
                                 workload_parameters, runtime_parameters, augmentations ...]}
    OUT/<id>-<label>-<iteration>/result.json   per-job Result (same shape as the run's)
    OUT/<id>-<label>-<iteration>/trace.dat, energy CSVs, logs ... (listed in its artifacts)
    OUT/__failed/<job>-attemptNN/            earlier failed attempts of retried jobs (ignored)

A Result pod: {"status": "OK"|"PARTIAL"|"FAILED"|..., "metrics": [{"name", "value", "units",
"lower_is_better", "classifiers"}], "artifacts": [{"name", "path" (relative to the job dir), "kind"
(log|meta|data|export|raw), "description", "classifiers"}], "events": [...], "classifiers": {...},
"metadata": {...}}.

Mapping onto abtest's store model (abtest.store.reader.Iteration):
  kernel label  <- classifier "kernel" (job's, else the run's), else the label given by the caller (the
                   directory name under the store), else __meta/target_info.json kernel_release
  workload      <- the job's WA label (JobSpec.label; WA defaults it to the workload name)
  iteration     <- the job's WA iteration number
  complete      <- job status "OK" (anything else is kept but reported as unusable, with WA's status)
  metrics       <- the job's result.json metrics: name (plus "[k=v,...]" when a metric has classifiers of
                   its own, e.g. sub-tests), units, lower_is_better; source "wa:result.json"
  trace_path    <- a job artifact that abtest can read (trace-cmd's trace.dat, perfetto, text), else the
                   first trace-looking file in the job directory
  power_path    <- energy CSVs of the job (devlib MeasurementsCsv: `<site>_energy` J cumulative and/or
                   `<site>_power` W, time in `timestamp`/`time` s, `time_ms`, `time_us`) converted to the
                   store's power.csv (ts_ns, rail, subsystem, energy_uj cumulative); written next to the
                   CSV as .abtest-power.csv, or under ~/.cache/abtest/wa/ when the directory is read-only
  meta          <- {"kernel": {"release", "version"}, "hardware": target/os/abi/cpus, "wa": run name,
                    uuid, job id, WA status, classifiers, workload parameters, runtime parameters}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import polars as pl

from abtest.store.layout import find_trace
from abtest.store.model import Iteration, StoreError

_JOB_DIR = re.compile(r"^(?P<id>[^-]+)-(?P<label>.+)-(?P<iteration>\d+)$")
_TRACE_ARTIFACT_SUFFIXES = (".dat", ".perfetto-trace", ".pftrace", ".pb", ".html", ".ctrace", ".txt", ".gz")
_TIME_COLUMNS = {"timestamp": 1e9, "time": 1e9, "time_s": 1e9, "time_ms": 1e6, "time_us": 1e3, "time_ns": 1.0}
POWER_CACHE_NAME = ".abtest-power.csv"


def _read_json(path: Path, what: str) -> dict:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise StoreError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON in WA {what} ({e.msg})") from e
    if not isinstance(doc, dict):
        raise StoreError(f"{path}: expected a JSON object (WA {what})")
    return doc


def _status(value) -> str:
    """WA statuses are plain strings in result.json and may be enum pods ({"name": ...}) in state files."""
    if isinstance(value, dict):
        value = value.get("name") or value.get("value")
    return str(value or "UNKNOWN").upper()


def _jobs_from_state(root: Path) -> list[dict]:
    state = root / ".run_state.json"
    if state.is_file():
        doc = _read_json(state, "run state")
        jobs = []
        for j in doc.get("jobs", []):
            jobs.append(
                {
                    "id": str(j["id"]),
                    "label": str(j["label"]),
                    "iteration": int(j["iteration"]),
                    "status": _status(j.get("status")),
                    "retries": int(j.get("retries") or 0),
                }
            )
        return jobs
    jobs = []  # no state file: job directories named <id>-<label>-<iteration> holding a result.json
    for d in sorted(root.iterdir()):
        m = _JOB_DIR.match(d.name)
        if d.is_dir() and m and (d / "result.json").is_file():
            jobs.append(
                {"id": m["id"], "label": m["label"], "iteration": int(m["iteration"]), "status": None, "retries": 0}
            )
    return jobs


def _metric_name(m: dict, job_classifiers: dict) -> str:
    own = {k: v for k, v in (m.get("classifiers") or {}).items() if job_classifiers.get(k) != v}
    if not own:
        return str(m["name"])
    return f"{m['name']}[{','.join(f'{k}={v}' for k, v in sorted(own.items()))}]"


def _trace_artifact(job_dir: Path, artifacts: list[dict]) -> Path | None:
    for a in artifacts:
        p = job_dir / str(a.get("path", ""))
        if (
            a.get("kind") in ("data", "raw")
            and p.is_file()
            and p.name.endswith(_TRACE_ARTIFACT_SUFFIXES)
            and "energy" not in p.name
        ):
            return p
    return None


def _energy_csvs(job_dir: Path, artifacts: list[dict]) -> list[Path]:
    found = []
    for a in artifacts:
        p = job_dir / str(a.get("path", ""))
        if (
            p.suffix == ".csv"
            and p.is_file()
            and ("energy" in p.name or "energy" in str(a.get("name", "")) or "power" in p.name)
        ):
            found.append(p)
    if not found:
        found = sorted(p for p in job_dir.glob("*.csv") if "energy" in p.name or "power" in p.name)
    return found


def energy_csv_to_samples(path: Path) -> pl.DataFrame:
    """devlib MeasurementsCsv (WA energy_measurement output) -> store power samples.

    Columns in: a time column (timestamp|time|time_s in s, time_ms, time_us, time_ns) and per site
    `<site>_energy` (J, cumulative) and/or `<site>_power` (W; integrated with the trapezoid rule from the
    first sample). Out: ts_ns (Int64, from the first sample), rail (site), subsystem ("wa-energy"),
    energy_uj (Float64, cumulative). Raises StoreError naming the file when it has no usable columns.
    """
    try:
        df = pl.read_csv(path, infer_schema_length=1000)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as e:
        raise StoreError(f"{path}: cannot parse energy CSV ({e})") from e
    cols = {c.strip().lower(): c for c in df.columns}
    time_col = next((cols[c] for c in _TIME_COLUMNS if c in cols), None)
    if time_col is None:
        raise StoreError(f"{path}: no time column; expected one of {', '.join(_TIME_COLUMNS)}")
    scale = _TIME_COLUMNS[time_col.strip().lower()]
    t = df[time_col].cast(pl.Float64).to_numpy()
    ts_ns = np.rint((t - t[0]) * scale).astype(np.int64) if len(t) else np.zeros(0, np.int64)
    sites: dict[str, tuple[str, str]] = {}
    for c in df.columns:
        m = re.match(r"^(?P<site>.+)_(?P<kind>energy|power)$", c.strip(), re.IGNORECASE)
        if m:
            kind = m["kind"].lower()
            if kind == "energy" or m["site"] not in sites:
                sites[m["site"]] = (c, kind)
    if not sites:
        raise StoreError(f"{path}: no <site>_energy or <site>_power columns (devlib MeasurementsCsv expected)")
    frames = []
    for site, (col, kind) in sorted(sites.items()):
        v = df[col].cast(pl.Float64).to_numpy()
        if kind == "energy":
            energy_uj = v * 1e6
        else:
            dt_s = np.diff(ts_ns) / 1e9
            energy_uj = np.concatenate([[0.0], np.cumsum((v[1:] + v[:-1]) / 2 * dt_s)]) * 1e6
        frames.append(
            pl.DataFrame(
                {
                    "ts_ns": ts_ns,
                    "rail": [site] * len(ts_ns),
                    "subsystem": ["wa-energy"] * len(ts_ns),
                    "energy_uj": energy_uj,
                }
            )
        )
    return pl.concat(frames)


def _power_file(job_dir: Path, csvs: list[Path]) -> tuple[Path | None, list[str]]:
    """Convert the job's energy CSVs to one store power.csv; (path, problems)."""
    if not csvs:
        return None, []
    out = job_dir / POWER_CACHE_NAME
    newest = max(p.stat().st_mtime_ns for p in csvs)
    if out.is_file() and out.stat().st_mtime_ns >= newest:
        return out, []
    try:
        samples = pl.concat([energy_csv_to_samples(p) for p in csvs])
    except StoreError as e:
        return None, [str(e)]
    try:
        samples.write_csv(out)
        return out, []
    except OSError:
        key = hashlib.sha256("|".join(f"{p}:{p.stat().st_mtime_ns}" for p in csvs).encode()).hexdigest()[:20]
        alt = Path.home() / ".cache" / "abtest" / "wa" / f"{key}.csv"
        alt.parent.mkdir(parents=True, exist_ok=True)
        samples.write_csv(alt)
        return alt, []


def load_wa_output(path: str | os.PathLike, label: str | None = None) -> list[Iteration]:
    """Read a WA3 output directory; one Iteration per job (see the module docstring for the mapping).

    label: kernel label to use when neither the jobs nor the run carry a "kernel" classifier (default: the
    directory name). Raises StoreError when `path` is not a WA3 output directory.
    """
    root = Path(path)
    if not (root / "__meta").is_dir() and not (root / "result.json").is_file():
        raise StoreError(f"{root} is not a Workload Automation 3 output directory (no __meta/ nor result.json)")
    run_result = _read_json(root / "result.json", "run result") if (root / "result.json").is_file() else {}
    meta_dir = root / "__meta"
    run_info = _read_json(meta_dir / "run_info.json", "run info") if (meta_dir / "run_info.json").is_file() else {}
    target = (
        _read_json(meta_dir / "target_info.json", "target info") if (meta_dir / "target_info.json").is_file() else {}
    )
    specs = {}
    if (meta_dir / "jobs.json").is_file():
        specs = {str(s.get("id")): s for s in _read_json(meta_dir / "jobs.json", "job specs").get("jobs", [])}
    run_classifiers = dict(run_result.get("classifiers") or {})
    default_label = label or root.name
    iterations = []
    for job in _jobs_from_state(root):
        job_dir = root / f"{job['id']}-{job['label']}-{job['iteration']}"
        spec = specs.get(job["id"], {})
        problems: list[str] = []
        result: dict = {}
        if (job_dir / "result.json").is_file():
            try:
                result = _read_json(job_dir / "result.json", "job result")
            except StoreError as e:
                problems.append(str(e))
        elif job_dir.is_dir() or job["status"] == "OK":
            problems.append(f"{job_dir}: no result.json")
        status = _status(result.get("status") if result else job["status"])
        classifiers = {**run_classifiers, **(spec.get("classifiers") or {}), **(result.get("classifiers") or {})}
        kernel_label = str(classifiers.get("kernel") or default_label)
        metrics = {}
        for m in result.get("metrics", []):
            if not isinstance(m, dict) or "name" not in m:
                problems.append(f"{job_dir}/result.json: malformed metric {m!r}")
                continue
            value = m.get("value")
            metrics[_metric_name(m, classifiers)] = {
                "value": value if isinstance(value, (int, float)) and not isinstance(value, bool) else None,
                "unit": m.get("units") or "",
                "lower_is_better": bool(m.get("lower_is_better", False)),
                "source": "wa:result.json",
            }
        artifacts = [a for a in result.get("artifacts", []) if isinstance(a, dict)]
        trace_path = _trace_artifact(job_dir, artifacts) if job_dir.is_dir() else None
        if trace_path is None and job_dir.is_dir():
            trace_path = find_trace(job_dir)
            if trace_path is not None and (trace_path.name == "result.json" or trace_path.suffix == ".csv"):
                trace_path = None
        power_path, power_problems = (
            _power_file(job_dir, _energy_csvs(job_dir, artifacts)) if job_dir.is_dir() else (None, [])
        )
        problems.extend(power_problems)
        if status != "OK":
            problems.append(f"WA job status {status}")
        meta = {
            "kernel": {"release": target.get("kernel_release"), "version": target.get("kernel_version")},
            "hardware": {
                k: target.get(k) for k in ("target", "os", "os_version", "abi", "hostname") if target.get(k) is not None
            }
            | ({"cpus": len(target["cpus"])} if target.get("cpus") else {}),
            "wa": {
                "run_name": run_info.get("run_name"),
                "run_uuid": run_info.get("uuid"),
                "project": run_info.get("project"),
                "job_id": job["id"],
                "status": status,
                "retries": job["retries"],
                "classifiers": classifiers,
                "workload_name": spec.get("workload_name"),
                "workload_parameters": spec.get("workload_parameters"),
                "runtime_parameters": spec.get("runtime_parameters"),
                "start_time": run_info.get("start_time"),
                "end_time": run_info.get("end_time"),
            },
        }
        iterations.append(
            Iteration(
                label=kernel_label,
                workload=job["label"],
                index=job["iteration"],
                path=job_dir,
                complete=status == "OK" and job_dir.is_dir(),
                metrics=metrics,
                meta=meta,
                trace_path=trace_path,
                power_path=power_path,
                name=job_dir.name,
                problems=problems,
            )
        )
    if not iterations:
        raise StoreError(f"{root}: WA output directory lists no jobs (.run_state.json or <id>-<label>-<n>/ dirs)")
    return iterations
