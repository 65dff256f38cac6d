"""Workload plugins: spec parsing, and each Linux workload run for real on this machine (short runs) with
its output parsed into metrics with units; Android workloads' result files (real formats) converted to
metrics through abtest.results.benchmarks parsers."""

from __future__ import annotations

import json
import shutil
import sqlite3
import zipfile

import pytest

from abtest.collectors.workloads import REGISTRY, WorkloadError, make_workload, parse_spec
from abtest.collectors.workloads.android import metrics_from_result, pcmark_scores
from abtest.targets.local import LocalTarget


@pytest.fixture(scope="module")
def local():
    return LocalTarget()


def run(local, wl, tmp_path):
    wl.prepare(local, str(tmp_path))
    res = local.run(wl.command(str(tmp_path)), wl.timeout_s)
    assert res.exit_code == 0, res.stderr
    return wl.parse(res)


def test_spec_parsing_and_errors():
    assert parse_spec("hackbench:groups=4,loops=200") == ("hackbench", {"groups": "4", "loops": "200"})
    assert parse_spec("shell:cmd='a, b',name=x") == ("shell", {"cmd": "a, b", "name": "x"})
    with pytest.raises(WorkloadError, match="unknown workload"):
        make_workload("nope")
    with pytest.raises(WorkloadError, match="unknown parameters"):
        make_workload("hackbench:grups=2")
    with pytest.raises(WorkloadError, match="not a int"):
        make_workload("hackbench:groups=many")
    w = make_workload("hackbench:groups=3,threads=true,name=hb3")
    assert w.name == "hb3" and w.params["groups"] == 3 and w.params["threads"] is True
    assert set(REGISTRY) >= {
        "shell",
        "hackbench",
        "stress-ng",
        "sysbench",
        "rt-app",
        "kbuild",
        "youtube",
        "game",
        "jankbench",
        "geekbench",
        "pcmark",
    }


def test_missing_tool_is_reported(local, tmp_path):
    w = make_workload("geekbench:binary=geekbench-not-installed")
    with pytest.raises(WorkloadError, match="not found"):
        w.prepare(local, str(tmp_path))


@pytest.mark.skipif(shutil.which("hackbench") is None, reason="rt-tests not installed")
def test_hackbench(local, tmp_path):
    m = run(local, make_workload("hackbench:groups=1,loops=20"), tmp_path)
    assert m["hackbench_time_s"]["unit"] == "s" and m["hackbench_time_s"]["value"] > 0
    assert m["hackbench_time_s"]["lower_is_better"] is True


@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng not installed")
def test_stress_ng(local, tmp_path):
    m = run(local, make_workload("stress-ng:stressor=cpu,workers=1,duration_s=1"), tmp_path)
    assert m["bogo_ops_per_s"]["value"] > 0 and m["bogo_ops_per_s"]["unit"] == "ops/s"
    assert m["bogo_ops_per_s"]["lower_is_better"] is False


@pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench not installed")
def test_sysbench(local, tmp_path):
    m = run(local, make_workload("sysbench:test=cpu,threads=1,duration_s=1"), tmp_path)
    assert m["events_per_s"]["value"] > 0 and m["latency_avg_ms"]["unit"] == "ms"


