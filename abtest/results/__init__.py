"""Workload result files that benchmarks write outside the trace (Jankbench sqlite, Geekbench JSON,
dumpsys SurfaceFlinger / gfxinfo text) and the declarations of the metrics they yield.

Below both the collectors (which pull these files and write metrics.json) and the analyses: it imports
nothing from abtest except abtest.trace.errors and abtest.metric_spec.
"""
