"""STORE/abtest.toml: settings that belong to a store rather than to one command line.

    [workloads.youtube]
    tasks = ["RenderThread", "surfaceflinger", "CrRendererMain"]   # per-task metrics always compared

    [power.channels]                                                 # explicit rail -> channel mapping
    CPU-Little = ["S4M_VDD_CPUCL0"]
    CPU-Big = ["S2M_VDD_CPUCL2"]

Both are optional; without the file every default applies. A malformed file is a StoreError naming it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from abtest.store.layout import STORE_CONFIG_FILE
from abtest.store.model import StoreError


@dataclass(frozen=True)
class StoreConfig:
    """tasks: workload -> task names; rail_channels: channel -> rail names (None: built-in mapping)."""

    tasks: dict = field(default_factory=dict)
    rail_channels: dict | None = None
    path: str | None = None

    def tasks_for(self, workload: str) -> tuple[str, ...]:
        return tuple(self.tasks.get(workload, ()))


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _table(doc: dict, key: str, path: Path) -> dict:
    """doc[key] when it is a TOML table, {} when absent; StoreError naming the file and the key otherwise
    (`power = 1` instead of a [power] table)."""
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise StoreError(f"{path}: key {key}: expected a table ([{key}]), got {type(value).__name__} {_shown(value)}")
    return value


def load_store_config(root: str | Path | None) -> StoreConfig:
    """The store's abtest.toml, or the defaults when the store has none (or root is None)."""
    if root is None:
        return StoreConfig()
    path = Path(root) / STORE_CONFIG_FILE
    if not path.is_file():
        return StoreConfig()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise StoreError(f"{path}: invalid TOML ({e})") from e
    tasks: dict[str, tuple[str, ...]] = {}
    for wl, spec in _table(doc, "workloads", path).items():
        if not isinstance(spec, dict):
            raise StoreError(
                f"{path}: key workloads.{wl}: expected a table ([workloads.{wl}]), got "
                f"{type(spec).__name__} {_shown(spec)}"
            )
        names = spec.get("tasks", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise StoreError(f"{path}: [workloads.{wl}] tasks must be a list of task names")
        tasks[wl] = tuple(names)
    channels = _table(doc, "power", path).get("channels")
    if channels is not None:
        if not isinstance(channels, dict) or not all(
            isinstance(v, list) and all(isinstance(r, str) for r in v) for v in channels.values()
        ):
            raise StoreError(f"{path}: [power.channels] must map channel names to lists of rail names")
        channels = {k: tuple(v) for k, v in channels.items()}
    return StoreConfig(tasks=tasks, rail_channels=channels, path=str(path))
