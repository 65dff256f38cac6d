"""trace-cmd trace.dat (file versions 6 and 7) -> raw polars tables, one per kernel event.

`read(path, data)` parses the file layout and event formats in Python (small, per event *type*),
then hands every CPU's ring-buffer data to the compiled decoder. Default: the streaming decode
(`abtest._native.tracedat_fused`, native/src/tracedat_fused.rs): per CPU, v7 chunks are inflated one by
one and walked at once, records go straight into that CPU's typed columns, and each table is then the
merge of its per-CPU runs by timestamp. Fallback (a CPU whose timestamps go backwards, corrupt data):
the record-index path (`tracedat_walk` + `columns`, native/src/tracedat.rs), which orders such traces
by a stable sort and reports errors with their exact positions. No Python code runs per event.

Raw table columns: ts (Int64, ns on the trace clock, after trace-cmd's OFFSET / DATE / TSC2NSEC
corrections), cpu (Int32, ring buffer the event was in), common_pid (Int32), then every field of the
event's format under its kernel name and width: u32 -> UInt32, s64 -> Int64, char[N] (comm and other
names, and __data_loc comm / *_comm) -> Categorical, other __data_loc char[] -> Utf8, other fixed arrays -> List(int), other dynamic arrays ->
Binary (kernel_stack/user_stack `caller` -> List(UInt64) of the `size` recorded entries).
An event with its own `cpu` field (sched_load_*, ...) keeps it as `cpu`; the ring-buffer CPU is then
`buffer_cpu`.
Marker events: print `buf` is the written text; bprint `buf` is the trace_printk() text formatted from
the printk format and the binary arguments (as `trace-cmd report` prints it, without the ip prefix);
bputs `str` is the constant string. `common_type` is dropped (it is the table).
Events whose id has no format in the file land in `unknown_event_<id>` with the whole record as
`payload` (Binary) and a warning.
"""
from __future__ import annotations

import gc
import mmap
import re
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from abtest.trace import decoded
from abtest.trace import tracedat_format as tf
from abtest.trace.errors import TraceFormatError
from abtest.trace.tracedat_instances import instance_view, merge_buffers
from abtest.trace.tracedat_lost import LostEvents, lost_events
from abtest.trace.tracedat_layout import Layout, load_kallsyms, parse_layout

_INT_DTYPES = decoded.INT_DTYPES  # numpy integer dtype -> polars dtype


_ID_RE = re.compile(r"^ID:\s*(\d+)", re.M)
_NAME_RE = re.compile(r"^name:\s*(\S+)", re.M)


def _format_index(path, lay: Layout) -> dict[int, tuple[str, str, str]]:
    """{event id: (system, name, format text)} from a cheap scan (full parsing only for ids in the data)."""
    from abtest import _native

    index: dict[int, tuple[str, str, str]] = {}
    formats = [("ftrace", t) for t in lay.ftrace_formats] + lay.event_formats
    # the two searches below, done natively for ASCII texts (False: this text needs the regexes)
    found = _native.tracedat_format_ids([text for _, text in formats])
    for (system, text), hit in zip(formats, found):
        if hit is False:
            m_id, m_name = _ID_RE.search(text), _NAME_RE.search(text)
            hit = (int(m_id.group(1)), m_name.group(1)) if m_id and m_name else None
        if hit is not None:
            index[hit[0]] = (system, hit[1], text)
    if not index:
        raise TraceFormatError(path, "no event formats in the file", expected="ftrace/event format sections")
    return index


def _parse_formats(index: dict, ids) -> tuple[dict[int, tf.EventFormat], list[str]]:
    formats: dict[int, tf.EventFormat] = {}
    warnings = []
    for i in ids:
        if i not in index:
            continue
        system, name, text = index[i]
        try:
            formats[i] = tf.parse_event_format(text, system)
        except ValueError as e:
            warnings.append(f"event {system}:{name} (id {i}) has an unparsable format ({e}); "
                            f"its records are kept as raw bytes in `payload`")
    return formats, warnings


