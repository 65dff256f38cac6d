"""`abtest engines`, `abtest sql`, `abtest wattson`: Perfetto trace_processor as a second engine.

Exit codes: 0 ok; 2 when no engine is available, the trace is unreadable or the SQL is rejected.
"""

from __future__ import annotations

import json
import sys
import time

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ENGINE_CHOICE = click.Choice(["auto", "shell", "wasm"])


def _fail(msg: str) -> None:
    raise click.ClickException(msg)


def measure_startup(info) -> dict:
    """Wall time (s) to get a ready trace_processor instance with no trace loaded.

    wasm: module (cranelift compile, disk-cache deserialise, or in-memory) + instantiation.
    shell: process start until its HTTP /status answers (perfetto package).
    """
    t0 = time.perf_counter()
    if info.name == "wasm":
        from pathlib import Path

        from abtest.trace.wasm_engine import WasmTraceProcessor

        tp = WasmTraceProcessor(Path(info.path))
        return {
            "seconds": time.perf_counter() - t0,
            "module_source": tp.startup.source,
            "module_seconds": tp.startup.seconds,
            "instantiate_seconds": tp.instantiate_seconds,
            "module_cache": tp.startup.cache_file,
        }
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    tp = TraceProcessor(config=TraceProcessorConfig(bin_path=info.path, load_timeout=60))
    seconds = time.perf_counter() - t0
    tp.close()
    return {"seconds": seconds}


@click.command("engines")
@click.option("--measure", is_flag=True, help="Start each available engine once and report its start-up time.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def engines(measure: bool, as_json: bool) -> None:
    """List Perfetto trace_processor engines in discovery order (never downloads anything)."""
    from abtest.trace.perfetto_engine import EngineUnavailableError, discover

    try:
        found = discover()
    except EngineUnavailableError as e:
        _fail(str(e))
    rows = []
    for c in found:
        row = {
            "engine": c.name,
            "source": c.source,
            "path": c.path,
            "available": c.available,
            "version": c.version,
            "detail": c.detail,
        }
        if measure and c.available:
            try:
                row["startup"] = measure_startup(c)
            except Exception as e:  # report, keep listing the others
                row["startup"] = {"error": str(e).splitlines()[0]}
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        table = Table(title="Perfetto trace_processor engines (first available is used)")
        for col in ("engine", "source", "available", "start-up", "detail"):
            table.add_column(col)
        for r in rows:
            st = r.get("startup") or {}
            start = (
                f"{st['seconds']:.2f} s" + (f" ({st['module_source']})" if "module_source" in st else "")
                if "seconds" in st
                else st.get("error", "")
            )
            table.add_row(
                r["engine"],
                escape(r["source"]),
                "yes" if r["available"] else "no",
                escape(start),
                escape((r["detail"] or "") + (f" [{r['path']}]" if r["path"] else "")),
            )
        Console().print(table)
    if not any(r["available"] for r in rows):
        sys.exit(2)


@click.command("sql")
@click.argument("trace_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("query")
@click.option("--engine", type=ENGINE_CHOICE, default="auto", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(trace_file: str, query: str, engine: str, fmt: str) -> None:
    """Run a PerfettoSQL QUERY on TRACE_FILE with trace_processor."""
    from abtest.trace.perfetto_engine import EngineQueryError, EngineUnavailableError
    from abtest.trace.perfetto_engine import query as tp_query

    try:
        df = tp_query(trace_file, query, engine=engine)
    except (EngineUnavailableError, EngineQueryError) as e:
        _fail(str(e))
    if fmt == "csv":
        click.echo(df.write_csv(), nl=False)
    elif fmt == "json":
        click.echo(df.write_json())
    else:
        import polars as pl

        with pl.Config(tbl_rows=50, tbl_cols=20, fmt_str_lengths=60):
            click.echo(str(df))


@click.command("wattson")
@click.argument("trace_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--engine", type=ENGINE_CHOICE, default="auto", show_default=True)
@click.option(
    "--platform",
    "platform_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Energy-model platform file for abtest's estimate (LISA plat_info.yml, Wattson cpu_1d.csv, ...).",
)
@click.option(
    "--curves",
    "curves_dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Directory of Wattson curves (<device>/cpu_1d.csv); default $ABTEST_WATTSON_CURVES.",
)
@click.option(
    "--assume-device",
    default=None,
    help="WHAT-IF: run Wattson as if the trace came from this device codename (same length).",
)
@click.option("--json", "as_json", is_flag=True)
def wattson(trace_file: str, engine: str, platform_path, curves_dir, assume_device, as_json: bool) -> None:
    """Wattson CPU power estimate (Perfetto) beside abtest's energy model and measured CPU rails."""
    import polars as pl

    from abtest.interop.wattson import compare_estimates
    from abtest.trace.perfetto_engine import EngineQueryError, EngineUnavailableError

    try:
        report = compare_estimates(
            trace_file, engine=engine, platform=platform_path, curves_dir=curves_dir, assume_device=assume_device
        )
    except (EngineUnavailableError, EngineQueryError, ValueError) as e:
        _fail(str(e))
    if as_json:
        doc = {k: (v.to_dicts() if isinstance(v, pl.DataFrame) else v) for k, v in report.items()}
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    click.echo(report["coverage"])
    for key, title in (
        ("wattson_cpu_mw", "Wattson CPU estimate (mW)"),
        ("energy_model", "abtest energy model (mW)"),
        ("rails_mw", "measured CPU rails (mW)"),
    ):
        df = report.get(key)
        total = report.get(
            {
                "wattson_cpu_mw": "wattson_cpu_total_mw",
                "energy_model": "energy_model_total_mw",
                "rails_mw": "rails_cpu_total_mw",
            }[key]
        )
        click.echo(f"\n{title}: " + (f"total {total:.2f}" if total is not None else "none"))
        if isinstance(df, pl.DataFrame):
            click.echo(str(df))
    for note in report.get("notes", []):
        click.echo(f"note: {note}")


COMMANDS = [engines, sql, wattson]
