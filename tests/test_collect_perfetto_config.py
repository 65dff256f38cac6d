"""The generated Perfetto trace config parses as Perfetto's own TraceConfig proto (text format) and asks
for what the analyses need: sched + idle (incl. cpu_idle_miss) + PELT events, power rails, frame timeline."""

from __future__ import annotations

import pytest

from abtest.analysis.registry import events_for
from abtest.collectors.ftrace import requested_events
from abtest.collectors.perfetto_config import ftrace_event_names, make_trace_config


def test_config_is_a_valid_trace_config():
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    text_format = pytest.importorskip("google.protobuf.text_format")
    tables = requested_events(events_for()) + ["sched_pelt_cfs", "sched_pelt_se"]
    cfg = text_format.Parse(make_trace_config(tables, duration_s=30, rail_poll_ms=100), pb.TraceConfig())
    names = [ds.config.name for ds in cfg.data_sources]
    assert names == ["linux.ftrace", "linux.process_stats", "android.power", "android.surfaceflinger.frametimeline"]
    ft = cfg.data_sources[0].config.ftrace_config
    assert {
        "sched/sched_switch",
        "sched/sched_waking",
        "power/cpu_idle",
        "power/cpu_idle_miss",
        "power/cpu_frequency",
        "sched/sched_pelt_cfs",
        "sched/sched_load_se",
    } <= set(ft.ftrace_events)
    assert "gfx" in ft.atrace_categories
    power = cfg.data_sources[2].config.android_power_config
    assert power.collect_power_rails and power.battery_poll_ms == 100
    assert cfg.duration_ms == 30000 and cfg.write_into_file


def test_event_mapping():
    assert ftrace_event_names(["marker", "sched_switch", "cpu_idle_miss", "sched_pelt_cfs"]) == [
        "sched/sched_switch",
        "power/cpu_idle_miss",
        "sched/sched_pelt_cfs",
        "lisa/lisa__sched_pelt_cfs",
        "sched/sched_load_cfs_rq",
    ]


def test_collector_config_records_markers():
    from abtest.collectors.perfetto_config import PerfettoCollector
    from abtest.targets.local import LocalTarget

    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    text_format = pytest.importorskip("google.protobuf.text_format")
    c = PerfettoCollector(LocalTarget(), ["sched_switch", "cpu_idle"], duration_s=120)
    cfg = text_format.Parse(c.config_text, pb.TraceConfig())
    assert list(cfg.data_sources[0].config.ftrace_config.ftrace_events) == [
        "ftrace/print",
        "sched/sched_switch",
        "power/cpu_idle",
    ]
    assert c.trace_name == "trace.perfetto-trace" and cfg.duration_ms == 120000
