"""notebooks/explain.ipynb runs top to bottom (nbclient, this venv's python3 kernel): it builds an A/B store from
LISA's real Juno trace with a known change (the big cluster one OPP up), explains it and draws the drill-down
figures; the terms it prints add up to the delta."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "explain.ipynb"


def test_explain_notebook_executes(tmp_path, monkeypatch, traces):
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True, capture_output=True)
    monkeypatch.setenv("ABTEST_SHARED_TRACES", str(traces))
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Active power on cpu1-2" in text and "active time moved from 800 MHz to 950 MHz" in text
    sums = [ln for ln in text.splitlines() if ln.startswith("sum of the terms:")]
    (line,) = sums
    a, b = (float(x.split(" mW")[0]) for x in line.replace("sum of the terms: ", "").split("mW; the channel's delta: "))
    assert a == pytest.approx(b, abs=1e-6)
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert pngs >= 2
