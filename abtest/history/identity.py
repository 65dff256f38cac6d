"""A build's identity, the device and the date of an iteration, from the meta.json the collector wrote.

Nothing here guesses: a field meta.json does not carry is '' (unknown), except the date, which falls back to
the iteration directory's modification time (UTC) so that builds without meta.json still have an order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from abtest.store.model import Iteration

# bisect stores a revision under the label bisect-<first 12 hex digits> (abtest.bisect.state)
_BISECT_LABEL = re.compile(r"^bisect-([0-9a-f]{7,40})$")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class BuildIdentity:
    """kernel_release / kernel_version: `uname -r` / `uname -v`; git_revision: hex revision; config_hash:
    sha256 of the kernel config. '' = unknown."""

    kernel_release: str = ""
    kernel_version: str = ""
    git_revision: str = ""
    config_hash: str = ""


def _dict(d, key) -> dict:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else {}


def _text(v) -> str:
    return v.strip() if isinstance(v, str) else ""


def git_revision(meta: dict, label: str) -> str:
    """The source revision: meta.json git.revision / kernel.git_revision / build.revision, else the hex of a
    bisect label, else ''."""
    for cand in (
        _dict(meta, "git").get("revision"),
        _dict(meta, "kernel").get("git_revision"),
        _dict(meta, "build").get("revision"),
    ):
        text = _text(cand).lower()
        if _HEX.match(text):
            return text
    m = _BISECT_LABEL.match(label)
    return m.group(1) if m else ""


def build_identity(meta: dict, label: str) -> BuildIdentity:
    kernel = _dict(meta, "kernel")
    return BuildIdentity(
        _text(kernel.get("release")),
        _text(kernel.get("version")),
        git_revision(meta, label),
        _text(kernel.get("config_sha256")),
    )


def device(meta: dict) -> str:
    """The target's name (meta.json target.name), else the Android model, else the CPU model, else 'unknown'."""
    hw = _dict(meta, "hardware")
    for cand in (_dict(meta, "target").get("name"), hw.get("android_model"), hw.get("cpu_model")):
        if _text(cand):
            return _text(cand)
    return "unknown"


def iteration_date(it: Iteration) -> str:
    """ISO-8601 UTC start of the iteration (meta.json timestamps.start_utc), else the directory's mtime."""
    start = _text(_dict(it.meta, "timestamps").get("start_utc"))
    if start:
        try:
            return datetime.fromisoformat(start).astimezone(UTC).isoformat(timespec="seconds")
        except ValueError:
            pass
    return datetime.fromtimestamp(it.path.stat().st_mtime, UTC).isoformat(timespec="seconds")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
