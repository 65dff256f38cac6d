"""`abtest compare DIR_A DIR_B` on plain folders of real traces (no store, no markers), and store errors that say
what layout is expected and how to fix it (issue 38 item 4). Traces: the shared x86 VM recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_data import TRACES

from abtest.cli import cli
from abtest.store.reader import load_label

ROOT = Path(__file__).resolve().parent.parent
X86 = TRACES / "x86-vm"


def _metrics_json(path: Path, fps: float) -> None:
    path.write_text(json.dumps({"metrics": {"fps": {"value": fps, "unit": "frames/s", "lower_is_better": False}}}))


@pytest.fixture()
def plain_dirs(tmp_path):
    """Two folders of trace files, each file one run; NAME.metrics.json beside two of them."""
    a, b = tmp_path / "runsA", tmp_path / "runsB"
    for d, names in ((a, ("menu", "haltpoll")), (b, ("ladder", "ladder"))):
        d.mkdir()
        for i, n in enumerate(names, 1):
            (d / f"run{i}.dat").symlink_to(X86 / f"x86-{n}-hackbench-cyclictest.dat")
            _metrics_json(d / f"run{i}.metrics.json", 60.0 - i - (d is b))
    return a, b


def _run(args, env=None):
    return CliRunner(env={"ABTEST_METRICS_CACHE": "", **(env or {})}).invoke(cli, args)


def test_a_folder_of_traces_is_a_label(plain_dirs):
    lab = load_label(plain_dirs[0])
    assert lab.plain and list(lab.workloads) == ["traces"]
    its = lab.complete("traces")
    assert [it.name for it in its] == ["run1.dat", "run2.dat"]
    assert [it.metrics["fps"].value for it in its] == [59.0, 58.0]
    assert all(it.trace_path == it.path for it in its)


def test_compare_two_folders_of_traces(plain_dirs, tmp_path):
    a, b = plain_dirs
    before = sorted(p.name for p in a.iterdir())
    r = _run(["compare", str(a), str(b), "--format", "json", "--jobs", "1"], {"ABTEST_CACHE_DIR": str(tmp_path / "c")})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    w = doc["workloads"][0]
    assert (w["workload"], w["n_a"], w["n_b"]) == ("traces", 2, 2)
    names = {m["name"] for m in w["metrics"]}
    assert "fps" in names and "idle.too_shallow_pct" in names  # the sidecar results and the trace analyses
    assert sorted(p.name for p in a.iterdir()) == before  # nothing written into the user's folder


def test_subfolders_each_holding_a_trace(tmp_path):
    d = tmp_path / "runs"
    for i, n in enumerate(("menu", "ladder")):
        (d / f"r{i}").mkdir(parents=True)
        (d / f"r{i}" / "trace.dat").symlink_to(X86 / f"x86-{n}-hackbench-cyclictest.dat")
    lab = load_label(d)
    assert lab.plain and len(lab.complete("traces")) == 2


def test_a_plain_folder_compares_with_a_store_label(plain_dirs, tmp_path):
    """The store label's one workload name is taken by the folder's runs."""
    store = tmp_path / "store"
    for i in (1, 2):
        it = store / "base" / "cyclictest" / str(i)
        it.mkdir(parents=True)
        (it / "trace.dat").symlink_to(X86 / "x86-menu-hackbench-cyclictest.dat")
        _metrics_json(it / "metrics.json", 61.0)
        (it / ".complete").touch()
    r = _run(["compare", "base", str(plain_dirs[1]), "--store", str(store), "--format", "json", "--no-trace"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["workloads"][0]["workload"] == "cyclictest"


def test_missing_markers_say_how_to_fix(tmp_path):
    store = tmp_path / "store"
    for label in ("a", "b"):
        it = store / label / "w" / "1"
        it.mkdir(parents=True)
        _metrics_json(it / "metrics.json", 60.0)  # no .complete: the collection did not say it finished
    r = _run(["compare", "a", "b", "--store", str(store), "--no-trace"])
    assert r.exit_code == 2
    msg = " ".join(r.output.split())
    assert "incomplete (no .complete marker)" in msg
    assert f"touch {store / 'a' / 'w'}/*/.complete" in msg


def test_an_empty_folder_states_the_layout(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = _run(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert r.exit_code == 2
    msg = " ".join(r.output.split())
    assert "no workload and no trace file found" in msg and "folder of trace files" in msg
    assert "STORE/<label>/<workload>/<iteration>/" in msg and "none; none" not in msg


def test_label_not_found_names_the_bundled_store(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    r = _run(["compare", "kernelA", "kernelB", "--store", str(tmp_path)])
    assert r.exit_code == 2
    msg = " ".join(r.output.split())
    assert "label 'kernelA' not found" in msg
    assert "examples/idle-governors (labels ladder, menu): `--store examples/idle-governors`" in msg
