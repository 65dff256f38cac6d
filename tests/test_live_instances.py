"""Named trace instances (tracefs `instances/NAME`, what `trace-cmd record -B NAME` records), recorded live
on this machine and extracted with `trace-cmd extract -t -B A -B B` (top buffer + two instances) and
`trace-cmd extract -B C` (an instance alone, no top buffer), checked against `trace-cmd report` of the
same files: every event of every buffer lands in its table with the right `instance`, every field equal;
lost events per buffer against the kernel's own counters of that buffer; the v6 rewrite and the report
text give the same tables. Instance B records in non-overwrite mode with a small buffer, so the events
its full buffer refused must be reported for B alone (trace-cmd saves every buffer's statistics in the
file: those of B must not be taken for the top buffer's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest
import tracedat_ref as ref
from live_record import current_clock, kernel_lost, record_instances
from test_convert import assert_convert_matches
from test_streamed_open import assert_streamed_equals_whole

from abtest.trace import streamed, tracedat
from abtest.trace.errors import TraceFormatError
from abtest.trace.readers import read_trace

WORKLOAD = [["hackbench", "-l", "20"]]


def _instances_of(raw: dict) -> dict[str, list[tuple]]:
    """{event: sorted [(ts, cpu, pid, instance)]} of raw tables."""
    out = {}
    for name, df in raw.items():
        cpu = "buffer_cpu" if "buffer_cpu" in df.columns else "cpu"
        out[name] = sorted(
            zip(
                df["ts"].to_list(),
                df[cpu].to_list(),
                df["common_pid"].to_list(),
                df["instance"].cast(pl.String).to_list(),
            ),
            key=lambda r: (r[0], r[1], r[2], r[3] or ""),
        )
    return out


def _report_instances(path: str) -> dict[str, list[tuple]]:
    return {
        ev: sorted(
            ((ts, cpu, pid, inst) for ts, cpu, pid, _rest, inst in rows), key=lambda r: (r[0], r[1], r[2], r[3] or "")
        )
        for ev, rows in ref.events(path, with_instance=True).items()
    }


def test_top_buffer_and_two_instances(tracefs_lock, tmp_path):
    a, b = f"abtest_a_{os.getpid()}", f"abtest_b_{os.getpid()}"
    stats: dict = {}
    clock = current_clock(tracefs_lock)
    out = record_instances(
        tracefs_lock,
        tmp_path / "instances.dat",
        ["sched/sched_switch", "sched/sched_wakeup"],
        {
            a: {"events": ["sched/sched_switch", "irq/softirq_raise"], "buffer_kb": 1024, "marker": "abtest in A"},
            b: {"events": ["sched/sched_waking"], "buffer_kb": 8, "overwrite": False},
        },
        WORKLOAD,
        stats=stats,
    )
    raw, meta = tracedat.read(out, out.read_bytes())
    assert meta["instances"] == [a, b]  # sorted, as the text reader lists them
    # every event of every buffer, with its buffer, as trace-cmd report prints them
    assert _instances_of(raw) == _report_instances(str(out))
    assert ref.compare_fields(raw, str(out)) == sum(df.height for df in raw.values())
    ours = raw["sched_switch"]["instance"].cast(pl.String)
    assert ours.null_count() > 100 and (ours == a).sum() > 100  # recorded by both buffers, merged in time order
    assert raw["sched_switch"]["ts"].is_sorted()
    assert set(raw["sched_waking"]["instance"].cast(pl.String)) == {b}
    assert raw["print"]["buf"].to_list() == ["abtest in A\n"] and raw["print"]["instance"].to_list() == [a]
    # per-buffer clocks (trace-cmd extract 3.1.6 writes the top buffer's clock for every buffer)
    buffers = meta["instance_buffers"]
    assert meta["clock"] == buffers[a]["clock"] == buffers[b]["clock"] == clock
    assert not [w for w in meta["warnings"] if "clock" in w]
    # lost events: B's full buffer refused events (non-overwrite mode, marked in no page): they come from
    # B's saved statistics, and only B's; the totals add up over the buffers
    kernel = {key: kernel_lost(s) for key, s in stats.items()}
    assert sum(kernel[b].values()) > 0
    assert buffers[b]["lost_events_per_cpu"] == {c: n for c, n in kernel[b].items()}
    assert buffers[a]["lost_events"] == sum(kernel[a].values())
    total = {c: kernel[None][c] + kernel[a][c] + kernel[b][c] for c in kernel[None]}
    assert meta["lost_events_per_cpu"] == {c: n for c, n in total.items()}
    assert meta["lost_events"] == sum(total.values())

    # canonical tables: the marker table and every other table keep `instance` (Categorical)
    data = read_trace(out)
    assert data.tables["sched_switch"].schema["instance"] == pl.Categorical
    marker = data.tables["marker"]
    assert marker["text"].to_list() == ["abtest in A"] and marker["instance"].cast(pl.String).to_list() == [a]
    assert data.meta["events"] == {ev: len(rows) for ev, rows in ref.events(str(out)).items()}
    info = subprocess.run(
        [sys.executable, "-m", "abtest.cli", "trace", "info", str(out), "--json", "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    doc = json.loads(info.stdout)
    assert doc["events"] == data.meta["events"] and doc["instances"] == [a, b]
    assert doc["lost_events"] == meta["lost_events"] and "lost in the ring buffer" in info.stderr

    # the same file as v6 (BUFFER options pointing to per-instance flyrecord headers): the same tables
    meta6 = ref.assert_v6_rewrite_matches(out, tmp_path / "instances-v6.dat", raw)
    assert meta6["instance_buffers"] == buffers
    # uncompressed v7 (stored per-CPU data per buffer): the same tables
    v7 = tmp_path / "instances-v7-stored.dat"
    subprocess.run(
        ["trace-cmd", "convert", "-i", str(out), "-o", str(v7), "--file-version", "7", "--compression", "none"],
        check=True,
        capture_output=True,
    )
    for other, _ in (tracedat.read(v7, v7.read_bytes()),):
        assert sorted(other) == sorted(raw)
        for name in raw:
            assert other[name].equals(raw[name]), name
    # decoded in rounds of a few pages (the first open of a long trace): three buffers' CPU streams cut into
    # rounds give the whole decode's tables and meta, compressed and stored
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(streamed.ROUND_MB_ENV, "0.05")
        mp.setenv(streamed.PIECE_KB_ENV, "8")
        assert assert_streamed_equals_whole(out, tmp_path / "entry-zstd") > 1
        assert assert_streamed_equals_whole(v7, tmp_path / "entry-stored") > 1

    # trace-cmd's report text of the file: same events, same instance per event
    txt = tmp_path / "instances.txt"
    txt.write_text("\n".join(ref.report_lines(str(out), raw=False)) + "\n")
    as_text = read_trace(txt)
    assert as_text.meta["events"] == data.meta["events"] and as_text.meta["instances"] == data.meta["instances"]
    for name in ("sched_switch", "sched_waking", "marker"):
        assert (
            as_text.tables[name]["instance"].cast(pl.String).to_list()
            == data.tables[name]["instance"].cast(pl.String).to_list()
        ), name

    # `abtest trace convert` of the file (frames only: tables of several buffers are merged)
    assert_convert_matches(out, tmp_path / "converted")

    # a corrupt chunk of an instance's ring-buffer data is an error naming the instance, the CPU and the
    # chunk's offset, never a shorter trace
    lay = tracedat.layout(out, out.read_bytes())
    inst = next(b for b in lay["buffers"] if b["name"] == a)
    cpu, spans = inst["cpus"][0]["cpu"], inst["cpus"][0]["chunks"]
    start, size, _inflated = spans[-1]
    bad = bytearray(out.read_bytes())
    bad[start + 4 : start + size - 4] = b"\xff" * (size - 8)
    corrupt = tmp_path / "corrupt.dat"
    corrupt.write_bytes(bytes(bad))
    with pytest.raises(TraceFormatError) as err:
        read_trace(corrupt)
    assert f"instance {a!r} CPU {cpu} chunk {len(spans) - 1}" in str(err.value)
    assert err.value.offset == start - 8  # the chunk's header


def test_instance_without_top_buffer(tracefs_lock, tmp_path):
    """`trace-cmd extract -B NAME` without -t writes a file whose only buffer is the instance."""
    c = f"abtest_c_{os.getpid()}"
    clock = current_clock(tracefs_lock)
    out = record_instances(
        tracefs_lock,
        tmp_path / "only.dat",
        [],
        {c: {"events": ["sched/sched_switch", "sched/sched_wakeup"], "buffer_kb": 1024}},
        WORKLOAD,
        with_top=False,
    )
    raw, meta = tracedat.read(out, out.read_bytes())
    assert meta["instances"] == [c] and meta["clock"] == clock
    assert _instances_of(raw) == _report_instances(str(out))
    assert ref.compare_fields(raw, str(out)) == sum(df.height for df in raw.values()) > 100
    assert {ev: df.height for ev, df in raw.items()} == {ev: len(rows) for ev, rows in ref.events(str(out)).items()}
    assert not [w for w in meta["warnings"] if "clock" in w]
