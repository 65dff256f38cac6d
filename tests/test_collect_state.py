"""Collection state on a real target (this machine, kind = "local", real tracefs), issue 27 items 17, 19, 20:
- a real `abtest collect` killed with SIGKILL mid-iteration leaves tracing on, events enabled, buffer size and
  clock changed and a label's sysfs setting applied; its host journal holds the originals; `abtest collect
  --restore` (or the next run, which then records the originals as "original") puts them back;
- two collections at once with conflicting settings of one knob: every iteration runs under its own setting
  (applied and restored under the tracefs lock), and the knob ends as it was;
- scratch files live in a private mktemp directory (0700, removed at the end): planted symlinks with the old
  fixed names are not followed; the stored trace is owner-only.
The knob is /proc/sys/kernel/printk_ratelimit_burst (harmless; restored by the tests whatever happens).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from abtest.collectors.ftrace import TracefsLock
from abtest.collectors.host_state import lock_dir
from tests.test_collect_faults import wait_for

ROOT = Path(__file__).resolve().parent.parent
KNOB = Path("/proc/sys/kernel/printk_ratelimit_burst")
pytestmark = [pytest.mark.tracefs, pytest.mark.skipif(not KNOB.exists(), reason=f"{KNOB} missing")]


def tracefs_state(tracefs: Path = Path("/sys/kernel/tracing")) -> dict:
    clock = (tracefs / "trace_clock").read_text()
    return {
        "tracing_on": (tracefs / "tracing_on").read_text().strip(),
        "buffer_size_kb": (tracefs / "buffer_size_kb").read_text().split()[0],
        "trace_clock": clock[clock.index("[") + 1 : clock.index("]")],
        "set_event": sorted((tracefs / "set_event").read_text().split()),
    }


def locked_state() -> dict:
    with TracefsLock(True):
        return {**tracefs_state(), "knob": KNOB.read_text().strip()}


def put_back(orig: dict) -> None:
    """Last-resort cleanup when a test failed half-way (under the lock, as every tracefs writer)."""
    t = Path("/sys/kernel/tracing")
    with TracefsLock(True):
        (t / "tracing_on").write_text("0")
        (t / "set_event").write_text("")
        for ev in orig["set_event"]:
            with open(t / "set_event", "a") as f:
                f.write(ev)
        (t / "buffer_size_kb").write_text(orig["buffer_size_kb"])
        (t / "trace_clock").write_text(orig["trace_clock"])
        (t / "tracing_on").write_text(orig["tracing_on"])
        KNOB.write_text(orig["knob"])


@pytest.fixture
def env(tmp_path):
    e = {**os.environ, "PYTHONPATH": str(ROOT), "ABTEST_STATE_DIR": str(tmp_path / "state")}
    return e


def abtest(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def other_values(orig: dict) -> tuple[str, str, str]:
    """A buffer size, a clock and a knob value that differ from the originals (the kernel rounds the buffer up
    to whole pages: 1024 reads back as 1027 here)."""
    buf = "1024" if abs(int(orig["buffer_size_kb"]) - 1024) > 64 else "2048"
    clock = "mono" if orig["trace_clock"] != "mono" else "global"
    return buf, clock, str(int(orig["knob"]) + 7)


def start_and_kill(tmp_path: Path, env: dict, orig: dict) -> tuple[list[str], Path]:
    """Start a real collect, wait until its workload runs (tracing on, setting applied), SIGKILL it (and the
    workload it started) by PID. Returns the collect arguments and the journal directory."""
    buf, clock, knob = other_values(orig)
    pidfile = tmp_path / "workload.pid"
    args = [
        "collect",
        "--target",
        "localhost",
        "--label",
        f"k:sysfs:{KNOB}={knob}",
        "--workload",
        f"shell:name=hold,cmd=\"sh -c 'echo $$ > {pidfile}; exec sleep 60'\"",
        "-n",
        "1",
        "--buffer-size-kb",
        buf,
        "--trace-clock",
        clock,
        "--store",
        str(tmp_path / "store"),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "abtest.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 120, "the workload to start")
        during = {**tracefs_state(), "knob": KNOB.read_text().strip()}  # the collector holds the lock now
        assert during["tracing_on"] == "1" and during["knob"] == knob
        assert abs(int(during["buffer_size_kb"]) - int(buf)) <= 16 and during["trace_clock"] == clock
        assert during["set_event"] and during["buffer_size_kb"] != orig["buffer_size_kb"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pidfile.exists() and pidfile.read_text().strip():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the workload's sleep, started by us
            except ProcessLookupError:
                pass
    journals = list((tmp_path / "state" / "journal").glob("local.*.json"))
    assert len(journals) == 1, journals
    doc = json.loads(journals[0].read_text())
    assert doc["tracefs"]["tracing_on"] == orig["tracing_on"]
    assert doc["tracefs"]["buffer_size_kb"] == orig["buffer_size_kb"]
    assert doc["tracefs"]["trace_clock"] == orig["trace_clock"]
    assert sorted(doc["tracefs"]["set_event"]) == orig["set_event"]
    assert doc["settings"] == {str(KNOB): orig["knob"]}
    return args, tmp_path / "state" / "journal"


def test_sigkill_then_restore_puts_tracefs_and_settings_back(tmp_path, env):
    orig = locked_state()
    try:
        _, journal_dir = start_and_kill(tmp_path, env, orig)
        left = {**tracefs_state(), "knob": KNOB.read_text().strip()}
        assert left["tracing_on"] == "1" and left["knob"] != orig["knob"]  # what SIGKILL leaves behind
        res = abtest("collect", "--target", "localhost", "--restore", "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == {"restored": 1, "dropped": 0, "live": 0}
        assert locked_state() == orig
        assert not list(journal_dir.glob("*.json"))
        again = abtest("collect", "--target", "localhost", "--restore", "--json", env=env)
        assert json.loads(again.stdout)["restored"] == 0
    finally:
        if locked_state() != orig:
            put_back(orig)


def test_sigkill_then_resume_restores_first_and_records_the_originals(tmp_path, env):
    orig = locked_state()
    try:
        args, journal_dir = start_and_kill(tmp_path, env, orig)
        i = args.index("--workload")
        args[i + 1] = "shell:name=hold,cmd=true"
        res = abtest(*args, "--resume", "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert "restored the state a dead collection" in res.stderr
        meta = json.loads((tmp_path / "store/k/hold/1/meta.json").read_text())
        assert meta["settings"]["original"] == {str(KNOB): orig["knob"]}
        assert meta["settings"]["applied"] == {str(KNOB): other_values(orig)[2]}
        tracefs_orig = meta["trace"]["tracefs_original"]
        assert tracefs_orig["buffer_size_kb"] == orig["buffer_size_kb"]
        assert tracefs_orig["trace_clock"] == orig["trace_clock"]
        assert tracefs_orig["tracing_on"] == orig["tracing_on"]
        assert locked_state() == orig
        assert not list(journal_dir.glob("*.json"))
    finally:
        if locked_state() != orig:
            put_back(orig)


def test_two_collections_at_once_keep_their_own_settings(tmp_path, env):
    orig = locked_state()
    values = {"a": str(int(orig["knob"]) + 11), "b": str(int(orig["knob"]) + 22)}
    procs = {}
    try:
        for label, value in values.items():
            procs[label] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "abtest.cli",
                    "collect",
                    "--target",
                    "localhost",
                    "--label",
                    f"{label}:sysfs:{KNOB}={value}",
                    "--workload",
                    f"shell:name=read,cmd='cat {KNOB}; sleep 0.3; cat {KNOB}'",
                    "-n",
                    "4",
                    "--no-trace",
                    "--no-progress",
                    "--store",
                    str(tmp_path / f"store-{label}"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
            )
        for _label, p in procs.items():
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        if KNOB.read_text().strip() != orig["knob"]:
            put_back(orig)
    waits = []
    for label, value in values.items():
        for it in range(1, 5):
            d = tmp_path / f"store-{label}/{label}/read/{it}"
            log = (d / "workload.log").read_text()
            stdout = log.split("--- stdout ---\n", 1)[1].split("--- stderr ---", 1)[0].split()
            assert stdout == [value, value], (label, it, log)  # its own setting, start to end
            meta = json.loads((d / "meta.json").read_text())
            assert meta["settings"]["applied"] == {str(KNOB): value}
            assert meta["settings"]["original"] == {str(KNOB): orig["knob"]}
            waits.append(meta["timings"]["lock_wait_s"])
    assert KNOB.read_text().strip() == orig["knob"]
    assert max(waits) > 0.2, waits  # they did run at the same time, one waiting for the other


def test_scratch_files_are_private_and_not_at_fixed_names(tmp_path, env):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in ("abtest-extract.err", "abtest-trace.dat", "abtest-power.txt", "abtest-perfetto.pbtxt"):
        (tmpdir / name).symlink_to(victim)  # what an attacker could plant under a fixed name
    orig = locked_state()
    try:
        res = abtest(
            "collect",
            "--target",
            "localhost",
            "--label",
            "p",
            "--workload",
            "shell:name=where,cmd='pwd; stat -c \"%a %u\" .'",
            "-n",
            "1",
            "--buffer-size-kb",
            "1024",
            "--store",
            str(tmp_path / "store"),
            "--no-progress",
            env={**env, "TMPDIR": str(tmpdir)},
        )
        assert res.returncode == 0, res.stderr
    finally:
        if locked_state() != orig:
            put_back(orig)
    assert locked_state() == orig
    d = tmp_path / "store/p/where/1"
    out = (d / "workload.log").read_text().split("--- stdout ---\n", 1)[1].split("--- stderr ---", 1)[0].split()
    scratch, mode, uid = out[0], out[1], out[2]
    assert Path(scratch).parent == tmpdir and Path(scratch).name.startswith("abtest.")
    assert (mode, uid) == ("700", str(os.getuid()))
    assert not Path(scratch).exists()  # removed at the end
    assert victim.read_text() == "precious\n"
    assert (d / "trace.dat").stat().st_mode & 0o777 == 0o600  # kernel addresses: owner only
    lock = lock_dir() / "tracefs.lock"
    assert lock.stat().st_uid == os.geteuid() and lock.stat().st_mode & 0o077 == 0
    assert lock_dir().stat().st_mode & 0o777 == 0o700
    assert not list((tmp_path / "state" / "journal").glob("*.json"))  # a run that ended leaves no journal


JOURNAL_WRITER = """
import os, sys, time
from abtest.collectors.host_state import StateJournal
j = StateJournal.open("local", {"name": "localhost", "kind": "local"}, sys.argv[1])
j.record_setting(sys.argv[2], sys.argv[3])
print("ready", flush=True)
if sys.argv[4] == "die":
    os._exit(0)  # dies without closing: its journal stays, its lock is released
