"""`abtest bisect` over adb: the stock adb client against the STAND-IN device (tests/standins/adb_device.py, a
protocol-level ADB device, not Android: it runs the shell commands on this machine). The target file's flash
hook ([bisect] install, run on the host with ABTEST_OUT) "flashes" the revision's build (its knob file); the
workload then runs on the device through adb. Same repository and culprit as tests/test_bisect_cli.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.standins.local_sshd import free_port
from tests.test_bisect_cli import CULPRIT, ROOT, bench  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(shutil.which("adb") is None, reason="needs the adb client (make setup)")


def _port() -> int:
    while True:  # outside 5555-5585: the adb server probes those as emulators
        p = free_port()
        if not 5555 <= p <= 5585:
            return p


def test_bisect_over_adb_with_a_flash_hook(bench, tmp_path):  # noqa: F811
    port, server_port = _port(), _port()
    standin = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/standins/adb_device.py"), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=bench["env"],
    )
    try:
        assert "listening" in standin.stdout.readline()
        flashed = tmp_path / "flashed.log"
        target = tmp_path / "adb.toml"
        target.write_text(
            f'name = "standin"\nkind = "adb"\n[connection]\nserial = "127.0.0.1:{port}"\n'
            f"server_port = {server_port}\n"
            f'[bisect]\ninstall = "cp \\"$ABTEST_OUT/knob\\" {bench["tmp"] / "knob"} && '
            f'echo $ABTEST_REV >> {flashed}"\n'
        )
        shas = bench["shas"]
        r = bench["run"](
            "bisect",
            "start",
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--repo",
            str(bench["repo"]),
            "--build",
            str(bench["tmp"] / "build.sh"),
            "--target",
            str(target),
            "--workload",
            "hackbench",
            "--metric",
            "hackbench_time_s",
        )
        assert r.returncode == 0, r.stderr
        r = bench["run"]("bisect", "run", "--format", "json")
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads(r.stdout)
        assert res["culprit"] == shas[CULPRIT] and res["confirmation"]["confirmed"]
        flashes = flashed.read_text().split()
        assert shas[CULPRIT] in flashes and shas[0] in flashes
        meta = json.loads(next((bench["store"] / res["labels"]["culprit"]).glob("hackbench/*/meta.json")).read_text())
        assert meta["target"]["kind"] == "adb"
    finally:
        subprocess.run(["adb", "-P", str(server_port), "kill-server"], capture_output=True, timeout=30)
        standin.terminate()
        standin.wait(10)
