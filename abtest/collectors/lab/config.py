"""The `[lab]` table of a target file (and `--lab URL`): which lab, how jobs look, how artifacts return.

    [lab]
    url = "https://lava.example.org/"   # a LAVA server, or "lava-run:DEVICE" (LAVA's dispatcher alone,
                                        # DEVICE = a device dictionary .jinja2 or a rendered device .yaml)
    allow_http = false                  # plain http:// to a server that is not on a loopback address is
                                        # refused (the token would cross the network in clear) unless true
    token_env = "LAVA_TOKEN"            # API token from this environment variable (default LAVA_TOKEN)
    token_file = "~/.config/abtest/lava-token"   # ... or from this file (first line)
    device_type = "qemu"
    tags = []                           # LAVA device tags a device must have
    priority = "medium"                 # high | medium | low | 0..100
    visibility = "public"               # public | personal
    job_timeout_min = 30                # whole job
    boot_timeout_min = 5                # deploy and boot actions, each
    test_timeout_min = 0                # the test action; 0 = the workload's timeout_s + 5 min
    retries = 2                         # resubmissions of an iteration whose job failed
    max_in_flight = 0                   # jobs queued or running at once; 0 = 2 x the matching devices
    poll_s = 2.0
    artifacts = "upload"                # upload (HTTP receiver) | log (through the job log only)
    upload_url = ""                     # base URL the device reaches the receiver at; default
                                        # http://10.0.2.2:PORT (QEMU user networking's host address)
    receiver_bind = "127.0.0.1"         # receiver listen address ("0.0.0.0" for a remote lab)
    receiver_port = 0                   # 0 = any free port
    max_artifact_mb = 256               # per file, decoded
    log_max_mb = 8                      # with artifacts = "log": all files of a job together
    images = "auto"                     # file (file:// URLs) | http (served by the receiver) | auto
    prompt = "abtest# "                 # the shell prompt of the test image
    [lab.actions.kernelA]               # other device types: the label's deploy and boot actions,
    deploy = { ... }                    # verbatim LAVA job YAML as TOML tables (no QEMU recipe)
    boot = { ... }

The token is read when the collection starts and is never written into the store or a job definition,
never sent over plain http to another machine unless `allow_http = true`, and never sent to another origin
on a redirect (backends.LavaServer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_TOKEN_ENV = "LAVA_TOKEN"
LAVA_RUN_SCHEME = "lava-run:"
DEFAULT_PROMPT = "abtest# "


class LabConfigError(ValueError):
    """The [lab] table or --lab value is unusable (the message names the key)."""


@dataclass
class LabConfig:
    """A parsed [lab] table. Times in minutes or seconds as named; sizes in MiB."""

    url: str
    token_env: str = DEFAULT_TOKEN_ENV
    token_file: str = ""
    device_type: str = "qemu"
    tags: list[str] = field(default_factory=list)
    priority: str | int = "medium"
    visibility: str = "public"
    job_timeout_min: int = 30
    boot_timeout_min: int = 5
    test_timeout_min: int = 0
    retries: int = 2
    max_in_flight: int = 0
    poll_s: float = 2.0
    artifacts: str = "upload"
    upload_url: str = ""
    receiver_bind: str = "127.0.0.1"
    receiver_port: int = 0
    max_artifact_mb: float = 256.0
    log_max_mb: float = 8.0
    images: str = "auto"
    prompt: str = DEFAULT_PROMPT
    actions: dict = field(default_factory=dict)
    allow_http: bool = False

    @property
    def is_lava_run(self) -> bool:
        """True for `lava-run:DEVICE` (LAVA's dispatcher on this machine, no server)."""
        return self.url.startswith(LAVA_RUN_SCHEME)

    @property
    def lava_run_device(self) -> Path:
        return Path(os.path.expanduser(self.url[len(LAVA_RUN_SCHEME) :]))

    @property
    def server_is_local(self) -> bool:
        """The lab runs on this machine (lava-run, or a server on a loopback address): file:// image
        URLs reach its worker."""
        if self.is_lava_run:
            return True
        return _is_loopback(urlparse(self.url).hostname or "")

    @property
    def image_transport(self) -> str:
        """`file` or `http` (images = auto: file when the lab is on this machine)."""
        if self.images == "auto":
            return "file" if self.server_is_local else "http"
        return self.images

    def api_url(self, path: str) -> str:
        return self.url.rstrip("/") + "/api/v0.2/" + path.lstrip("/")

    def job_url(self, job_id: int) -> str | None:
        """The job's page on the server (None for lava-run)."""
        return None if self.is_lava_run else f"{self.url.rstrip('/')}/scheduler/job/{job_id}"

    def describe(self) -> dict:
        """For meta.json and the journal: everything but secrets (the token never appears here)."""
        return {
            "url": self.url,
            "device_type": self.device_type,
            "tags": list(self.tags),
            "priority": self.priority,
            "transport": self.artifacts,
            "images": self.image_transport,
            "token_from": (f"file {self.token_file}" if self.token_file else f"env {self.token_env}")
            if not self.is_lava_run
            else None,
        }


_KEYS = set(LabConfig.__dataclass_fields__)


def _is_loopback(host: str) -> bool:
    """`localhost` or a loopback IP address (127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_lab(table: dict | None, url: str | None = None, where: str = "[lab]") -> LabConfig:
    """[lab] table (may be None) + --lab URL (overrides `url`) -> LabConfig. Raises LabConfigError."""
    table = dict(table or {})
    unknown = set(table) - _KEYS
    if unknown:
        raise LabConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    if url:
        table["url"] = url
    if not table.get("url"):
        raise LabConfigError(f'{where}: no lab URL (give --lab URL or url = "..." in [lab])')
    try:
        cfg = LabConfig(**table)
    except TypeError as e:
        raise LabConfigError(f"{where}: {e}") from e
    u = cfg.url
    if not cfg.is_lava_run and urlparse(u).scheme not in ("http", "https"):
        raise LabConfigError(f"{where}: url {u!r} is neither http(s)://SERVER/ nor lava-run:DEVICE_FILE")
    if cfg.artifacts not in ("upload", "log"):
        raise LabConfigError(f'{where}: artifacts must be "upload" or "log", got {cfg.artifacts!r}')
    if cfg.images not in ("auto", "file", "http"):
        raise LabConfigError(f"{where}: images must be auto, file or http, got {cfg.images!r}")
    if cfg.visibility not in ("public", "personal"):
        raise LabConfigError(f"{where}: visibility must be public or personal")
    if isinstance(cfg.priority, str) and cfg.priority not in ("high", "medium", "low"):
        raise LabConfigError(f"{where}: priority must be high, medium, low or 0..100")
    if isinstance(cfg.priority, int) and not 0 <= cfg.priority <= 100:
        raise LabConfigError(f"{where}: priority must be within 0..100")
    if cfg.retries < 0 or cfg.max_in_flight < 0 or cfg.poll_s <= 0:
        raise LabConfigError(f"{where}: retries and max_in_flight must be >= 0, poll_s > 0")
    if not isinstance(cfg.tags, list) or not all(isinstance(t, str) for t in cfg.tags):
        raise LabConfigError(f"{where}: tags must be a list of strings")
    for label, acts in cfg.actions.items():
        if not isinstance(acts, dict) or set(acts) - {"deploy", "boot"} or "deploy" not in acts or "boot" not in acts:
            raise LabConfigError(f"{where}: [lab.actions.{label}] needs exactly `deploy` and `boot` tables")
    if not isinstance(cfg.allow_http, bool):
        raise LabConfigError(f"{where}: allow_http must be true or false")
    host = urlparse(u).hostname or ""
    if not cfg.is_lava_run and urlparse(u).scheme == "http" and not _is_loopback(host) and not cfg.allow_http:
        raise LabConfigError(
            f"{where}: url {u!r} is plain http to {host!r}, not this machine: the API token would "
            f"cross the network unencrypted; use https://, or set allow_http = true in [lab]"
        )
    return cfg


def load_token(cfg: LabConfig, environ: dict | None = None) -> str | None:
    """The API token: from `token_file` (first line) when set, else from the `token_env` variable.
    None for lava-run (no server) and when neither is set (anonymous: only public reads work; a
    LAVA server refuses submissions without a token, which the backend reports)."""
    if cfg.is_lava_run:
        return None
    env = os.environ if environ is None else environ
    if cfg.token_file:
        path = Path(os.path.expanduser(cfg.token_file))
        try:
            text = path.read_text().strip()
        except OSError as e:
            raise LabConfigError(f"token_file {path}: {e.strerror}") from e
        token = text.splitlines()[0].strip() if text else ""
        if not token:
            raise LabConfigError(f"token_file {path} is empty")
        return token
    return env.get(cfg.token_env) or None
