"""The `abtest` entry point: commands imported only when they run, exit codes and output kept when the
process leaves without the interpreter's teardown (abtest.cli.exit_now). Real installed script, real
shared traces."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
ABTEST = (
    [str(ROOT / ".venv" / "bin" / "abtest")]
    if (ROOT / ".venv/bin/abtest").exists()
    else [sys.executable, "-m", "abtest.cli"]
)
ALL_COMMANDS = [
    "analyze",
    "bisect",
    "collect",
    "compare",
    "engines",
    "explain",
    "gate",
    "history",
    "metrics",
    "sql",
    "timeline",
    "trace",
    "wattson",
]

_MODULES_AFTER = r"""
import json, sys
from abtest.cli import run
code = run(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.startswith("abtest."))}))
"""


def _modules_after(args: list[str], cwd: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER, *args], capture_output=True, text=True, check=True, cwd=cwd
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_trace_commands_import_only_the_trace_command_module(traces, tmp_path):
    trace = traces / "lisa/sched_load-trace.dat"
    got = _modules_after(["trace", "convert", str(trace), "-o", str(tmp_path / "t")], tmp_path)
    assert got["code"] == 0 and (tmp_path / "t/meta.json").exists()
    loaded = set(got["modules"])
    assert "abtest.commands.trace" in loaded
    for other in (
        "abtest.commands.collect",
        "abtest.commands.compare",
        "abtest.commands.analyze",
        "abtest.commands.interop",
        "abtest.collectors.orchestrate",
        "abtest.store.reader",
    ):
        assert other not in loaded, other
    # the JSON form of `trace info` does not need rich either
    got = _modules_after(["trace", "info", "--json", "--no-cache", str(trace)], tmp_path)
    assert got["code"] == 0 and "abtest.commands.collect" not in got["modules"]


def test_help_lists_every_command_and_unknown_command_is_exit_2():
    r = subprocess.run(ABTEST + ["--help"], capture_output=True, text=True)
    assert r.returncode == 0
    listed = [line.split()[0] for line in r.stdout.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == ALL_COMMANDS
    r = subprocess.run(ABTEST + ["nosuch"], capture_output=True, text=True)
    assert r.returncode == 2 and "No such command 'nosuch'" in r.stderr


def test_convert_through_the_script_writes_everything_before_exit(traces, tmp_path):
    """The installed script ends with os._exit: every file and every line of output must be out first."""
    trace = traces / "x86-vm/x86-menu-hackbench-cyclictest.dat"
    out = tmp_path / "tables"
    r = subprocess.run(ABTEST + ["trace", "convert", str(trace), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert (out / ".complete").exists()
    assert f"wrote {len(list(out.glob('*.parquet')))} tables, {sum(meta['events'].values()):,} events" in r.stderr
    heights = {f.stem: pl.read_parquet(f).height for f in out.glob("*.parquet")}
    assert heights["marker"] == meta["events"]["print"]  # print events: the canonical `marker` table
    assert {k: v for k, v in heights.items() if k != "marker"} == {
        k: v for k, v in meta["events"].items() if k != "print"
    }
    # stdout through a pipe, read in full: the JSON object is complete
    r = subprocess.run(ABTEST + ["trace", "info", "--json", str(trace)], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["events"] == meta["events"]


def test_bad_input_and_a_commands_own_exit_code(tmp_path):
    bad = tmp_path / "truncated.dat"
    bad.write_bytes(b"\x17\x08\x44tracing6\x00")
    r = subprocess.run(ABTEST + ["trace", "info", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "truncated.dat" in r.stderr
    # gate with thresholds that do not exist: click's own usage error, exit 2
    r = subprocess.run(
        ABTEST + ["gate", "A", "B", "--store", str(tmp_path), "--thresholds", str(tmp_path / "no.toml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip()


def test_a_closed_reader_ends_quietly(traces):
    """`abtest trace info --json FILE | head -c 0`: the reader is gone before abtest writes; exit 1 (click's
    EPIPE handling) without a traceback, also from the final flush before os._exit."""
    p = subprocess.Popen(
        ABTEST + ["trace", "info", "--json", str(traces / "lisa/sched_load-trace.dat")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()


_ALLOCATOR_SEEN_BY_POLARS = r"""
import os, sys
import abtest.cli  # sets the allocator up before polars loads
import polars  # appends the value it finds to its own setting
print(os.environ["_RJEM_MALLOC_CONF"])
"""


def _allocator_config(env_value: str | None) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if env_value is not None:
        env["_RJEM_MALLOC_CONF"] = env_value
    r = subprocess.run(
        [sys.executable, "-c", _ALLOCATOR_SEEN_BY_POLARS], capture_output=True, text=True, check=True, env=env
    )
    return r.stdout.strip()


def test_the_command_line_sets_polars_allocator_unless_the_user_did():
    from abtest.cli import CLI_JEMALLOC, POLARS_JEMALLOC_DEFAULT

    # unset, or polars' own default inherited from a Python parent: the command line's setting, last (wins)
    for inherited in (None, POLARS_JEMALLOC_DEFAULT):
        assert _allocator_config(inherited).endswith("," + CLI_JEMALLOC)
    # the user's own value is what polars gets
    mine = "dirty_decay_ms:2000"
    got = _allocator_config(mine)
    assert got.endswith("," + mine) and CLI_JEMALLOC not in got
