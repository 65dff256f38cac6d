"""Metadata of a perfetto trace: kernel, device, platform (CPU OPPs/capacities), clocks, lost events.

Pure functions over the small metadata dict returned by the native decoder (no event data here).
"""
from __future__ import annotations

import polars as pl

# FtraceEventBundle.ftrace_clock (perfetto.protos.FtraceClock). UNSPECIFIED means perfetto left the
# kernel on its default for traced: the "boot" trace_clock (CLOCK_BOOTTIME).
FTRACE_CLOCKS = {0: "boot", 1: "unknown", 2: "global", 3: "local", 4: "mono_raw"}
# perfetto.protos.BuiltinClock
BUILTIN_CLOCKS = {1: "realtime", 2: "realtime_coarse", 3: "monotonic", 4: "monotonic_coarse",
                  5: "monotonic_raw", 6: "boottime"}
FTRACE_STATS_START, FTRACE_STATS_END = 1, 2


def _lost_events(native_meta: dict) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """Per-CPU lost events from FtraceStats (end minus start of overrun + commit_overrun + dropped_events)
    and per-CPU count of bundles whose kernel page reported lost events (count unknown, >= 1 each).

    Returns (lost_events_per_cpu, lost_pages_per_cpu, warnings). A CPU's lost count is the larger of
    the two (a flagged page lost at least one event).
    """
    by_phase: dict[int, dict[int, int]] = {}
    for s in native_meta["ftrace_cpu_stats"]:
        lost = int(s["overrun"]) + int(s["commit_overrun"]) + int(s["dropped_events"])
        by_phase.setdefault(int(s["phase"]), {})[int(s["cpu"])] = lost
    end = by_phase.get(FTRACE_STATS_END) or by_phase.get(0) or {}
    start = by_phase.get(FTRACE_STATS_START, {})
    per_cpu = {cpu: max(0, n - start.get(cpu, 0)) for cpu, n in end.items()}
    pages = {int(cpu): int(n) for cpu, n in native_meta["bundles_with_lost_events"]}
    warnings = []
    for cpu, n in pages.items():
        per_cpu[cpu] = max(per_cpu.get(cpu, 0), n)
    if pages:
        warnings.append(f"ftrace reported lost events in {sum(pages.values())} bundles "
                        f"(per CPU: {dict(sorted(pages.items()))}); the exact number lost is unknown")
    if end and not start:
        warnings.append("ftrace_stats has no START_OF_TRACE phase: lost events counted from end-of-trace totals")
    per_cpu = {str(c): n for c, n in sorted(per_cpu.items()) if n}
    return per_cpu, {str(c): n for c, n in sorted(pages.items())}, warnings


def _platform(cpu_info: list[dict]) -> dict | None:
    """CpuInfo -> {"source", "cpus": [{"cpu", "processor", "capacity", "opps_khz"}], "cpu_capacities"}."""
    if not cpu_info:
        return None
    cpus = [{"cpu": i, "processor": c["processor"] or None, "capacity": c["capacity"],
             "opps_khz": sorted(int(f) for f in c["frequencies_khz"])} for i, c in enumerate(cpu_info)]
    plat = {"source": "perfetto cpu_info", "cpus": cpus}
    if all(c["capacity"] is not None for c in cpus):
        plat["cpu_capacities"] = {str(c["cpu"]): c["capacity"] for c in cpus}
    return plat


def build_meta(out: dict, raw: dict[str, pl.DataFrame], warnings: list[str], packet_names: dict) -> dict:
    """Assemble the reader metadata (keys of abtest.trace.model.TraceData.meta plus perfetto extras)."""
    nm = out["meta"]
    si, un = nm["system_info"], nm["utsname"]
    kernel = {k: v for k, v in {
        "sysname": un.get("sysname"), "release": un.get("release"), "version": un.get("version"),
        "arch": un.get("machine"), "hz": si.get("hz"), "page_size": si.get("page_size"),
    }.items() if v is not None}
    device = {k: v for k, v in si.items() if k not in ("hz", "page_size", "num_cpus")}
    platform = _platform(nm["cpu_info"])

    per_cpu, pages, lost_warn = _lost_events(nm)
    warnings = warnings + lost_warn
    loss = {k: int(v) for k, v in nm["trace_loss"] if v}
    if loss:
        warnings.append(f"perfetto's trace buffer lost data ({loss}); events may be missing from the trace")
    if nm["previous_packet_dropped"]:
        warnings.append(f"{nm['previous_packet_dropped']} packets say the packet before them was dropped")
    if nm["ftrace_errors"]:
        warnings.append(f"{nm['ftrace_errors']} ftrace read errors recorded in FtraceEventBundle.error")
    if nm["bundles_without_cpu"]:
        warnings.append(f"{nm['bundles_without_cpu']} ftrace bundles carry no cpu field: taken as CPU 0 "
                        f"(the protobuf default)")
    for key, what in (("events_without_timestamp", "without a timestamp"),
                      ("events_without_payload", "without an event payload")):
        if nm[key]:
            warnings.append(f"{nm[key]} FtraceEvents {what} were skipped")

    clocks = sorted({FTRACE_CLOCKS.get(c, f"ftrace_clock_{c}") for c in nm["ftrace_clocks"]})
    if len(clocks) > 1:
        warnings.append(f"ftrace bundles use several clocks: {clocks}")
    clock = clocks[0] if clocks else (
        "boot" if (not nm["packet_clock_ids"] or 6 in nm["packet_clock_ids"]) else None)

    cpus = si.get("num_cpus") or (len(nm["cpu_info"]) if nm["cpu_info"] else None)
    not_decoded = {packet_names.get(str(f), f"field_{f}"): int(n) for f, n in sorted(nm["packets_not_decoded"])}
    meta = {
        "format": "perfetto",
        "format_version": si.get("tracing_service_version"),
        "clock": clock,
        "lost_events": int(sum(per_cpu.values())),
        "lost_events_per_cpu": per_cpu,
        "kernel": kernel,
        "device": device,
        "platform": platform,
        "warnings": warnings,
        "perfetto": {
            "packets": int(nm["packets"]),
            "compressed_blocks": int(nm["compressed_blocks"]),
            "packet_clock_ids": sorted(BUILTIN_CLOCKS.get(c, str(c)) for c in nm["packet_clock_ids"]),
            "clock_snapshots": [{BUILTIN_CLOCKS.get(cid, str(cid)): int(ts) for cid, ts in snap}
                                for snap in nm["clock_snapshots"][:2]],
            "bundles_with_lost_events_per_cpu": pages,
            "trace_buffer_loss": loss,
            "packets_not_decoded": not_decoded,
        },
    }
    if cpus:
        meta["cpus"] = int(cpus)
    return meta
