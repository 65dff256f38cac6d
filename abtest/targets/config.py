"""Target files (TOML): how to reach a target, what it is, how to boot each kernel.

    name = "pixel6"
    kind = "adb"                 # local | ssh | adb | qemu
    [connection]                 # ssh: host port user key_file host_key known_hosts
    serial = "1A2B3C4D"          # adb: serial server_port
    [trace]                      # ftrace collector defaults
    events = ["sched_switch"]    # added to what the analyses declare
    buffer_size_kb = 8192        # per CPU
    clock = "boot"
    [power]
    sampler = "odpm"             # none | odpm | hwmon | rapl
    period_s = 0.5
    [cooldown]
    thermal_max_c = 40.0         # wait until every thermal zone is below this (or timeout_s)
    fixed_s = 0.0                # and/or a fixed pause before each iteration
    timeout_s = 300.0
    [boot.kernelA]               # one table per kernel label
    host_command = "fastboot boot boot-a.img"   # run on the host (or `command`: run on the target)
    expect_release = "6.1.*"     # glob matched against `uname -r` after boot
    [labels.menu]                # a label applying settings on the running kernel
    settings = { cpuidle_governor = "menu" }
    [platform]                   # capacities, OPPs, energy model, rail groups (see docs/collect.md)

The QEMU kind takes [qemu] (memory_mb, smp, append, boot_timeout_s, boot_attempts) and per kernel `package =
"linux-image-6.1.0-*-amd64"`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from abtest.targets.base import Target

KINDS = ("local", "ssh", "adb", "qemu")


class TargetConfigError(ValueError):
    """A target file is malformed (the message names the file and the key)."""


@dataclass
class BootEntry:
    """How to get kernel `label` running.

    command: shell line run ON the target (kexec, `reboot <entry>`...), connection drops after it.
    host_command: shell line run on the HOST (fastboot boot, power-cycle script...).
    expect_release: fnmatch glob that `uname -r` must match afterwards ('' = no check).
    package: QEMU only, Debian package (glob) of the kernel image to boot.
    append: QEMU only, extra kernel command line.
    timeout_s: seconds to wait for the target to come back.
    """

    label: str
    command: str = ""
    host_command: str = ""
    expect_release: str = ""
    package: str = ""
    append: str = ""
    timeout_s: float = 300.0


@dataclass
class TargetConfig:
    """A parsed target file. `raw` keeps the whole TOML document."""

    name: str
    kind: str
    path: Path | None = None
    connection: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)
    power: dict = field(default_factory=dict)
    cooldown: dict = field(default_factory=dict)
    boot: dict[str, BootEntry] = field(default_factory=dict)
    labels: dict[str, dict] = field(default_factory=dict)
    qemu: dict = field(default_factory=dict)
    platform: dict | None = None
    raw: dict = field(default_factory=dict)


def _table(doc: dict, key: str, where: str) -> dict:
    val = doc.get(key, {})
    if not isinstance(val, dict):
        raise TargetConfigError(f"{where}: [{key}] must be a table, got {type(val).__name__}")
    return val


def parse_target(doc: dict, where: str = "<target>") -> TargetConfig:
    """Validate a TOML document (dict) into a TargetConfig."""
    kind = doc.get("kind")
    if kind not in KINDS:
        raise TargetConfigError(f"{where}: kind must be one of {', '.join(KINDS)}; got {kind!r}")
    boot = {}
    for label, entry in _table(doc, "boot", where).items():
        if not isinstance(entry, dict):
            raise TargetConfigError(f"{where}: [boot.{label}] must be a table")
        unknown = set(entry) - (set(BootEntry.__dataclass_fields__) - {"label"})
        if unknown:
            raise TargetConfigError(f"{where}: [boot.{label}] has unknown keys {sorted(unknown)}")
        boot[label] = BootEntry(label=label, **entry)
    labels = _table(doc, "labels", where)
    for label, entry in labels.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("settings", {}), dict):
            raise TargetConfigError(f"{where}: [labels.{label}] must be a table with a `settings` table")
    conn = _table(doc, "connection", where)
    if kind == "ssh" and "host" not in conn:
        raise TargetConfigError(f'{where}: kind = "ssh" needs [connection] host')
    return TargetConfig(
        name=str(doc.get("name") or (Path(where).stem if where else kind)),
        kind=kind,
        connection=conn,
        trace=_table(doc, "trace", where),
        power=_table(doc, "power", where),
        cooldown=_table(doc, "cooldown", where),
        boot=boot,
        labels=labels,
        qemu=_table(doc, "qemu", where),
        platform=doc.get("platform"),
        raw=doc,
    )


def load_target_file(path: str | os.PathLike) -> TargetConfig:
    """Read and validate a target TOML file (TargetConfigError on bad content)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such target file") from None
    except tomllib.TOMLDecodeError as e:
        raise TargetConfigError(f"{path}: invalid TOML: {e}") from e
    cfg = parse_target(doc, str(path))
    cfg.path = path
    return cfg


def make_target(cfg: TargetConfig, *, connection: dict | None = None) -> Target:
    """Build the Target a config describes (`connection` overrides [connection] keys, e.g. a VM port)."""
    conn = dict(cfg.connection)
    conn.update(connection or {})
    if cfg.kind == "local":
        from abtest.targets.local import LocalTarget

        return LocalTarget(name=cfg.name, platform=cfg.platform)
    if cfg.kind in ("ssh", "qemu"):
        from abtest.targets.ssh import SshTarget

        allowed = {
            "host",
            "port",
            "user",
            "key_file",
            "host_key",
            "known_hosts",
            "insecure_accept_any_host_key",
            "connect_timeout_s",
        }
        bad = set(conn) - allowed
        if bad:
            raise TargetConfigError(
                f"{cfg.path or cfg.name}: unknown [connection] keys {sorted(bad)} (ssh takes {sorted(allowed)})"
            )
        return SshTarget(name=cfg.name, platform=cfg.platform, **conn)
    from abtest.targets.adb import AdbTarget

    bad = set(conn) - {"serial", "server_port", "adb"}
    if bad:
        raise TargetConfigError(
            f"{cfg.path or cfg.name}: unknown [connection] keys {sorted(bad)} (adb takes serial, server_port, adb)"
        )
    return AdbTarget(name=cfg.name, platform=cfg.platform, **conn)
