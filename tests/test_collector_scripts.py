"""The shell the collectors send stays what it was (issue 39: one tracefs set-up generator for the ftrace collector
and the lab's iteration script, orchestrate.py split by responsibility).

tests/data/collector_scripts.json holds the scripts generated, for representative configurations, by the code
before the refactoring. The lab's iteration script is stored in the run store (lava-script.sh): it must stay
the same to the byte. The ftrace collector's start script (sent over ssh/adb, never stored) now comes from the
shared generator: it is run, old and new, in a stand-in tracefs directory, and must leave the same files and
report the same events, clock and warnings. Regenerate the data only from the code before a change:
`ABTEST_WRITE_SCRIPTS=1 pytest tests/test_collector_scripts.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from abtest.collectors.ftrace import FtraceCollector
from abtest.collectors.lab import guest_script as gs
from abtest.targets.base import RunResult, Target

DATA = Path(__file__).resolve().parent / "data" / "collector_scripts.json"
EVENTS = ["sched_switch", "sched_wakeup", "sched_pelt_cfs", "cpu_idle", "marker", "power_rail"]


class Recorder(Target):
    """Records every script; answers like a tracefs with nothing enabled."""

    def __init__(self):
        super().__init__(name="rec", root_wrap="")
        self.scripts: list[str] = []

    def _run(self, shell_cmd: str, timeout):
        self.scripts.append(shell_cmd)
        return RunResult(0, "ABTEST_ON sched_switch sched_switch\nABTEST_CLOCK boot\n", "")

    def tracefs_path(self) -> str:
        return "/sys/kernel/tracing"

    def pull(self, remote, local):
        Path(local).write_bytes(b"")


def guest_scripts() -> dict[str, str]:
    specs = {
        "guest_traced_upload": gs.GuestSpec(
            key="A-w-1-a1-0123abcd",
            tag="label=A workload=w iteration=1",
            command="hackbench -g 2",
            tools=("hackbench",),
            events=EVENTS,
        ),
        "guest_untraced_log": gs.GuestSpec(key="k", tag="t", command="true", transport="log", quiet_console=False),
        "guest_mono_small_buffer": gs.GuestSpec(
            key="k2",
            tag="t",
            command="sleep 1",
            events=["sched_switch"],
            buffer_size_kb=1024,
            clock="mono",
            timeout_s=30,
        ),
        "guest_local_clock": gs.GuestSpec(key="k3", tag="t", command="x", events=["cpu_frequency"], clock="local"),
    }
    for kind in ("hwmon", "rapl", "odpm"):
        specs[f"guest_power_{kind}"] = gs.GuestSpec(
            key="k4",
            tag="t",
            command="true",
            events=["sched_switch"],
            power={"sampler": kind, "period_s": 0.25, "sysfs": "/sys"},
            workdir="/data/local/tmp/w",
        )
    return {name: gs.build_script(spec) for name, spec in specs.items()}


def ftrace_scripts() -> dict[str, str]:
    """The scripts of start/stop/reset/restore. stop pulls into a file of a private temporary directory: the
    collector makes its local copy owner-only (chmod 600), which must never reach a shared path such as /dev/null."""
    import shutil
    import tempfile

    out = {}
    local = Path(tempfile.mkdtemp(prefix="abtest-scripts-")) / "trace.dat"
    try:
        out = _ftrace_scripts(local)
    finally:
        shutil.rmtree(local.parent)
    return out


def _ftrace_scripts(local: Path) -> dict[str, str]:
    out = {}
    for name, kw in {
        "ftrace_default": {},
        "ftrace_events": {"events": EVENTS, "buffer_size_kb": 4096, "clock": "mono", "owner_uid": 1000},
        "ftrace_local_clock": {"events": ["sched_switch"], "clock": "local", "remote_dir": "/tmp/abtest.x"},
    }.items():
        t = Recorder()
        c = FtraceCollector(t, **kw)
        c.start(preamble="echo PRE")
        c.stop(local)
        c.reset()
        c.restore()
        c.original = {
            "path": "/sys/kernel/tracing",
            "tracing_on": "1",
            "trace_clock": "local",
            "buffer_size_kb": "X",
            "buffer_size_kb_per_cpu": {"0": "7", "1": "1408"},
            "set_event": ["sched:sched_switch"],
        }
        c.reset()
        for i, script in enumerate(t.scripts):
            out[f"{name}_{i}"] = script
    return out


def orchestrate_scripts() -> dict[str, str]:
    from abtest.collectors.cooldown import wait_cooldown
    from abtest.collectors.iteration import workload_script
    from abtest.collectors.target_state import probe_target, restore_from_journal
    from abtest.collectors.workloads import make_workload

    t = Recorder()
    probe_target(t, make_dir=False)
    wait_cooldown(t, thermal_max_c=45.0, temp_glob="/sys/class/thermal/thermal_zone[0-9]/temp")
    restore_from_journal(
        t,
        {
            "tracefs": {
                "path": "/sys/kernel/tracing",
                "tracing_on": "0",
                "trace_clock": "boot",
                "buffer_size_kb": "1408",
                "set_event": ["sched:sched_switch", "power:cpu_idle"],
            },
            "settings": {"/sys/devices/system/cpu/cpuidle/current_governor": "menu"},
            "remote_dirs": ["/tmp/abtest.AbCdEf0123", "/etc/not-ours"],
        },
    )
    out = {f"orchestrate_{i}": s for i, s in enumerate(t.scripts)}
    wl = make_workload("hackbench:groups=2,loops=10")
    out["orchestrate_workload"] = workload_script(wl, "/sys/kernel/tracing/trace_marker", "label=A w=h it=1", "/tmp/d")
    out["orchestrate_workload_untraced"] = workload_script(wl, None, "t", "/tmp/d")
    return out


def generated() -> dict[str, str]:
    return {**guest_scripts(), **ftrace_scripts(), **orchestrate_scripts(), **power_scripts()}


@pytest.fixture(scope="module")
def before() -> dict[str, str]:
    if os.environ.get("ABTEST_WRITE_SCRIPTS"):
        DATA.write_text(json.dumps(generated(), indent=1, sort_keys=True) + "\n")
    return json.loads(DATA.read_text())


def test_the_lab_iteration_script_is_the_same_to_the_byte(before):
    now = guest_scripts()
    assert sorted(now) == sorted(k for k in before if k.startswith("guest_"))
    for name, text in now.items():
        assert text == before[name], name


def _run_in_fake_tracefs(script: str, tmp: Path) -> tuple[dict[str, str], list[str]]:
    tmp.mkdir()
    for f in ("tracing_on", "set_event", "buffer_size_kb", "trace_clock", "trace"):
        (tmp / f).write_text("")
    script = script.replace("/sys/kernel/tracing", str(tmp)).replace("echo PRE\n", "")
    r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, cwd=tmp, timeout=30, check=False)
    files = {p.name: p.read_text() for p in sorted(tmp.iterdir())}
    report = [ln for ln in r.stdout.splitlines() if ln.startswith(("ABTEST_ON", "ABTEST_MISSING", "ABTEST_CLOCK"))]
    return files, report


def test_the_ftrace_collector_scripts_do_what_they_did(before, tmp_path):
    now = ftrace_scripts()
    assert sorted(now) == sorted(k for k in before if k.startswith("ftrace_"))
    for name, text in now.items():
        if name.endswith("_0"):  # start: from the shared generator; the same effect on tracefs
            assert _run_in_fake_tracefs(text, tmp_path / f"{name}-new") == _run_in_fake_tracefs(
                before[name], tmp_path / f"{name}-old"
            ), name
        else:
            assert text == before[name], name


def test_the_collect_loop_scripts_are_the_same_to_the_byte(before):
    now = orchestrate_scripts()
    assert sorted(now) == sorted(k for k in before if k.startswith("orchestrate_"))
    for name, text in now.items():
        assert text == before[name], name


class Silent(Recorder):
    def _run(self, shell_cmd: str, timeout):
        self.scripts.append(shell_cmd)
        return RunResult(0, "", "")


def power_scripts() -> dict[str, str]:
    """The power sampler's discovery and loop scripts (ssh/adb/local), per kind."""
    from abtest.collectors.power import PowerSampler
    from abtest.targets.base import TargetError

    out = {}
    for kind in ("hwmon", "rapl", "odpm"):
        t = Silent()
        s = PowerSampler(t, kind, period_s=0.25, remote_dir="/tmp/d", sysfs="/sys/")
        with pytest.raises(TargetError):
            s.discover()
        s.names = {"/sys/class/hwmon/hwmon0/power1_input": "pm_power1", "/sys/x y/energy1_input": "e_energy1"}
        out[f"power_{kind}_discover"], out[f"power_{kind}_loop"] = t.scripts[0], s.loop_script()
    return out


