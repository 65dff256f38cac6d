"""notebooks/explore_trace.ipynb runs top to bottom on the shared traces (nbclient, python3 kernel of this
venv) without any error, and produces its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "explore_trace.ipynb"


def _ensure_kernelspec() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True, capture_output=True)


def test_explore_notebook_executes(traces, monkeypatch):
    _ensure_kernelspec()
    monkeypatch.setenv("ABTEST_SHARED_TRACES", str(traces))  # the kernel inherits it: same traces as the tests
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # util vs runnable, OPP residency, power per rail, idle residency, idle misses, latency CDF, placement
    assert len(images) >= 7
    text = "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert sys.prefix in text or Path(sys.executable).resolve().as_posix() in text or ".venv" in text
    assert "miss source: cpu_idle_miss" in text
