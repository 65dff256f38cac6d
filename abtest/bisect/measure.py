"""Runs of a revision: collected into the run store by the ordinary collector, read back through compare's one
evaluation path (abtest.compare.metrics.iteration_metrics), so `abtest compare` / `explain` see the same values.

Measurer.collect(labels, runs) brings every label to `runs` complete iterations (interleaved, resuming what a
killed run left); Measurer.values(label) is the metric's value per complete iteration (metric unit).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from abtest.analysis import registry
from abtest.bisect.boot import BootFailed, RevisionProvider, TargetDead
from abtest.bisect.state import BisectError, Config
from abtest.collectors.orchestrate import CollectConfig, CollectError, LabelSpec, collect
from abtest.collectors.workloads import WorkloadError, make_workload
from abtest.compare.metrics import iteration_metrics, options_for
from abtest.store.config import load_store_config
from abtest.store.reader import load_label
from abtest.targets.base import TargetConnectionError, TargetError, TargetTimeout
from abtest.targets.config import load_target_file


class Measurer:
    """Collects and reads runs of revisions (store labels) for one bisection."""

    def __init__(self, cfg: Config, store: Path, log: Callable[[str], None] = print, *, progress: bool = False):
        self.cfg, self.store, self.log, self.progress = cfg, Path(store), log, progress
        self.target_cfg = load_target_file(cfg.target)
        try:
            self.workload = make_workload(cfg.workload)
        except WorkloadError as e:
            raise BisectError(str(e)) from e
        self.provider = RevisionProvider(self.target_cfg, log=log)
        self._cache: dict[str, list[float]] = {}
        self.direction: bool | None = None  # lower_is_better of the metric, as declared
        self.aggregation = "mean"  # how its iterations aggregate, as declared (gmean: compared on logarithms)

    def count(self, label: str) -> int:
        return len(self.values(label))

    def values(self, label: str) -> list[float]:
        """The metric per complete iteration of `label` (empty when none); BisectError when an iteration lacks it."""
        if label in self._cache:
            return self._cache[label]
        path = self.store / label
        out: list[float] = []
        if path.is_dir():
            # the options compare uses on this store, so `abtest compare` / `explain` of two bisect labels read the
            # values (and the per-iteration cache entries) this measured
            options = options_for(load_store_config(self.store), self.workload.name)
            for it in load_label(path).complete(self.workload.name):
                vals, notes = iteration_metrics(it, options, with_trace=self.cfg.trace)
                m = vals.get(self.cfg.metric)
                if m is None:
                    raise BisectError(
                        f"{it.path}: no metric {self.cfg.metric!r} (it has: "
                        f"{', '.join(sorted(vals)[:20]) or 'none'}){'; ' + notes[0] if notes else ''}"
                    )
                out.append(float(m.value))
                if self.direction is None:
                    self.direction = m.spec.lower_is_better
                    self.aggregation = m.spec.aggregation.value
        self._cache[label] = out
        return out

    def collect(self, builds: dict[str, Path], runs: int) -> None:
        """Bring each label of `builds` (label -> build directory) to `runs` complete iterations, interleaved.

        Raises BootFailed (skip the revision: it did not boot/install, or the workload fails on it) and
        TargetDead (abort)."""
        for label in builds:
            self._cache.pop(label, None)
        self.provider.builds.update(builds)
        cc = CollectConfig(
            target_cfg=self.target_cfg,
            labels=[LabelSpec(label) for label in builds],
            workloads=[self.workload],
            iterations=runs,
            store=self.store,
            resume=True,
            trace=self.cfg.trace,
            analysis_events=self.events(),
            progress=self.progress,
        )
        try:
            collect(cc, provider=self.provider, log=self.log)
        except CollectError as e:
            cause = e.__cause__
            if isinstance(cause, (TargetConnectionError, TargetTimeout)):
                raise TargetDead(str(e)) from e
            raise BootFailed(str(e)) from e
        except (BootFailed, TargetDead):
            raise
        except TargetError as e:
            raise TargetDead(str(e)) from e
        finally:
            for label in builds:
                self._cache.pop(label, None)

    def events(self) -> list[str]:
        """The trace events the metric's analysis declares (all analyses' for a metric no analysis declares)."""
        if not self.cfg.trace:
            return []
        hit = registry.resolve(self.cfg.metric)
        if hit is None:
            return registry.events_for(None)
        return registry.events_for([registry.analysis_of(hit[0]).name])

    def shutdown(self) -> None:
        self.provider.shutdown()
