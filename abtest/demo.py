"""`make demo` / `make demo-live`: abtest's main job, end to end, on a fresh clone.

Default: compare the bundled run store examples/idle-governors (recorded by this project on a real
x86_64 machine: cpuidle governor menu vs ladder, cyclictest, see its PROVENANCE.md) with
`abtest compare`, print the key tables and write a self-contained HTML report.

--live: first collect a new store on this machine, then compare it the same way. Which A/B runs is
chosen from /sys/devices/system/cpu/cpuidle (`--variant` overrides):
  kernels    two real Debian kernels, 6.1 (CFS) and 6.12 (EEVDF), booted under QEMU (TCG) with abtest's
             own initramfs (targets/examples/qemu-debian.toml), hackbench in the guest, ABAB-interleaved.
             Runs on any machine with qemu-system-x86, dropbear and apt (make setup installs them); the
             kernel packages are downloaded once into ~/.cache/abtest/qemu. The default when the cpuidle
             driver is `none` (no idle states: an idle-governor A/B would compare one system).
  governors  cpuidle governor menu vs ladder on this machine (local target, root and tracefs), cyclictest.
             The default when the machine has a cpuidle driver and both governors.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_STORE = ROOT / "examples" / "idle-governors"
OUT = ROOT / "out"
CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")


@dataclass(frozen=True)
class Demo:
    """One A/B: labels, workload, how to collect it live, and its key metrics (shell patterns of metric keys,
    printed as the headline after the comparison; every metric is in the HTML report)."""

    name: str
    label_a: str
    label_b: str
    workload: str
    what: str
    collect_args: tuple[str, ...] = ()
    iterations: int = 5
    tasks: tuple[str, ...] = ()
    key_metrics: tuple[str, ...] = ()


GOVERNORS = Demo(
    "governors",
    "menu",
    "ladder",
    "cyclictest",
    "cpuidle governor menu vs ladder on this machine, cyclictest",
    (
        "--target",
        "localhost",
        "--label",
        "menu",
        "--label",
        "ladder",
        "--workload",
        "cyclictest:loops=500,dma_latency_us=0",
        "--analysis",
        "idle",
        "--analysis",
        "latency",
    ),
    iterations=8,
    key_metrics=(
        "latency_*",
        "idle.too_*",
        "idle.wakeups_per_s",
        "idle.idle_pct",
        "latency.gmean_us",
        "latency.p99_us",
    ),
)
KERNELS = Demo(
    "kernels",
    "kernelA",
    "kernelB",
    "hackbench",
    "Debian kernel 6.1 (kernelA, CFS) vs 6.12 (kernelB, EEVDF) booted under QEMU TCG, hackbench in the guest "
    "(emulated CPUs: compare the kernels' behaviour, not absolute speed)",
    (
        "--target",
        str(ROOT / "targets" / "examples" / "qemu-debian.toml"),
        "--kernel",
        "kernelA",
        "--kernel",
        "kernelB",
        "--workload",
        "hackbench:groups=2,loops=20",
        "--analysis",
        "latency",
        "--analysis",
        "placement",
        "--analysis",
        "idle",
        "--retries",
        "3",
    ),
    iterations=5,
    tasks=("hackbench",),
    key_metrics=(
        "hackbench_time_s",
        "latency.gmean_us",
        "latency.p50_us",
        "latency.task.hackbench.*",
        "placement.task.hackbench.*",
        "placement.cpu_changes_per_s",
    ),
)
BUNDLED = GOVERNORS  # examples/idle-governors was collected as the governors A/B


def choose_variant(cpuidle: Path = CPUIDLE) -> tuple[Demo, str]:
    """The live A/B this machine can run meaningfully, and why (read from the cpuidle sysfs directory)."""
    try:
        driver = (cpuidle / "current_driver").read_text().strip()
    except OSError:
        return (
            KERNELS,
            f"no cpuidle driver ({cpuidle / 'current_driver'} absent): an idle-governor A/B would compare one system",
        )
    if driver in ("", "none"):
        return KERNELS, (
            f"cpuidle driver '{driver or 'none'}': no idle states, the idle governor never runs, so menu "
            "vs ladder would compare one system"
        )
    try:
        governors = (cpuidle / "available_governors").read_text().split()
    except OSError:
        governors = []
    if not {"menu", "ladder"} <= set(governors):
        return KERNELS, f"cpuidle driver '{driver}' but governors {governors or 'unknown'} (menu and ladder needed)"
    if os.geteuid() != 0:
        return KERNELS, f"cpuidle driver '{driver}', but switching governors needs root"
    return GOVERNORS, f"cpuidle driver '{driver}' with governors {' '.join(governors)}"


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


def _abtest_to(path: Path, args: list[str]) -> int:
    """Run one abtest command with its stdout written to `path`."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = _abtest(args)
    path.write_text(buf.getvalue())
    return rc