def _field_spec(ev: tf.EventFormat, f: tf.Field, long_size: int) -> tuple:
    """The tuple the Rust decoder takes: (name, offset, size, kind, signed, elem, aux_off, aux_size)."""
    kind, aux_off, aux_size = f.kind, 0, 0
    if ev.system == "ftrace" and ev.name == "bprint" and f.name == "buf":
        fmt = ev.field("fmt")
        if fmt is not None:
            kind, aux_off, aux_size = tf.KIND_BPRINT_TEXT, fmt.offset, fmt.size
    elif ev.system == "ftrace" and ev.name == "bputs" and f.name == "str" and f.kind == tf.KIND_INT:
        kind = tf.KIND_PRINTK_STR
    elif ev.system == "ftrace" and ev.name == "raw_data" and f.name == "buf" and f.kind == tf.KIND_TAIL_STR:
        # trace_marker_raw writes: binary data (declared `char buf[]`), kept as the record's bytes, its
        # alignment padding to 4 bytes included (the kernel stores no length), as trace-cmd prints them
        kind = tf.KIND_TAIL_BIN
    elif f.kind == tf.KIND_DATA_LOC_STR and (f.name == "comm" or f.name.endswith("_comm")):
        kind = tf.KIND_DATA_LOC_CAT  # newer kernels store comm as __data_loc: same Categorical as char[16]
    elif ev.system == "ftrace" and ev.name in ("kernel_stack", "user_stack") and f.name == "caller":
        # the format declares caller[8] (or a bare `caller`), the record holds `size` entries
        count = ev.field("size")
        elem = f.elem_size or long_size
        return (f.name, f.offset, 0, tf.KIND_TAIL_LIST, False, elem, count.offset if count else 0,
                count.size if count else 0)
    return (f.name, f.offset, f.size, kind, f.signed, f.elem_size, aux_off, aux_size)


def _ordered_fields(ev: tf.EventFormat) -> list[tf.Field]:
    """common_pid first, then the event's own fields, then the other common_* fields; no common_type."""
    fields = [f for f in ev.fields if f.name != "common_type"]
    pid = [f for f in fields if f.name == "common_pid"]
    own = [f for f in fields if not f.name.startswith("common_")]
    other_common = [f for f in fields if f.name.startswith("common_") and f.name != "common_pid"]
    return pid + own + other_common


def _dictionary(offsets, data) -> pa.Array:
    """Arrow large_utf8 array over the decoder's (offsets i64[n+1], bytes) buffers (no copy)."""
    return pa.Array.from_buffers(pa.large_utf8(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _to_series(name: str, col) -> pl.Series:
    """Rust column -> polars Series (numpy ints zero-copy where polars allows; strings via Arrow buffers)."""
    if isinstance(col, np.ndarray):
        return pl.Series(name, col, dtype=_INT_DTYPES.get(col.dtype))
    tag = col[0]
    if tag in ("utf8", "binary"):
        offsets, data = col[1], col[2]
        n = len(offsets) - 1
        typ = pa.large_utf8() if tag == "utf8" else pa.large_binary()
        arr = pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pl.Series(name, arr)
    if tag == "list":
        flat, count = col[1], col[2]
        n = len(flat) // count if count else 0
        s = pl.Series(name, flat, dtype=_INT_DTYPES.get(flat.dtype))
        return s.reshape((n, count)).cast(pl.List(s.dtype)).alias(name)
    if tag == "cat":
        codes, offsets, data = col[1], col[2], col[3]
        dictionary = _dictionary(offsets, data)
        # the codes index the dictionary the decoder built from the same records: arrow's per-code
        # bounds check (safe=True, ~0.5 ns per code) is skipped
        return pl.Series(name, pa.DictionaryArray.from_arrays(pa.array(codes), dictionary, safe=False))
    if tag == "varlist":
        offsets, flat = col[1], col[2]
        arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))
        return pl.Series(name, arr)
    raise TypeError(f"unknown column tag {tag!r}")


def _frames(tables: list[dict]) -> list[pl.DataFrame]:
    """Decoder columns of each table -> DataFrames (same order). The decoder returns the ring-buffer CPU as
    `__buffer_cpu`: it becomes `cpu`, unless the event has its own `cpu` field (e.g. sched_load_*), which
    then keeps the name `cpu` (the CPU the event is about) and the ring-buffer CPU is kept as `buffer_cpu`.

    Categorical columns: each column's small dictionary becomes a Categorical first, one after the other
    in table and column order (this assigns polars' global category ids in the order a column-by-column
    conversion assigns them, so ids and parquet files do not depend on timing); then every column's
    codes are mapped through its dictionary by one `gather` each, all columns of all tables in one
    `collect_all` on polars' threads. Integer columns are taken from numpy without a copy."""
    out: list = []
    lazy: list[int] = []
    for cols in tables:
        series, cats = [], []
        for name, v in _cpu_names(cols).items():
            if isinstance(v, tuple) and v[0] == "cat":
                lut = pl.Series(name, _dictionary(v[2], v[3])).cast(pl.Categorical)
                series.append(pl.Series(name, v[1]))  # u32 codes into the dictionary
                cats.append(pl.lit(lut).gather(pl.col(name)).alias(name))
            else:
                series.append(_to_series(name, v))
        series[0] = series[0].set_sorted()  # ts: the decoder emits every table in timestamp order
        df = pl.DataFrame(series)
        if cats:
            lazy.append(len(out))
            df = df.lazy().with_columns(cats)
        out.append(df)
    if lazy:
        for i, df in zip(lazy, pl.collect_all([out[i] for i in lazy], engine="in-memory")):
            out[i] = df
    return out


