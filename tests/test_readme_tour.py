"""The README's tour runs as written: every `abtest trace info`, `abtest analyze`, `abtest metrics` line of its
tour block is executed (paths under ../shared/ resolved to the shared data this suite uses), and the demo
excerpt it shows is what `abtest compare` prints on the bundled store today."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from shared_data import TRACES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TOUR = README[README.index("## A 5-minute tour"):]
TOUR = TOUR[:TOUR.index("```python")]
RUNNABLE = [ln.split("#")[0].strip() for ln in TOUR.splitlines()
            if re.match(r"abtest (trace info|analyze|metrics)\b", ln.strip())]


def test_the_tour_has_commands():
    assert len(RUNNABLE) >= 5, RUNNABLE


@pytest.mark.parametrize("line", RUNNABLE)
def test_tour_command_runs(line, tmp_path):
    args = [a.replace("../shared/traces", str(TRACES)) for a in shlex.split(line)]
    r = subprocess.run([sys.executable, "-m", "abtest.cli", *args[1:]], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin",
                                                   "ABTEST_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.strip()


def test_demo_excerpt_is_current(tmp_path):
    """Each table row of the README's demo excerpt appears in today's output of the same command."""
    excerpt = README[README.index("Its first screen"):]
    excerpt = excerpt[excerpt.index("```") + 3:]
    excerpt = excerpt[:excerpt.index("```")]
    rows = [ln for ln in excerpt.splitlines() if ln.startswith("│")]
    assert len(rows) >= 5
    import shutil
    store = tmp_path / "store"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    r = subprocess.run([sys.executable, "-m", "abtest.cli", "compare", "menu", "ladder", "--store", str(store),
                        "--workload", "cyclictest"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "ABTEST_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    for row in rows:
        assert row in r.stdout, row
