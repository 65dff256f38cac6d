"""End to end: `abtest collect` over ssh (real sshd on 127.0.0.1) to this machine, cpuidle governors
menu vs haltpoll as two labels, 3 iterations each, hackbench + a 2 ms cyclictest; every trace read back
with abtest.Trace. The collector takes /tmp/abtest-tracefs.lock itself (same boot_id as this host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abtest import Trace
from tests.standins.local_sshd import LocalSshd

GOV = Path("/sys/devices/system/cpu/cpuidle/current_governor")
ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.tracefs, pytest.mark.slow]


def governors() -> set[str]:
    p = GOV.parent / "available_governors"
    return set(p.read_text().split()) if p.exists() else set()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = LocalSshd(tmp_path_factory.mktemp("sshd-collect"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def abtest(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "abtest.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw
    )


@pytest.mark.skipif(not {"menu", "haltpoll"} <= governors(), reason="needs cpuidle governors menu and haltpoll")
def test_collect_menu_vs_haltpoll_over_ssh(sshd, tmp_path):
    before = GOV.read_text().strip()
    target = tmp_path / "ssh-here.toml"
    target.write_text(sshd.target_toml(extra="[trace]\nbuffer_size_kb = 4096\n"))
    store = tmp_path / "store"
    try:
        res = abtest(
            "collect",
            "--target",
            str(target),
            "--label",
            "menu:cpuidle_governor=menu",
            "--label",
            "haltpoll:cpuidle_governor=haltpoll",
            "--workload",
            "hackbench:groups=2,loops=100",
            "--workload",
            "shell:name=cyclictest-2ms,cmd='cyclictest -i 2000 -l 250 -q'",
            "--iterations",
            "3",
            "--store",
            str(store),
            "--no-progress",
            "--json",
        )
        assert res.returncode == 0, res.stderr
        summary = json.loads(res.stdout)
        assert summary["done"] == 12 and summary["skipped"] == 0
    finally:
        after = GOV.read_text().strip()
        if after != before:
            GOV.write_text(before)
    assert after == before, "the collector did not restore the original cpuidle governor"

    idle_total = miss_total = 0
    overheads = []
    for label in ("menu", "haltpoll"):
        for wl in ("hackbench", "cyclictest-2ms"):
            for it in (1, 2, 3):
                d = store / label / wl / str(it)
                assert (d / ".complete").is_file(), d
                meta = json.loads((d / "meta.json").read_text())
                metrics = json.loads((d / "metrics.json").read_text())["metrics"]
                assert meta["governors"]["cpuidle"] == label  # set through the target, read back per iteration
                assert meta["settings"]["applied"] == {str(GOV): label}
                assert meta["kernel"]["release"] == os.uname().release
                assert {"cpu_idle", "cpu_idle_miss", "sched_switch", "sched_wakeup"} <= set(
                    meta["trace"]["events_enabled"]
                )
                assert meta["tools"]["trace-cmd"] and meta["tools"]["abtest"]
                assert metrics["duration_s"]["unit"] == "s" and metrics["duration_s"]["value"] > 0
                if wl == "hackbench":
                    assert metrics["hackbench_time_s"]["value"] > 0
                    overheads.append(meta["timings"]["overhead_s"])
                t = Trace(d / "trace.dat")
                ev = t.events
                assert ev["sched_switch"] > 0 and ev["sched_wakeup"] > 0
                idle_total += ev.get("cpu_idle", 0)
                miss_total += ev.get("cpu_idle_miss", 0)
                if meta["trace"]["lost_events"] == 0:  # kernel ring-buffer counters agree with the trace file
                    assert not t.meta.get("lost_events")
                markers = t.df("marker")["text"].to_list()
                assert any(
                    m.startswith(f"abtest_workload_begin label={label} workload={wl} iteration={it}") for m in markers
                )
                assert any(m.startswith("abtest_workload_end") for m in markers)
    assert idle_total > 0, "no cpu_idle event in any trace"
    # cpu_idle_miss is enabled above; how many fire depends on how idle the machine is (none under load)
    print(
        f"cpu_idle events {idle_total}, cpu_idle_miss events {miss_total}; "
        f"ssh per-iteration overhead (hackbench): {sorted(overheads)} s"
    )
    # a second run without --resume refuses to overwrite the complete store
    res = abtest(
        "collect",
        "--target",
        str(target),
        "--label",
        "menu:cpuidle_governor=menu",
        "--workload",
        "hackbench:groups=2,loops=100",
        "-n",
        "1",
        "--store",
        str(store),
        "--no-progress",
    )
    assert res.returncode == 1 and "--resume" in res.stderr
