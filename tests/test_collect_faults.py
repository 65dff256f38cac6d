"""Fault injection against `abtest collect` over a real sshd on 127.0.0.1:
- the sshd processes serving the connection are killed (by PID) mid-iteration -> the iteration is retried,
  no completed iteration is lost or rewritten;
- SIGINT during collection -> exit 130, completed iterations intact, no partial iteration left;
  `--resume` then completes the store without redoing what was complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.standins.local_sshd import LocalSshd

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # ~50 s: two real collections with a fault each


@pytest.fixture
def sshd(tmp_path):
    server = LocalSshd(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_collect(target: Path, store: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "abtest.cli",
            "collect",
            "--target",
            str(target),
            "--store",
            str(store),
            "--no-progress",
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def wait_for(cond, timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def complete_markers(store: Path) -> list[Path]:
    """`.complete` of every iteration renamed into place. An iteration writes `.complete` into its
    `.tmp-*` directory before the rename (abtest/store/writer.py), and pathlib's `*` matches
    dot-directories, so those are left out: until renamed, an iteration is not complete (an interrupt
    then discards it)."""
    return [p for p in store.glob("*/*/*/.complete") if not p.parent.name.startswith(".")]


def snapshot(store: Path) -> dict[str, bytes]:
    """meta.json bytes of every complete iteration."""
    return {str(p.parent.relative_to(store)): (p.parent / "meta.json").read_bytes() for p in complete_markers(store)}


@pytest.mark.tracefs
def test_killed_connection_mid_iteration_is_retried(sshd, tmp_path):
    target = tmp_path / "t.toml"
    target.write_text(sshd.target_toml(extra="[trace]\nbuffer_size_kb = 1024\n"))
    store = tmp_path / "store"
    proc = start_collect(
        target, store, "--label", "a", "--workload", "shell:name=sleep,cmd='sleep 2'", "-n", "3", "--retries", "2"
    )
    try:
        wait_for(lambda: (store / "a/sleep/1/.complete").exists(), 120, "iteration 1")
        first = snapshot(store)
        # iteration 2 in flight: its temp dir exists and the workload (sleep 2) is running
        wait_for(
            lambda: (
                list((store / "a/sleep").glob(".tmp-2-*"))
                and subprocess.run(["pgrep", "-f", "^sleep 2$"], capture_output=True).returncode == 0
            ),
            60,
            "iteration 2 to start its workload",
        )
        killed = sshd.serving_children()
        assert killed, "no sshd process serves the collector's connection"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)
    assert summary["retries"] >= 1 and summary["done"] == 3, summary
    assert "retrying a/sleep/2" in err
    for it in (1, 2, 3):
        assert (store / f"a/sleep/{it}/.complete").is_file()
    assert snapshot(store)["a/sleep/1"] == first["a/sleep/1"]  # completed iteration untouched
    assert not list(store.glob("*/*/.tmp-*"))
    meta2 = json.loads((store / "a/sleep/2/meta.json").read_text())
    assert meta2["attempt"] >= 2


def test_sigint_then_resume(sshd, tmp_path):
    target = tmp_path / "t.toml"
    target.write_text(sshd.target_toml())
    store = tmp_path / "store"
    args = ("--label", "a", "--label", "b", "--workload", "shell:name=sleep,cmd='sleep 1'", "-n", "3", "--no-trace")
    proc = start_collect(target, store, *args)
    try:
        wait_for(lambda: len(complete_markers(store)) >= 2, 120, "two complete iterations")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "--resume" in err
    done_before = snapshot(store)
    assert 2 <= len(done_before) < 6
    assert not list(store.glob("*/*/.tmp-*")), "the interrupted iteration left a temp dir"
    # without --resume the store is protected
    again = start_collect(target, store, *args)
    _, err2 = again.communicate(timeout=120)
    assert again.returncode == 1 and "--resume" in err2
    resumed = start_collect(target, store, *args, "--resume")
    out3, err3 = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err3[-2000:]
    summary = json.loads(out3)
    assert summary["skipped"] == len(done_before) and summary["done"] == 6 - len(done_before)
    after = snapshot(store)
    assert len(after) == 6
    for key, meta in done_before.items():
        assert after[key] == meta  # nothing complete was redone
