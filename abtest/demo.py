"""`make demo` / `make demo-live`: abtest's main job, end to end, on a fresh clone.

Default: compare the bundled run store examples/idle-governors (recorded by this project on a real
x86_64 machine: cpuidle governor menu vs ladder, cyclictest, see its PROVENANCE.md) with
`abtest compare`, print the key tables and write a self-contained HTML report.

--live: first collect a new store on this machine (local target, cpuidle governor menu vs ladder,
cyclictest, ABAB-interleaved iterations; needs root and tracefs), then compare it the same way.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_STORE = ROOT / "examples" / "idle-governors"
OUT = ROOT / "out"
LABEL_A, LABEL_B = "menu", "ladder"
WORKLOAD = "cyclictest"


def _abtest(args: list[str]) -> int:
    """Run one abtest CLI command in-process; return its exit code."""
    from abtest.cli import cli
    try:
        cli.main(args, prog_name="abtest", standalone_mode=False)
        return 0
    except SystemExit as e:  # click's ctx.exit()
        return int(e.code or 0)
    except click.exceptions.Exit as e:
        return e.exit_code


def collect_live(store: Path, iterations: int) -> None:
    """Collect menu vs ladder on this machine into `store` (resumes a partial store)."""
    args = ["collect", "--target", "localhost", "--label", LABEL_A, "--label", LABEL_B,
            "--workload", f"{WORKLOAD}:loops=500,dma_latency_us=0", "-n", str(iterations), "--store", str(store),
            "--analysis", "idle", "--analysis", "latency"]
    if (store / LABEL_A).exists():
        args.append("--resume")
    rc = _abtest(args)
    if rc != 0:
        raise SystemExit(f"collection failed (exit {rc})")


@click.command()
@click.option("--live", is_flag=True, help="collect a new store on this machine first (root, tracefs)")
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="compare this store instead of the bundled one")
@click.option("-n", "--iterations", default=8, show_default=True, help="iterations per label (--live)")
def main(live: bool, store: Path | None, iterations: int) -> None:
    """Run a real A/B comparison end to end and write an HTML report."""
    t0 = time.perf_counter()
    OUT.mkdir(exist_ok=True)
    if live:
        store = store or OUT / f"live-store-{time.strftime('%Y%m%d-%H%M%S')}"
        click.secho(f"== collecting {LABEL_A} vs {LABEL_B} on this machine into {store}", bold=True)
        collect_live(store, iterations)
    store = store or BUNDLED_STORE
    if not store.is_dir():
        raise SystemExit(f"{store}: no such run store")
    if store == BUNDLED_STORE:
        click.secho(f"== bundled run store {store.relative_to(ROOT)} (provenance: "
                    f"{(store / 'PROVENANCE.md').relative_to(ROOT)})", bold=True)
    html = OUT / "demo-report.html"
    md = OUT / "demo-report.md"
    common = [LABEL_A, LABEL_B, "--store", str(store), "--workload", WORKLOAD]
    # Full comparison: every metric, markdown on disk, HTML report with figures.
    stdout = sys.stdout
    with open(md, "w") as f:
        sys.stdout = f
        try:
            rc = _abtest(["compare", *common, "--format", "markdown", "--html", str(html)])
        finally:
            sys.stdout = stdout
    if rc not in (0,):
        raise SystemExit(f"abtest compare failed (exit {rc}); see {md}")
    # The terminal report: verdicts and summary first (per-iteration metrics are cached by now).
    click.secho(f"\n== abtest compare {LABEL_A} {LABEL_B}  (all metrics: --all, and in the HTML report)", bold=True)
    _abtest(["compare", *common])
    click.secho(f"\nHTML report: {html}\nmarkdown:    {md}\n"
                f"done in {time.perf_counter() - t0:.1f} s", fg="green", bold=True)


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "160")
    main()
