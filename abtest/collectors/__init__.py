"""Collectors: what runs on a target around a workload (ftrace / perfetto capture, power sampling,
workload plugins) and the orchestration that fills a run store (abtest.collectors.orchestrate)."""
