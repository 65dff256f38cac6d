"""'This analysis does not apply' (AnalysisNotApplicable, MissingEventsError) is skipped with its message; any
other exception of an analysis is a failure that is reported, never silently skipped (issue 39): in Trace.metrics
(raised), windows (WindowAnalysisError), compare's per-iteration values (a note naming the analysis and the
error, the other analyses go on) and `abtest analyze` (listed as failed). And the Trace's analysis properties
(t.idle, t.energy, ...) come from the registry's facade declarations."""

from __future__ import annotations

from dataclasses import replace

import pytest
from shared_data import TRACES

from abtest.analysis import registry
from abtest.analysis.windowed import WindowAnalysisError, df_window_metrics
from abtest.commands.analyze import FAILED, _run_one
from abtest.compare.metrics import trace_values
from abtest.session import Trace
from abtest.trace.errors import AnalysisNotApplicable, MissingEventsError

JUNO = TRACES / "lisa" / "sched_load-trace.dat"


def _bug(trace, options=None):
    raise ValueError("bug")


def _not_applicable(trace, options=None):
    raise AnalysisNotApplicable("needs a platform with an energy model")


BUGGY = replace(registry.IDLE, name="buggy", compute=_bug)
NOT_APPLICABLE = replace(registry.IDLE, name="not_applicable", compute=_not_applicable)


@pytest.fixture(scope="module")
def trace():
    return Trace(JUNO)


@pytest.fixture
def patched(monkeypatch):
    monkeypatch.setattr(registry, "TRACE_ANALYSES", (BUGGY, NOT_APPLICABLE, registry.IDLE))
    monkeypatch.setitem(registry.BY_NAME, BUGGY.name, BUGGY)
    monkeypatch.setitem(registry.BY_NAME, NOT_APPLICABLE.name, NOT_APPLICABLE)


def test_not_applicable_is_a_value_error_of_its_own():
    assert issubclass(AnalysisNotApplicable, ValueError)  # callers catching ValueError keep working
    assert not issubclass(AnalysisNotApplicable, MissingEventsError)


def test_compare_notes_a_failing_analysis_and_goes_on(trace, patched):
    values, notes, failed = trace_values(trace, registry.MetricOptions())
    assert failed
    bug = [n for n in notes if n.startswith("buggy:")]
    assert len(bug) == 1 and "FAILED" in bug[0] and "ValueError: bug" in bug[0], notes
    assert "not_applicable: skipped (needs a platform with an energy model)" in notes
    assert any(m.source == "trace:idle" for m in values)  # the others still ran
    assert not any(m.source in ("trace:buggy", "trace:not_applicable") for m in values)


def test_trace_metrics_raises_a_real_error_and_skips_what_does_not_apply(trace, patched):
    df = trace.metrics(["not_applicable", "idle"])
    assert set(df["analysis"]) == {"idle"}
    with pytest.raises(ValueError, match="bug"):
        trace.metrics(["buggy"])


def test_windows_name_a_failing_analysis_and_skip_what_does_not_apply(trace, patched):
    df = df_window_metrics(trace, 1.0, analyses=["not_applicable", "idle"])
    assert set(df["analysis"]) == {"idle"}
    with pytest.raises(WindowAnalysisError, match="analysis buggy failed on window 0.*ValueError: bug"):
        df_window_metrics(trace, 1.0, analyses=["buggy"])


def test_analyze_lists_a_failing_analysis_as_failed(trace):
    res, reason = _run_one("buggy", BUGGY, trace, registry.MetricOptions())
    assert res is None and reason.startswith(FAILED) and "ValueError: bug" in reason
    res, reason = _run_one("not_applicable", NOT_APPLICABLE, trace, registry.MetricOptions())
    assert res is None and reason == "needs a platform with an energy model"


def test_analyses_raise_not_applicable_without_platform_data(trace):
    assert not trace.platform  # the Juno trace.dat opened without its plat_info.yml
    with pytest.raises(AnalysisNotApplicable, match="platform"):
        trace.energy.df_energy_estimate()


def test_trace_properties_come_from_the_registry():
    facades = [a for a in registry.ANALYSES if a.facade is not None]
    assert {a.trace_attribute for a in facades} >= {
        "idle",
        "latency",
        "frequency",
        "load_tracking",
        "placement",
        "power",
        "energy",
        "tasks",
        "overutilized",
        "thermal",
        "capacity",
        "cgroups",
    }
    names = dir(Trace)
    for a in facades:
        prop = getattr(Trace, a.trace_attribute)
        assert isinstance(prop, property) and a.trace_attribute in names
        assert a.title in prop.__doc__ and a.facade.__name__ in prop.__doc__
        assert prop.fget.__annotations__["return"] is a.facade


def test_trace_properties_bind_the_facade(trace):
    for a in registry.ANALYSES:
        if a.facade is not None:
            obj = getattr(trace, a.trace_attribute)
            assert type(obj) is a.facade and obj.trace is trace
