"""One iteration's values for the database, through the one evaluation path
(abtest.compare.metrics.iteration_metrics with the store's options, as abtest.compare.comparison builds them).
Module-level functions of plain data so that a Dask worker process can run them."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from abtest.analysis.registry import MetricOptions
from abtest.compare.metrics import iteration_metrics
from abtest.store.model import Iteration


@dataclass(frozen=True)
class Value:
    """One finite value of one iteration: key (full metric key), value (in unit), unit, direction
    (lower/higher/none), aggregation (mean/gmean/...), declared (registry declares the key)."""

    key: str
    value: float
    unit: str
    direction: str
    aggregation: str
    declared: bool


@dataclass
class Evaluated:
    """path: str(iteration path); values; notes: what could not be derived (as iteration_metrics says);
    pid: the process that evaluated it (a Dask worker's, or this one's)."""

    path: str
    values: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    pid: int = field(default_factory=os.getpid)


def evaluate(it: Iteration, options: MetricOptions, with_trace: bool = True, use_cache: bool = True) -> Evaluated:
    """The iteration's finite values. An analysis failure becomes a note (the other iterations go on)."""
    try:
        measured, notes = iteration_metrics(it, options, use_cache=use_cache, with_trace=with_trace)
    except Exception as e:  # noqa: BLE001 - one broken iteration is reported with its path, never fatal
        return Evaluated(str(it.path), [], [f"analysis failed: {type(e).__name__}: {e}"])
    return Evaluated(str(it.path), values_of(measured), list(notes))


def values_of(measured: dict) -> list[Value]:
    """The finite values of one iteration's {full key: Measured} (as iteration_metrics returns it, and as
    compare keeps it in WorkloadComparison.measured_a / _b), sorted by key."""
    return [
        Value(k, float(m.value), m.spec.unit, m.spec.direction.value, m.spec.aggregation.value, m.declared)
        for k, m in sorted(measured.items())
        if math.isfinite(m.value)
    ]