def _cpu_names(cols: dict) -> dict:
    """The decoder's `__buffer_cpu` column renamed: `cpu`, or `buffer_cpu` when the event has its own
    `cpu` field (see _frames)."""
    if "__buffer_cpu" not in cols:
        return cols
    cpu_name = "buffer_cpu" if "cpu" in cols else "cpu"
    return {(cpu_name if k == "__buffer_cpu" else k): v for k, v in cols.items()}


def _frame(cols: dict) -> pl.DataFrame:
    """One table's decoder columns -> DataFrame (see _frames)."""
    return _frames([cols])[0]


def _name_counts(index: dict[int, tuple[str, str, str]]) -> Counter:
    """How many event formats of the file carry each event name (a name two systems share is qualified)."""
    return Counter(name for _system, name, _text in index.values())


def _table_name(index: dict[int, tuple[str, str, str]], counts: Counter, ev_id: int) -> str:
    """Table name of an event id: the kernel event name, `system:name` when two systems share a name."""
    system, name, _text = index[ev_id]
    return name if counts[name] == 1 else f"{system}:{name}"


def _decode_error(path, lay: Layout, err: ValueError) -> TraceFormatError:
    if len(err.args) == 3 and isinstance(err.args[1], int):
        msg, si, pos = err.args
        cd = lay.cpu_data[si] if si < len(lay.cpu_data) else None
        if cd is not None and cd.file_offset is not None:
            return TraceFormatError(path, f"{lay.buffer_label}CPU {cd.cpu} ring buffer: {msg}",
                                    offset=cd.file_offset + pos, expected="a well-formed ring-buffer page")
        cpu = cd.cpu if cd is not None else "?"
        chunk = cd.chunk if cd is not None else "?"
        page = pos // lay.page_size
        return TraceFormatError(path, f"{lay.buffer_label}CPU {cpu} ring buffer, compressed chunk {chunk}, byte "
                                f"{pos} (page {page}) of the inflated chunk: {msg}",
                                expected="a well-formed ring-buffer page")
    return TraceFormatError(path, str(err))


# How the last read() decoded its file (for tests and benchmarks): {"path": "fused" | "indexed",
# "fallback": why the streaming path was not used (None when it was)}.
last_decode: dict = {}


