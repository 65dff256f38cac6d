"""Every event this kernel has, recorded live on this machine, decoded by abtest and checked value by value
against `trace-cmd report` on the same file; lost events checked against the kernel's own counters.

With all ~1,500 events on (tracefs `events/enable`) a short workload (hackbench, a directory walk, a
file written with fsync, a two-line kernel message and a trace_marker write) produces 200+ event types
from many subsystems (sched, irq, timer, syscalls, kmem, block, ext4, writeback, x86_fpu, rcu, ...) and
overflows the 2 MiB per-CPU ring buffers, so the file also carries real lost-event markers. Reference
for lost events: tracefs `per_cpu/cpuN/stats`, read right before `trace-cmd extract` (overwrite mode:
`overrun`; non-overwrite mode: `dropped events`, which no page marks and `trace-cmd report` does not
show). The tracefs lock is held and every setting is restored (tests/live_record.py). The file's
`abtest trace convert` output must read back to the same tables.
"""

from __future__ import annotations

import polars as pl
import tracedat_ref as ref
from live_record import kernel_lost, record, stats_counters
from test_convert import assert_convert_matches

from abtest.trace import tracedat
from abtest.trace.readers import read_trace

WORKLOAD = [["hackbench", "-l", "20"], ["sh", "-c", "ls -R /usr/lib > /dev/null"]]
KMSG = r"abtest test: a kernel message\nof two lines"
MARK = "abtest marker"


def _kernel_lost(stats: dict[int, str]) -> dict[str, int]:
    """Events each CPU's ring buffer lost, as the kernel counted them (CPUs with none left out)."""
    return {cpu: n for cpu, n in kernel_lost(stats).items() if n}


