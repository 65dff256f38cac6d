"""Once per trace: a function of a Trace whose result the metrics and the declared tables of one analysis share
(abtest.analysis.registry.evaluate runs both on the same Trace object, then `release`s what they kept, so that
an analysis gives its memory back before the next one, as one function computing both would). Keyed weakly by
the Trace object: a result never outlives its trace (a window is a Trace of its own)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
_MEMOS: list[tuple[str, weakref.WeakKeyDictionary]] = []  # (module of the function, its results by trace)


def per_trace(fn: Callable[[object], T]) -> Callable[[object], T]:
    """fn(trace), computed once per Trace object until `release`d."""
    done: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    _MEMOS.append((fn.__module__, done))

    @functools.wraps(fn)
    def once(trace) -> T:
        if trace not in done:
            done[trace] = fn(trace)
        return done[trace]

    return once


def release(trace, modules: Iterable[str]) -> None:
    """Forget what the per_trace functions of these modules kept for this trace."""
    modules = set(modules)
    for module, done in _MEMOS:
        if module in modules:
            done.pop(trace, None)
