"""abtest command line (thin: parses arguments, calls the library, prints).

Command groups live in abtest/commands/<name>.py, one file per group, and are imported only when one of
their commands runs (or `--help` lists them): `abtest trace convert` does not import the collectors,
statistics or interop code.
Exit codes (a contract CI reads): 0 ok; 1 regression found (gate) and nothing else; 2 bad input, not
enough data, or any unexpected error (one line on stderr; $ABTEST_DEBUG=1 adds the traceback); 130
interrupted.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

# Before polars loads (nothing above imports it): polars' allocator (jemalloc) keeps the pages it frees per
# thread arena for 0.5-1 s (polars' own setting), so an `abtest analyze` held ~1.5x the memory its analyses
# use at once. The command line (not the library: a notebook keeps its own settings) asks for one arena and a
# purge of freed pages after 100 ms by a background thread (polars appends a _RJEM_MALLOC_CONF it finds to
# its own setting). A value the user set is kept; polars' own default, inherited from a Python parent that
# imported polars (a notebook's `!abtest`, a test), is not the user's. Measured in docs/analysis-speed.md.
POLARS_JEMALLOC_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"
CLI_JEMALLOC = "narenas:1,background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0"
if os.environ.get("_RJEM_MALLOC_CONF", POLARS_JEMALLOC_DEFAULT) == POLARS_JEMALLOC_DEFAULT:
    os.environ["_RJEM_MALLOC_CONF"] = CLI_JEMALLOC

from abtest.trace.errors import MissingEventsError, TraceFormatError  # noqa: E402

# top-level command -> module of abtest/commands that lists it in COMMANDS
COMMAND_MODULES = {
    "trace": "trace",
    "analyze": "analyze",
    "compare": "compare",
    "gate": "compare",
    "explain": "explain",
    "collect": "collect",
    "metrics": "metrics",
    "engines": "interop",
    "sql": "interop",
    "wattson": "interop",
    "timeline": "timeline",
    "bisect": "bisect",
    "history": "history",
}


class LazyGroup(click.Group):
    """The `abtest` group: a command's module is imported when the command is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMAND_MODULES if self.get_command(ctx, name) is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        mod_name = COMMAND_MODULES.get(name)
        if mod_name is None:
            return None
        try:
            mod = importlib.import_module(f"abtest.commands.{mod_name}")
        except ModuleNotFoundError as e:
            if e.name != f"abtest.commands.{mod_name}":
                raise
            return None  # command module left out of this installation
        return next((cmd for cmd in mod.COMMANDS if cmd.name == name), None)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    """--version: the version is looked up only when asked for (abtest.version)."""
    if value and not ctx.resilient_parsing:
        from abtest.version import get

        click.echo(f"abtest, version {get()}")
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """abtest: trace analysis and A/B power-regression toolkit for kernel scheduler work."""


def run(args: list[str] | None = None) -> int:
    """Run the command line `args` (default: sys.argv[1:]); returns the exit code."""
    try:
        cli.main(args, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2 if e.exit_code in (1, 2) else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except (TraceFormatError, MissingEventsError, FileNotFoundError) as e:
        click.secho(f"error: {e}", fg="red", err=True)
        return 2
    except SystemExit as e:  # a command's sys.exit(code): the code as Python would exit with it
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        click.echo(e.code, err=True)
        return 2
    except MemoryError as e:
        return _out_of_memory(e, args)
    except Exception as e:  # noqa: BLE001 - the exit-code contract: anything unexpected is 2, never 1
        return _unexpected(e, args)
    return 0


DEBUG_ENV = "ABTEST_DEBUG"


def _unexpected(e: Exception, args: list[str] | None) -> int:
    """Exit code 2 and a one-line message for an exception no command turned into a message of its own.

    Exit 1 means "regression found" (gate) and nothing else: a CI job must never read a crash as a regression.
    The message names the command, the exception type and its text; with $ABTEST_DEBUG=1 the traceback is
    printed too."""
    argv = sys.argv[1:] if args is None else args
    cmd = next((a for a in argv if not a.startswith("-")), "abtest")
    text = " ".join(str(e).split())
    text = text if len(text) <= 300 else text[:300] + " ..."
    if os.environ.get(DEBUG_ENV):
        import traceback

        traceback.print_exception(e)
    click.secho(
        f"error: abtest {cmd} failed on its input: {type(e).__name__}: {text or '(no message)'} "
        f"(this is a bug or an input abtest does not handle; set {DEBUG_ENV}=1 for the traceback)",
        fg="red",
        err=True,
    )
    return 2


def _out_of_memory(e: MemoryError, args: list[str] | None) -> int:
    """Exit code 2 and one line for a MemoryError: what was refused before reading (TraceTooLargeError says the
    size and the limit), or an allocation that failed, with this process' limits."""
    from abtest.trace.limits import TraceTooLargeError, memory_limits

    if os.environ.get(DEBUG_ENV):
        import traceback

        traceback.print_exception(e)
    if isinstance(e, TraceTooLargeError):
        click.secho(f"error: {e}", fg="red", err=True)
        return 2
    argv = sys.argv[1:] if args is None else args
    cmd = next((a for a in argv if not a.startswith("-")), "abtest")
    limit, available = memory_limits()
    gib = lambda n: "unlimited" if n is None else f"{n / 2**30:.1f} GiB"  # noqa: E731
    click.secho(
        f"error: abtest {cmd} ran out of memory (address-space limit, ulimit -v / RLIMIT_AS: {gib(limit)}; "
        f"available memory: {gib(available)}){': ' + str(e) if str(e) else ''}. Raise the limit or free memory; "
        "a long trace reads in bounded memory as trace.dat, and `abtest analyze --windows 30` analyses it window "
        "by window",
        fg="red",
        err=True,
    )
    return 2


def exit_now(code: int) -> None:
    """End the process with `code` once everything is written, without the interpreter's teardown.

    After a command has finished (files closed, subprocesses and servers stopped by their context
    managers), finalizing polars, pyarrow and numpy and freeing a decode's memory object by object only
    costs time: 0.10-0.15 s of every `abtest trace convert` run on this project's 2-vCPU VM (docs/ingest.md,
    "CLI start-up and exit"). Log handlers and the standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # reader went away (`| head`) or stream closed
            pass
    os._exit(code)


def main() -> None:
    exit_now(run())


if __name__ == "__main__":
    main()
