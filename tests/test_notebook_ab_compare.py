"""notebooks/ab_compare.ipynb runs top to bottom (nbclient, this venv's python3 kernel) on a run store and
draws its figures. The store is the bundled examples/idle-governors (real recordings, see PROVENANCE.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "ab_compare.ipynb"
STORE = ROOT / "examples" / "idle-governors"


def _ensure_kernelspec() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True, capture_output=True)


def _caches_in_examples() -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (ROOT / "examples").rglob(".abtest-metrics.json")}


def test_ab_compare_notebook_executes(tmp_path, monkeypatch, traces):
    assert (STORE / "menu").is_dir() and (STORE / "ladder").is_dir(), "bundled store missing"
    _ensure_kernelspec()
    monkeypatch.setenv("ABTEST_NOTEBOOK_STORE", str(STORE))
    monkeypatch.setenv("ABTEST_SHARED_TRACES", str(traces))  # the Pixel trace of the power cell
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))  # the kernel inherits both
    monkeypatch.delenv("ABTEST_METRICS_CACHE", raising=False)
    before = _caches_in_examples()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # per-iteration dots, idle misses, idle residency, and power per channel (store's or the Pixel's)
    assert len(images) >= 3
    text = "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "iterations of menu" in text
    md = [o for o in outputs if "text/markdown" in o.get("data", {})]
    assert md and "ladder" in md[0]["data"]["text/markdown"]
    # the bundled store stays as committed: the metric caches went to the user cache directory
    assert "metric caches: user cache directory" in text
    assert _caches_in_examples() == before
    assert len(list((tmp_path / "cache" / "metrics").glob("*.json"))) == 16  # 8 iterations per label
