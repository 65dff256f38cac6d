"""abtest's readers vs Perfetto's trace_processor (independent engine, real wasm build v52, offline).

For every perfetto protobuf, ftrace-text, atrace and systrace file in ../shared/traces, per-event counts
of sched_switch, sched_waking, sched_wakeup, cpu_idle, cpu_frequency (and, for perfetto traces, every ftrace
event TP ingests) plus per-rail power-rail samples and energy must be equal, except for differences that
are explained here, each checked precisely (never a tolerance):

* compact sched (perfetto): TP discards the first compact sched_switch / sched_waking of every CPU (it has
  no prev_* state for it) and counts them in its stats `compact_sched_switch_skipped` /
  `compact_sched_waking_skipped`; abtest keeps them. abtest == TP + skipped.
* ftrace text: TP's systrace line parser (src/trace_processor/importers/systrace/systrace_line_parser.cc)
  knows a fixed list of events. sched_switch goes to its ftrace_event table; cpu_idle / cpu_frequency become
  cpuidle / cpufreq counter tracks (compared there); sched_waking only feeds thread_state (not countable
  1:1: not compared); sched_wakeup is not parsed at all (asserted absent); every other event is dropped.
* a text file whose last line has no trailing newline: TP drops that unterminated line.
* power rails: TP times each sample with the power HAL's energy_data.timestamp_ms; abtest's `ts` is the
  packet timestamp (the ftrace clock) and it keeps the HAL time as `timestamp_ms`: compared on that.
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

from abtest.interop import perfetto_engine as pe

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
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
            counters = dict(s.query("select t.name, count(*) as n from counter c join cpu_counter_track t "
                                    "on c.track_id = t.id group by t.name").iter_rows())
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
    from abtest.trace.api import Trace
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
        tp_counts = {"sched_switch": facts["ftrace"].get("sched_switch", 0),
                     "cpu_idle": facts["counters"].get("cpuidle", 0),
                     "cpu_frequency": facts["counters"].get("cpufreq", 0)}
        dropped_last = _unterminated_last_event(TRACES / rel)
        for event, tp_count in tp_counts.items():
            expected = tp_count + (1 if dropped_last == event else 0)
            assert ours.get(event, 0) == expected, (event, ours.get(event), tp_count, dropped_last)
            compared.append(event)
        assert "sched_wakeup" not in facts["ftrace"]  # TP's text importer does not parse it
    assert compared


def test_power_rails_agree(tp_facts):
    """Per rail: same samples, same cumulative energy (uWs == uJ), same sample times.

    Timestamps: TP puts each rail sample at the power HAL's energy_data.timestamp_ms * 1e6; abtest's `ts` is
    the packet timestamp (BOOTTIME ns, the ftrace clock) and keeps the HAL time as `timestamp_ms`. So TP's ts
    is compared with abtest's timestamp_ms * 1e6 (exact), and the packet-vs-HAL offset is reported.
    """
    rel = "PerfettoTraceScript/pixel7pro-power-rails.perfetto-trace"
    tp = tp_facts(rel)["rails"].sort("rail")
    assert tp.height == 24
    df = _abtest(rel).df("power_rail").with_columns(pl.col("rail").cast(pl.String))
    ours = (df.sort("ts").group_by("rail", maintain_order=True)
            .agg(pl.len().alias("samples"), (pl.col("timestamp_ms").min() * 1_000_000).alias("first_ts"),
                 (pl.col("timestamp_ms").max() * 1_000_000).alias("last_ts"),
                 (pl.col("energy_uj").last() - pl.col("energy_uj").first()).cast(pl.Int64).alias("energy_uj"))
            .sort("rail"))
    assert ours["rail"].to_list() == tp["rail"].to_list()
    for col in ("samples", "first_ts", "last_ts", "energy_uj"):
        assert ours[col].to_list() == tp[col].to_list(), col
    # every sample, not only the ends
    s = pe.open_session(TRACES / rel, "wasm")
    try:
        tp_all = s.query("""include perfetto module android.power_rails;
            select m.raw_power_rail_name as rail, c.ts, cast(c.value as int) as energy_uj
            from counter c join android_power_rails_metadata m on c.track_id = m.track_id order by rail, c.ts""")
    finally:
        s.close()
    ours_all = (df.select("rail", (pl.col("timestamp_ms") * 1_000_000).alias("ts"),
                          pl.col("energy_uj").cast(pl.Int64)).sort("rail", "ts"))
    assert ours_all.equals(tp_all)
    offset_ms = (df["timestamp_ms"] * 1_000_000 - df["ts"]) / 1e6
    print(f"\nrail sample time, HAL timestamp_ms minus packet ts: median {offset_ms.median():.3f} ms, "
          f"range {offset_ms.min():.1f} .. {offset_ms.max():.1f} ms over {df.height} samples")
