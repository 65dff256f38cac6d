"""Workload plugin base: parameters, the command to run, and metrics with units."""

from __future__ import annotations

import shlex
from pathlib import Path

from abtest.results.specs import DURATION, MetricSpec
from abtest.results.specs import entry as entry_of
from abtest.safe_io import UnsafePathError, check_name
from abtest.targets.base import RunResult, Target
from abtest.targets.shell import quote


class WorkloadError(ValueError):
    """Bad workload name/parameters, a missing tool on the target, or unparseable output."""


def parse_spec(spec: str) -> tuple[str, dict]:
    """`hackbench:groups=4,loops=200` -> ("hackbench", {"groups": "4", "loops": "200"}).

    A value may contain commas when quoted shell-style: `shell:cmd='sleep 1, then'`.
    """
    name, _, rest = spec.partition(":")
    params: dict[str, str] = {}
    if rest:
        lex = shlex.shlex(rest, posix=True, punctuation_chars=False)
        lex.whitespace = ","
        lex.whitespace_split = True
        for item in lex:
            key, eq, value = item.partition("=")
            if not eq:
                raise WorkloadError(f"workload {name!r}: parameter {item!r} is not key=value")
            params[key.strip()] = value
    return name.strip(), params


def metrics(*values: tuple) -> dict:
    """metrics.json entries {full key: {"value", "unit", "lower_is_better"}} from (spec, value) or
    (spec, value, group) tuples; unit and direction come from the spec's declaration
    (abtest.results.specs), never from the plugin."""
    out = {}
    for spec, value, *group in values:
        key, entry = entry_of(spec, value, group[0] if group else None)
        out[key] = entry
    return out


class Workload:
    """A workload plugin.

    Class attributes: KIND (registry name), DEFAULTS (param -> default; the type of the default is the
    type the string from the command line is converted to), TOOLS (binaries that must exist on target),
    DURATION_METRIC (the declared metric the measured wall time of the command is written as).
    Params `name` (store directory name, default KIND) and `timeout_s` are common to all.
    """

    KIND = "workload"
    DEFAULTS: dict = {}
    TOOLS: tuple[str, ...] = ()
    DURATION_METRIC: MetricSpec = DURATION  # what the collector's measured wall time of the command is

    def __init__(self, **params):
        known = dict(self.DEFAULTS)
        known.setdefault("timeout_s", 600.0)
        unknown = set(params) - set(known) - {"name"}
        if unknown:
            raise WorkloadError(
                f"workload {self.KIND!r}: unknown parameters {sorted(unknown)}; it takes {sorted(known)}"
            )
        try:  # the name is a directory of the run store: a plain name (no path separator, no leading dot)
            self.name = check_name(str(params.pop("name", self.KIND)), "workload name")
        except UnsafePathError as e:
            raise WorkloadError(str(e)) from e
        self.params = {}
        for key, default in known.items():
            raw = params.get(key, default)
            try:
                if isinstance(default, bool) and isinstance(raw, str):
                    self.params[key] = raw.lower() in ("1", "true", "yes", "on")
                elif default is not None and not isinstance(raw, type(default)):
                    self.params[key] = type(default)(raw)
                else:
                    self.params[key] = raw
            except (TypeError, ValueError) as e:
                raise WorkloadError(
                    f"workload {self.KIND!r}: parameter {key}={raw!r} is not a {type(default).__name__}"
                ) from e

    @property
    def timeout_s(self) -> float:
        return float(self.params["timeout_s"])

    def prepare(self, target: Target, remote_dir: str) -> None:
        """Check the tools exist on the target; push inputs. Raises WorkloadError."""
        if self.TOOLS:
            script = "; ".join(f"command -v {quote(t)} >/dev/null || echo MISSING {t}" for t in self.TOOLS)
            missing = [
                l.split(" ", 1)[1] for l in target.run(script, 30).stdout.splitlines() if l.startswith("MISSING ")
            ]
            if missing:
                raise WorkloadError(
                    f"{target.name}: workload {self.name!r} needs {', '.join(missing)} "
                    f"on the target (not found in PATH)"
                )

    def command(self, remote_dir: str) -> str:  # pragma: no cover
        """Shell command line run on the target (as root)."""
        raise NotImplementedError

    def parse(self, res: RunResult) -> dict:
        """Metrics from the command's output: {name: {"value", "unit", "lower_is_better"}}."""
        return {}

    def collect(self, target: Target, outdir: Path, remote_dir: str) -> dict:
        """Pull result files into outdir and return metrics from them (default: none)."""
        return {}

    def describe(self) -> dict:
        """For meta.json: kind, name and parameters."""
        return {"kind": self.KIND, "name": self.name, "params": dict(self.params)}
