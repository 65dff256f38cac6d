"""trace.dat reader vs the reference decoder (`trace-cmd report`, run here) on every real trace.dat
under ../shared/traces: per-event counts, every event's ts / cpu / pid / field values, marker text,
metadata and the `abtest trace info --json` contract."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import tracedat_ref as ref
from abtest.trace import tracedat
from abtest.trace.readers import read_trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
TRACEDAT_FILES = ["langraph/trace.dat", "lisa/sched_load-trace.dat", "trappy/trace.dat", "trappy/trace_idle.dat",
                  "x86-vm/x86-haltpoll-hackbench-cyclictest.dat", "x86-vm/x86-ladder-hackbench-cyclictest.dat",
                  "x86-vm/x86-menu-hackbench-cyclictest.dat"]
SCHED_POWER = ("sched_switch", "sched_wakeup", "sched_waking", "cpu_idle", "cpu_frequency", "cpu_idle_miss")


@pytest.fixture(scope="module")
def expected(traces):
    return json.loads((traces / "expected-counts.json").read_text())


_RAW_CACHE: dict[str, tuple] = {}


def raw_of(rel: str):
    if rel not in _RAW_CACHE:
        p = TRACES / rel
        _RAW_CACHE[rel] = tracedat.read(p, p.read_bytes())
    return _RAW_CACHE[rel]


def test_all_shared_tracedat_files_covered(traces):
    found = sorted(str(p.relative_to(traces)) for p in traces.rglob("*.dat"))
    assert found == sorted(TRACEDAT_FILES)


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_counts_equal_trace_cmd_report(rel, expected):
    raw, meta = raw_of(rel)
    counts = {name: df.height for name, df in raw.items() if df.height}
    assert counts == expected[rel]["events"]
    # and the live reference agrees (same trace-cmd that produced expected-counts.json)
    live = {ev: len(rows) for ev, rows in ref.events(str(TRACES / rel)).items()}
    assert counts == live
    assert meta["records"] == sum(counts.values())


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_every_field_value_equals_trace_cmd_report(rel):
    """For every event of every type (bprint text is checked separately): same ts (ns), cpu, common_pid
    and field values, as `trace-cmd report -R -t` prints them."""
    raw, _ = raw_of(rel)
    checked = ref.compare_fields(raw, str(TRACES / rel))
    assert checked == sum(df.height for name, df in raw.items() if name != "bprint")


@pytest.mark.parametrize("version,compression", [("6", "none"), ("7", "none")])
def test_trace_cmd_convert_variants(tmp_path, version, compression):
    """The same real trace rewritten by `trace-cmd convert` as v6 and as uncompressed v7 decodes to the
    same tables, and matches `trace-cmd report` on the converted file."""
    src = TRACES / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    out = tmp_path / f"v{version}-{compression}.dat"
    subprocess.run(["trace-cmd", "convert", "-i", str(src), "-o", str(out), "--file-version", version,
                    "--compression", compression], check=True, capture_output=True)
    raw, meta = tracedat.read(out, out.read_bytes())
    assert meta["format_version"] == version and meta["compression"] is None
    assert ref.compare_fields(raw, str(out)) == sum(df.height for df in raw.values())
    orig, _ = raw_of("x86-vm/x86-menu-hackbench-cyclictest.dat")
    assert sorted(raw) == sorted(orig)
    for name in orig:
        assert raw[name].equals(orig[name]), name


@pytest.mark.parametrize("rel", [r for r in TRACEDAT_FILES if "trappy/trace.dat" in r or "x86-vm" in r or "lisa" in r])
def test_marker_text_equals_trace_cmd_report(rel):
    """print / bprint text (bprint: printk format applied to the binary args in Rust) vs `trace-cmd report`."""
    raw, _ = raw_of(rel)
    reference = ref.events(str(TRACES / rel), raw=False)
    n = 0
    for ev, col in (("print", "buf"), ("bprint", "buf")):
        if ev not in reference:
            continue
        ours = raw[ev].select("ts", "cpu", col).rows()
        for (ts, cpu, text), (rts, rcpu, _pid, rest) in zip(ours, reference[ev]):
            assert (ts, cpu) == (rts, rcpu)
            # report prints "<ip or symbol>: <text>"
            assert rest.strip().split(": ", 1)[1] == text.rstrip("\n").strip(), (rest, text)
            n += 1
    assert n > 0


def test_bprint_has_formatted_text():
    raw, meta = raw_of("trappy/trace.dat")
    bp = raw["bprint"]
    assert bp.schema["buf"] == pl.Utf8
    assert bp["buf"].str.starts_with("cpu_load: cpu: ").sum() > 400
    assert not any("UNKNOWN" in w for w in meta["warnings"])


@pytest.mark.parametrize("rel,version,long_size,clock,cpus", [
    ("langraph/trace.dat", "7", 8, "perf", 4),
    ("lisa/sched_load-trace.dat", "6", 8, None, 6),
    ("trappy/trace.dat", "6", 4, None, 8),
    ("x86-vm/x86-menu-hackbench-cyclictest.dat", "7", 8, "local", 2),
])
def test_meta(rel, version, long_size, clock, cpus):
    _, meta = raw_of(rel)
    assert meta["format_version"] == version
    assert meta["kernel"]["long_size"] == long_size
    assert meta["kernel"]["endian"] == "little"
    assert meta["clock"] == clock
    assert meta["cpus"] == cpus
    assert meta["lost_events"] == 0 and meta["lost_events_exact"]
    assert meta["saved_cmdlines"] > 0
    if version == "7":
        assert meta["compression"] == "zstd"
        assert meta["kernel"]["release"] and meta["kernel"]["arch"] == "x86_64"


def test_dtypes_follow_kernel_widths():
    raw, _ = raw_of("x86-vm/x86-menu-hackbench-cyclictest.dat")
    ss = raw["sched_switch"]
    assert ss.schema["ts"] == pl.Int64 and ss.schema["cpu"] == pl.Int32 and ss.schema["common_pid"] == pl.Int32
    assert ss.schema["prev_comm"] == pl.Categorical and ss.schema["prev_pid"] == pl.Int32
    assert ss.columns[:3] == ["ts", "cpu", "common_pid"]
    assert raw["cpu_idle"].schema["state"] == pl.UInt32
    assert ss["ts"].is_sorted()
    ks = raw_of("langraph/trace.dat")[0]["kernel_stack"]
    assert ks.schema["caller"] == pl.List(pl.UInt64)


def test_canonical_tables_juno_pelt_and_idle():
    d = read_trace(TRACES / "lisa/sched_load-trace.dat")
    se, cfs = d.tables["sched_pelt_se"], d.tables["sched_pelt_cfs"]
    for col in ("ts", "cpu", "path", "util", "load"):
        assert col in se.columns and col in cfs.columns
    assert {"pid", "comm"} <= set(se.columns)
    idle = d.tables["cpu_idle"]
    assert idle.schema["state"] == pl.Int64 and idle["state"].min() == -1
    assert d.meta["event_aliases"]["sched_pelt_cfs"] == "sched_load_cfs_rq"


def _abtest_info(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "abtest.cli", "trace", "info", "--json", "--no-cache", str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_cli_info_json_exact(rel, expected):
    info = _abtest_info(TRACES / rel)
    assert info["format"] == "trace.dat"
    from abtest.trace.schema import EVENT_ALIASES
    want = {EVENT_ALIASES.get(k, k): v for k, v in expected[rel]["events"].items()}
    assert {k: v for k, v in info["events"].items() if v} == want
    reference = ref.events(str(TRACES / rel))
    all_ts = [r[0] for rows in reference.values() for r in rows]
    assert info["start_ns"] == min(all_ts) and info["end_ns"] == max(all_ts)
    assert info["lost_events"] == 0
    cpus_line = next(line for line in ref.report_lines(str(TRACES / rel)) if line.startswith("cpus="))
    assert info["cpus"] == int(cpus_line.split("=")[1])


@pytest.mark.parametrize("rel", TRACEDAT_FILES)
def test_global_event_order_equals_trace_cmd_report(rel):
    """All events merged by (ts, cpu) come out in exactly the order `trace-cmd report` prints them."""
    raw, _ = raw_of(rel)
    parts = []
    for name, df in raw.items():
        cpu = "buffer_cpu" if "buffer_cpu" in df.columns else "cpu"
        parts.append(df.select("ts", pl.col(cpu).alias("c"), pl.lit(name).alias("event")))
    merged = pl.concat(parts).sort(["ts", "c"], maintain_order=True)
    ours = list(zip(merged["ts"].to_list(), merged["c"].to_list(), merged["event"].to_list()))
    theirs = [(ts, cpu, ev) for ev, rows in ref.events(str(TRACES / rel)).items() for ts, cpu, _p, _r in rows]
    theirs_in_order = []
    for line in ref.report_lines(str(TRACES / rel)):
        m = ref._LINE.match(line)
        if m:
            ns = m.group("ns")
            ts = int(m.group("s")) * 1_000_000_000 + int(ns) if ns is not None else int(m.group("s"))
            theirs_in_order.append((ts, int(m.group("cpu")), m.group("event")))
    assert len(theirs_in_order) == len(theirs)
    assert ours == theirs_in_order
