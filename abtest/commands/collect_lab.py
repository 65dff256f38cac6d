"""`abtest collect --lab URL`: the lab branch of `abtest collect` (thin: config -> collect_lab -> report)."""

from __future__ import annotations

import json
import sys

import click

from abtest.collectors.lab.backends import LabError
from abtest.collectors.lab.collect import collect_lab
from abtest.collectors.lab.config import LabConfigError, parse_lab
from abtest.collectors.plan import CollectConfig, CollectError


def collect_through_lab(cc: CollectConfig, *, lab_url: str | None, retries: int | None, as_json: bool) -> None:
    """Run the collection through the lab ([lab] of the target file, `lab_url` overriding its url; `retries`, when
    given on the command line, overriding its retries); exit 0 when every iteration is complete, 1 when some failed
    after their retries (listed with job ids and reasons), 2 on a bad [lab] table, 130 on Ctrl-C."""
    cfg = cc.target_cfg
    try:
        lab = parse_lab(cfg.raw.get("lab"), lab_url, where=f"{cfg.path or cfg.name}: [lab]")
    except LabConfigError as e:
        raise click.UsageError(str(e)) from e
    if retries is not None:
        lab.retries = retries
    cc.lab = lab
    try:
        summary = collect_lab(cc)
    except KeyboardInterrupt:
        click.secho(
            f"\ninterrupted: jobs in flight were canceled; completed iterations in {cc.store} are intact; "
            f"rerun the same command with --resume to continue",
            fg="yellow",
            err=True,
        )
        sys.exit(130)
    except LabConfigError as e:
        raise click.UsageError(str(e)) from e
    except (CollectError, LabError, ValueError, OSError) as e:
        click.secho(f"error: {e}", fg="red", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        devices = "; ".join(
            f"{label}: " + ", ".join(f"{d} x{n}" for d, n in sorted(devs.items()))
            for label, devs in sorted(summary["devices"].items())
        )
        click.echo(
            f"{summary['done']} iterations collected through {lab.url}, {summary['skipped']} already "
            f"complete, {summary['retries']} retries, {len(summary['failed'])} failed; store: {cc.store}"
            + (f"\ndevices per label: {devices}" if devices else ""),
            err=True,
        )
    for f in summary["failed"]:
        reasons = "; ".join(f"job {a['job_id']}: {a['reason']}" for a in f["attempts"])
        click.secho(f"failed: {f['label']}/{f['workload']}/{f['iteration']}: {reasons}", fg="red", err=True)
    if summary["failed"]:
        sys.exit(1)
