"""LocalTarget, target files (TOML), label settings and kernel-label activation on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abtest.collectors.orchestrate import CollectError, LabelSpec, TargetProvider, make_plan
from abtest.collectors.settings import SettingError, SettingsManager, parse_label
from abtest.targets.base import TargetTimeout
from abtest.targets.config import BootEntry, TargetConfigError, load_target_file, make_target, parse_target
from abtest.targets.local import LocalTarget

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "targets" / "examples"


def test_local_run_timeout_and_files(tmp_path):
    t = LocalTarget()
    res = t.run(["printf", "%s", "a b 'c'"])
    assert res.stdout == "a b 'c'" and res.exit_code == 0
    with pytest.raises(TargetTimeout):
        t.run("sleep 5", timeout=0.3)
    p = str(tmp_path / "x y.txt")
    t.write_file(p, "v=1\n")
    assert t.read_file(p) == "v=1\n" and t.exists(p)
    assert t.uname_r() == os.uname().release
    assert t.is_local_machine and t.tracefs_path().endswith("tracing")


def test_example_target_files_load():
    kinds = {}
    for f in sorted(EXAMPLES.glob("*.toml")):
        cfg = load_target_file(f)
        kinds[f.stem] = cfg.kind
        make_target(cfg)  # every example builds its Target
    assert kinds == {
        "lava-qemu": "qemu",
        "linux-board": "ssh",
        "localhost": "local",
        "pixel6": "adb",
        "qemu-debian": "qemu",
        "ssh-localhost": "ssh",
    }
    px = load_target_file(EXAMPLES / "pixel6.toml")
    assert px.boot["kernelB"].expect_release == "*kernelB*" and px.power["sampler"] == "odpm"
    assert len(px.platform["cpu_capacities"]) == px.platform["cpus"] == 8
    q = load_target_file(EXAMPLES / "qemu-debian.toml")
    assert q.boot["kernelA"].package.startswith("linux-image-6.1.0-")


def test_bad_target_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("kind = 'ssh'\n[connection]\nhots = 'x'\n")
    with pytest.raises(TargetConfigError, match="needs \\[connection\\] host"):
        load_target_file(bad)
    bad.write_text("kind = 'telnet'\n")
    with pytest.raises(TargetConfigError, match="kind must be one of"):
        load_target_file(bad)
    bad.write_text("kind = 'local'\n[boot.A]\ncomand = 'x'\n")
    with pytest.raises(TargetConfigError, match="unknown keys \\['comand'\\]"):
        load_target_file(bad)
    bad.write_text("kind = [\n")
    with pytest.raises(TargetConfigError, match="invalid TOML"):
        load_target_file(bad)
    with pytest.raises(TargetConfigError, match="unknown \\[connection\\] keys"):
        make_target(parse_target({"kind": "ssh", "connection": {"host": "h", "passwd": "x"}}))


def test_cli_bad_input_exits_2(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "abtest.cli", "collect", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
        )

    r = run("--target", "localhost", "--workload", "nope", "--store", str(tmp_path))
    assert r.returncode == 2 and "unknown workload 'nope'" in r.stderr
    r = run("--target", "no-such-target", "--workload", "hackbench", "--store", str(tmp_path))
    assert r.returncode == 2 and "no such target file" in r.stderr
    r = run("--target", "localhost", "--kernel", "kernelZ", "--workload", "hackbench", "--store", str(tmp_path))
    assert r.returncode == 2 and "[boot.kernelZ]" in r.stderr


def test_plan_orders():
    abab = [(p.label, p.iteration) for p in make_plan(["A", "B"], ["w"], 2)]
    assert abab == [("A", 1), ("B", 1), ("A", 2), ("B", 2)]
    blocked = [(p.label, p.iteration) for p in make_plan(["A", "B"], ["w"], 2, "blocked")]
    assert blocked == [("A", 1), ("A", 2), ("B", 1), ("B", 2)]


def test_kernel_label_activation_verifies_uname():
    cfg = parse_target({"kind": "local", "name": "here"})
    prov = TargetProvider(cfg, log=lambda m: None)
    rel = os.uname().release
    # already running the wanted kernel: no boot command needed
    assert prov.activate(LabelSpec("cur", boot=BootEntry("cur", expect_release=rel[:3] + "*"))) is prov.target
    # wrong kernel and nothing to boot it with: a clear error
    with pytest.raises(CollectError, match="does not match"):
        prov.activate(LabelSpec("other", boot=BootEntry("other", expect_release="0.0.*")))
    # a boot command that does not reboot: waiting for a new boot_id times out
    with pytest.raises(TargetTimeout, match="new boot"):
        prov.activate(
            LabelSpec("other", boot=BootEntry("other", host_command="true", expect_release="0.0.*", timeout_s=2))
        )


def test_settings_parse_apply_restore(tmp_path):
    assert parse_label("menu:cpuidle_governor=menu") == ("menu", {"cpuidle_governor": "menu"})
    with pytest.raises(SettingError, match="not key=value"):
        parse_label("x:cpuidle_governor")
    knob = tmp_path / "plain"
    knob.write_text("1\n")
    mgr = SettingsManager(LocalTarget())
    assert mgr.apply({f"sysfs:{knob}": "2"}) == {str(knob): "2"}
    assert knob.read_text() == "2\n"
    assert mgr.apply({f"sysfs:{knob}": "3"}) == {str(knob): "3"}
    mgr.restore()
    assert knob.read_text() == "1\n"  # the value found before the first change
    with pytest.raises(SettingError, match="cannot read"):
        mgr.apply({f"sysfs:{tmp_path}/missing/knob": "1"})
    with pytest.raises(SettingError, match="unknown setting"):
        mgr.apply({"cpu_governor": "x"})


def test_failing_workload_is_retried_then_reported_without_partial_iteration(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "collect",
            "--target",
            "localhost",
            "--label",
            "x",
            "--workload",
            "shell:cmd='echo boom >&2; exit 3'",
            "-n",
            "1",
            "--retries",
            "1",
            "--no-trace",
            "--store",
            str(tmp_path),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 1
    assert "retrying x/shell/1" in r.stderr and "failed after 2 attempts" in r.stderr and "boom" in r.stderr
    assert not list(tmp_path.glob("x/shell/*")) and not list(tmp_path.glob("x/shell/.tmp-*"))


def test_thermal_cooldown_waits_for_the_hottest_zone(tmp_path):
    """Thermal zone files (milli-degC, as sysfs reports them) cool down while the collector waits."""
    import threading

    from abtest.collectors.cooldown import wait_cooldown

    z0, z1 = tmp_path / "zone0_temp", tmp_path / "zone1_temp"
    z0.write_text("35000\n")
    z1.write_text("52000\n")
    stop = threading.Event()

    def cool():
        temp = 52000
        while not stop.is_set() and temp > 30000:
            temp -= 2000
            tmp = z1.with_suffix(".new")
            tmp.write_text(f"{temp}\n")
            tmp.replace(z1)
            time.sleep(0.1)

    th = threading.Thread(target=cool)
    th.start()
    try:
        out = wait_cooldown(
            LocalTarget(), thermal_max_c=45.0, timeout_s=20, temp_glob=f"{tmp_path}/zone*_temp", poll_s=0.05
        )
    finally:
        stop.set()
        th.join()
    assert out["reached"] is True and out["zones"] == 2 and out["max_temp_c"] <= 45.0
    assert out["waited_s"] >= 0.3  # 52 -> 44 C takes 4 steps of 0.1 s
    z1.write_text("90000\n")
    out = wait_cooldown(
        LocalTarget(), thermal_max_c=45.0, timeout_s=0.3, temp_glob=f"{tmp_path}/zone*_temp", poll_s=0.05
    )
    assert out["reached"] is False and out["max_temp_c"] == 90.0
    out = wait_cooldown(LocalTarget(), thermal_max_c=45.0, temp_glob=f"{tmp_path}/none*", poll_s=0.05)
    assert out["reached"] is None and out["zones"] == 0


def test_cpuidle_governor_on_a_machine_without_idle_states_is_reported():
    """This machine's own cpuidle driver decides: `none` (no idle state on any CPU: the firecracker guests
    CI runs on since 2026-11-25) must be reported when a label sets a cpuidle governor; a driver with idle
    states (haltpoll on the earlier machines) must not."""
    driver = Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
    has_states = bool(list(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpuidle/state[0-9]*")))

    class CountingLocal(LocalTarget):  # the real local target, counting the driver look-ups
        driver_reads = 0

        def run(self, cmd, *args, **kwargs):
            if "current_driver" in str(cmd):
                CountingLocal.driver_reads += 1
            return super().run(cmd, *args, **kwargs)

    mgr = SettingsManager(CountingLocal())
    governor = Path("/sys/devices/system/cpu/cpuidle/current_governor").read_text().strip()
    try:
        mgr.apply({"cpuidle_governor": "ladder"})
        mgr.apply({"cpuidle_governor": "menu"})
    finally:
        mgr.restore()
    assert Path("/sys/devices/system/cpu/cpuidle/current_governor").read_text().strip() == governor
    assert CountingLocal.driver_reads == 1  # once per target, not per iteration
    if driver == "none" or not has_states:
        assert len(mgr.warnings) == 1 and f"cpuidle driver is {driver!r}" in mgr.warnings[0]
    else:
        assert mgr.warnings == []
