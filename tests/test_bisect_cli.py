"""`abtest bisect` end to end on this machine (kind = "local"): a throwaway git repository whose `knob` file
sets what a workload measures, a build command that extracts it per revision, an install hook of the target
file that puts it in place; the workload is a stand-in `hackbench` on PATH (written by the test) that prints
"Time:" = knob x (1 + 1 % noise), so its declared metric hackbench_time_s (lower is better) moves at the
culprit. Real collector, real run store, real decision rule.

Covers: the oracle's exit codes for `git bisect run` (0 good, 1 bad, 125 skip, 128 abort), a build that fails
on some revisions (skipped; the culprit block reports them), resume after SIGKILL of `abtest bisect run` without
losing or repeating a measurement, and the store labels `compare` reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
N_COMMITS = 16
CULPRIT = 11  # commit number (position in the range) that raises the knob

FAKE_HACKBENCH = """#!/bin/sh
k=$(cat "$BISECT_KNOB_FILE")
exec {python} -c "import random, sys; print('Time: %.6f' % (float(sys.argv[1]) * (1 + 0.01 * random.gauss(0, 1))))" "$k"
"""
BUILD = """#!/bin/sh
# fails on commits whose subject says "broken"
git -C "$ABTEST_REPO" log -1 --format=%s "$1" | grep -q broken && {{ echo "cc: internal error" >&2; exit 1; }}
git -C "$ABTEST_REPO" show "$1:knob" > "$2/knob"
"""


@pytest.fixture
def bench(tmp_path):
    """(run, env, repo, shas): `run(*args)` runs abtest in the fixture's environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hb = bin_dir / "hackbench"
    hb.write_text(FAKE_HACKBENCH.format(python=sys.executable))
    hb.chmod(0o755)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    (repo / "knob").write_text("1.0\n")
    subprocess.run(git + ["add", "knob"], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    for i in range(1, N_COMMITS + 1):
        if i == CULPRIT:
            (repo / "knob").write_text("1.10\n")
        else:
            (repo / f"f{i}").write_text(str(i))
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(
            git + ["commit", "-qm", f"commit {i}" + (" broken" if i in (4, CULPRIT - 1) else "")], check=True
        )
    shas = subprocess.run(
        ["git", "-C", str(repo), "log", "--reverse", "--format=%H"], capture_output=True, text=True, check=True
    ).stdout.split()
    build = tmp_path / "build.sh"
    build.write_text(BUILD.format())
    build.chmod(0o755)
    knob = tmp_path / "knob"
    target = tmp_path / "target.toml"
    target.write_text(
        f'name = "bisect-local"\nkind = "local"\n[bisect]\ninstall = "cp \\"$ABTEST_OUT/knob\\" {knob}"\n'
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BISECT_KNOB_FILE": str(knob),
        "ABTEST_STORE": str(tmp_path / "store"),
    }

    def run(*args, timeout=600):
        return subprocess.run(
            [sys.executable, "-m", "abtest.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=timeout,
        )

    def start(*extra):
        r = run(
            "bisect",
            "start",
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--repo",
            str(repo),
            "--build",
            str(build),
            "--target",
            str(target),
            "--workload",
            "hackbench",
            "--metric",
            "hackbench_time_s",
            "--min-effect",
            "2%",
            *extra,
        )
        assert r.returncode == 0, r.stderr
        return r

    return {
        "run": run,
        "start": start,
        "env": env,
        "repo": repo,
        "shas": shas,
        "store": tmp_path / "store",
        "tmp": tmp_path,
    }


def _complete_iterations(store: Path) -> dict[str, list[str]]:
    return {
        d.name: sorted(p.parent.name for p in d.glob("hackbench/*/.complete")) for d in sorted(store.glob("bisect-*"))
    }


def test_run_finds_the_culprit_skipping_broken_builds_and_resumes_after_sigkill(bench):
    bench["start"]()
    shas, store = bench["shas"], bench["store"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "abtest.cli", "bisect", "run"],
        env=bench["env"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300 and proc.poll() is None:
            done = _complete_iterations(store)
            if len([k for k, v in done.items() if v]) >= 3:  # endpoints and one revision of the search
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        os.killpg(proc.pid, signal.SIGKILL)  # the bisect run and the workload it started (its own session)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    before = _complete_iterations(store)
    stamps = {p: p.stat().st_mtime_ns for p in store.glob("bisect-*/hackbench/*/metrics.json")}
    st = bench["run"]("bisect", "status", "--format", "json")
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["done"] is False

    r = bench["run"]("bisect", "run", "--format", "json")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["culprit"] == shas[CULPRIT]
    # the parent does not build: the culprit block says "one of these", the parent is the last testable one
    assert res["candidates"] == [shas[CULPRIT - 1], shas[CULPRIT]]
    assert res["parent"] == shas[CULPRIT - 2]
    assert res["probability"] >= 0.95
    assert res["confirmation"]["confirmed"] and res["confirmation"]["verdict"] == "regression"
    assert shas[CULPRIT - 1][:12] in res["untestable"] and "build failed" in res["untestable"][shas[CULPRIT - 1][:12]]
    # nothing measured before the kill was lost or measured again; iterations are numbered without gaps
    after = _complete_iterations(store)
    for label, its in before.items():
        assert set(its) <= set(after[label])
    for its in after.values():
        assert sorted(map(int, its)) == list(range(1, len(its) + 1))
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert res["runs_total"] == sum(len(v) for v in after.values())
    again = bench["run"]("bisect", "run", "--format", "json")  # finished: the result again, nothing measured
    assert again.returncode == 0 and json.loads(again.stdout) == res
    assert _complete_iterations(store) == after
    # every tested revision is a store label: compare works on culprit vs parent
    c = bench["run"]("compare", res["labels"]["parent"], res["labels"]["culprit"], "--format", "json")
    assert c.returncode == 0, c.stderr[-2000:]
    assert "hackbench_time_s" in c.stdout
    log = bench["run"]("bisect", "log", "--format", "json")
    events = [e["event"] for e in json.loads(log.stdout)]
    assert events[0] == "start" and events[-1] == "done" and events.count("endpoints") == 1
    assert "skip" in events


def test_oracle_exit_codes_for_git_bisect_run(bench):
    bench["start"]()
    shas, run = bench["shas"], bench["run"]
    assert run("bisect", "oracle", shas[3]).returncode == 0  # before the culprit: good
    assert run("bisect", "oracle", shas[CULPRIT + 2]).returncode == 1  # after it: bad
    r = run("bisect", "oracle", shas[4])  # does not build
    assert r.returncode == 125, r.stderr[-2000:]
    # HEAD of the repository, as `git bisect run` leaves it checked out
    assert run("bisect", "oracle").returncode == 1


def test_oracle_aborts_on_a_dead_target(bench, tmp_path):
    """An ssh target nobody listens on: the endpoints cannot be measured; exit 128 (git bisect run aborts),
    and the state is kept."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = tmp_path / "dead.toml"
    dead.write_text(
        f'name = "dead"\nkind = "ssh"\n[connection]\nhost = "127.0.0.1"\nport = {port}\nuser = "root"\n'
        f"connect_timeout_s = 2\n[bisect]\nrecover_timeout_s = 1\n"
    )
    shas, run = bench["shas"], bench["run"]
    r = run(
        "bisect",
        "start",
        "--good",
        shas[0],
        "--bad",
        shas[-1],
        "--repo",
        str(bench["repo"]),
        "--build",
        str(tmp_path / "build.sh"),
        "--target",
        str(dead),
        "--workload",
        "hackbench",
        "--metric",
        "hackbench_time_s",
        "--store",
        str(tmp_path / "dead-store"),
    )
    assert r.returncode == 0, r.stderr
    r = run("bisect", "oracle", shas[5], "--store", str(tmp_path / "dead-store"), timeout=300)
    assert r.returncode == 128, r.stderr[-2000:]
    assert (tmp_path / "dead-store" / ".bisect" / "state.json").is_file()
    # `bisect run` on the dead target: stops with exit 2, says how to resume, logs the abort, keeps the state
    r = run("bisect", "run", "--store", str(tmp_path / "dead-store"), timeout=300)
    assert r.returncode == 2 and "target dead" in r.stderr and "resumes" in r.stderr, r.stderr[-2000:]
    log = run("bisect", "log", "--format", "json", "--store", str(tmp_path / "dead-store"))
    assert [e["event"] for e in json.loads(log.stdout)] == ["start", "abort"]


def test_oracle_exit_code_table():
    from abtest.bisect.search import ORACLE_EXIT

    assert ORACLE_EXIT == {"good": 0, "bad": 1, "skip": 125, "abort": 128}


def test_classic_mode_finds_the_same_culprit(bench):
    """`--mode classic`: git bisect's halving with the oracle at each step; the broken parent is skipped."""
    bench["start"]("--mode", "classic")
    r = bench["run"]("bisect", "run", "--format", "json")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["mode"] == "classic"
    assert res["culprit"] == bench["shas"][CULPRIT]
    assert res["confirmation"]["confirmed"]
    text = bench["run"]("bisect", "status")
    assert f"done: culprit {bench['shas'][CULPRIT][:12]}" in text.stdout


def test_git_bisect_run_drives_the_oracle(bench):
    """`git bisect run abtest bisect oracle`: git checks revisions out, the oracle judges HEAD; the broken builds
    are skipped (125), so git names the culprit together with its unbuildable parent."""
    bench["start"]()
    repo, shas = bench["repo"], bench["shas"]
    g = ["git", "-C", str(repo)]
    subprocess.run(g + ["bisect", "start", shas[-1], shas[0]], check=True, capture_output=True)
    try:
        r = subprocess.run(
            g + ["bisect", "run", sys.executable, "-m", "abtest.cli", "bisect", "oracle"],
            capture_output=True,
            text=True,
            env=bench["env"],
            cwd=ROOT,
            timeout=600,
        )
    finally:
        subprocess.run(g + ["bisect", "reset"], capture_output=True)
    out = r.stdout + r.stderr
    assert "first bad commit" in out, out[-3000:]
    verdict = out[out.index("first bad commit") :]
    if "could be any of" in verdict:  # git's wording when skipped commits are left: the parent and the culprit
        assert shas[CULPRIT] in verdict and shas[CULPRIT - 1] in verdict, verdict
    else:  # git tested around the unbuildable parent without needing it
        assert out[: out.index("first bad commit")].rstrip().endswith(shas[CULPRIT] + " is the"), out[-3000:]
