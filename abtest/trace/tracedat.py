"""trace-cmd trace.dat (file versions 6 and 7) -> raw polars tables, one per kernel event.

The compiled decoder (native/tracedat, `abtest._native.tracedat_decode`) owns the whole format: file
layout and options, event formats, printk formats and kallsyms, the ring-buffer pages of every buffer
(named instances included), v7 compression, time order and the metadata. It runs on all cores without
calling back into Python and returns one Arrow record batch per event (Arrow PyCapsule interface) and a
metadata dict; this module only turns the batches into polars frames (no copy of integer columns).

Raw table columns: ts (Int64, ns on the trace clock, after trace-cmd's OFFSET / DATE / TSC2NSEC
corrections), cpu (Int32, ring buffer the event was in), common_pid (Int32), then every field of the
event's format under its kernel name and width: u32 -> UInt32, s64 -> Int64, char[N] (comm and other
names, and __data_loc comm / *_comm) -> Categorical, other __data_loc char[] -> Utf8, other fixed arrays
-> List(int), other dynamic arrays -> Binary (kernel_stack/user_stack `caller` -> List(UInt64) of the
`size` recorded entries). An event with its own `cpu` field (sched_load_*, ...) keeps it as `cpu`; the
ring-buffer CPU is then `buffer_cpu`. A `const char *` field whose non-zero values all point to constant
strings of the file's printk formats (rcu_utilization `s`, bprint `fmt`) holds those strings (NULL ->
null), as trace-cmd prints them; other pointers stay integers.
Marker events: print `buf` is the written text; bprint `buf` is the trace_printk() text formatted from
the printk format and the binary arguments (as `trace-cmd report` prints it, without the ip prefix);
bputs `str` is the constant string. `common_type` is dropped (it is the table).
Events whose id has no format in the file land in `unknown_event_<id>` with the whole record as
`payload` (Binary) and a warning.
Named trace instances (tracefs `instances/NAME`, `trace-cmd record -B NAME`): every buffer's events go
to the same tables, with a column `instance` (the instance name; null for the top buffer); rows are
ordered by timestamp, ties in file order (top buffer, then the instances). meta["instances"] lists the
names (sorted), meta["instance_buffers"] gives each instance's clock, per-event counts and lost events.
Limits on inflated sizes (v7 chunks and sections): abtest.trace.limits (a chunk that declares more is a
TraceFormatError naming its offset and the limit).
"""

from __future__ import annotations

import mmap

import polars as pl

from abtest.trace.errors import TraceFormatError
from abtest.trace.limits import Limits, current


def _native():
    from abtest import _native

    return _native


def format_error(path, err: ValueError) -> TraceFormatError:
    """The decoder's ValueError((offset, message, expected)) as a TraceFormatError naming the file."""
    if len(err.args) == 3 and isinstance(err.args[1], str):
        offset, message, expected = err.args
        return TraceFormatError(path, message, offset=offset, expected=expected)
    return TraceFormatError(path, str(err))


def frames(batches: list) -> dict[str, pl.DataFrame]:
    """(name, Arrow record batch) pairs -> {name: DataFrame}, `ts` flagged sorted when it is (the decoders
    emit tables in timestamp order, except perfetto's sched_switch / sched_waking with compact rows after
    the full events' ones). Converted one after the other, so that polars assigns its global category ids
    in table and column order (the same ids, and parquet files, whatever the timing)."""
    out = {}
    batches.reverse()
    while batches:  # each batch released once converted (its dictionary columns are copied by polars)
        name, batch = batches.pop()
        df = pl.DataFrame(batch)
        del batch
        if "ts" not in df.columns:  # a table describing the system (perfetto's `process`)
            out[name] = df
            continue
        ts = df["ts"]
        out[name] = df.with_columns(ts.set_sorted()) if ts.is_sorted() else df
    return out