def collect_live(demo: Demo, store: Path, iterations: int) -> None:
    """Collect the demo's A/B on this machine into `store` (resumes a partial store)."""
    args = ["collect", *demo.collect_args, "-n", str(iterations), "--store", str(store)]
    if (store / demo.label_a).exists():
        args.append("--resume")
    rc = _abtest(args)
    if rc != 0:
        raise SystemExit(f"collection failed (exit {rc})")


def headline(compare_json: Path, demo: Demo) -> list[str]:
    """One line per key metric of the comparison: A -> B, delta, verdict (from `compare --format json`)."""
    import fnmatch

    d = json.loads(compare_json.read_text())
    lines = []
    for w in d["workloads"]:
        for m in w["metrics"]:
            if any(fnmatch.fnmatch(m["name"], p) for p in demo.key_metrics):
                a, b, unit = m.get("value_a"), m.get("value_b"), m.get("unit") or ""
                if a is None or b is None:
                    continue
                delta = m.get("delta_pct")
                lines.append(
                    f"{m['name']}: {a:,.4g} -> {b:,.4g} {unit} "
                    f"({'n/a' if delta is None else f'{delta:+.1f} %'}; {m.get('verdict_text') or m.get('verdict')})"
                )
    return lines


def report_paths(out: Path, live: bool) -> tuple[Path, Path, Path]:
    """(HTML, markdown, JSON) report files: out/demo-report.* for the bundled store, out/demo-live-report.* (and
    demo-live-compare.json) for a live run, so `make demo-live` never overwrites `make demo`'s report."""
    stem = "demo-live" if live else "demo"
    return out / f"{stem}-report.html", out / f"{stem}-report.md", out / f"{stem}-compare.json"


@click.command()
@click.option("--live", is_flag=True, help="collect a new store on this machine first")
@click.option(
    "--variant",
    type=click.Choice(["auto", "kernels", "governors"]),
    default="auto",
    show_default=True,
    help="live A/B: kernels = Debian 6.1 vs 6.12 under QEMU; governors = cpuidle menu vs ladder here; "
    "auto = governors when this machine has a cpuidle driver with both, else kernels",
)
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="compare this store instead of the bundled one (with --live: collect into it)",
)
@click.option(
    "-n",
    "--iterations",
    type=click.IntRange(2),
    default=None,
    help="iterations per label with --live (default: 5 for kernels, 8 for governors)",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=OUT,
    show_default=True,
    help="directory for the reports (and the live store unless --store)",
)
def main(live: bool, variant: str, store: Path | None, iterations: int | None, out: Path) -> None:
    """Run a real A/B comparison end to end and write an HTML report."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    demo = BUNDLED
    if live:
        if variant == "auto":
            demo, why = choose_variant()
            click.secho(f"== live demo: {demo.name} ({why})", bold=True)
        else:
            demo = KERNELS if variant == "kernels" else GOVERNORS
            click.secho(f"== live demo: {demo.name} (--variant {variant})", bold=True)
        click.echo(f"   {demo.what}")
        store = store or out / f"live-{demo.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        click.secho(f"== collecting {demo.label_a} vs {demo.label_b} into {store}", bold=True)
        collect_live(demo, store, iterations or demo.iterations)
        click.echo(f"   collected in {time.perf_counter() - t0:.0f} s")
    store = store or BUNDLED_STORE
    if not store.is_dir():
        raise SystemExit(f"{store}: no such run store")
    if store == BUNDLED_STORE:
        click.secho(
            f"== bundled run store {store.relative_to(ROOT)} (provenance: "
            f"{(store / 'PROVENANCE.md').relative_to(ROOT)})",
            bold=True,
        )
        # the bundled store stays as committed: per-iteration metric caches go to the user cache directory
        os.environ.setdefault("ABTEST_METRICS_CACHE", "user")
    html, md, js = report_paths(out, live)
    common = [
        demo.label_a,
        demo.label_b,
        "--store",
        str(store),
        "--workload",
        demo.workload,
        *(a for t in demo.tasks for a in ("--task", t)),
    ]
    # Full comparison: every metric, markdown and JSON on disk, HTML report with figures.
    rc = _abtest_to(md, ["compare", *common, "--format", "markdown", "--html", str(html)])
    if rc != 0:
        raise SystemExit(f"abtest compare failed (exit {rc}); see {md}")
    _abtest_to(js, ["compare", *common, "--format", "json"])  # per-iteration metrics are cached by now
    # The terminal report: verdicts and summary first.
    click.secho(
        f"\n== abtest compare {demo.label_a} {demo.label_b}  (all metrics: --all, and in the HTML report)", bold=True
    )
    _abtest(["compare", *common])
    click.secho("\n== headline: key metrics (baseline -> B, delta, verdict)", bold=True)
    for line in headline(js, demo):
        click.echo(f"  {line}")
    click.secho(
        f"\nHTML report: {html}\nmarkdown:    {md}\nJSON:        {js}\ndone in {time.perf_counter() - t0:.1f} s",
        fg="green",
        bold=True,
    )


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "160")
    main()