def _fake_sysfs(root: Path) -> Path:
    files = {
        "class/hwmon/hwmon0/name": "pm\n",
        "class/hwmon/hwmon0/power1_input": "2500000\n",
        "class/hwmon/hwmon0/energy1_input": "123\n",
        "x y/energy1_input": "7\n",
        "class/powercap/intel-rapl:0/energy_uj": "1000\n",
        "class/powercap/intel-rapl:0/name": "package-0\n",
        "class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850\n",
        "bus/iio/devices/iio:device0/enabled_rails": "CH0[S4M_VDD_CPUCL0]:CPU(little)\n",
        "bus/iio/devices/iio:device0/energy_value": "t=10\nCH0(T=10)[S4M_VDD_CPUCL0], 42\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _run_power(script: str, sysfs: Path) -> list[str]:
    script = "sleep() { exit 0; }\n" + script.replace("/sys", str(sysfs))  # one loop round
    r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    return ["@" if ln.startswith("@ ") else ln for ln in r.stdout.splitlines()]


def test_the_power_sampler_scripts_read_what_they_read(before, tmp_path):
    """PowerSampler's discovery and loop now come from the generator the lab script uses (sysfs quoted)."""
    sysfs = _fake_sysfs(tmp_path / "sysfs")
    now = power_scripts()
    assert sorted(now) == sorted(k for k in before if k.startswith("power_"))
    for name, text in now.items():
        got = _run_power(text, sysfs)
        assert got and got == _run_power(before[name], sysfs), name
