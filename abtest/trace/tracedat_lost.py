"""Lost ring-buffer events of a trace.dat, per CPU, from the data pages and the kernel's buffer statistics.

Two sources, both in the file:

- the ring-buffer pages: a page whose `commit` word has RB_MISSED_EVENTS set follows lost events; with
  RB_MISSED_STORED the count of events overwritten since the previous page is stored after the data,
  else the kernel had no room for it (counted here as 1, a lower bound, when nothing better is known);
- the CPUSTAT option: the text of tracefs `per_cpu/cpuN/stats` saved when the file was written
  (`overrun`, `commit overrun`, `dropped events`, ...; counters since the buffer was last reset).

`overrun` counts the events overwritten in overwrite mode: the page counts add up to it (checked on
every trace recorded here) and it settles the pages without a stored count. `dropped events` (events
refused because the buffer was full, non-overwrite mode) and `commit overrun` (events lost to nested
writes filling the buffer) appear in no page: only the statistics know them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_STAT_LINE = re.compile(r"^([a-z][a-z ]*):\s*(\d+)\s*$", re.M)


def parse_cpustat(text: str) -> dict[str, int]:
    """tracefs per-CPU stats text -> {counter name: value} for its integer lines ("overrun": 12, ...)."""
    return {k: int(v) for k, v in _STAT_LINE.findall(text)}


@dataclass
class LostEvents:
    """Lost events per CPU (CPU number -> count), whether every count is exact, and what to tell the user."""

    per_cpu: dict[int, int] = field(default_factory=dict)
    exact: bool = True
    warnings: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.per_cpu.values())


def lost_events(page_counts: dict[int, int], uncounted_pages: dict[int, int],
                cpustats: dict[int, str]) -> LostEvents:
    """Per-CPU lost events.

    page_counts: CPU -> sum of the counts stored in its pages (every CPU with data, zeros included);
    uncounted_pages: CPU -> pages flagged as following lost events without a stored count;
    cpustats: CPU -> CPUSTAT text (empty when the file has none)."""
    out = LostEvents()
    for cpu in sorted(set(page_counts) | set(uncounted_pages) | set(cpustats)):
        counted, unknown = page_counts.get(cpu, 0), uncounted_pages.get(cpu, 0)
        stat = parse_cpustat(cpustats[cpu]) if cpu in cpustats else None
        overrun = stat.get("overrun") if stat else None
        overwritten = counted + unknown
        if unknown and overrun is not None and overrun >= counted + unknown:
            overwritten = overrun
            out.warnings.append(f"CPU {cpu}: {unknown} ring-buffer page(s) follow lost events without a stored "
                                f"count; the count, {overrun}, is the kernel's overrun counter saved in the file")
        elif unknown:
            out.exact = False
            out.warnings.append(f"CPU {cpu}: {unknown} ring-buffer page(s) follow lost events without a stored "
                                f"count and the file has no usable ring-buffer statistics: each counts 1, so "
                                f"lost_events is a lower bound")
        elif overrun is not None and overrun != counted:
            out.warnings.append(f"CPU {cpu}: the pages count {counted} overwritten events, the ring-buffer "
                                f"statistics saved in the file {overrun}: the pages' count is used")
        refused = (stat.get("dropped events", 0) + stat.get("commit overrun", 0)) if stat else 0
        if refused:
            out.warnings.append(f"CPU {cpu}: {refused} events dropped by the kernel (buffer full in non-overwrite "
                                f"mode, or commit overruns), known only from the ring-buffer statistics saved in "
                                f"the file: the data does not mark where")
        if cpu in page_counts or overwritten or refused:
            out.per_cpu[cpu] = overwritten + refused
    return out
