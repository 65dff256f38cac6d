"""Re-run the notebooks top to bottom and save them with their outputs (`make notebooks`).

The notebooks are committed with outputs so that a reader sees the figures and tables on GitHub before
installing anything; this script is how they are refreshed after a change. It runs each notebook in its own
folder with this venv's python3 kernel (nbclient), on the notebooks' default inputs (the bundled
examples/idle-governors store, ../shared/traces), without execution timestamps, and writes it back only when
every cell ran without an error. Caches go to the user cache directory (the A/B notebook sets
ABTEST_METRICS_CACHE=user for the bundled store), never into examples/.

    python notebooks/render.py [NOTEBOOK ...]      # default: every *.ipynb beside this script
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import nbclient
import nbformat

HERE = Path(__file__).resolve().parent


def render(path: Path) -> int:
    """Execute one notebook in place; returns its size in bytes."""
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=600, record_timing=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell: nothing is written then
    nbformat.write(nb, path)
    return path.stat().st_size


def main(argv: list[str]) -> None:
    for p in [Path(a) for a in argv] or sorted(HERE.glob("*.ipynb")):
        t0 = time.perf_counter()
        size = render(p)
        print(f"{p.name}: executed in {time.perf_counter() - t0:.1f} s, {size / 1024:.0f} KiB with outputs")


if __name__ == "__main__":
    main(sys.argv[1:])
