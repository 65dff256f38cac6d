"""Every event this kernel has, recorded live on this machine, decoded by abtest and checked value by value
against `trace-cmd report` on the same file.

With all ~1,500 events on (tracefs `events/enable`) a short workload (hackbench, a directory walk, a
file written with fsync) produces 100+ event types from many subsystems (sched, irq, timer, syscalls,
kmem, block, ext4, writeback, x86_fpu, rcu, ...) and overflows the 2 MiB per-CPU ring buffers, so the
file also carries real lost-event markers: their per-CPU sums must equal trace-cmd's
`CPU:N [M EVENTS DROPPED]` lines (plus 1 for each `CPU:N [EVENTS DROPPED]` page, whose count the kernel
could not store; the total is then flagged inexact). The tracefs lock is held and every setting is restored
(tests/live_record.py). The `trace-cmd report` text of the same file must give the text reader the same
events and lost events.
"""
from __future__ import annotations

import subprocess

import tracedat_ref as ref
from live_record import record
from abtest.trace import tracedat, tracedat_format, tracedat_layout
from abtest.trace.readers import read_trace


def test_every_kernel_event_decodes_as_trace_cmd_reports_it(tracefs_lock, tmp_path):
    out = record(tracefs_lock, tmp_path / "all-events.dat", None, 2048, [
        ["hackbench", "-l", "20"],
        ["sh", "-c", "ls -R /usr/lib > /dev/null"],
        ["dd", "if=/dev/zero", f"of={tmp_path / 'written'}", "bs=1M", "count=8", "conv=fsync"],
    ])
    data = out.read_bytes()
    raw, meta = tracedat.read(out, data)
    reference = ref.events(str(out))
    counts = {name: df.height for name, df in raw.items()}
    assert counts == {ev: len(rows) for ev, rows in reference.items()}
    assert len(counts) >= 100, sorted(counts)

    lay = tracedat_layout.parse_layout(out, data)
    printk = tracedat_format.parse_printk_formats(lay.printk)
    syms = ref.Symbols(tracedat_layout.load_kallsyms(lay).decode())
    checked = ref.compare_fields_as_printed(raw, str(out), printk, syms)
    assert checked["events"] == sum(counts.values()) - counts.get("bprint", 0)
    assert checked["symbols"] > 0  # code addresses (call sites, ips) were checked against kallsyms

    # lost events: a page whose count the kernel could not store adds 1 (a lower bound) and marks the
    # total inexact (docs/ingest.md); trace-cmd prints `[EVENTS DROPPED]` without a number for it
    counted, uncounted = ref.dropped_per_cpu(str(out))
    assert sum(counted.values()) > 0, "the ring buffers did not overflow: no lost events to check"
    expected = {cpu: counted.get(cpu, 0) + uncounted.get(cpu, 0) for cpu in set(counted) | set(uncounted)}
    assert meta["lost_events_per_cpu"] == {str(cpu): n for cpu, n in expected.items() if n}
    assert meta["lost_events"] == sum(expected.values())
    assert meta.get("lost_events_exact", True) == (not uncounted)

    # the same file rewritten as v6 without compression decodes to the very same tables
    v6 = tmp_path / "all-events-v6.dat"
    subprocess.run(["trace-cmd", "convert", "-i", str(out), "-o", str(v6), "--file-version", "6",
                    "--compression", "none"], check=True, capture_output=True)
    raw6, meta6 = tracedat.read(v6, v6.read_bytes())
    assert sorted(raw6) == sorted(raw)
    for name in raw:
        assert raw6[name].equals(raw[name]), name
    assert meta6["lost_events_per_cpu"] == meta["lost_events_per_cpu"]

    # the same file as `trace-cmd report` text: the text reader finds the same events and lost events
    txt = tmp_path / "all-events.txt"
    txt.write_text("\n".join(ref.report_lines(str(out), raw=False)) + "\n")
    as_text, as_dat = read_trace(txt).meta, read_trace(out).meta
    assert as_text["format"] == "ftrace-text"
    assert as_text["events"] == as_dat["events"]
    assert {str(c): n for c, n in as_text["lost_events_per_cpu"].items() if n} == meta["lost_events_per_cpu"]
    assert (as_text["lost_events"], as_text["lost_events_exact"]) == (as_dat["lost_events"],
                                                                       as_dat["lost_events_exact"])
