"""Issue 43: text that did not read, and timestamps far outside a trace's body.

trace_printk lines as tracefs prints them (captures of a module's trace_printk on Debian 6.1, the issue's lines
inside a real trace, and this kernel's own sym-offset printing),
systrace's final clock-sync line (a real systrace HTML with the line its writer appends), `perf script`
tracepoint text (recordings made here and traceshark's documented sample, xz / gzip / zstd), function_graph
with funcgraph-args / -retaddr / -retval (captures of Debian 6.18 and a Linux 7.3 built here, and the issue's lines),
and events re-stamped 1 ns and
4294967295 s in real shared traces (docs/ingest-policy.md, "Timestamp outliers").
"""

from __future__ import annotations

import gzip
import lzma
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from abtest import Trace
from abtest.analysis import registry
from abtest.trace.detect import detect_format
from abtest.trace.import_log import import_warnings
from abtest.trace.readers import read_trace

DATA = Path(__file__).resolve().parent / "data" / "ingest"
PERF = DATA / "perf"
# an ftrace event head with a trace_printk caller printed with its offset (options/sym-offset)
SYM_OFFSET_HEAD = re.compile(r"\s\d+\.\d+: ([A-Za-z_][\w.]*\+0x[0-9a-f]+/0x[0-9a-f]+): (.*)$")
# a perf script tracepoint sample head: ... [CPU] SEC.FRAC: [PERIOD] SYSTEM:EVENT:
PERF_HEAD = re.compile(r"^\s*(.+?)\s+(\d+)(?:/(\d+))?\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(?:\d+\s+)?(\w+):(\w+):\s?(.*)$")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Trace() caches by content: each test decodes with this tree's readers."""
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))


# --- trace_printk (ftrace bprint) ------------------------------------------------------------------------------

# The line forms of the issue (kernel-book Raspberry Pi logs whose repository states no license, so they are not
# redistributed here): trace_printk printed with options/sym-offset, and with the `%ps: message` form.
PRINTK_SYM_OFFSET = [
    "          <idle>-0     [000] d...  374416.554411: __schedule+0x184/0x9fc: [+] prev->state:0 next:kworker/0:1",
    "     kworker/0:1-4021  [000] ....  374416.554430: mutex_lock+0xcc/0x130: [+][fastpath] mutex_lock owner:0",
]
PRINTK_FUNC_COLON = "     kworker/0:1-4021  [000] d.h.  374416.554452: __handle_irq_event_percpu: [+] irq:[17] caller"


def _with_lines_after_first_switch(traces, tmp_path: Path, extra: list[str]) -> Path:
    """A real ftrace text trace (tracecompass's Android sched trace) with `extra` lines (their timestamps replaced by
    the first sched_switch's) inserted after that switch."""
    lines = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if "sched_switch:" in ln)
    ts = re.search(r"\s(\d+\.\d+): ", lines[n]).group(1)
    lines[n + 1 : n + 1] = [re.sub(r"\s\d+\.\d+: ", f" {ts}: ", x, count=1) for x in extra]
    path = tmp_path / "printk.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trace_printk_lines_become_bprint_markers(traces, tmp_path):
    """trace_printk lines (sym-offset form and `func: message` form) inside a real trace are `bprint` rows of the
    marker table with the function in `ip` and the message in `text`; before, they were counted as malformed."""
    path = _with_lines_after_first_switch(traces, tmp_path, PRINTK_SYM_OFFSET + [PRINTK_FUNC_COLON])
    clean = read_trace(traces / "tracecompass/trace-android-sched").meta["events"]
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    assert data.meta["events"] == clean | {"bprint": 3}
    assert "__handle_irq_event_percpu" not in data.tables
    marker = data.tables["marker"].filter(pl.col("event").cast(pl.Utf8) == "bprint")
    assert marker["ip"].to_list() == ["__schedule+0x184/0x9fc", "mutex_lock+0xcc/0x130", "__handle_irq_event_percpu"]
    assert marker["text"].to_list() == [
        "[+] prev->state:0 next:kworker/0:1",
        "[+][fastpath] mutex_lock owner:0",
        "[+] irq:[17] caller",
    ]
    assert marker["pid"].to_list() == [0, 4021, 4021]


