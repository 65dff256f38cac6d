"""Ring buffers with sub-buffers larger than a page (tracefs `buffer_subbuf_size_kb`, Linux 6.8+), recorded
live: `trace-cmd extract` then writes the sub-buffer size as the file's page size (8 KiB ... 128 KiB pages,
each with one page header). Every event, field and lost-event count must come out as `trace-cmd report`
and the kernel's counters give them, on both decode paths, in the v6 rewrite, through `convert` and the
CLI. The buffer is kept small so that it overwrites itself: lost-event counts are stored in the headers
of large pages. The tracefs lock is held; the sub-buffer size and every switch are restored."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tracedat_ref as ref
from live_record import kernel_lost, record
from test_convert import assert_convert_matches

from abtest.trace import tracedat
from abtest.trace.readers import read_trace

EVENTS = ["sched/sched_switch", "sched/sched_wakeup", "sched/sched_waking", "power/cpu_idle"]
MARK = "abtest subbuf marker " + "x" * 3000  # one record of ~3 KiB: fits any sub-buffer


@pytest.mark.parametrize("subbuf_kb", [16, 128])
def test_large_subbuffers_decode_as_trace_cmd_reports_them(tracefs_lock, tmp_path, subbuf_kb):
    fs = tracefs_lock
    knob = fs / "buffer_subbuf_size_kb"
    if not knob.exists():
        pytest.skip("this kernel has no buffer_subbuf_size_kb (Linux < 6.8)")
    # the buffer size reads back differently once the sub-buffer size changes: both are restored, in order
    saved, saved_kb = knob.read_text().strip(), (fs / "buffer_size_kb").read_text().split()[0]
    stats: dict[int, str] = {}
    out = tmp_path / f"subbuf{subbuf_kb}.dat"
    try:
        knob.write_text(str(subbuf_kb))
        assert knob.read_text().strip() == str(subbuf_kb)
        # 4 sub-buffers per CPU: hackbench overwrites them many times over (-l 100 once left 4 x 128 KiB
        # unfilled on a loaded machine: -l 300)
        record(
            fs,
            out,
            EVENTS,
            4 * subbuf_kb,
            [
                ["hackbench", "-l", "300"],
                ["sh", "-c", f"printf '{MARK}' > {fs / 'trace_marker'}"],
            ],
            stats=stats,
        )
    finally:
        knob.write_text(saved)
        (fs / "buffer_size_kb").write_text(saved_kb)
    assert (fs / "buffer_size_kb").read_text().split()[0] == saved_kb

    data = out.read_bytes()
    assert tracedat.layout(out, data)["page_size"] == subbuf_kb * 1024
    raw, meta = tracedat.read(out, data)
    counts = {name: df.height for name, df in raw.items()}
    reference = ref.events(str(out))
    assert counts == {ev: len(rows) for ev, rows in reference.items()}
    assert counts.get("sched_switch", 0) > 100, counts
    assert ref.compare_fields(raw, str(out)) == sum(counts.values())
    assert MARK + "\n" in raw["print"]["buf"].to_list()

    # lost events: the kernel's counters (saved in the file by trace-cmd); the counts stored in the large
    # pages' headers add up to them, except on a CPU whose flagged page had no room left for its count
    kernel = {cpu: n for cpu, n in kernel_lost(stats).items() if n}
    assert kernel, "the ring buffers did not overflow: no lost events to check"
    assert {c: n for c, n in meta["lost_events_per_cpu"].items() if n} == kernel
    assert meta["lost_events"] == sum(kernel.values()) and meta["lost_events_exact"] is True
    counted, uncounted = ref.dropped_per_cpu(str(out))
    for cpu, n in kernel.items():
        if not uncounted.get(int(cpu)):
            assert counted.get(int(cpu)) == n, cpu

    # the v6 rewrite (trace-cmd convert) and `convert` agree
    meta6 = ref.assert_v6_rewrite_matches(out, tmp_path / f"subbuf{subbuf_kb}-v6.dat", raw)
    assert meta6["lost_events_per_cpu"] == meta["lost_events_per_cpu"]
    assert_convert_matches(out, tmp_path / "converted")

    # the CLI contract, and trace-cmd's report text of the same file read by the text reader
    info = json.loads(
        subprocess.run(
            [sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(out)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert info["events"] == read_trace(out).meta["events"]
    assert info["lost_events"] == sum(kernel.values())
    txt = tmp_path / "report.txt"
    txt.write_text("\n".join(ref.report_lines(str(out), raw=False)) + "\n")
    as_text = read_trace(txt).meta
    assert as_text["events"] == info["events"]
    # the text carries only trace-cmd's markers: an uncounted one counts 1, flagged as a lower bound
    markers = {str(c): counted.get(c, 0) + uncounted.get(c, 0) for c in set(counted) | set(uncounted)}
    assert {c: n for c, n in as_text["lost_events_per_cpu"].items() if n} == markers
    assert as_text["lost_events_exact"] == (not uncounted)
