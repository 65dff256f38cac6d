"""abtest's readers vs Perfetto's trace_processor (independent engine, real wasm build v52, offline).

For every perfetto protobuf, ftrace-text, atrace and systrace file in ../shared/traces, per-event counts
of sched_switch, sched_waking, sched_wakeup, cpu_idle, cpu_frequency (and, for perfetto traces, every ftrace
event TP ingests) plus per-rail power-rail samples and energy must be equal, except for differences that
are explained here, each checked precisely (never a tolerance):

* compact sched (perfetto): TP discards the first compact sched_switch of every CPU (it has no prev_* state
  for it) and the compact sched_wakings that precede their CPU's first sched_switch (waker unknown), and
  counts them in its stats `compact_sched_switch_skipped` / `compact_sched_waking_skipped`; abtest keeps
  them (unknown fields null). abtest == TP + skipped, and the skipped rows are exactly those.
* ftrace text: TP's systrace line parser (src/trace_processor/importers/systrace/systrace_line_parser.cc)
  knows a fixed list of events. sched_switch goes to its ftrace_event table; cpu_idle / cpu_frequency become
  cpuidle / cpufreq counter tracks (compared there); sched_waking only feeds thread_state (not countable
  1:1: not compared); sched_wakeup is not parsed at all (asserted absent); every other event is dropped.
* a text file whose last line has no trailing newline: TP drops that unterminated line.
* text comm with spaces ("Web Content"): TP splits text arguments at spaces and keeps "Web"; compared cut.
* text prev_state "R+": TP encodes the "+" as 0x800, abtest as 0x100 (4.14+ TASK_REPORT_MAX); mapped.
* compact sched_switch prev_comm of the idle task: abtest "swapper/N" (the CPU's previous next_comm, the
  kernel's name), TP "swapper" (its single idle thread): mapped.
* files TP cannot open: trace-cmd report output (starts "version = 6": TP's format detection does not know
  it), and catapult's `atrace -z` dump ("TRACE:" + zlib: TP v52 fails with "Failed to decompress").
* files TP opens but reads nothing from: ftrace text stored as an escaped JavaScript string (lines end in a
  literal "\\n\\"), and legacy systrace HTML (`var linuxPerfData = "..."`): TP only reads
  <script class="trace-data"> blocks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from shared_data import TRACES

from abtest.trace import perfetto_engine as pe

COMPARED = ("sched_switch", "sched_waking", "sched_wakeup", "cpu_idle", "cpu_frequency")
SKIP_STATS = {"sched_switch": "compact_sched_switch_skipped", "sched_waking": "compact_sched_waking_skipped"}

TP_CANNOT_OPEN = {
    "trappy/raw_trace.txt": "Unknown trace type",
    "trappy/trace.txt": "Unknown trace type",
    "trappy/trace_empty.txt": "Unknown trace type",
    "trappy/trace_idle_unsorted.txt": "Unknown trace type",
    "trappy/trace_sched.txt": "Unknown trace type",
    "trappy/trace_thermal.txt": "Unknown trace type",
    "lisa/trace_txt-trace.txt": "Unknown trace type",
    "catapult/compressed_atrace_data.txt": "Failed to decompress",
}
TP_READS_NOTHING = {
    "catapult/android_systrace.txt": "escaped JavaScript string",
    "trappy/trace_legacy_systrace.html": "legacy systrace HTML (linuxPerfData)",
}


def _files() -> list[tuple[str, str]]:
    manifest = json.loads((TRACES / "manifest.json").read_text())
    out = []
    for rel, entry in sorted(manifest.items()):
        fmt = entry.get("format", "")
        if fmt.startswith("trace.dat") or fmt.startswith("platform-info"):
            continue
        out.append((rel, "perfetto" if fmt.startswith("perfetto") else "text"))
    return out


FILES = _files()


@pytest.fixture(scope="module")
def tp_facts():
    """Per file, what trace_processor saw (computed once per file; the wasm module is compiled once)."""
    cache: dict[str, dict] = {}

    def get(rel: str) -> dict:
        if rel in cache:
            return cache[rel]
        path = TRACES / rel
        try:
            s = pe.open_session(path, "wasm")
        except pe.EngineQueryError as e:
            cache[rel] = {"error": str(e)}
            return cache[rel]
        try:
            ftrace = dict(s.query("select name, count(*) as n from ftrace_event group by name").iter_rows())
            counters = dict(
                s.query(
                    "select t.name, count(*) as n from counter c join cpu_counter_track t "
                    "on c.track_id = t.id group by t.name"
                ).iter_rows()
            )
            stats = dict(s.query("select name, value from stats where name like 'compact_sched_%'").iter_rows())
            rails = s.query("""
                include perfetto module android.power_rails;
                select m.raw_power_rail_name as rail, count(c.id) as samples, min(c.ts) as first_ts,
                       max(c.ts) as last_ts,
                       cast((select value from counter where track_id = m.track_id order by ts desc limit 1)
                          - (select value from counter where track_id = m.track_id order by ts limit 1) as int)
                         as energy_uj
                from android_power_rails_metadata m join counter c on c.track_id = m.track_id
                group by m.track_id""")
        finally:
            s.close()
        cache[rel] = {"ftrace": ftrace, "counters": counters, "stats": stats, "rails": rails}
        return cache[rel]

    yield get
    pe.close_all()


def _abtest(rel: str):
    from abtest.session import Trace

    return Trace(TRACES / rel)


def _unterminated_last_event(path: Path) -> str | None:
    """Event name on the last line when the file does not end with a newline, else None."""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    last = data.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
    m = re.search(r"\]\s.*?\d+\.\d+:\s+(\w+):", last)
    return m.group(1) if m else None


@pytest.mark.parametrize("rel,kind", FILES, ids=[f[0] for f in FILES])
def test_counts_agree(rel, kind, tp_facts):
    facts = tp_facts(rel)
    if rel in TP_CANNOT_OPEN:
        assert "error" in facts, f"TP now opens {rel}: compare it and drop it from TP_CANNOT_OPEN"
        assert TP_CANNOT_OPEN[rel] in facts["error"]
        return
    assert "error" not in facts, facts.get("error")
    ours = _abtest(rel).events
    if rel in TP_READS_NOTHING:
        assert not facts["ftrace"] and not facts["counters"], f"TP now reads {rel}: compare it"
        assert sum(ours.get(e, 0) for e in COMPARED) > 0  # abtest does read it
        return
    compared = []
    if kind == "perfetto":
        for event, tp_count in facts["ftrace"].items():
            skipped = int(facts["stats"].get(SKIP_STATS.get(event, ""), 0) or 0)
            assert ours.get(event, 0) == tp_count + skipped, (event, ours.get(event), tp_count, skipped)
            compared.append(event)
        for event in COMPARED:
            if event not in facts["ftrace"]:
                assert ours.get(event, 0) == 0, f"{event}: abtest has {ours.get(event)}, TP has none"
    else:
        tp_counts = {
            "sched_switch": facts["ftrace"].get("sched_switch", 0),
            "cpu_idle": facts["counters"].get("cpuidle", 0),
            "cpu_frequency": facts["counters"].get("cpufreq", 0),
        }
        dropped_last = _unterminated_last_event(TRACES / rel)
        for event, tp_count in tp_counts.items():
            expected = tp_count + (1 if dropped_last == event else 0)
            assert ours.get(event, 0) == expected, (event, ours.get(event), tp_count, dropped_last)
            compared.append(event)
        assert "sched_wakeup" not in facts["ftrace"]  # TP's text importer does not parse it
    assert compared


def test_power_rails_agree(tp_facts):
    """Per rail: same samples, same times, same cumulative energy (uWs == uJ), sample by sample.

    Both engines time a sample with the power HAL's energy_data.timestamp_ms (x 1e6 ns); abtest also keeps
    the packet timestamp (when traced polled the HAL) as packet_ts, and the offset between the two is
    reported.
    """
    rel = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
    tp = tp_facts(rel)["rails"].sort("rail")
    assert tp.height == 24
    df = _abtest(rel).df("power_rail").with_columns(pl.col("rail").cast(pl.String))
    ours = (
        df.sort("ts")
        .group_by("rail", maintain_order=True)
        .agg(
            pl.len().alias("samples"),
            pl.col("ts").min().alias("first_ts"),
            pl.col("ts").max().alias("last_ts"),
            (pl.col("energy_uj").last() - pl.col("energy_uj").first()).cast(pl.Int64).alias("energy_uj"),
        )
        .sort("rail")
    )
    assert ours["rail"].to_list() == tp["rail"].to_list()
    for col in ("samples", "first_ts", "last_ts", "energy_uj"):
        assert ours[col].to_list() == tp[col].to_list(), col
    s = pe.open_session(TRACES / rel, "wasm")
    try:
        tp_all = s.query("""include perfetto module android.power_rails;
            select m.raw_power_rail_name as rail, c.ts, cast(c.value as int) as energy_uj
            from counter c join android_power_rails_metadata m on c.track_id = m.track_id order by rail, c.ts""")
    finally:
        s.close()
    ours_all = df.select("rail", "ts", pl.col("energy_uj").cast(pl.Int64)).sort("rail", "ts")
    assert ours_all.equals(tp_all)
    offset_ms = (df["ts"] - df["packet_ts"]) / 1e6
    print(
        f"\nrail sample time (HAL timestamp_ms) minus packet time: median {offset_ms.median():.3f} ms, "
        f"range {offset_ms.min():.1f} .. {offset_ms.max():.1f} ms over {df.height} samples"
    )


# -- field by field ---------------------------------------------------------------------------------
FIELDS = {
    "sched_switch": ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"],
    "sched_waking": ["comm", "pid", "prio", "target_cpu"],
    "cpu_idle": ["state"],
    "cpu_frequency": ["frequency_khz"],
}
TP_ARG = {"frequency_khz": "state"}  # TP keeps the kernel field names (cpu_frequency.state, cpu_id)


def _tp_rows(s, event: str, kind: str) -> pl.DataFrame:
    if kind == "text" and event in ("cpu_idle", "cpu_frequency"):
        track = {"cpu_idle": "cpuidle", "cpu_frequency": "cpufreq"}[event]
        col = FIELDS[event][0]
        return s.query(
            f"select c.ts, t.cpu, cast(c.value as int) as {col} from counter c join cpu_counter_track t "
            f"on c.track_id = t.id where t.name = '{track}'"
        )
    cols = ", ".join(f"extract_arg(e.arg_set_id, '{TP_ARG.get(c, c)}') as {c}" for c in FIELDS[event])
    cpu = "extract_arg(e.arg_set_id, 'cpu_id')" if event in ("cpu_idle", "cpu_frequency") else "e.cpu"
    return s.query(f"select e.ts, {cpu} as cpu, {cols} from ftrace_event e where e.name = '{event}'")


def _norm(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    out = df.select(["ts", "cpu", *cols]).with_columns(
        [
            pl.col(c).cast(pl.String) if df.schema[c] in (pl.Categorical, pl.String) else pl.col(c).cast(pl.Int64)
            for c in ["ts", "cpu", *cols]
        ]
    )
    if "state" in cols:  # the kernel writes (u32)-1 for "exit idle"; abtest's canonical table says -1
        out = out.with_columns(
            pl.when(pl.col("state") == 4294967295).then(-1).otherwise(pl.col("state")).alias("state")
        )
    return out


FIELD_CASES = [(rel, kind) for rel, kind in FILES if rel not in TP_CANNOT_OPEN and rel not in TP_READS_NOTHING]


@pytest.mark.parametrize("rel,kind", FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_fields_agree(rel, kind):
    """Every compared event row (ts, cpu and its fields) from abtest equals one from trace_processor; the only
    abtest rows TP lacks are the ones explained above (compact first-per-CPU, unterminated last line)."""
    t = _abtest(rel)
    s = pe.open_session(TRACES / rel, "wasm")
    compared = 0
    try:
        stats = dict(s.query("select name, value from stats where name like 'compact_sched_%'").iter_rows())
        for event, cols in FIELDS.items():
            if kind == "text" and event == "sched_waking":
                continue  # TP's text importer keeps no sched_waking rows
            ours = _norm(t.df(event), cols) if event in t.tables else None
            tp = _tp_rows(s, event, kind)
            if ours is None or ours.is_empty():
                assert tp.is_empty(), (event, tp.height)
                continue
            theirs = _norm(tp, cols)
            if kind == "text":
                # TP splits a text event's arguments at spaces, so a comm with a space ("Web Content",
                # "POSIX timer 2") reaches it cut at the first space; abtest keeps the kernel's comm
                for c in ("prev_comm", "next_comm", "comm"):
                    if c in cols:
                        ours = ours.with_columns(pl.col(c).str.split(" ").list.first().alias(c))
            if kind == "perfetto" and "prev_comm" in cols:
                # compact sched_switch carries no prev_comm: abtest takes it from the CPU's previous next_comm
                # (the idle task is "swapper/N", as the kernel names it); TP takes its thread-table name and
                # has one idle thread for all CPUs, "swapper"
                ours = ours.with_columns(
                    pl.when((pl.col("prev_pid") == 0) & pl.col("prev_comm").str.contains(r"^swapper/\d+$"))
                    .then(pl.lit("swapper"))
                    .otherwise(pl.col("prev_comm"))
                    .alias("prev_comm")
                )
            if kind == "text" and "prev_state" in cols:
                # text "R+" (preempted while runnable): TP encodes the "+" as 0x800 (its own kMaxState),
                # abtest as 0x100 (TASK_REPORT_MAX of 4.14+ kernels); the text carries no number at all
                theirs = theirs.with_columns(
                    pl.when((pl.col("prev_state") & 0x800) != 0)
                    .then((pl.col("prev_state") & ~0x800) | 0x100)
                    .otherwise(pl.col("prev_state"))
                    .alias("prev_state")
                )
            keys = ["ts", "cpu", *cols]
            only_tp = theirs.join(ours, on=keys, how="anti", nulls_equal=True)
            only_ours = ours.join(theirs, on=keys, how="anti", nulls_equal=True)
            # renamed tasks switch out under their new comm in both (abtest reader fixed;
            # tests/test_perfetto_derived.py)
            assert only_tp.is_empty(), (event, only_tp.head())
            explained = int(stats.get(SKIP_STATS.get(event, ""), 0) or 0) if kind == "perfetto" else 0
            if kind == "text" and _unterminated_last_event(TRACES / rel) == event:
                explained += 1
            assert only_ours.height == explained, (event, only_ours.head())
            if explained and event == "sched_switch":  # exactly the first sched_switch of each CPU
                firsts = ours.sort("ts").group_by("cpu", maintain_order=True).first()
                assert (
                    only_ours.select("cpu", "ts").sort("cpu", "ts").equals(firsts.select("cpu", "ts").sort("cpu", "ts"))
                )
            if explained and event == "sched_waking":  # exactly the wakings before the CPU's first sched_switch
                first_switch = (
                    t.df("sched_switch").group_by(pl.col("cpu").cast(pl.Int64)).agg(pl.col("ts").min().alias("t0"))
                )
                early = ours.join(first_switch, on="cpu", how="left").filter(
                    pl.col("t0").is_null() | (pl.col("ts") < pl.col("t0"))
                )
                assert (
                    only_ours.select("cpu", "ts").sort("cpu", "ts").equals(early.select("cpu", "ts").sort("cpu", "ts"))
                )
            compared += ours.height
    finally:
        s.close()
    if any(t.events.get(e) for e in FIELDS):
        assert compared > 0


# -- analysis level: residencies ------------------------------------------------------------------------
def test_residency_agrees():
    """abtest.analysis idle / frequency residency vs Perfetto on the same window (TP's trace span).

    Idle: equal to the nanosecond with the stdlib's linux.cpu.idle, once abtest's inferred lead-in (active
    before a CPU's first idle entry) is added. Frequency: TP's linux.cpu.frequency
    also feeds on the trace's SysStats cpufreq polling (every 500 ms here), which shifts residency by
    milliseconds and gives the X1 CPUs a frequency before their first event; computed in SQL from the
    ftrace cpu_frequency events alone, TP's residency equals abtest's to the nanosecond.
    """
    from abtest.analysis.frequency import df_frequency_intervals
    from abtest.analysis.idle import df_idle_intervals, df_idle_residency

    rel = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
    r = pe.analyze(TRACES / rel, engine="wasm")
    start, end = r["span"]["start_ns"], r["span"]["end_ns"]
    t = _abtest(rel)
    idle = (
        df_idle_residency(df_idle_intervals(t.df("cpu_idle"), start_ns=start, end_ns=end))
        .filter(pl.col("state").is_not_null())
        .select(pl.col("cpu").cast(pl.Int64), "state", "time_ns")
        .sort("cpu", "state")
    )
    tp_idle = r["cpu_idle_residency"].select("cpu", "state", "time_ns").sort("cpu", "state")
    # abtest infers what TP leaves out: a CPU whose first cpu_idle event enters an idle state was active
    # from the window start until then (the stdlib starts each CPU at its first event)
    first = (
        t.df("cpu_idle")
        .sort("ts")
        .group_by("cpu", maintain_order=True)
        .first()
        .filter(pl.col("state") >= 0)
        .select(
            pl.col("cpu").cast(pl.Int64), pl.lit(-1, pl.Int64).alias("state"), (pl.col("ts") - start).alias("lead_in")
        )
    )
    assert first.height >= 1  # on this trace: CPU 3, 284 ms
    tp_idle = tp_idle.join(first, on=["cpu", "state"], how="left").select(
        "cpu", "state", (pl.col("time_ns") + pl.col("lead_in").fill_null(0)).alias("time_ns")
    )
    assert idle.equals(tp_idle)

    freq = (
        df_frequency_intervals(t.df("cpu_frequency"), start_ns=start, end_ns=end)
        .filter(pl.col("frequency_khz").is_not_null())
        .group_by(pl.col("cpu").cast(pl.Int64), "frequency_khz")
        .agg(pl.col("dur").sum().alias("time_ns"))
        .sort("cpu", "frequency_khz")
    )
    tp_ftrace_only = pe.query(
        TRACES / rel,
        """
        with ev as (select extract_arg(arg_set_id, 'cpu_id') as cpu, extract_arg(arg_set_id, 'state') as f, ts
                    from ftrace_event where name = 'cpu_frequency'),
             iv as (select cpu, f, lead(ts, 1, trace_end()) over (partition by cpu order by ts) - ts as dur from ev)
        select cpu, f as frequency_khz, sum(dur) as time_ns from iv group by cpu, f order by cpu, f""",
        engine="wasm",
    )
    assert freq.equals(tp_ftrace_only)
    stdlib = r["cpu_frequency_residency"].select("cpu", "frequency_khz", pl.col("time_ns").alias("tp_ns"))
    diff = freq.join(stdlib, on=["cpu", "frequency_khz"], how="full", coalesce=True).with_columns(
        (pl.col("time_ns").fill_null(0) - pl.col("tp_ns").fill_null(0)).abs().alias("d")
    )
    little = diff.filter(pl.col("cpu") < 4)["d"].max()
    print(
        f"\nfrequency residency, abtest vs TP stdlib (polling mixed in): little CPUs differ by up to "
        f"{little / 1e6:.1f} ms per OPP; X1 CPUs by {diff.filter(pl.col('cpu') >= 6)['d'].max() / 1e9:.2f} s"
    )