def test_trace_printk_lines_alone_are_a_trace(tmp_path):
    """A trace of nothing but trace_printk lines was refused as not a trace."""
    path = tmp_path / "only-printk.txt"
    path.write_text("# tracer: nop\n#\n" + "\n".join(PRINTK_SYM_OFFSET + [PRINTK_FUNC_COLON]) + "\n")
    data = read_trace(path)
    assert data.meta["import_errors"] == {} and data.meta["events"] == {"bprint": 3}


@pytest.mark.parametrize(
    "head, event, ip",
    [
        ("foo_init [mymod]", "bprint", "foo_init [mymod]"),  # %ps of a module's symbol
        ("foo_init+0x10/0x40 [mymod]", "bprint", "foo_init+0x10/0x40 [mymod]"),
        ("do_thing.isra.0", "bprint", "do_thing.isra.0"),
        ("0xffffffffc0a01234", "bprint", "0xffffffffc0a01234"),  # no symbol found
        ("tracing_mark_write+0x131/0x1d0", "tracing_mark_write", None),  # a marker write printed with its offset
    ],
)
def test_printk_symbol_shapes(traces, tmp_path, head, event, ip):
    """The shapes a kernel symbol takes and a tracepoint name cannot, inside a real trace."""
    lines = (traces / "tracecompass/trace-android-sched").read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if "sched_switch:" in ln)
    ts = re.search(r"\s(\d+\.\d+): ", lines[n]).group(1)
    lines.insert(n + 1, f"           <...>-1234  [000] ...1 {ts}: {head}: hello world: x=1")
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n")
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    row = data.tables["marker"].row(0, named=True)
    assert (str(row["event"]), row["text"], row.get("ip")) == (event, "hello world: x=1", ip)


def test_live_marker_printed_with_sym_offset_and_sym_addr(tracefs_lock, tmp_path):
    """This kernel's own text of trace_marker writes with options/sym-offset and sym-addr (the printing path of
    trace_printk's ip): `tracing_mark_write+0x../0x..: text`, then with ` <address>`."""
    fs = tracefs_lock
    texts = []
    try:
        (fs / "tracing_on").write_text("0")
        (fs / "trace").write_text("")
        (fs / "tracing_on").write_text("1")
        for option in ("sym-offset", "sym-addr"):
            (fs / "options" / option).write_text("1")
            (fs / "trace_marker").write_text(f"abtest {option} marker")
        (fs / "tracing_on").write_text("0")
        texts = (fs / "trace").read_text().splitlines()
    finally:
        (fs / "tracing_on").write_text("0")
        for option in ("sym-offset", "sym-addr"):
            (fs / "options" / option).write_text("0")
        (fs / "trace").write_text("")
    shown = [ln for ln in texts if "abtest sym-" in ln]
    assert len(shown) == 2 and "tracing_mark_write+0x" in shown[0] and re.search(r" <[0-9a-f]+>: ", shown[1])
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(texts) + "\n")
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    marker = data.tables["marker"].filter(pl.col("text").str.starts_with("abtest sym-"))
    assert marker["text"].to_list() == ["abtest sym-offset marker", "abtest sym-addr marker"]
    assert set(marker["event"].cast(pl.Utf8)) == {"tracing_mark_write"}


# --- systrace's final clock-sync line ---------------------------------------------------------------------------

# what systrace's legacy HTML writer appends after the trace text, closing the JavaScript string: the line has no
# line end in the string, by construction (catapult systrace, html_suffix)
SYSTRACE_SUFFIX = '           dummy-0000  [000] 0.0: 0: trace_event_clock_sync: parent_ts=0.0\\n";'


def test_systrace_final_clock_sync_line_is_kept(traces, tmp_path):
    src = (traces / "catapult/counter_tracks.html").read_text()
    last = 'hwc_eventmon-336   [001] 50265.647128: 0: C|124|VSYNC|0\\n";'
    assert src.count(last) == 1
    path = tmp_path / "systrace.html"
    path.write_text(src.replace(last, last[:-2] + "\\\n" + SYSTRACE_SUFFIX))
    clean, data = read_trace(traces / "catapult/counter_tracks.html"), read_trace(path)
    assert data.meta["events"] == {"tracing_mark_write": clean.meta["events"]["tracing_mark_write"] + 1}
    assert "truncated_line" not in data.meta["import_errors"]
    sync = data.tables["marker"].filter(pl.col("text").str.starts_with("trace_event_clock_sync"))
    assert sync["text"].to_list() == ["trace_event_clock_sync: parent_ts=0.0"] and sync["ts"].to_list() == [0]
    # stamped 0.0 by the writer: kept, but out of the span (a timestamp outlier)
    assert (data.meta["start_ns"], data.meta["end_ns"]) == (clean.meta["start_ns"], clean.meta["end_ns"])
    assert data.meta["timestamp_outliers"]["tables"] == {"marker": 1}


