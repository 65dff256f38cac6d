"""Where lab jobs run: a LAVA server through its REST API (v0.2), or LAVA's dispatcher alone (`lava-run`).

Both give the same small interface to the collection loop:
    submit(definition) -> job id          status(job id) -> JobStatus       log(job id) -> text
    cancel(job id)                        device_worker(device) -> worker   matching_devices(type, tags)
    close()

LavaServer (REST API v0.2, `Authorization: Token <token>`):
    POST /api/v0.2/jobs/ {"definition": "<yaml>"} -> 201 {"job_ids": [N]}   (400: {"message": reason})
    GET  /api/v0.2/jobs/N/        state (Submitted, Scheduling, Scheduled, Running, Canceling, Finished),
                                  health (Unknown, Complete, Incomplete, Canceled), actual_device,
                                  submit_time / start_time / end_time, failure_comment
    GET  /api/v0.2/jobs/N/logs/   the job log (YAML, one record per line)
    GET  /api/v0.2/jobs/N/cancel/ cancel
    GET  /api/v0.2/devices/?device_type=T   devices (hostname, health, worker_host, tags)
Network errors and 5xx answers raise LabUnavailable (the loop retries the poll later); anything else
the server refuses raises LabError. A redirect is followed only within the server's origin (scheme, host,
port): the token is never sent to another origin, and a redirect elsewhere is a LabError naming it.

LavaRun runs `lava-run --job-id ID --output-dir DIR --device DEVICE.yaml --dispatcher D.yaml JOB.yaml`
subprocesses on this machine (root, as lava-run requires), `parallel` at a time, in submission order.
A device dictionary (.jinja2) is rendered with LAVA's own templates (/usr/share/lava-server/device-
types, from the lava-server package) by Debian's python3, which has jinja2 as a lava-dispatcher
dependency. The dispatcher configuration sets a per-collection `prefix` so that its job directories
(/var/lib/lava/dispatcher/tmp/<prefix><id>) never collide with another lava-run or worker on the host.
cancel/close stop the lava-run processes by PID (SIGTERM: lava-run cancels the job and stops its QEMU),
then whatever they left (descendants found through /proc) by PID.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from abtest.collectors.lab.config import LabConfig
from abtest.collectors.lab.job import QEMU_CONTEXT

DEVICE_TYPES_DIR = Path("/usr/share/lava-server/device-types")
SYSTEM_PYTHON = "/usr/bin/python3"


class LabError(RuntimeError):
    """The lab refused something (bad job definition, no such device type, permission)."""


class LabUnavailable(LabError):
    """The lab could not be reached or answered with a server error (worth retrying later)."""


@dataclass
class JobStatus:
    """A job as the lab reports it. Times are ISO strings (UTC) or None."""

    job_id: int
    state: str
    health: str
    device: str | None = None
    submit_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    failure_comment: str | None = None

    @property
    def finished(self) -> bool:
        return self.state == "Finished"

    def seconds(self, a: str, b: str) -> float | None:
        """Seconds between two of the time fields (e.g. "submit_time", "start_time")."""
        ta, tb = getattr(self, a), getattr(self, b)
        if not ta or not tb:
            return None
        return round((_parse_time(tb) - _parse_time(ta)).total_seconds(), 3)


def _parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# -- LAVA server ----------------------------------------------------------------------------------------
def _origin(url: str) -> tuple[str, str, int | None]:
    u = urllib.parse.urlsplit(url)
    port = u.port or {"http": 80, "https": 443}.get(u.scheme.lower())
    return (u.scheme.lower(), (u.hostname or "").lower(), port)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect (with the request's headers, the token included) only to the same origin; raise
    LabError for any other (urllib would otherwise copy the Authorization header to wherever a 302 points)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if _origin(newurl) != _origin(req.full_url):
            raise LabError(
                f"{req.full_url}: HTTP {code} redirects to another origin ({newurl}); not following "
                f"it with the API token (point [lab] url at the server itself)"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


class LavaServer:
    """A LAVA server's REST API v0.2. `token` may be None (read-only use)."""

    def __init__(self, cfg: LabConfig, token: str | None, timeout_s: float = 30.0):
        self.cfg, self._token, self.timeout_s = cfg, token, timeout_s
        self.url = cfg.url
        self._workers: dict[str, str | None] = {}

    def _request(self, method: str, path: str, body: dict | None = None, *, raw: bool = False):
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Token {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.cfg.api_url(path), data=data, method=method, headers=headers)
        try:
            with _OPENER.open(req, timeout=self.timeout_s) as r:
                payload = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")[:500]
            try:
                text = json.loads(text).get("message") or json.loads(text).get("detail") or text
            except (ValueError, AttributeError):
                pass
            if e.code >= 500:
                raise LabUnavailable(f"{self.url}: {method} {path}: HTTP {e.code}: {text}") from None
            raise LabError(f"{self.url}: {method} {path}: HTTP {e.code}: {text}") from None
        except (TimeoutError, urllib.error.URLError, OSError) as e:
            raise LabUnavailable(f"{self.url}: {method} {path}: {getattr(e, 'reason', e)}") from None
        return payload if raw else json.loads(payload or b"null")

    def version(self) -> str:
        return str(self._request("GET", "system/version/").get("version"))

    def submit(self, definition: str) -> int:
        if not self._token:
            raise LabError(f"{self.url}: submitting needs an API token (set ${self.cfg.token_env} or [lab] token_file)")
        out = self._request("POST", "jobs/", {"definition": definition})
        ids = out.get("job_ids") if isinstance(out, dict) else None
        if not ids:
            raise LabError(f"{self.url}: submission returned no job id: {out}")
        return int(ids[0])

    def status(self, job_id: int) -> JobStatus:
        j = self._request("GET", f"jobs/{int(job_id)}/")
        return JobStatus(
            int(j["id"]),
            str(j["state"]),
            str(j["health"]),
            j.get("actual_device"),
            j.get("submit_time"),
            j.get("start_time"),
            j.get("end_time"),
            j.get("failure_comment"),
        )

    def log(self, job_id: int) -> str:
        try:
            return self._request("GET", f"jobs/{int(job_id)}/logs/", raw=True).decode(errors="replace")
        except LabError as e:
            if "HTTP 404" in str(e):
                return ""
            raise

    def cancel(self, job_id: int) -> None:
        self._request("GET", f"jobs/{int(job_id)}/cancel/")

    def definition(self, job_id: int) -> str:
        return str(self._request("GET", f"jobs/{int(job_id)}/").get("definition", ""))

    def device_worker(self, device: str | None) -> str | None:
        if not device:
            return None
        if device not in self._workers:
            try:
                self._workers[device] = self._request("GET", f"devices/{urllib.parse.quote(device)}/").get(
                    "worker_host"
                )
            except LabError:
                self._workers[device] = None
        return self._workers[device]

    def matching_devices(self, device_type: str, tags: list[str]) -> list[str]:
        """Hostnames of usable devices of that type carrying every tag."""
        q = urllib.parse.urlencode({"device_type": device_type, "limit": 1000})
        out = self._request("GET", f"devices/?{q}")
        rows = out.get("results", []) if isinstance(out, dict) else []
        return [
            d["hostname"]
            for d in rows
            if d.get("health") in ("Good", "Unknown", "Looping") and set(tags) <= set(d.get("tags") or [])
        ]

    def close(self) -> None:
        pass


