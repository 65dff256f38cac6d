"""`abtest collect`: run workloads on kernel/setting labels of a target and fill the run store."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import NoReturn

import click

from abtest.collectors.orchestrate import CollectConfig, CollectError, LabelSpec
from abtest.collectors.orchestrate import collect as run_collect
from abtest.collectors.settings import SettingError, parse_label
from abtest.collectors.workloads import WorkloadError, make_workload
from abtest.safe_io import UnsafePathError, check_name
from abtest.store.writer import STORE_ENV, default_store
from abtest.targets.base import TargetError
from abtest.targets.config import TargetConfigError, load_target_file

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "targets" / "examples"


def resolve_target_file(spec: str) -> Path:
    """A path, or the name of a file in targets/examples (`localhost` -> targets/examples/localhost.toml)."""
    p = Path(spec)
    if p.is_file():
        return p
    for cand in (EXAMPLES / spec, EXAMPLES / f"{spec}.toml"):
        if cand.is_file():
            return cand
    raise click.BadParameter(f"{spec}: no such target file (nor targets/examples/{spec}.toml)", param_hint="--target")


def build_labels(cfg, kernels: tuple[str, ...], label_specs: tuple[str, ...]) -> list[LabelSpec]:
    labels = []
    for k in kernels:
        if k not in cfg.boot:
            raise click.BadParameter(
                f"kernel {k!r} has no [boot.{k}] entry in {cfg.path} (entries: {', '.join(cfg.boot) or 'none'})",
                param_hint="--kernel",
            )
        labels.append(LabelSpec(k, boot=cfg.boot[k], settings=dict(cfg.labels.get(k, {}).get("settings", {}))))
    for spec in label_specs:
        name, settings = parse_label(spec)
        merged = dict(cfg.labels.get(name, {}).get("settings", {}))
        merged.update(settings)
        labels.append(LabelSpec(name, boot=cfg.boot.get(name), settings=merged))
    if not labels:
        labels.append(LabelSpec("default"))
    for label in labels:  # kernel labels come from [boot.NAME] tables: the same rule as --label names
        try:
            check_name(label.name, "label")
        except UnsafePathError as e:
            raise click.BadParameter(str(e), param_hint="--kernel/--label") from e
    names = [l.name for l in labels]
    if len(set(names)) != len(names):
        raise click.BadParameter(f"label names repeat: {names}")
    return labels


@click.command("collect")
@click.option("--target", "target_spec", required=True, help="target TOML file, or a name in targets/examples")
@click.option("--kernel", "kernels", multiple=True, help="kernel label with a [boot.NAME] entry (repeat: A, B)")
@click.option(
    "--label",
    "label_specs",
    multiple=True,
    help="label NAME[:setting=value,...] on the running kernel, e.g. menu:cpuidle_governor=menu",
)
@click.option(
    "--workload",
    "workload_specs",
    multiple=True,
    help="NAME[:param=value,...], e.g. hackbench:groups=2,loops=100 (repeatable)",
)
@click.option("--iterations", "-n", default=3, show_default=True, type=click.IntRange(1))
@click.option(
    "--store",
    type=click.Path(file_okay=False),
    envvar=STORE_ENV,
    default=None,
    help="run store directory [env ABTEST_STORE; default ./results]",
)
@click.option("--resume", is_flag=True, help="continue a partial collection (complete iterations are kept)")
@click.option(
    "--order",
    type=click.Choice(["interleave", "blocked"]),
    default="interleave",
    show_default=True,
    help="interleave = ABAB per iteration; blocked = AA..BB.. (fewer kernel switches)",
)
@click.option(
    "--analysis",
    "analyses",
    multiple=True,
    help="record the events these analyses declare (repeatable; default: all; `abtest metrics` lists them)",
)
@click.option("--event", "extra_events", multiple=True, help="extra ftrace event to record")
@click.option("--no-trace", is_flag=True, help="do not trace (workload metrics and power only)")
@click.option("--buffer-size-kb", type=click.IntRange(1), default=None, help="ftrace buffer per CPU [KiB]")
@click.option("--trace-clock", default=None, help="trace clock (default boot: aligns with power samples)")
@click.option(
    "--retries",
    default=2,
    show_default=True,
    type=click.IntRange(0),
    help="retries per iteration on a dropped connection / reboot / failed workload",
)
@click.option("--cooldown-s", type=float, default=None, help="fixed pause before every iteration [s]")
@click.option(
    "--cooldown-temp-c",
    type=float,
    default=None,
    help="wait until every thermal zone is at or below this temperature [C]",
)
@click.option("--no-progress", is_flag=True, help="no progress bar")
@click.option("--json", "as_json", is_flag=True, help="print a JSON summary on stdout")
@click.option(
    "--lab",
    "lab_url",
    default=None,
    help="run every iteration as a LAVA job: http(s)://SERVER/ or lava-run:DEVICE_FILE "
    "(or [lab] url in the target file; docs/lab.md)",
)
@click.option(
    "--restore",
    "restore_only",
    is_flag=True,
    help="only put back the state (tracefs, label settings) a collection that died left on TARGET",
)
def collect(
    target_spec,
    kernels,
    label_specs,
    workload_specs,
    iterations,
    store,
    resume,
    order,
    analyses,
    extra_events,
    no_trace,
    buffer_size_kb,
    trace_clock,
    retries,
    cooldown_s,
    cooldown_temp_c,
    no_progress,
    as_json,
    lab_url,
    restore_only,
) -> None:
    """Collect ITERATIONS runs of each WORKLOAD on each kernel/label of TARGET into the run store
    (STORE/<label>/<workload>/<iteration>/ with trace.dat, power.csv, metrics.json, meta.json, .complete).

    The original tracefs values and label settings are journaled on the host before the first change and
    put back after every iteration; after a crash (or SIGKILL) the next collect on the target, or
    `abtest collect --restore --target TARGET`, restores them (docs/robustness.md)."""
    if restore_only:
        _restore(target_spec, as_json)
        return
    if not workload_specs:
        raise click.UsageError("Missing option '--workload' (or pass --restore)")
    from abtest.analysis.registry import BY_NAME, events_for

    unknown = [a for a in analyses if a not in BY_NAME]
    if unknown:
        raise click.UsageError(f"unknown analysis {', '.join(unknown)}; analyses: {', '.join(BY_NAME)}")
    try:
        cfg = load_target_file(resolve_target_file(target_spec))
        labels = build_labels(cfg, kernels, label_specs)
        workloads = [make_workload(s) for s in workload_specs]
    except (TargetConfigError, WorkloadError, SettingError) as e:
        raise click.UsageError(str(e)) from e
    cc = CollectConfig(
        target_cfg=cfg,
        labels=labels,
        workloads=workloads,
        iterations=iterations,
        store=Path(store) if store else default_store(),
        resume=resume,
        order=order,
        analyses=list(analyses) or None,
        analysis_events=events_for(list(analyses) or None),
        extra_events=list(extra_events),
        trace=not no_trace,
        buffer_size_kb=buffer_size_kb,
        trace_clock=trace_clock,
        retries=retries,
        cooldown_fixed_s=cooldown_s,
        cooldown_thermal_max_c=cooldown_temp_c,
        progress=not no_progress,
    )
    if lab_url or (cfg.raw.get("lab") or {}).get("url"):
        from abtest.commands.collect_lab import collect_through_lab

        from_cli = click.get_current_context().get_parameter_source("retries") == click.core.ParameterSource.COMMANDLINE
        return collect_through_lab(cc, lab_url=lab_url, retries=retries if from_cli else None, as_json=as_json)
    try:
        summary = run_collect(cc)
    except KeyboardInterrupt:
        click.secho(
            f"\ninterrupted: completed iterations in {cc.store} are intact; "
            f"rerun the same command with --resume to continue",
            fg="yellow",
            err=True,
        )
        sys.exit(130)
    except (CollectError, TargetError, WorkloadError, ValueError, OSError) as e:
        _fail(e)
    _report(
        summary,
        as_json,
        f"{summary['done']} iterations collected, {summary['skipped']} already complete, "
        f"{summary['retries']} retries; store: {cc.store}",
    )


def _fail(e: Exception) -> NoReturn:
    click.secho(f"error: {e}", fg="red", err=True)
    sys.exit(1)


def _report(out: dict, as_json: bool, text: str) -> None:
    """The summary: JSON on stdout (--json), else `text` on stderr."""
    click.echo(json.dumps(out) if as_json else text, err=not as_json)


def _restore(target_spec: str, as_json: bool) -> None:
    from abtest.collectors.target_state import restore_target

    try:
        cfg = load_target_file(resolve_target_file(target_spec))
        out = restore_target(cfg, log=lambda m: click.echo(re.sub(r"\[/?[a-z ]*\]", "", m), err=True))
    except TargetConfigError as e:
        raise click.UsageError(str(e)) from e
    except (CollectError, TargetError, OSError) as e:
        _fail(e)
    _report(
        out,
        as_json,
        f"{out['restored']} state journal(s) restored, {out['dropped']} dropped (target rebooted since), "
        f"{out['live']} belong to a running collection",
    )


COMMANDS = [collect]