time.sleep(120)
"""


def test_journals_of_live_runs_and_earlier_boots_are_left_alone(tmp_path, env):
    """A journal whose process still runs is not restored (that run puts its state back itself); one written
    during an earlier boot of the target is dropped (the reboot reset that state). Journals written by real
    processes through StateJournal; the knob value in them must never reach the knob."""
    orig_knob = KNOB.read_text().strip()
    bogus = str(int(orig_knob) + 99)
    this_boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    dead = subprocess.run(
        [sys.executable, "-c", JOURNAL_WRITER, "0" * 8 + this_boot[8:], str(KNOB), bogus, "die"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert dead.returncode == 0 and "ready" in dead.stdout, dead.stderr
    live = subprocess.Popen(
        [sys.executable, "-c", JOURNAL_WRITER, this_boot, str(KNOB), bogus, "live"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert live.stdout.readline().strip() == "ready"
        res = abtest("collect", "--target", "localhost", "--restore", "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == {"restored": 0, "dropped": 1, "live": 1}
        assert KNOB.read_text().strip() == orig_knob
        assert len(list((tmp_path / "state" / "journal").glob("local.*.json"))) == 1  # the live one
    finally:
        live.kill()
        live.wait()
        if KNOB.read_text().strip() != orig_knob:
            KNOB.write_text(orig_knob)
