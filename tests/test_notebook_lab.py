"""`make notebook`: the venv's JupyterLab (pyproject dev extras, installed by `make setup`) starts with the
Makefile's command (`make -n notebook`) and serves notebooks/ (the real server process on a free localhost port; its
REST API
lists the notebooks and /lab answers). Stopped by its PID."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("jupyterlab", reason="make setup installs JupyterLab (pyproject dev extras)")

ROOT = Path(__file__).resolve().parent.parent
JUPYTER = Path(sys.executable).parent / "jupyter"


def _make_notebook_command() -> list[str]:
    """The command `make notebook` runs with this venv (`make -n`: printed, not run)."""
    venv = Path(sys.executable).parent.parent
    out = subprocess.run(
        ["make", "-s", "-n", "notebook", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return next(ln for ln in out.splitlines() if "jupyter lab" in ln).split()


def test_make_notebook_serves_the_notebooks(tmp_path):
    cmd = _make_notebook_command()
    assert cmd[:2] == [str(JUPYTER), "lab"] and "--notebook-dir=notebooks" in cmd
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "abtest-test"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    proc = subprocess.Popen(
        [*cmd, "--no-browser", f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        contents = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=5) as r:
                    contents = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        assert contents is not None, f"jupyter lab did not answer (exit {proc.poll()})"
        names = {c["name"] for c in contents["content"]}
        assert {p.name for p in (ROOT / "notebooks").glob("*.ipynb")} <= names
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=30) as r:
            assert r.status == 200 and re.search(r"JupyterLab", r.read().decode(), re.I)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # our own server (its own session), by PID
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
