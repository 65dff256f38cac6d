"""AdbTarget through the STOCK adb client against a STAND-IN device (tests/standins/adb_device.py: a
protocol-level ADB device, not Android; it runs the shell commands on this machine). A private adb
server port (-P) is used and that server is killed afterwards; no other adb server is touched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from abtest.collectors.ftrace import DEFAULT_EVENTS, FtraceCollector, TracefsLock
from abtest.targets.adb import AdbTarget
from abtest.targets.base import TargetCommandError
from tests.standins.local_sshd import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("adb") is None, reason="needs the adb client (make setup)")


def port_outside_emulator_range() -> int:
    while True:
        p = free_port()
        if not 5555 <= p <= 5585:
            return p


@pytest.fixture(scope="module")
def device():
    port = port_outside_emulator_range()
    server_port = port_outside_emulator_range()
    standin = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/standins/adb_device.py"), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert "listening" in standin.stdout.readline()
        t = AdbTarget(name="adb-standin", serial=f"127.0.0.1:{port}", server_port=server_port)
        t.connect()
        yield t
    finally:
        subprocess.run(["adb", "-P", str(server_port), "kill-server"], capture_output=True, timeout=30)
        standin.terminate()
        standin.wait(10)


def test_shell_exit_codes_and_streams(device):
    res = device.run("echo out; echo err >&2; exit 3")
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(TargetCommandError):
        device.run("false", check=True)
    assert device.is_up()


def test_argv_quoting_and_files_with_spaces(device, tmp_path):
    name = str(tmp_path / 'it\'s a "file" $(x).txt')
    res = device.run(["sh", "-c", 'printf %s "$1" > "$1"', "sh", name])
    assert res.ok, res.stderr
    assert Path(name).read_text() == name
    src = tmp_path / "local 'src' file.bin"
    payload = bytes(range(256)) * 4096  # 1 MiB: several sync DATA chunks
    src.write_bytes(payload)
    remote = str(tmp_path / "remote copy 'q'.bin")
    device.push(src, remote)
    back = tmp_path / "pulled back.bin"
    device.pull(remote, back)
    assert back.read_bytes() == payload
    with pytest.raises(FileNotFoundError):
        device.pull(str(tmp_path / "does-not-exist"), tmp_path / "x")


def test_root_and_tracefs_discovery(device):
    assert device.ensure_root() == ""  # `id -u` is 0 on the stand-in
    assert device.tracefs_path() in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
    assert device.adb_call("root").stdout.strip() == "adbd is already running as root"


def test_ftrace_collector_through_adb(device, tmp_path):
    collector = FtraceCollector(device, list(DEFAULT_EVENTS), buffer_size_kb=1024, remote_dir=str(tmp_path))
    assert device.is_local_machine  # the stand-in runs here: tracefs is this machine's, so take the lock
    with TracefsLock(device.is_local_machine):
        session, _ = collector.start()
        res = device.run(
            collector.marker_command("abtest adb marker") + "; hackbench -g 1 -l 20 >/dev/null", as_root=True
        )
        assert res.ok, res.stderr
        session = collector.stop(tmp_path / "trace.dat")
        collector.restore()
    assert "sched_switch" in session.enabled
    from abtest import Trace

    t = Trace(tmp_path / "trace.dat")
    assert t.events["sched_switch"] > 0
    assert "abtest adb marker" in t.df("marker")["text"].to_list()


def test_collect_over_adb(device, tmp_path):
    target = tmp_path / "adb.toml"
    target.write_text(
        f'name = "standin"\nkind = "adb"\n[connection]\nserial = "{device.serial}"\n'
        f"server_port = {device.server_port}\n[trace]\nbuffer_size_kb = 1024\n"
    )
    store = tmp_path / "store"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "collect",
            "--target",
            str(target),
            "--label",
            "x",
            "--workload",
            "hackbench:groups=1,loops=20",
            "-n",
            "1",
            "--store",
            str(store),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    d = store / "x/hackbench/1"
    meta = json.loads((d / "meta.json").read_text())
    assert meta["target"]["kind"] == "adb" and (d / ".complete").exists() and (d / "trace.dat").stat().st_size > 0