# -- lava-run on this machine ------------------------------------------------------------------------------
def render_device_dictionary(
    dictionary: Path, out: Path, context: dict | None = None, templates: Path = DEVICE_TYPES_DIR
) -> Path:
    """A device dictionary (jinja2, `{% extends 'qemu.jinja2' %}` ...) -> device YAML, rendered the way
    lava-server renders it for a job (jinja2 FileSystemLoader over LAVA's device-type templates,
    trim_blocks, the job's `context` as variables), by Debian's python3 (where lava's jinja2 lives)."""
    if not (templates / "base.jinja2").is_file():
        raise LabError(f"{templates}: LAVA's device-type templates are missing (apt-get install lava-server)")
    code = (
        "import sys, jinja2\n"
        "env = jinja2.Environment(loader=jinja2.FileSystemLoader(sys.argv[1]), trim_blocks=True, autoescape=False)\n"
        "sys.stdout.write(env.from_string(sys.stdin.read()).render(**json.loads(sys.argv[2])))\n"
    )
    r = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import json\n" + code, str(templates), json.dumps(context or {})],
        input=Path(dictionary).read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        raise LabError(f"rendering {dictionary} failed: {r.stderr.strip()[-500:]}")
    out.write_text(r.stdout)
    return out


def _start_time(pid: int) -> int | None:
    """Start time of `pid` (clock ticks since boot, /proc/PID/stat field 22), None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every living descendant of `pid` (from /proc/*/stat parent links)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            st = _start_time(c)
            if st is not None:
                out.append((c, st))
                todo.append(c)
    return out


def stop_process_tree(pid: int, grace_s: float = 20.0) -> None:
    """SIGTERM `pid` (a child we started), wait up to grace_s, then SIGKILL it and every descendant
    still alive, by PID (a PID is only signalled while its start time is the one recorded: never a
    recycled PID)."""
    tree = {p: st for p, st in descendants(pid)}
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    t0 = time.monotonic()
    while time.monotonic() - t0 < grace_s:
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break
        except ChildProcessError:
            break
        time.sleep(0.1)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    tree.update({p: st for p, st in descendants(pid)})
    for p, st in tree.items():
        if _start_time(p) == st:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class _LocalJob:
    job_id: int
    dir: Path
    definition: str
    submit_time: str
    proc: subprocess.Popen | None = None
    start_time: str | None = None
    end_time: str | None = None
    health: str = "Unknown"
    canceled: bool = False
    failure: str | None = None


class LavaRun:
    """Jobs run by `lava-run` on this machine. workdir: job directories (definition, output, log).
    parallel: lava-run processes at once (each boots one QEMU)."""

    def __init__(self, cfg: LabConfig, workdir: Path, parallel: int = 1, context: dict | None = None):
        self.cfg = cfg
        self.url = cfg.url
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.parallel = max(1, int(parallel))
        src = cfg.lava_run_device
        if not src.is_file():
            raise LabError(f"lava-run device file {src} does not exist")
        self.device_yaml = (
            render_device_dictionary(src, self.workdir / "device.yaml", context) if src.suffix == ".jinja2" else src
        )
        self.device_name = src.stem
        self.prefix = f"abtest-{secrets.token_hex(4)}-"
        self.dispatcher_yaml = self.workdir / "dispatcher.yaml"
        self.dispatcher_yaml.write_text(f"prefix: {self.prefix}\n")
        self._jobs: dict[int, _LocalJob] = {}
        self._next = 1

    @staticmethod
    def _now() -> str:
        return datetime.utcnow().isoformat() + "Z"

    def submit(self, definition: str) -> int:
        jid = self._next
        self._next += 1
        d = self.workdir / f"job-{jid}"
        d.mkdir()
        (d / "job.yaml").write_text(definition)
        self._jobs[jid] = _LocalJob(jid, d, definition, self._now())
        self._pump()
        return jid

    def _pump(self) -> None:
        """Reap finished lava-run processes; start queued jobs while fewer than `parallel` run."""
        for j in self._jobs.values():
            if j.proc is not None and j.end_time is None and j.proc.poll() is not None:
                j.end_time = self._now()
                j.health = "Canceled" if j.canceled else ("Complete" if j.proc.returncode == 0 else "Incomplete")
                if j.proc.returncode != 0:
                    j.failure = _lava_run_error(j.dir)
        running = sum(1 for j in self._jobs.values() if j.proc is not None and j.end_time is None)
        for j in sorted(self._jobs.values(), key=lambda j: j.job_id):
            if running >= self.parallel:
                break
            if j.proc is None and not j.canceled:
                out = open(j.dir / "lava.log", "w")
                j.proc = subprocess.Popen(
                    [
                        "lava-run",
                        "--job-id",
                        str(j.job_id),
                        "--output-dir",
                        str(j.dir / "output"),
                        "--device",
                        str(self.device_yaml),
                        "--dispatcher",
                        str(self.dispatcher_yaml),
                        str(j.dir / "job.yaml"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                out.close()
                j.start_time = self._now()
                running += 1

    def _job(self, job_id: int) -> _LocalJob:
        try:
            return self._jobs[int(job_id)]
        except KeyError:
            raise LabError(
                f"lava-run job {job_id} is not one of this run's (lava-run jobs do not outlive "
                f"the abtest process that started them)"
            ) from None

    def status(self, job_id: int) -> JobStatus:
        self._pump()
        j = self._job(job_id)
        if j.canceled and j.proc is None:
            state = "Finished"
        elif j.proc is None:
            state = "Submitted"
        elif j.end_time is None:
            state = "Running"
        else:
            state = "Finished"
        return JobStatus(
            j.job_id,
            state,
            j.health if state == "Finished" else "Unknown",
            self.device_name if j.proc is not None else None,
            j.submit_time,
            j.start_time,
            j.end_time,
            j.failure,
        )

    def log(self, job_id: int) -> str:
        p = self._job(job_id).dir / "lava.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def cancel(self, job_id: int) -> None:
        j = self._job(job_id)
        j.canceled = True
        if j.proc is None:
            j.health, j.end_time = "Canceled", self._now()
        elif j.end_time is None:
            stop_process_tree(j.proc.pid)
            self._pump()

    def device_worker(self, device: str | None) -> str | None:
        return f"{socket.gethostname()} (lava-run)" if device else None

    def matching_devices(self, device_type: str, tags: list[str]) -> list[str]:
        return [self.device_name] * self.parallel

    def close(self) -> None:
        for j in self._jobs.values():
            if j.proc is not None and j.end_time is None:
                self.cancel(j.job_id)


def _lava_run_error(job_dir: Path) -> str | None:
    """error_type: error_msg from lava-run's result.yaml (written at the end of every run)."""
    p = job_dir / "output" / "result.yaml"
    try:
        import yaml

        res = yaml.safe_load(p.read_text()) or {}
    except (OSError, ValueError):
        return None
    if res.get("result") == "pass":
        return None
    return f"{res.get('error_type') or 'Error'}: {res.get('error_msg') or 'unknown'}"


def make_backend(cfg: LabConfig, token: str | None, workdir: Path):
    """LavaRun for `lava-run:DEVICE`, else LavaServer."""
    if cfg.is_lava_run:
        # lava-run takes a rendered device: render it with the QEMU recipe's job context, as a server would
        return LavaRun(
            cfg, workdir, parallel=max(1, cfg.max_in_flight or 1), context=QEMU_CONTEXT if not cfg.actions else {}
        )
    return LavaServer(cfg, token)
