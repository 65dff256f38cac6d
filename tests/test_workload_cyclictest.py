"""cyclictest workload plugin: a real short run on this machine, and the summary-line parser."""

from __future__ import annotations

import shutil

import pytest

from abtest.collectors.workloads import make_workload
from abtest.targets.base import RunResult
from abtest.targets.local import LocalTarget

# Two summary lines as cyclictest 2.x prints them with -q (taken from a run on this machine).
SAMPLE = """# /dev/cpu_dma_latency set to 100000us
T: 0 (32721) P:90 I:2000 C:    200 Min:     26 Act:   31 Avg:   43 Max:     157
T: 1 (32722) P:90 I:2500 C:    167 Min:     27 Act:   43 Avg:   44 Max:     107
"""


def test_parse_summary_lines():
    m = make_workload("cyclictest").parse(RunResult(0, SAMPLE, ""))
    assert m["latency_avg_us"] == {"value": 43.5, "unit": "us", "lower_is_better": True}
    assert m["latency_max_us"]["value"] == 157 and m["latency_min_us"]["value"] == 26


def test_command_sets_pm_qos_and_quotes_ints():
    cmd = make_workload("cyclictest:threads=1,loops=10,dma_latency_us=500").command("/tmp")
    assert cmd.split() == ["cyclictest", "-q", "-t", "1", "-i", "2000", "-l", "10", "-p", "90", "--latency=500"]


@pytest.mark.skipif(shutil.which("cyclictest") is None, reason="rt-tests not installed (make setup installs it)")
def test_real_run(tmp_path):
    local = LocalTarget()
    wl = make_workload("cyclictest:threads=2,interval_us=1000,loops=100")
    wl.prepare(local, str(tmp_path))
    res = local.run(wl.command(str(tmp_path)), wl.timeout_s)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.count("T:") == 2
    m = wl.parse(res)
    assert 0 < m["latency_min_us"]["value"] <= m["latency_avg_us"]["value"] <= m["latency_max_us"]["value"]
