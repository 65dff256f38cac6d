"""The notebooks are committed with their outputs (`make notebooks` = notebooks/render.py refreshes them) so that
GitHub shows their figures: every code cell has run and left output, none failed, the figures are there, no
execution timestamps (they would change at every render), and each file stays small (repository size)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
MIN_FIGURES = {"ab_compare.ipynb": 3, "explain.ipynb": 2, "explore_trace.ipynb": 7}
MAX_BYTES = 512 * 1024


@pytest.mark.parametrize("name", sorted(MIN_FIGURES))
def test_committed_notebook_has_outputs(name):
    path = NOTEBOOKS / name
    assert path.stat().st_size <= MAX_BYTES
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("outputs") for c in code), "a code cell without output: run `make notebooks`"
    assert all(c.get("execution_count") for c in code)
    outputs = [o for c in code for o in c["outputs"]]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= MIN_FIGURES[name]
    assert not any("execution" in c.get("metadata", {}) for c in code), "timestamps: render with notebooks/render.py"