def read(path, data, *, fused: bool = True, keep_decoded=None, keep_runs: bool = True) -> tuple[dict, dict]:
    """Decode a trace.dat held in `data` (bytes or mmap). Returns (raw tables by event name, meta).

    Only event types with records get a table (the file carries the formats of every event the kernel
    knows, thousands of them); meta["event_formats"] counts the formats present.
    fused=True (default): the streaming decode (inflate, walk and columns in one pass per CPU, then a
    per-table merge); it falls back to the record-index path when a CPU's timestamps go backwards or
    the data is corrupt (that path then orders the records or raises the exact error). fused=False:
    the record-index path only. Both give identical tables.
    keep_decoded: optional `(table name, DecodedTable) -> bool`; a table it accepts is returned as that
    DecodedTable (the decoder's arrays, for writing parquet without polars: abtest.trace.decoded) instead
    of a DataFrame. Offered only for tables of integer, text and dictionary columns whose fields need no
    later resolution (no `char *` fields).
    keep_runs (with keep_decoded, streaming decode): the integer and dictionary columns of such a table
    merged from several CPUs stay as their per-CPU runs (`_native.RunColumn`), which the parquet writer
    gathers row group by row group instead of the merged arrays being built; False: arrays. Same files.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the decode allocates few, large objects: cyclic GC passes would only cost time
    try:
        return _read(Path(path), data, fused, keep_decoded, keep_runs)
    finally:
        if gc_was_enabled:
            gc.enable()


class _Setup:
    """What both decode paths need from the file layout (per event *type*, never per event)."""

    def __init__(self, path: Path, lay: Layout):
        self.index = _format_index(path, lay)
        self.name_counts = _name_counts(self.index)
        self.ph = tf.parse_header_page(lay.header_page, lay.long_size)
        self.first = tf.parse_event_format(next(iter(self.index.values()))[2], "")
        ctype = self.first.field("common_type")
        self.id_field = (ctype.offset, ctype.size) if ctype else (0, 2)
        self.clock_off = lay.ts_offset_ns + lay.date_offset_ns
        self.tsc = lay.tsc2nsec if (lay.tsc2nsec and lay.tsc2nsec[0]) else None
        ph = self.ph
        self.page = (lay.page_size, ph.ts_offset, ph.ts_size, ph.commit_offset, ph.commit_size, ph.data_offset)
        self.unknown = [_field_spec(self.first, f, ph.commit_size) for f in _ordered_fields(self.first)
                        if f.name.startswith("common_")]
        self.unknown.append(("payload", 0, 0, tf.KIND_TAIL_BIN, False, 0, 0, 0))
        self.printk = {a: s.encode() for a, s in tf.parse_printk_formats(lay.printk).items()}

    def specs(self, formats: dict[int, tf.EventFormat]) -> dict[int, list]:
        return {i: [_field_spec(ev, f, self.ph.commit_size) for f in _ordered_fields(ev)] for i, ev in formats.items()}


def _read(path: Path, data, fused: bool, keep_decoded, keep_runs: bool = True) -> tuple[dict, dict]:
    lay = parse_layout(path, data, inflate=not fused)
    setup = _Setup(path, lay)
    if not lay.instances:
        return _read_buffer(path, data, lay, setup, fused, keep_decoded, None, keep_runs)
    # named trace instances: every buffer decoded on its own, tables merged (tracedat_instances)
    top_has_data = any(cd.size for cd in lay.cpu_data) or bool(lay.chunks)
    top = _read_buffer(path, data, lay, setup, fused, None, None)
    how = dict(last_decode)
    parts = []
    for i, inst in enumerate(lay.instances):
        parts.append((inst, _read_buffer(path, data, instance_view(lay, inst), setup, fused, None, i)))
        if last_decode["fallback"] and not how["fallback"]:
            how = dict(last_decode)
    last_decode.update(how)
    return merge_buffers(top, parts, lay.clock, top_has_data)


def _read_buffer(path: Path, data, lay: Layout, setup: _Setup, fused: bool, keep_decoded,
                 instance: int | None, keep_runs: bool = False) -> tuple[dict, dict]:
    """Decode one buffer: the top one (instance None, `lay` the file's layout) or named instance number
    `instance` (`lay` its view, tracedat_instances.instance_view)."""
    if fused:
        out = _read_fused(path, data, lay, setup, keep_decoded, keep_runs)
        if out is not None:
            return out
        if lay.chunks:  # compressed chunks were only located: inflate them for the record-index path
            lay = parse_layout(path, data)
            if instance is not None:
                lay = instance_view(lay, lay.instances[instance])
    else:
        last_decode.update(path="indexed", fallback="fused=False")
    return _read_indexed(path, lay, setup, keep_decoded)


def _read_fused(path: Path, data, lay: Layout, setup: _Setup, keep_decoded, keep_runs: bool = False):
    """The streaming decode (native/src/tracedat_fused.rs); None when the record-index path must run."""
    from abtest import _native

    if lay.chunks:
        groups = lay.chunks
    else:
        groups = [(cd.cpu, [(cd.start, cd.size, 0)]) for cd in lay.cpu_data if cd.size > 0]
        if any(cd.buf is not data for cd in lay.cpu_data):
            groups = None
    cpus = [cpu for cpu, _ in groups or []]
    if groups is None or len(set(cpus)) != len(cpus):
        last_decode.update(path="indexed", fallback="CPU data not one run per CPU in the file")
        return None
    formats: dict[int, tf.EventFormat] = {}
    bad: dict[int, str] = {}

    def resolve(ev_id: int):
        """Field specs of event id `ev_id` (None: no usable format; its records keep the raw payload)."""
        got, warn = _parse_formats(setup.index, [ev_id])
        if warn:
            bad[ev_id] = warn[0]
        if ev_id not in got:
            return None
        formats[ev_id] = got[ev_id]
        return setup.specs(got)[ev_id]

    def kallsyms() -> bytes:
        return load_kallsyms(lay)

    # bprint %pS needs the kernel symbols: fetched by the decoder on its first bprint record, if any
    syms = kallsyms if any(b"%p" in f for f in setup.printk.values()) else None
    release = isinstance(data, mmap.mmap)
    # tables to be written (keep_decoded, keep_runs): numeric / Categorical columns of tables merged from
    # several CPUs stay as their runs (RunColumn), gathered by the parquet writer (native/src/tracedat_lazy.rs)
    res = _native.tracedat_fused(data, groups, lay.compression, setup.page, lay.big_endian, setup.id_field,
                                 setup.tsc, setup.clock_off, resolve, setup.unknown, setup.ph.commit_size,
                                 setup.printk, syms, release, lay.deferred_sections, keep_decoded is not None and keep_runs)
    if "fallback" in res:
        last_decode.update(path="indexed", fallback=res["fallback"])
        return None
    last_decode.update(path="fused", fallback=None)
    lay.chunks = []
    warnings = lay.warnings + [bad[i] for i in sorted(bad)]
    return _finish(lay, setup, formats, warnings, res, res["stats"], sorted(cpus), keep_decoded)


def _read_indexed(path: Path, lay: Layout, setup: _Setup, keep_decoded):
    """The record-index path: page walk -> record index -> time order -> column pass."""
    from abtest import _native

    bufs = [(cd.cpu, cd.buf, cd.start, cd.size) for cd in lay.cpu_data if cd.size > 0]
    try:
        recs = _native.tracedat_walk(bufs, setup.page, lay.big_endian, setup.id_field, setup.tsc, setup.clock_off)
    except ValueError as e:
        raise _decode_error(path, lay, e) from None
    counts = recs.event_counts()
    formats, warnings = _parse_formats(setup.index, sorted(counts))
    warnings = lay.warnings + warnings
    specs = setup.specs(formats)
    needs_syms = (any(setup.index.get(i, ("", ""))[1] == "bprint" for i in counts)
                  and any(b"%p" in f for f in setup.printk.values()))
    kallsyms = load_kallsyms(lay) if needs_syms else b""  # parsed in Rust, for %pS / %ps
    # the column pass may give back the pages of the sources it has consumed: inflated chunks (dropped
    # right after) and read-only file mappings (they fault back in unchanged); never a caller's bytes
    release = [cd.file_offset is None or isinstance(cd.buf, mmap.mmap) for cd in lay.cpu_data if cd.size > 0]
    res = recs.columns(specs, setup.unknown, setup.ph.commit_size, setup.printk, kallsyms, release)
    stats = recs.stats()
    cpus_with_data = sorted({cd.cpu for cd in lay.cpu_data if cd.size > 0})
    del recs, bufs  # release the records and the (inflated) ring-buffer pages before building frames
    lay.cpu_data = []
    return _finish(lay, setup, formats, warnings, res, stats, cpus_with_data, keep_decoded)


def _finish(lay: Layout, setup: _Setup, formats: dict, warnings: list, res: dict, stats: dict,
            cpus_with_data: list, keep_decoded=None) -> tuple[dict, dict]:
    """Decoder columns + statistics -> (raw tables by name, meta). Tables `keep_decoded` accepts (see
    `read`) stay DecodedTables; the others become DataFrames."""
    index = setup.index
    raw: dict = {}
    to_frame = []
    for ev_id, cols in res["events"].items():
        name = _table_name(index, setup.name_counts, ev_id) if ev_id in formats else f"unknown_event_{ev_id}"
        if ev_id not in formats:
            warnings.append(f"{len(cols['ts'])} events with id {ev_id} have no usable format in the file "
                            f"(table {name}, raw bytes in `payload`)")
        cols = _cpu_names(cols)
        table = None
        if (keep_decoded is not None and ev_id in formats and not _pointer_fields(formats[ev_id], cols)
                and decoded.writable(cols)):
            table = decoded.DecodedTable(cols)
        if table is not None and keep_decoded(name, table):
            raw[name] = table
        else:
            to_frame.append((ev_id, name, cols))
    _materialize([cols for _, _, cols in to_frame])
    for (ev_id, name, _cols), frame in zip(to_frame, _frames([cols for _, _, cols in to_frame])):
        raw[name] = _constant_strings(frame, formats[ev_id], setup.printk) if ev_id in formats else frame
    del to_frame
    uncounted = {int(c): int(n) for c, n in stats["lost_unknown_pages"].items()}
    lost = lost_events({int(c): int(n) for c, n in stats["lost"].items()}, uncounted, lay.cpustats)
    if lost.total:
        warnings.append(f"{lost.total} events lost in the ring buffer (per CPU: {_str_keys(lost.per_cpu)})")
    warnings += lost.warnings
    if res["short_fields"]:
        warnings.append(f"{res['short_fields']} field values lay beyond their record's end and read as 0")
    if res["missing_formats"]:
        warnings.append(f"{res['missing_formats']} bprint/bputs events reference printk formats missing from "
                        f"the file")
    if lay.has_time_shift or lay.guests:
        warnings.append("host/guest time synchronisation data present but not applied")
    meta = _meta(lay, stats, lost, uncounted, warnings)
    meta["event_formats"] = len(index)
    meta["cpus_with_data"] = cpus_with_data
    return {k: raw[k] for k in sorted(raw)}, meta


def _materialize(tables: list[dict]) -> None:
    """Replace the RunColumns (columns held as their per-CPU runs, see `read_fused`) of these tables'
    column dicts by the decoder's arrays, merged on the native threads."""
    from abtest import _native

    where = [(cols, name) for cols in tables for name, v in cols.items() if isinstance(v, _native.RunColumn)]
    if where:
        for (cols, name), arr in zip(where, _native.tracedat_materialize([cols[n] for cols, n in where])):
            cols[name] = arr


_CHAR_POINTER = re.compile(r"\bchar\s*\*$")


def _pointer_fields(ev: tf.EventFormat, columns) -> list[str]:
    """Integer fields declared `char *` (candidates for `_constant_strings`)."""
    return [f.name for f in ev.fields if f.kind == tf.KIND_INT and _CHAR_POINTER.search(f.type)
            and f.name in columns]


def _constant_strings(frame: pl.DataFrame, ev: tf.EventFormat, printk: dict[int, bytes]) -> pl.DataFrame:
    """`const char *` fields that point to constant strings the kernel exported with the trace (the
    file's printk formats, where tracepoint_string() puts them; e.g. rcu_utilization `s`, wbt_step
    `msg`) -> those strings, as trace-cmd prints them (NULL -> null). A field holding any other address
    (a user-space or heap pointer, e.g. a syscall's `filename`) keeps its integer addresses."""
    names = _pointer_fields(ev, frame.columns)
    if not names or not printk:
        return frame
    addresses = pl.Series(list(printk), dtype=pl.UInt64)
    texts = pl.Series([t.decode(errors="replace") for t in printk.values()], dtype=pl.String)
    for name in names:
        col = frame[name].cast(pl.UInt64)
        pointed = set(col.filter(col != 0).unique().to_list())
        if pointed and pointed <= printk.keys():
            frame = frame.with_columns(col.replace_strict(addresses, texts, default=None).alias(name))
    return frame


def _str_keys(per_cpu: dict[int, int]) -> dict[str, int]:
    """{cpu: n} with the CPU numbers as strings, as meta (and its JSON) holds per-CPU counts."""
    return {str(c): n for c, n in per_cpu.items()}


def _meta(lay: Layout, res: dict, lost: LostEvents, uncounted: dict[int, int], warnings: list) -> dict:
    uname = tf.parse_uname(lay.uname)
    return {
        "format": "trace.dat",
        "format_version": str(lay.version),
        "compression": lay.compression,
        "clock": lay.clock,
        "cpus": int(lay.cpus),
        "page_size": lay.page_size,
        "kernel": {
            "release": uname.get("release"), "version": uname.get("version"), "arch": uname.get("arch"),
            "uname": uname.get("uname"), "long_size": lay.long_size,
            "kernel_long_size": tf.parse_header_page(lay.header_page, lay.long_size).commit_size,
            "endian": "big" if lay.big_endian else "little",
        },
        "tracer_version": lay.tracer_version,
        "ts_offset_ns": lay.ts_offset_ns + lay.date_offset_ns,
        "tsc2nsec": list(lay.tsc2nsec) if lay.tsc2nsec else None,
        "lost_events": lost.total,
        "lost_events_per_cpu": _str_keys(lost.per_cpu),
        "lost_events_exact": lost.exact,
        "lost_pages_without_count_per_cpu": _str_keys(uncounted),
        "saved_cmdlines": sum(map(bool, map(str.strip, lay.cmdlines.splitlines()))),  # non-blank lines
        "ring_buffer_pages": int(res["pages"]),
        "records": int(res["records"]),
        "instances": [],
        "warnings": warnings,
    }
