"""abtest.trace.tracedat_lost: how the page counts and the saved ring-buffer statistics combine.

The statistics texts below have the layout of tracefs `per_cpu/cpuN/stats` (as the CPUSTAT option of
a trace.dat stores it); the real files are exercised by tests/test_live_all_events.py.
"""
from __future__ import annotations

from abtest.trace.tracedat_lost import lost_events, parse_cpustat


def _stat(overrun: int, dropped: int | None = 0, commit: int = 0) -> str:
    text = f"CPU: 0\nentries: 0\noverrun: {overrun}\ncommit overrun: {commit}\nbytes: 0\n" \
           f"oldest event ts: 55061.649037\nnow ts: 55062.067842\n"
    if dropped is not None:  # older kernels print no "dropped events" line
        text += f"dropped events: {dropped}\nread events: 58156\n"
    return text


def test_parse_cpustat_reads_the_integer_counters():
    c = parse_cpustat(_stat(990426, 7, 2))
    assert c["overrun"] == 990426 and c["dropped events"] == 7 and c["commit overrun"] == 2
    assert "oldest event ts" not in c  # not an integer counter


def test_counted_pages_are_exact_and_agree_with_the_statistics():
    r = lost_events({0: 420468, 1: 0}, {}, {0: _stat(420468), 1: _stat(0)})
    assert r.per_cpu == {0: 420468, 1: 0} and r.exact and r.total == 420468
    assert r.warnings == []


def test_a_page_without_a_stored_count_is_settled_by_the_overrun_counter():
    r = lost_events({0: 990426, 1: 0}, {1: 1}, {0: _stat(990426), 1: _stat(1411942)})
    assert r.per_cpu == {0: 990426, 1: 1411942} and r.exact
    assert any("1411942" in w and "overrun" in w for w in r.warnings)


def test_without_statistics_an_uncounted_page_is_a_lower_bound():
    r = lost_events({0: 5}, {0: 2}, {})
    assert r.per_cpu == {0: 7} and not r.exact
    assert any("lower bound" in w for w in r.warnings)


def test_statistics_below_the_pages_count_are_not_trusted():
    """Statistics from another session (e.g. a file cut from a longer one) cannot settle the pages."""
    r = lost_events({0: 50}, {0: 1}, {0: _stat(10)})
    assert r.per_cpu == {0: 51} and not r.exact


def test_statistics_that_disagree_with_counted_pages_are_reported_and_the_pages_kept():
    r = lost_events({0: 50}, {}, {0: _stat(60)})
    assert r.per_cpu == {0: 50} and r.exact
    assert any("60" in w and "50" in w for w in r.warnings)


def test_events_refused_in_non_overwrite_mode_come_only_from_the_statistics():
    r = lost_events({0: 0, 1: 0}, {}, {0: _stat(0, dropped=977104), 1: _stat(0, dropped=99414, commit=3)})
    assert r.per_cpu == {0: 977104, 1: 99417} and r.exact and r.total == 1076521
    assert sum("non-overwrite" in w for w in r.warnings) == 2


def test_old_kernel_statistics_without_dropped_events():
    r = lost_events({0: 3}, {}, {0: _stat(3, dropped=None)})
    assert r.per_cpu == {0: 3} and r.exact and r.warnings == []