# --- perf script ------------------------------------------------------------------------------------------------


def _perf_text(name: str) -> str:
    return lzma.decompress((PERF / name).read_bytes()).decode()


def _perf_counts(text: str) -> Counter:
    return Counter(m.group(8) for m in map(PERF_HEAD.match, text.splitlines()) if m)


def test_perf_script_recorded_here_xz(tmp_path):
    """`perf record -a -g -e sched:... -e power:cpu_idle -e cpu-clock` on this project's machine, `perf script`,
    xz: every tracepoint sample read into the canonical tables with the values its line shows."""
    name = "live-6.18-sched-cpuidle-callchains.txt.xz"
    text = _perf_text(name)
    data = read_trace(PERF / name)
    assert (data.meta["format"], data.meta["wrapper"]) == ("perf-script", "xz")
    assert data.meta["events"] == dict(sorted(_perf_counts(text).items()))
    assert data.meta["import_errors"] == {}
    cpu_clock = sum(1 for ln in text.splitlines() if re.search(r"\d:\s+\d+\s+cpu-clock:", ln))
    assert cpu_clock and "perf_sample_not_tracepoint" in data.meta["non_event_content"]
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "sched:sched_switch:" in ln and "prev_state=S" in ln)
    m = PERF_HEAD.match(lines[i])
    f = dict(kv.split("=", 1) for kv in re.findall(r"(\w+=\S+)", m.group(9)))
    ts = int(m.group(5)) * 10**9 + int(m.group(6).ljust(9, "0"))
    at = (pl.col("ts") == ts) & (pl.col("cpu") == int(m.group(4)))
    row = data.tables["sched_switch"].filter(at).row(0, named=True)
    assert (row["common_pid"], row["prev_pid"], row["next_pid"], row["prev_prio"], row["prev_state"]) == (
        int(m.group(2)),
        int(f["prev_pid"]),
        int(f["next_pid"]),
        int(f["prev_prio"]),
        1,
    )
    assert str(row["common_comm"]) == m.group(1).strip() and str(row["next_comm"]) == f["next_comm"]
    frames = [re.match(r"\s+[0-9a-f]+ (\S+)", ln).group(1) for ln in lines[i + 1 : i + 4]]
    assert row["stack"].split("\n")[:3] == frames
    idle_rows = data.tables["cpu_idle"]
    assert idle_rows.schema["cpu"] == pl.Int32 and set(idle_rows["state"].unique()) <= {-1, 0, 1}
    for suffix, pack in (("gz", gzip.compress), ("txt", bytes)):
        other = tmp_path / f"perf.{suffix}"
        other.write_bytes(pack(text.encode()))
        again = read_trace(other)
        assert again.meta["events"] == data.meta["events"] and again.meta["format"] == "perf-script"
    if shutil.which("zstd"):
        plain = tmp_path / "perf.txt"
        subprocess.run(["zstd", "-q", "-f", str(plain), "-o", str(tmp_path / "perf.zst")], check=True)
        assert read_trace(tmp_path / "perf.zst").meta["events"] == data.meta["events"]


