"""The flags column of ftrace text (``d..2.``) decoded into common_flags / common_preempt_count, checked
against the binary fields of the same events in real trace.dat files:

- trace-cmd report -l text (libtraceevent's letters) of every shared trace.dat: the bits that form prints
  (0x1f) and the preempt count equal the trace.dat values;
- the kernel's own text (tracefs ``trace`` file) of a trace recorded here, and the trace.dat `trace-cmd
  extract` makes of the same ring buffer: every bit equal.
"""

from __future__ import annotations

import subprocess

import polars as pl
import pytest
from test_live_trace import live_trace  # noqa: F401  (fixture: records a trace here, restores tracefs)

from abtest.trace.readers import read_trace
from abtest.trace.text_flags import LATENCY_FORM_FLAG_BITS

TRACE_DATS = [
    "x86-vm/x86-menu-hackbench-cyclictest.dat",
    "x86-vm/x86-ladder-hackbench-cyclictest.dat",
    "x86-vm/x86-haltpoll-hackbench-cyclictest.dat",
    "langraph/trace.dat",
    "lisa/sched_load-trace.dat",
    "trappy/trace_idle.dat",
]
FLAGS = ["common_flags", "common_preempt_count"]


def _compare(text_tables: dict, dat_tables: dict, flag_mask: int, ts_div: int = 1) -> int:
    """Row-by-row comparison of every table both readers produced; returns the rows compared.
    ts_div=1000: the text prints microseconds, rounded to the nearest one as the kernel's ns2usecs does."""
    rows = 0
    for name, t in text_tables.items():
        d = dat_tables.get(name)
        if d is None or "common_flags" not in t.columns or "common_flags" not in d.columns:
            continue
        assert t.height == d.height, name
        assert t["common_flags"].null_count() == 0, name
        got = t.select((pl.col("ts") // ts_div).alias("ts"), "cpu", *FLAGS)
        want = d.select(
            ((pl.col("ts") + ts_div // 2) // ts_div).alias("ts"),
            "cpu",
            (pl.col("common_flags") & flag_mask).alias("common_flags"),
            "common_preempt_count",
        )
        diff = (
            got.with_row_index()
            .join(want.with_row_index(), on="index", suffix="_dat")
            .filter(
                (pl.col("ts") != pl.col("ts_dat"))
                | (pl.col("cpu") != pl.col("cpu_dat"))
                | (pl.col("common_flags") != pl.col("common_flags_dat"))
                | (pl.col("common_preempt_count") != pl.col("common_preempt_count_dat"))
            )
        )
        if not diff.is_empty():
            with pl.Config(tbl_cols=-1, tbl_width_chars=250):
                print(name, diff.head(8))
        assert diff.is_empty(), name
        rows += t.height
    return rows


@pytest.mark.parametrize("rel", TRACE_DATS)
def test_trace_cmd_latency_form_matches_binary_flags(traces, tmp_path, rel):
    dat = traces / rel
    text = tmp_path / "report-l.txt"
    with open(text, "w") as out:
        subprocess.run(
            ["trace-cmd", "report", "-l", "-t", "-i", str(dat)], stdout=out, check=True, stderr=subprocess.DEVNULL
        )
    t = read_trace(text)
    assert t.meta["text_columns"]["flags"] and t.meta["text_columns"]["flags_bits"] == LATENCY_FORM_FLAG_BITS
    rows = _compare(t.tables, read_trace(dat).tables, LATENCY_FORM_FLAG_BITS)
    assert rows >= 40, rows


def test_kernel_text_flags_equal_binary_flags(live_trace):  # noqa: F811
    # the tracefs `trace` file, read before `trace-cmd extract`: the kernel's own formatting of the same buffer
    t = read_trace(live_trace.with_suffix(".txt"))
    assert t.meta["text_columns"]["flags_bits"] == 0xFF
    dat = read_trace(live_trace)
    rows = _compare(t.tables, dat.tables, 0xFF, ts_div=1000)
    assert rows > 1000, rows
    # the decoded bits are not all trivial: irqs-off and a preempt depth > 0 both occur in this recording
    flags = pl.concat([df.select(FLAGS) for df in t.tables.values() if "common_flags" in df.columns])
    assert (flags["common_flags"] & 1).sum() > 0 and (flags["common_preempt_count"] > 0).sum() > 0
