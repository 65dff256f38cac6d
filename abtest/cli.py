"""abtest command line (thin: parses arguments, calls the library, prints).

Command groups live in abtest/commands/<name>.py, one file per group.
Exit codes: 0 ok, 1 regression found (gate) or failure, 2 bad input / not enough data.
"""
from __future__ import annotations

import sys

import click

from abtest import __version__
from abtest.trace.errors import MissingEventsError, TraceFormatError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="abtest")
def cli() -> None:
    """abtest: trace analysis and A/B power-regression toolkit for kernel scheduler work."""


def _register() -> None:
    from abtest.commands import trace as trace_cmds
    cli.add_command(trace_cmds.trace)
    optional = ("analyze", "compare", "collect", "interop")
    for mod_name in optional:
        try:
            mod = __import__(f"abtest.commands.{mod_name}", fromlist=["COMMANDS"])
        except ModuleNotFoundError as e:
            if e.name != f"abtest.commands.{mod_name}":
                raise
            continue
        for cmd in mod.COMMANDS:
            cli.add_command(cmd)


_register()


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(2 if e.exit_code in (1, 2) else e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except (TraceFormatError, MissingEventsError, FileNotFoundError) as e:
        click.secho(f"error: {e}", fg="red", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
