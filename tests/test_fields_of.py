"""A comparison decodes only the fields its analyses read (read_trace `fields_of`): the same metric values, the same
span and event counts as the whole decode, on every real trace.dat of ../shared/traces and a live-recorded one."""

from __future__ import annotations

import math

import pytest

from abtest.analysis import registry
from abtest.compare.metrics import trace_values
from abtest.session import Trace
from abtest.trace.readers import read_trace

DAT_FILES = [
    "langraph/trace.dat",
    "trappy/trace_idle.dat",
    "trappy/trace.dat",
    "lisa/sched_load-trace.dat",
    "x86-vm/x86-ladder-hackbench-cyclictest.dat",
    "x86-vm/x86-menu-hackbench-cyclictest.dat",
]


def _values(trace: Trace) -> dict:
    vals, notes, failed = trace_values(trace, registry.MetricOptions())
    assert not failed, notes
    return {m.key: m.value for m in vals}, notes


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _check(path) -> int:
    full = read_trace(path)
    part = read_trace(path, fields_of=registry.raw_tables_read())
    # same tables, rows, span, counts; the tables nobody reads keep ts and cpu only
    assert sorted(part.tables) == sorted(full.tables)
    for name, df in full.tables.items():
        assert part.tables[name].height == df.height, name
    for key in ("start_ns", "end_ns", "events", "lost_events", "cpus"):
        assert part.meta.get(key) == full.meta.get(key), key
    skipped = part.meta["fields_not_decoded"]
    for name in skipped:
        assert set(part.tables[name].columns) <= {"ts", "cpu", "event"}, name
        assert part.tables[name]["ts"].equals(full.tables[name]["ts"]), name
    for name in set(full.tables) - set(skipped):
        assert part.tables[name].equals(full.tables[name]), name
    v_full, n_full = _values(Trace(path, _data=full))
    v_part, n_part = _values(Trace(path, _data=part))
    assert n_part == n_full
    assert v_full.keys() == v_part.keys()
    diff = [k for k in v_full if not _same(v_full[k], v_part[k])]
    assert not diff, diff[:10]
    return len(skipped)


@pytest.mark.parametrize("name", DAT_FILES)
def test_fields_of_gives_the_whole_decodes_values(traces, name):
    _check(traces / name)


def test_fields_of_on_the_bench_trace_skips_unread_events(bench_trace):
    """The live-recorded bench trace has sched_stat_runtime (a third of its events), which no analysis reads."""
    assert _check(bench_trace) >= 1
    part = read_trace(bench_trace, fields_of=registry.raw_tables_read())
    assert "sched_stat_runtime" in part.meta["fields_not_decoded"]


def test_raw_tables_read_covers_aliases_and_markers():
    names = registry.raw_tables_read()
    assert {"sched_switch", "power_rail", "print", "bprint", "sched_load_cfs_rq", "lisa__sched_pelt_se"} <= names
    assert "sched_stat_runtime" not in names