def test_perf_script_pid_tid_and_ns_form():
    """The same recording printed with `-F +pid --ns`: PID/TID (the process lands in common_tgid) and 9-digit
    times give the same events, at the same microsecond."""
    us = read_trace(PERF / "live-6.18-sched-cpuidle-callchains.txt.xz")
    ns = read_trace(PERF / "live-6.18-pid-tid-ns.txt.xz")
    assert ns.meta["events"] == us.meta["events"]
    a, b = us.tables["sched_switch"], ns.tables["sched_switch"]
    assert ((b["ts"] // 1000) - a["ts"] // 1000).abs().max() == 0
    assert b["next_pid"].to_list() == a["next_pid"].to_list()
    assert "common_tgid" in b.columns and b["common_tgid"].null_count() == 0


def test_perf_script_traceshark_doc_sample():
    """traceshark's documented `perf script` sample (GPL-3.0, tests/data/ingest/MANIFEST.md): a sched_switch and a
    cpu_idle with call chains holding inlined frames, [unknown] symbols and .init.text objects."""
    name = "traceshark-doc-perf-stacktrace-format.txt"
    data = read_trace(PERF / name)
    assert data.meta["format"] == "perf-script" and data.meta["import_errors"] == {}
    assert data.meta["events"] == {"cpu_idle": 1, "sched_switch": 1}
    sw = data.tables["sched_switch"].row(0, named=True)
    assert (sw["ts"], sw["cpu"], sw["prev_comm"], sw["prev_pid"], sw["next_comm"], sw["next_pid"]) == (
        12942039622000,
        0,
        "migration/0",
        18,
        "swapper/0",
        0,
    )
    idle_row = data.tables["cpu_idle"].row(0, named=True)
    assert (idle_row["ts"], idle_row["cpu"], idle_row["state"]) == (12942039629000, 0, 3)
    assert idle_row["stack"].split("\n")[0].startswith("__do_trace_cpu_idle+0x186")
    assert len(idle_row["stack"].split("\n")) == 12


def test_perf_script_detection_leaves_ftrace_text_alone(traces):
    for name in ("tracecompass/trace-android-sched", "lisa/trace_txt-trace.txt", "trappy/trace.txt"):
        assert detect_format((traces / name).read_bytes()[:8192]) == "ftrace-text"
    assert detect_format((PERF / "traceshark-doc-perf-stacktrace-format.txt").read_bytes()) == "perf-script"


# --- timestamp outliers -----------------------------------------------------------------------------------------


def _restamp(lines: list[str], i: int, seconds: str) -> list[str]:
    out = list(lines)
    out[i] = re.sub(r" \d+\.\d+: ", f" {seconds}: ", out[i], count=1)
    return out


def test_event_stamped_1ns_stays_out_of_the_span(traces, tmp_path):
    """One cpu_idle event re-stamped 1 ns in a real 1.25 s trace stretched it to 1794 s: idle wakeups/s
    3495 -> 2.4 and CPU0 idle 85.7 % -> 99.99 %, without a warning."""
    dat = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    report = subprocess.run(
        ["trace-cmd", "report", "-t", "-i", str(dat)], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    idle_lines = [i for i, ln in enumerate(report) if " cpu_idle: " in ln]
    (tmp_path / "clean.txt").write_text("\n".join(report) + "\n")
    (tmp_path / "mutated.txt").write_text(
        "\n".join(_restamp(report, idle_lines[len(idle_lines) // 2], "0.000000001")) + "\n"
    )
    clean, mutated = Trace(tmp_path / "clean.txt"), Trace(tmp_path / "mutated.txt")
    assert (mutated.start_ns, mutated.end_ns) == (clean.start_ns, clean.end_ns)
    out = mutated.meta["timestamp_outliers"]
    assert out["tables"] == {"cpu_idle": 1} and out["examples"][0]["ts"] == 1
    assert mutated.meta["import_errors"]["timestamp_outlier"]["count"] == 1
    assert mutated.meta["events"]["cpu_idle"] == clean.meta["events"]["cpu_idle"]  # kept in its table
    a, b = ({v.key: v.value for v in registry.evaluate(registry.IDLE, t).values} for t in (clean, mutated))
    assert b["idle.wakeups_per_s"] == pytest.approx(a["idle.wakeups_per_s"])
    assert b["idle.cpu.0.idle_pct"] == pytest.approx(a["idle.cpu.0.idle_pct"], abs=0.1)


def test_event_stamped_4294967295s_stays_out_of_the_span(traces, tmp_path):
    """One atrace sched_switch re-stamped 4294967295 s: the task-state sums overflowed (known_s -1.27e9 s,
    sleeping 439 %)."""
    lines = (traces / "catapult/atrace_data").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if "sched_switch:" in ln and i > len(lines) // 2)
    path = tmp_path / "atrace.txt"
    path.write_text("\n".join(_restamp(lines, i, "4294967295.000000")) + "\n")
    clean, mutated = Trace(traces / "catapult/atrace_data"), Trace(path)
    assert (mutated.start_ns, mutated.end_ns) == (clean.start_ns, clean.end_ns)
    assert mutated.meta["timestamp_outliers"]["tables"] == {"sched_switch": 1}
    assert any(w.startswith("kept out of the span: 1 x timestamp_outlier") for w in import_warnings(mutated.meta))
    span_s = (clean.end_ns - clean.start_ns) / 1e9
    states = registry.evaluate(registry.TASKS, mutated).tables["states"]
    for t in states.iter_rows(named=True):
        name = t["comm"]
        assert 0 <= t["known_s"] <= span_s * t["threads"] + 1e-9, name
        assert all(0 <= t[f"{s}_pct"] <= 100 + 1e-9 for s in ("running", "runnable", "sleeping")), (name, t)


def test_no_outliers_in_the_shared_traces(traces):
    """The rule flags nothing in any real trace of ../shared/traces (false positives would shrink real spans)."""
    names = [p for p in sorted(traces.rglob("*")) if p.is_file() and p.suffix not in (".yml", ".md", ".json")]
    flagged = {str(p.relative_to(traces)): read_trace(p).meta.get("timestamp_outliers") for p in names}
    assert {k: v for k, v in flagged.items() if v} == {}


# --- function_graph with funcgraph-args / funcgraph-retaddr / funcgraph-retval ----------------------------------

# function_graph with funcgraph-args, -retaddr and -retval: the lines the issue quotes (a capture that states no
# license); real captures of each option are read at the end of this file
FUNCGRAPH_ARGS = """\
# tracer: function_graph
#
# CPU  DURATION                  FUNCTION CALLS
# |     |   |                     |   |   |   |
 1)               |  pick_next_task(rq=0xffff88807ddad800, prev=0xffff888007949bc0) { /* <-__schedule+0x154/0x700 */
 1)   0.170 us    |    rcu_rnp_online_cpus(rnp=0xffffffff83781280); /* <-rcu_rdp_cpu_online.isra.0+0xe/0x20 ret=0xff */
 1)               |    rcu_rdp_cpu_online.isra.0(rdp=0xffff88807dc2b680) { /* <-rcu_note_context_switch+0x5d/0x4a0 */
 1)   0.074 us    |      __cond_resched(); /* <-__kmalloc_noprof+0x28c/0x390 ret=0x0 */
 1)   0.899 us    |    } /* rcu_rdp_cpu_online.isra.0 ret=0x1 */
 1)   2.401 us    |  } /* pick_next_task ret=0xffff888003d1c000 */
"""


def test_funcgraph_args_retaddr_retval(tmp_path):
    """Entries carry their arguments and caller, leaves and exits their return value (before: refused as not a
    trace)."""
    path = tmp_path / "funcgraph-args.txt"
    path.write_text(FUNCGRAPH_ARGS)
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    assert data.meta["events"] == {"funcgraph_entry": 4, "funcgraph_exit": 2}
    entry = data.tables["funcgraph_entry"]
    first = entry.row(0, named=True)
    assert (first["func"], first["args"], first["retaddr"], first["leaf"]) == (
        "pick_next_task",
        "rq=0xffff88807ddad800, prev=0xffff888007949bc0",
        "__schedule+0x154/0x700",
        False,
    )
    leaf = entry.filter(pl.col("func") == "rcu_rnp_online_cpus").row(0, named=True)
    assert (leaf["args"], leaf["retaddr"], leaf["retval"], leaf["duration_ns"], leaf["leaf"]) == (
        "rnp=0xffffffff83781280",
        "rcu_rdp_cpu_online.isra.0+0xe/0x20",
        "0xff",
        170,
        True,
    )
    no_args = entry.filter(pl.col("func") == "__cond_resched").row(0, named=True)
    assert (no_args["args"] or "", no_args["retval"]) == ("", "0x0")
    exits = data.tables["funcgraph_exit"]
    assert dict(zip(exits["func"], exits["retval"])) == {
        "rcu_rdp_cpu_online.isra.0": "0x1",
        "pick_next_task": "0xffff888003d1c000",
    }


# Documentation/trace/ftrace.rst as Linux 6.5 added it, "Example with funcgraph-retval" (the `= X` form)
RETVAL_DOC_EXAMPLE = """\
    1)               |    cgroup_migrate() {
    1)   0.651 us    |      cgroup_migrate_add_task(); /* = 0xffff93fcfd346c00 */
    1)               |      cgroup_migrate_execute() {
    1)               |        cpu_cgroup_can_attach() {
    1)               |          cgroup_taskset_first() {
    1)   0.732 us    |            cgroup_taskset_next(); /* = 0xffff93fc8fb20000 */
    1)   1.232 us    |          } /* cgroup_taskset_first = 0xffff93fc8fb20000 */
    1)   0.380 us    |          sched_rt_can_attach(); /* = 0x0 */
    1)   2.335 us    |        } /* cpu_cgroup_can_attach = -22 */
    1)   4.369 us    |      } /* cgroup_migrate_execute = -22 */
    1)   7.143 us    |    } /* cgroup_migrate = -22 */
"""


def test_funcgraph_retval_equals_form(tmp_path):
    path = tmp_path / "retval.txt"
    path.write_text("# tracer: function_graph\n#\n" + RETVAL_DOC_EXAMPLE)
    data = read_trace(path)
    assert data.meta["events"] == {"funcgraph_entry": 7, "funcgraph_exit": 4} and data.meta["import_errors"] == {}
    exits = data.tables["funcgraph_exit"]
    assert dict(zip(exits["func"], exits["retval"])) == {
        "cgroup_taskset_first": "0xffff93fc8fb20000",
        "cpu_cgroup_can_attach": "-22",
        "cgroup_migrate_execute": "-22",
        "cgroup_migrate": "-22",
    }
    leaves = data.tables["funcgraph_entry"].filter(pl.col("leaf"))
    assert leaves["retval"].to_list() == ["0xffff93fcfd346c00", "0xffff93fc8fb20000", "0x0"]
    assert leaves["args"].null_count() == leaves.height


# --- real captures of trace_printk and funcgraph-args (recorded in QEMU: tests/data/ingest/MANIFEST.md) ----------

PRINTK = DATA / "printk"
# the module's messages (tests/data/ingest/printk/abtest_printk.c), what each bprint row's text must be
PRINTK_MESSAGES = re.compile(
    r"abtest_printk loaded|init step (\d) of 10, comm=insmod pid=\d+|\[\+\] tick:(\d+) cpu:[01] state:0"
)
# a tracefs event line and its payload: the printk lines are every line that is not a sched event
TRACEFS_LINE = re.compile(r"^\s*\S.*-\d+\s+\[\d{3}\]\s+\S{5}\s+\d+\.\d{6}: (.*)$")


@pytest.mark.parametrize(
    "name, caller",
    [
        ("6.1-trace_printk-default.txt", r"on_tick|0x[0-9a-f]{16}"),  # the kernel's default %ps form
        ("6.1-trace_printk-sym-offset-sched.txt", r"on_tick\+0x2d/0x4d \[abtest_printk\]|0x[0-9a-f]{16}"),
        ("6.1-trace_printk-sym-addr.txt", r"(?:on_tick\+0x2d/0x4d \[abtest_printk\]|0x[0-9a-f]{16}) <[0-9a-f]{16}>"),
    ],
)
def test_trace_printk_real_capture(name, caller):
    """trace_printk from a module on a real Debian 6.1 kernel, printed by tracefs in its three caller forms (the
    plain `on_tick: ...` one was read as an event named on_tick, the `0xADDR <ADDR>: ...` one as malformed lines):
    every printk line is a bprint row with the caller in `ip` and the module's message in `text`."""
    path = PRINTK / name
    payloads = [m.group(1) for m in map(TRACEFS_LINE.match, path.read_text().splitlines()) if m]
    printk = [p for p in payloads if not p.startswith(("sched_switch: ", "sched_wakeup: "))]
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    assert data.meta["events"] == {"bprint": len(printk)} | {
        ev: n for ev in ("sched_switch", "sched_wakeup") if (n := sum(p.startswith(ev + ": ") for p in payloads))
    }
    marker = data.tables["marker"]
    assert marker["event"].cast(pl.Utf8).unique().to_list() == ["bprint"]
    assert [f"{ip}: {text}" for ip, text in zip(marker["ip"], marker["text"])] == printk
    assert all(re.fullmatch(caller, ip) for ip in marker["ip"])
    assert all(PRINTK_MESSAGES.fullmatch(t) for t in marker["text"])
    ticks = [int(m.group(2)) for m in map(PRINTK_MESSAGES.fullmatch, marker["text"]) if m.group(2) is not None]
    assert ticks == list(range(len(ticks))) and len(ticks) >= 30


def test_trace_printk_plain_caller_is_named_in_a_warning(traces):
    """Reading `on_tick: ...` as trace_printk is a judgement (the name is no known trace event, the text no
    key=value fields): the warning names it. Real tracepoints whose text has no key=value field (ext4's
    `dev 8,13 ino ...`, raw_syscalls' `sys_enter: NR 63 (...)` in real shared traces) stay events."""
    data = read_trace(PRINTK / "6.1-trace_printk-default.txt")
    assert any("on_tick (34)" in w for w in data.meta["warnings"])
    assert "on_tick" not in data.tables
    for rel, events in (
        ("trappy/trace_filesystem.txt", ("ext4_da_write_begin", "ext4_da_write_end", "ext4_sync_file_enter")),
        ("tracecompass/trace-android-sched-irq-syscall", ("sys_enter",)),
    ):
        path = traces / rel
        text = path.read_text()
        other = read_trace(path)
        for event in events:
            assert other.meta["events"][event] == len(re.findall(rf"\d: {event}: ", text)) > 0
        assert not any("trace_printk" in w for w in other.meta.get("warnings", []))


def test_plain_printk_rule_can_be_turned_off(monkeypatch):
    """ABTEST_PLAIN_PRINTK=0: plain caller names stay events (a trace whose unknown events the rule misreads)."""
    monkeypatch.setenv("ABTEST_PLAIN_PRINTK", "0")
    data = read_trace(PRINTK / "6.1-trace_printk-default.txt")
    assert data.meta["events"] == {"bprint": 11, "on_tick": 34}
    assert not any("trace_printk" in w for w in data.meta["warnings"])


def test_trace_printk_trace_dat_matches_trace_cmd_report():
    """The same module under `trace-cmd record` in the guest: bprint / bputs rows equal trace-cmd report's."""
    path = PRINTK / "6.1-trace_printk-sched.dat"
    report = subprocess.run(
        ["trace-cmd", "report", str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    rows = re.findall(r"\s(\d+\.\d{6}): (bprint|bputs): +0x[0-9a-f]+: (.*)$", report, flags=re.M)
    assert len(rows) >= 40
    marker = read_trace(path).tables["marker"]
    got = [(f"{ts // 1000 / 1e6:.6f}", str(ev), text) for ts, ev, text in marker.select("ts", "event", "text").rows()]
    want = [(sec, ev, text) for sec, ev, text in rows]
    assert [(e, t) for _, e, t in got] == [(e, t) for _, e, t in want]
    # trace-cmd rounds the time to the microsecond, abtest keeps ns: equal within 1 us
    assert all(abs(float(a[0]) - float(b[0])) <= 1.001e-6 for a, b in zip(got, want))


# a function_graph call line as the kernel prints it: func(args) then ` {` or `;`, then funcgraph-retaddr's and
# funcgraph-retval's comment (`/* <-caller+0x1/0x2 ret=-2 */`)
GRAPH_CALL = re.compile(r"^([^\s(/]+)\((.*)\)(?: \{|;)(?: /\* (?:<-(\S+))? ?(?:ret=(\S+))? ?\*/)?$")


@pytest.mark.parametrize(
    "name",
    [
        "6.18-args.txt",  # funcgraph-args, Debian 6.18
        "6.18-args-proc-abstime.txt",
        "6.18-args-schedule-events.txt",
        "7.3-retval.txt",  # funcgraph-retval, Linux 7.3 built here (Debian's kernels leave it out)
        "7.3-retval-retaddr-tail.txt",  # + funcgraph-retaddr, -tail, -proc, -abstime
    ],
)
def test_funcgraph_options_real_capture(name):
    """function_graph with funcgraph-args / -retval / -retaddr on real kernels (before: refused as not a trace):
    every call line is a funcgraph_entry row with its arguments, caller and return value, in order, and every
    `}` a funcgraph_exit row with its return value."""
    path = DATA / "funcgraph" / name
    lines = path.read_text().splitlines()
    body = [ln.rsplit("|", 1)[-1].strip() for ln in lines if not ln.startswith("#") and "|" in ln]
    calls = [m.groups() for m in map(GRAPH_CALL.match, body) if m]
    data = read_trace(path)
    assert data.meta["import_errors"] == {}
    entry, exit_ = data.tables["funcgraph_entry"], data.tables["funcgraph_exit"]
    got = [(f, a or "", r, v) for f, a, r, v in entry.select("func", "args", "retaddr", "retval").rows()]
    assert got == [(f, a, r, v) for f, a, r, v in calls]
    exits = [b for b in body if b.startswith("}")]
    assert exit_.height == len(exits)
    assert exit_["retval"].to_list() == [m.group(1) if (m := re.search(r" ret=(\S+) \*/$", b)) else None for b in exits]
    options = "-".join(name.split("-")[1:])
    if "args" in options:
        assert sum(bool(a) for _, a, _, _ in calls) > 0.8 * len(calls)  # nearly every call prints its arguments
    if "retaddr" in options:
        assert all(r is not None for _, _, r, _ in calls)
    if "retval" in options:
        assert exit_["retval"].null_count() == 0 and any(v and v.startswith("-") for v in exit_["retval"])
    for event in ("sched_switch", "sched_wakeup"):
        assert data.meta["events"].get(event, 0) == sum(b.startswith(f"/* {event}: ") for b in body)


def test_kprobe_events_stay_events():
    """kprobe / kretprobe events (Debian 6.1, names chosen by the user, no known trace event) print `(func+0x0/0x170)`
    with no key=value field when they have no fetch arguments: they stay tables of their own, not trace_printk."""
    path = DATA / "kprobe" / "6.1-kprobes.txt"
    names = Counter(m.group(1) for m in re.finditer(r"\d+\.\d{6}: (\w+): ", path.read_text()))
    data = read_trace(path)
    assert data.meta["import_errors"] == {} and data.meta["events"] == dict(names)
    assert {"abtest_open", "abtest_open_ret", "abtest_open_args"} <= set(data.tables) and "marker" not in data.tables
    assert not any("trace_printk" in w for w in data.meta["warnings"])


def test_trace_cmd_report_text_names_every_event(tmp_path):
    """In `trace-cmd report` text (its `cpus=N` header) a line's name is always its event (trace_printk is `bprint:`
    there): the real capture's `on_tick: ...` lines under that header are a table on_tick."""
    lines = (PRINTK / "6.1-trace_printk-default.txt").read_text().splitlines()
    ticks = [ln for ln in lines if ": on_tick: " in ln]
    path = tmp_path / "report.txt"
    path.write_text("cpus=2\n" + "\n".join(ticks) + "\n")
    data = read_trace(path)
    assert data.meta["events"] == {"on_tick": len(ticks)} and "marker" not in data.tables


def test_plain_caller_decided_for_the_whole_text_read_in_blocks(monkeypatch, tmp_path):
    """A long text is read in blocks: a caller whose only free-text line falls in one block is trace_printk in every
    block (the text is read again with the whole text's decision), as when the text is read at once."""
    from abtest.trace import ftrace_text

    head = (PRINTK / "6.1-trace_printk-default.txt").read_text().splitlines()[:12]  # the tracefs header
    body = [
        f"          <idle>-0       [000] ..s1.     {9 + i / 1000:.6f}: my_probe: step={i} cpu=0" for i in range(120)
    ]
    body.insert(60, "          <idle>-0       [000] ..s1.     9.060500: my_probe: [+] halfway")
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(head + body) + "\n")
    whole = read_trace(path)
    monkeypatch.setattr(ftrace_text, "TEXT_BLOCK_BYTES", 1024)
    blocked = read_trace(path)
    assert whole.meta["events"] == blocked.meta["events"] == {"bprint": 121}
    assert whole.tables["marker"].equals(blocked.tables["marker"])
    assert [w for w in blocked.meta["warnings"] if "trace_printk" in w] == [
        w for w in whole.meta["warnings"] if "trace_printk" in w
    ]


def test_trace_printk_warning_once_over_the_blocks_of_a_long_text(monkeypatch):
    """A long text is read in blocks (TEXT_BLOCK_BYTES): the caller warning counts every block's lines, once."""
    from abtest.trace import ftrace_text

    monkeypatch.setattr(ftrace_text, "TEXT_BLOCK_BYTES", 1024)
    data = read_trace(PRINTK / "6.1-trace_printk-default.txt")
    notes = [w for w in data.meta["warnings"] if "trace_printk" in w]
    assert notes == [notes[0]] and "on_tick (34)" in notes[0]
    assert data.meta["events"] == {"bprint": 45}