def read(
    path, data, *, limits: Limits | None = None, fields_of: frozenset[str] | None = None
) -> tuple[dict[str, pl.DataFrame], dict]:
    """Decode a trace.dat held in `data` (bytes or mmap of the file at `path`). Returns (raw tables by
    event name, meta). Only event types with records get a table (the file carries the formats of
    every event the kernel knows, thousands of them); meta["event_formats"] counts the formats present.
    limits: the inflate limits (default: abtest.trace.limits.current(), the environment's). fields_of: the
    tables whose fields are decoded (None: all); the others keep `ts` and `cpu` only and the decoder names them
    in meta["fields_not_decoded"]."""
    lim = limits or current()
    try:
        # a read-only file mapping's pages are given back once decoded (they fault back in from the file)
        batches, meta = _native().tracedat_decode(
            data,
            lim.inflate_ratio,
            lim.inflate_floor,
            lim.inflated_bytes,
            isinstance(data, mmap.mmap),
            0,
            None if fields_of is None else sorted(fields_of),
        )
    except ValueError as e:
        raise format_error(path, e) from None
    return frames(batches), _meta_of(meta)


def read_rounds(
    path, data, emit, *, round_bytes: int, piece_bytes: int, limits: Limits | None = None, progress=None
) -> dict | None:
    """Decode a trace.dat held in `data` in rounds of about `round_bytes` of ring-buffer data (inflated),
    pieces of about `piece_bytes` (`abtest._native.tracedat_decode_rounds`): `emit({name: raw table})` is
    called with each round's rows (every table's rows later than the previous round's; concatenated, the
    rounds are `read`'s tables). `progress(done, total)`: ring-buffer bytes decoded so far and in all, after
    each round. Returns the meta, or None when a CPU's timestamps go backwards (rounds cannot keep the time
    order; rounds may have been emitted: decode the whole file with `read`)."""
    lim = limits or current()
    consumer_failed = False

    def each_round(batches: list, done_total: tuple[int, int]) -> None:
        nonlocal consumer_failed
        try:
            emit(frames(batches))
            if progress is not None:
                progress(*done_total)
        except BaseException:
            consumer_failed = True  # not the file's fault: raised as it is
            raise

    try:
        meta = _native().tracedat_decode_rounds(
            data,
            lim.inflate_ratio,
            lim.inflate_floor,
            lim.inflated_bytes,
            each_round,
            int(round_bytes),
            int(piece_bytes),
            isinstance(data, mmap.mmap),
        )
    except ValueError as e:
        if consumer_failed:
            raise
        raise format_error(path, e) from None
    return None if meta is None else _meta_of(meta)


def _meta_of(meta: dict) -> dict:
    """The decoder's meta as the readers' (format named; empty instance buffers and import errors left out)."""
    meta = dict(meta, format="trace.dat")
    if meta["instance_buffers"]:
        meta["instance_buffers"] = dict(meta["instance_buffers"])
    else:
        del meta["instance_buffers"]
    if not meta["import_errors"]:
        del meta["import_errors"]
    if not meta.get("undecoded_bytes_per_cpu", True):  # v7 declared bytes no chunk covers (none: left out)
        del meta["undecoded_bytes_per_cpu"]
    if meta.get("fields_not_decoded", ()) is None:  # every table decoded (no fields_of)
        del meta["fields_not_decoded"]
    return meta


def layout(path, data) -> dict:
    """Where the file keeps its ring-buffer data (`abtest._native.tracedat_layout`): version, page_size,
    buffers with their per-CPU stored spans or compressed chunks. For tests and tools."""
    try:
        return _native().tracedat_layout(data)
    except ValueError as e:
        raise format_error(path, e) from None


def printk_and_kallsyms(path, data) -> tuple[dict[int, bytes], bytes]:
    """({address: printk format}, kallsyms text) of the file: what bprint text and %pS symbols come from."""
    try:
        return _native().tracedat_printk_kallsyms(data)
    except ValueError as e:
        raise format_error(path, e) from None
