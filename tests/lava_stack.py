"""A whole, private LAVA stack on 127.0.0.1 for the end-to-end test: PostgreSQL, lava-server (gunicorn),
lava-publisher, lava-scheduler and one lava-worker with N QEMU devices, from the Debian packages
`make setup` installs (lava-server, lava-dispatcher, postgresql).

Nothing system-wide is touched: the database cluster, device dictionaries, job output and logs live in
one temporary directory, and lava-server reads its configuration from the environment (DATABASE_URL,
LAVA_SETTINGS_*, LAVA_YAML_SETTINGS_*: lava_server/settings/prod.py), so no `dpkg-reconfigure
lava-server` (which wants the system cluster running) is needed. Every port is a free one. Every process
is started here and stopped here by its PID (and the PIDs of its descendants: lava-worker -> lava-run ->
qemu), also when the test fails; `stop()` is idempotent.

Timings measured on this machine are printed (`timings`): initdb, migrate, provisioning, processes up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # Debian's python3 (python3-django) first, not a venv


def stack_missing() -> str | None:
    """Why the stack cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (lava-run and the private PostgreSQL cluster's postgres user)"
    for tool in ("lava-server", "lava-worker", "lava-run", "gunicorn3", "qemu-system-x86_64"):
        if not shutil.which(tool, path=SYSTEM_PATH):
            return f"{tool} is missing (make setup installs lava-server, lava-dispatcher, qemu-system-x86)"
    if not (PG_BIN / "initdb").exists():
        return f"{PG_BIN}/initdb is missing (apt-get install postgresql)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(pid: int) -> list[tuple[int, int]]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                children.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            st = _start_time(c)
            if st is not None:
                out.append((c, st))
                todo.append(c)
    return out


class LavaStack:
    """Start with `start()`; `url`, `token` (API token of the superuser `abtest`), `devices`, `timings`."""

    def __init__(self, devices: list[str], dictionary: str, worker: str = "worker1"):
        self.device_names = devices
        self.dictionary = dictionary
        self.worker = worker
        self.dir = Path(tempfile.mkdtemp(prefix="abtest-lava-stack-"))
        os.chmod(self.dir, 0o755)
        self.procs: dict[str, tuple[int, int | None]] = {}  # name -> (pid, start time)
        self._popens: dict[str, subprocess.Popen] = {}
        self.pg_port = free_port()
        self.http_port = free_port()
        self.event_port = free_port()
        self.publisher_port = free_port()
        self.url = f"http://127.0.0.1:{self.http_port}/"
        self.token = ""
        self.timings: dict[str, float] = {}
        self.env = self._env()

    def _env(self) -> dict:
        d = self.dir
        for sub in ("devices", "health-checks", "dispatcher.d", "media", "worker", "logs"):
            (d / sub).mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAVA_", "DJANGO_", "PYTHON"))}
        env.update(
            {
                "PATH": SYSTEM_PATH,
                "DATABASE_URL": f"postgres://lava@127.0.0.1:{self.pg_port}/lava",
                "LAVA_SETTINGS_DEVICES_PATH": str(d / "devices"),
                "LAVA_SETTINGS_HEALTH_CHECKS_PATH": str(d / "health-checks"),
                "LAVA_SETTINGS_DISPATCHER_CONFIG_PATH": str(d / "dispatcher.d"),
                "LAVA_SETTINGS_MEDIA_ROOT": str(d / "media"),
                "LAVA_SETTINGS_DJANGO_LOGFILE": str(d / "logs" / "django.log"),
                "LAVA_YAML_SETTINGS_DEVICE_TYPES_PATHS": json.dumps(["/usr/share/lava-server/device-types"]),
                # events: the scheduler reacts to a submission or a device turning idle at once (instead of
                # its 20 s loop); private sockets, no fixed port
                "LAVA_YAML_SETTINGS_EVENT_NOTIFICATION": "true",
                "LAVA_SETTINGS_INTERNAL_EVENT_SOCKET": f"ipc://{d}/lava.events",
                "LAVA_SETTINGS_EVENT_SOCKET": f"tcp://127.0.0.1:{self.event_port}",
            }
        )
        return env

    # -- processes --------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], **kw) -> None:
        log = open(self.dir / "logs" / f"{name}.out", "w")
        p = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kw,
        )
        log.close()
        self._popens[name] = p
        self.procs[name] = (p.pid, _start_time(p.pid))

    def _run(self, argv: list[str], timeout: float = 120, user: str | None = None) -> str:
        if user:
            argv = ["runuser", "-u", user, "--"] + argv
        r = subprocess.run(argv, env=self.env, cwd=self.dir, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {(r.stderr or r.stdout)[-1500:]}")
        return r.stdout

    def manage(self, *args: str) -> str:
        return self._run(["lava-server", "manage", *args])

    def start(self) -> LavaStack:
        t0 = time.monotonic()
        pg = self.dir / "pg"
        pg.mkdir()
        shutil.chown(pg, "postgres", "postgres")
        self._run(
            [str(PG_BIN / "initdb"), "-D", str(pg), "-A", "trust", "-U", "lava", "-E", "UTF8", "--no-sync"],
            user="postgres",
        )
        self._spawn(
            "postgres",
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(PG_BIN / "postgres"),
                "-D",
                str(pg),
                "-p",
                str(self.pg_port),
                "-k",
                str(pg),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
            ],
        )
        self._wait(lambda: self._pg_ready(), 30, "PostgreSQL")
        self._run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "lava", "lava"])
        self.timings["postgres_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        self._provision()
        self.timings["migrate_provision_s"] = time.monotonic() - t1
        t1 = time.monotonic()
        # root, like gunicorn here: as lavaserver (its default) it could not create its ipc socket in self.dir
        self._spawn(
            "publisher",
            [
                "lava-server",
                "manage",
                "lava-publisher",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.publisher_port),
                "-u",
                "root",
                "-g",
                "root",
                "--log-file",
                str(self.dir / "logs/publisher.log"),
            ],
        )
        self._spawn(
            "gunicorn",
            [
                "gunicorn3",
                "lava_server.wsgi",
                "--bind",
                f"127.0.0.1:{self.http_port}",
                "--workers",
                "2",
                "--timeout",
                "120",
                "--log-file",
                str(self.dir / "logs/gunicorn.log"),
            ],
        )
        self._spawn(
            "scheduler",
            [
                "lava-server",
                "manage",
                "lava-scheduler",
                "--level",
                "INFO",
                "-u",
                "root",
                "-g",
                "root",
                "--event-url",
                f"tcp://127.0.0.1:{self.event_port}",
                "--log-file",
                str(self.dir / "logs/scheduler.log"),
            ],
        )
        self._wait(lambda: self._api("system/version/").get("version"), 60, "lava-server (gunicorn)")
        self._spawn(
            "worker",
            [
                "lava-worker",
                "--name",
                self.worker,
                "--url",
                self.url,
                "--token",
                self.worker_token,
                "--worker-dir",
                str(self.dir / "worker"),
                "--ping-interval",
                "1",
                "--job-log-interval",
                "1",
                "--log-file",
                str(self.dir / "logs/worker.log"),
            ],
        )
        self._wait(lambda: self._api(f"workers/{self.worker}/").get("state") == "Online", 60, "lava-worker online")
        self.timings["processes_up_s"] = time.monotonic() - t1
        self.timings["total_s"] = time.monotonic() - t0
        return self

    def _provision(self) -> None:
        """migrate + device type, worker (its token), devices, superuser, API token: LAVA's own management
        commands (`lava-server manage migrate`, `device-types add`, `workers add`, `devices add`, `users add`,
        `tokens add`), run through Django's call_command in one `lava-server manage shell` process (one
        Django start-up instead of seven)."""
        for name in self.device_names:
            (self.dir / "devices" / f"{name}.jinja2").write_text(self.dictionary)
        # the worker's dispatcher configuration: a private prefix for its job directories
        (self.dir / "dispatcher.d" / f"{self.worker}.yaml").write_text(f"prefix: abtest-e2e-{os.getpid()}-\n")
        steps = [["migrate", "--no-input"], ["device-types", "add", "qemu"], ["workers", "add", self.worker]]
        steps += [["devices", "add", "--device-type", "qemu", "--worker", self.worker, n] for n in self.device_names]
        steps += [
            ["users", "add", "--superuser", "--staff", "--passwd", "abtest-e2e", "abtest"],
            ["tokens", "add", "--user", "abtest"],
        ]
        code = (
            "import io, json\nfrom django.core.management import call_command\nout = []\n"
            f"for argv in {json.dumps(steps)}:\n"
            "    buf = io.StringIO()\n    call_command(*argv, stdout=buf)\n    out.append(buf.getvalue())\n"
            "print('ABTEST-PROVISION ' + json.dumps(out))\n"
        )
        stdout = self._run(["lava-server", "manage", "shell", "-c", code], timeout=600)
        outputs = json.loads(stdout.split("ABTEST-PROVISION ", 1)[1])
        m = re.search(r"Token:\s*(\S+)", outputs[2])
        if not m:
            raise RuntimeError(f"`workers add` printed no token: {outputs[2]!r}")
        self.worker_token = m.group(1)
        self.token = outputs[-1].strip().splitlines()[-1].strip()

    def _pg_ready(self) -> bool:
        r = subprocess.run(
            [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.pg_port)], capture_output=True
        )
        return r.returncode == 0

    def _api(self, path: str) -> dict:
        req = urllib.request.Request(
            self.url + "api/v0.2/" + path, headers={"Authorization": f"Token {self.token}"} if self.token else {}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def api(self, path: str) -> dict:
        return self._api(path)

    def _wait(self, check, timeout_s: float, what: str) -> None:
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout_s:
            for name, p in self._popens.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode} while waiting for {what}: {self.log_tail(name)}")
            try:
                if check():
                    return
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.3)
        raise RuntimeError(f"{what} not up within {timeout_s:.0f} s ({last})")

    def log_tail(self, name: str, n: int = 1500) -> str:
        texts = []
        for p in (self.dir / "logs" / f"{name}.out", self.dir / "logs" / f"{name}.log"):
            if p.exists():
                texts.append(p.read_text(errors="replace")[-n:])
        return "\n".join(texts)

    def pids(self) -> list[int]:
        """Every living process of the stack: those started here and their descendants."""
        out = []
        for pid, st in self.procs.values():
            if st is not None and _start_time(pid) == st:
                out.append(pid)
                out += [p for p, _ in _descendants(pid)]
        return out

    def stop(self) -> None:
        """Stop every process started here, worker first (it stops its lava-run and QEMU), PostgreSQL last;
        SIGTERM (SIGINT for PostgreSQL: fast shutdown), then SIGKILL by PID after 5 s."""
        for name in ("worker", "scheduler", "gunicorn", "publisher", "postgres"):
            if name not in self.procs:
                continue
            t0 = time.monotonic()
            pid, st = self.procs.pop(name)
            popen = self._popens.pop(name)
            tree = _descendants(pid)
            # postgres runs under runuser: signal the postmaster (runuser's child) as well
            targets = [(pid, st)] + ([t for t in tree if _parent(t[0]) == pid] if name == "postgres" else [])
            for p, pst in targets:
                if _start_time(p) == pst:
                    try:
                        os.kill(p, signal.SIGINT if name == "postgres" else signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            try:
                popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=10)
            tree += _descendants(pid)
            for p, pst in tree:
                if _start_time(p) == pst:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.timings[f"stop_{name}_s"] = time.monotonic() - t0
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LavaStack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