def test_every_kernel_event_decodes_as_trace_cmd_reports_it(tracefs_lock, tmp_path):
    stats: dict[int, str] = {}
    out = record(
        tracefs_lock,
        tmp_path / "all-events.dat",
        None,
        2048,
        WORKLOAD
        + [
            ["dd", "if=/dev/zero", f"of={tmp_path / 'written'}", "bs=1M", "count=8", "conv=fsync"],
            # a kernel message with a newline inside (console event) and a trace_marker write
            ["sh", "-c", f"printf '{KMSG}' > /dev/kmsg; printf '{MARK}' > {tracefs_lock / 'trace_marker'}"],
        ],
        stats=stats,
        text_copy=tmp_path / "kernel.txt",
    )
    data = out.read_bytes()
    raw, meta = tracedat.read(out, data)
    reference = ref.events(str(out))
    counts = {name: df.height for name, df in raw.items()}
    assert counts == {ev: len(rows) for ev, rows in reference.items()}
    assert len(counts) >= 100, sorted(counts)

    printk, syms = ref.printk_and_symbols(out)
    checked = ref.compare_fields_as_printed(raw, str(out), printk, syms)
    assert checked["events"] == sum(counts.values()) - counts.get("bprint", 0)
    assert checked["symbols"] > 0  # code addresses (call sites, ips) were checked against kallsyms
    assert "abtest test: a kernel message\nof two lines" in raw["console"]["msg"].to_list()
    assert "abtest marker\n" in raw["print"]["buf"].to_list()
    # constant strings behind `const char *` fields are resolved (rcu_utilization is on with every event)
    assert raw["rcu_utilization"].schema["s"] == pl.String
    assert raw["rcu_utilization"]["s"].str.contains("context switch").any()

    # lost events: the kernel's counters; trace-cmd prints `[M EVENTS DROPPED]` for pages with a stored
    # count and `[EVENTS DROPPED]` for a page the kernel had no room to store it in
    counted, uncounted = ref.dropped_per_cpu(str(out))
    kernel = _kernel_lost(stats)
    assert kernel, "the ring buffers did not overflow: no lost events to check"
    assert counted or uncounted  # trace-cmd marks the loss too (a page may have no room for the count)
    assert {c: n for c, n in meta["lost_events_per_cpu"].items() if n} == kernel
    assert meta["lost_events"] == sum(kernel.values()) and meta["lost_events_exact"] is True
    for cpu, n in counted.items():  # the pages' counts add up to the kernel's overrun where all are stored
        if not uncounted.get(cpu):
            assert n == kernel.get(str(cpu), 0), cpu

    # the same file rewritten as v6 without compression decodes to the very same tables
    meta6 = ref.assert_v6_rewrite_matches(out, tmp_path / "all-events-v6.dat", raw)
    assert meta6["lost_events_per_cpu"] == meta["lost_events_per_cpu"]

    # `abtest trace convert` (most tables written from the decoder's arrays) reads back to the same
    # tables and meta as read_trace(); tables with `char *` or list fields take the frame path
    assert_convert_matches(out, tmp_path / "converted")

    # the same file as `trace-cmd report` text: the same events; the text carries only trace-cmd's
    # markers, so an uncounted one counts 1 there and the total is flagged as a lower bound
    txt = tmp_path / "all-events.txt"
    txt.write_text("\n".join(ref.report_lines(str(out), raw=False)) + "\n")
    as_text = read_trace(txt).meta
    assert as_text["format"] == "ftrace-text"
    assert as_text["events"] == read_trace(out).meta["events"]
    markers = {str(c): counted.get(c, 0) + uncounted.get(c, 0) for c in set(counted) | set(uncounted)}
    assert {str(c): n for c, n in as_text["lost_events_per_cpu"].items() if n} == {
        c: n for c, n in markers.items() if n
    }
    assert as_text["lost_events_exact"] == (not uncounted)

    # the kernel's own text of the same buffer (tracefs `trace`, syscall lines in the kernel's
    # `sys_read(fd: 3, ...)` / `sys_read -> 0x64` forms): the same events, and as lost events the
    # entries-written - entries-in-buffer of its header, which is the overrun total
    kernel_text = read_trace(tmp_path / "kernel.txt")
    # the kernel prints a trace_marker write (the ftrace `print` event) as `tracing_mark_write:`
    kernel_events = dict(kernel_text.meta["events"])
    kernel_events["print"] = kernel_events.pop("tracing_mark_write")
    assert kernel_events == as_text["events"]
    assert any(name.startswith("sys_exit_") for name in kernel_text.meta["events"])
    assert kernel_text.meta["lost_events"] == meta["lost_events"]
    # the second line of the kernel message is joined back to its event
    assert "abtest test: a kernel message\nof two lines" in kernel_text.tables["console"]["buf"].to_list()
    assert "abtest marker" in kernel_text.tables["marker"]["text"].to_list()


def test_events_refused_by_a_full_buffer_are_reported(tracefs_lock, tmp_path):
    """Non-overwrite mode: a full ring buffer refuses new events. No page marks them and `trace-cmd
    report` prints nothing about them; the file's saved ring-buffer statistics count them."""
    stats: dict[int, str] = {}
    out = record(tracefs_lock, tmp_path / "refused.dat", None, 1024, WORKLOAD, stats=stats, overwrite=False)
    kernel = _kernel_lost(stats)
    assert sum(stats_counters(t).get("dropped events", 0) for t in stats.values()) > 0, stats
    assert ref.dropped_per_cpu(str(out)) == ({}, {})
    meta = read_trace(out).meta
    assert {c: n for c, n in meta["lost_events_per_cpu"].items() if n} == kernel
    assert meta["lost_events"] == sum(kernel.values()) and meta["lost_events_exact"] is True
    assert any("non-overwrite" in w for w in meta["warnings"])
    # the events that did fit decode as trace-cmd reports them
    counts = {name: df.height for name, df in tracedat.read(out, out.read_bytes())[0].items()}
    assert counts == {ev: len(rows) for ev, rows in ref.events(str(out)).items()}