@pytest.mark.skipif(shutil.which("rt-app") is None, reason="rt-app not installed")
def test_rt_app_profile(local, tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(
        json.dumps(
            {
                "global": {"duration": 1, "calibration": 100, "default_policy": "SCHED_OTHER", "logdir": str(tmp_path)},
                "tasks": {"periodic": {"loop": -1, "run": 2000, "timer": {"ref": "tick", "period": 10000}}},
            }
        )
    )
    wl = make_workload(f"rt-app:profile={profile}")
    remote = tmp_path / "remote"
    remote.mkdir()
    wl.prepare(local, str(remote))
    assert (remote / "abtest-rtapp.json").read_text() == profile.read_text()  # pushed
    res = local.run(wl.command(str(remote)), 60)
    assert res.exit_code == 0, res.stderr
    with pytest.raises(WorkloadError, match="profile"):
        make_workload("rt-app:profile=/nonexistent.json")


def test_kernel_build_make_jobs(local, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "Makefile").write_text(
        ".PHONY: all clean\nOBJS := a.o b.o c.o d.o\nall: $(OBJS)\n%.o:\n\tsleep 0.2; touch $@\nclean:\n\trm -f *.o\n"
    )
    wl = make_workload(f"kbuild:src={src},jobs=4")
    m = run(local, wl, tmp_path)
    assert m == {}  # its metric is the measured duration_s the orchestrator adds
    assert sorted(p.name for p in src.glob("*.o")) == ["a.o", "b.o", "c.o", "d.o"]
    wl.prepare(local, str(tmp_path))  # clean=true: make clean before the timed build
    assert not list(src.glob("*.o"))


def test_jankbench_db_to_metrics(tmp_path):
    db = tmp_path / "BenchmarkResults"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE ui_results (_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, run_id INTEGER, "
        "iteration INTEGER, timestamp TEXT, unknown_delay REAL, input REAL, animation REAL, layout REAL, "
        "draw REAL, sync REAL, command_issue REAL, swap_buffers REAL, total_duration REAL, "
        "jank_frame BOOLEAN, device_charging INTEGER)"
    )
    rows = [
        ("list_view", 1, 0, "0", 0.1, 0.1, 0.5, 1.0, 2.0, 0.5, 1.0, 1.0, d, j, 1)
        for d, j in [(8.0, 0), (9.0, 0), (30.0, 1), (10.0, 0)]
    ]
    con.executemany(
        "INSERT INTO ui_results (name, run_id, iteration, timestamp, unknown_delay, input, animation,"
        " layout, draw, sync, command_issue, swap_buffers, total_duration, jank_frame, device_charging)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    con.commit()
    con.close()
    from abtest.results.benchmarks import read_workload_metrics

    m = metrics_from_result(read_workload_metrics(db))
    assert m["jank_pct"] == {"value": 25.0, "unit": "%", "lower_is_better": True}
    assert m["mean_frame_ms"]["value"] == pytest.approx(14.25)


def test_geekbench_and_surfaceflinger_to_metrics(tmp_path):
    from abtest.results.benchmarks import read_workload_metrics

    gb = tmp_path / "gb.json"
    gb.write_text(
        json.dumps(
            {
                "score": 1200,
                "multicore_score": 3400,
                "sections": [{"name": "Single-Core", "score": 1200, "workloads": []}],
            }
        )
    )
    m = metrics_from_result(read_workload_metrics(gb))
    assert m["geekbench_single_core_score"]["value"] == 1200 and m["geekbench_multi_core_score"]["value"] == 3400
    assert m["geekbench_multi_core_score"]["lower_is_better"] is False
    sf = tmp_path / "sf-latency.dump"
    period = 16_666_667
    lines = [str(period)] + [f"{i * period}\t{1_000_000_000 + i * period}\t{i * period}" for i in range(60)]
    sf.write_text("\n".join(lines) + "\n")
    m = metrics_from_result(read_workload_metrics(sf))
    assert m["fps"]["value"] == pytest.approx(60.0, rel=1e-3) and m["fps"]["unit"] == "frames/s"
    assert m["jank_pct"]["value"] == 0.0


def test_pcmark_archive_scores(tmp_path):
    z = tmp_path / "pcmark.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(
            "Result.xml",
            "<result><WorkPerformanceScore>9876</WorkPerformanceScore>"
            "<WebBrowsingScore>7000.5</WebBrowsingScore><name>Work</name></result>",
        )
    assert pcmark_scores(z) == {"WorkPerformanceScore": 9876.0, "WebBrowsingScore": 7000.5}
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(WorkloadError, match="not a PCMark result archive"):
        pcmark_scores(tmp_path / "bad.zip")


def test_android_commands_quote_parameters():
    yt = make_workload("youtube:url='https://www.youtube.com/watch?v=x&t=1',duration_s=5")
    cmd = yt.command("/data/local/tmp")
    assert "'https://www.youtube.com/watch?v=x&t=1'" in cmd and "sleep 5" in cmd
    with pytest.raises(WorkloadError, match="package"):
        make_workload("game")
