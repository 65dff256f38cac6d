"""Canonical scheduling tables -> perfetto ``FtraceEventBundle`` packets, as perfetto's own ftrace data source
writes them, so that trace_processor builds its ``sched``, ``thread_state``, ``thread`` and CPU counter
tables (and the Perfetto UI its CPU and thread tracks) from any format abtest reads.

Written, per CPU, in bundles of at most ``BUNDLE_EVENTS`` events:

* ``sched_switch`` and ``sched_waking`` in the bundle's ``compact_sched`` form (perfetto's compact encoding:
  delta-coded timestamps, interned comms; a switch carries the next task and the previous task's state, the
  previous task is the one the CPU's previous switch brought in);
* ``sched_wakeup`` (only when the trace has no sched_waking, which trace_processor prefers), ``sched_wakeup_new``,
  ``cpu_frequency`` (kHz), ``cpu_idle`` (state, 4294967295 = exit)
  and the text markers (``print``: atrace's ``B|pid|name`` / ``E`` / ``C`` lines become slices and counters)
  as ordinary ``FtraceEvent`` messages.

Timestamps are the canonical tables' ``ts`` (ns on the trace's own clock), written unchanged; the bundles
declare no ftrace clock, so trace_processor takes them as its default (BOOTTIME) domain, the same domain the
derived tracks use: everything lines up, and a ts in a query equals the ts abtest prints.

Field numbers: perfetto's protos/perfetto/trace/ftrace/*.proto (public).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from abtest.timeline import wire

BUNDLE_EVENTS = 8192

# TracePacket / FtraceEventBundle / CompactSched / FtraceEvent field numbers
PACKET_FTRACE_EVENTS, PACKET_SEQUENCE_ID, PACKET_SYSTEM_INFO = 1, 10, 45
BUNDLE_CPU, BUNDLE_EVENT, BUNDLE_COMPACT_SCHED = 1, 2, 4
CS_SWITCH_TS, CS_SWITCH_PREV_STATE, CS_SWITCH_NEXT_PID, CS_SWITCH_NEXT_PRIO = 1, 2, 3, 4
CS_INTERN_TABLE, CS_SWITCH_NEXT_COMM = 5, 6
CS_WAKING_TS, CS_WAKING_PID, CS_WAKING_TARGET_CPU, CS_WAKING_PRIO, CS_WAKING_COMM = 7, 8, 9, 10, 11
EV_TIMESTAMP, EV_PID = 1, 2
EV_PRINT, EV_CPU_FREQUENCY, EV_CPU_IDLE, EV_SCHED_WAKEUP, EV_SCHED_WAKEUP_NEW = 3, 11, 13, 17, 114

# canonical tables written as FtraceEvent: table -> (FtraceEvent field, [(inner field, column, kind)])
_PLAIN = {
    "cpu_frequency": (EV_CPU_FREQUENCY, [(1, "frequency_khz", "int"), (2, "cpu", "int")]),
    "cpu_idle": (EV_CPU_IDLE, [(1, "state", "u32"), (2, "cpu", "int")]),
    "sched_wakeup": (
        EV_SCHED_WAKEUP,
        [(1, "comm", "str"), (2, "pid", "int"), (3, "prio", "int"), (5, "target_cpu", "int")],
    ),
    "sched_wakeup_new": (
        EV_SCHED_WAKEUP_NEW,
        [(1, "comm", "str"), (2, "pid", "int"), (3, "prio", "int"), (5, "target_cpu", "int")],
    ),
    "marker": (EV_PRINT, [(2, "text", "str")]),
}
WRITTEN_TABLES = ("sched_switch", "sched_waking", *_PLAIN)


def _int_col(df: pl.DataFrame, name: str, default: int = 0) -> np.ndarray:
    if name not in df.columns:
        return np.full(df.height, default, dtype=np.int64)
    return df[name].cast(pl.Int64).fill_null(default).to_numpy()


def _str_col(df: pl.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes concatenated, lengths) of a string column (wire.Rows.strings' input)."""
    s = df[name].cast(pl.Utf8) if name in df.columns else pl.Series([""] * df.height, dtype=pl.Utf8)
    return wire.arrow_strings(s.to_arrow())


def _codes(df: pl.DataFrame, name: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, names): a string column as indices into its distinct values."""
    s = df[name].cast(pl.Utf8).fill_null("") if name in df.columns else pl.Series([""] * df.height)
    names = s.unique(maintain_order=True)
    codes = s.replace_strict(names, pl.int_range(len(names), eager=True), return_dtype=pl.Int64)
    return codes.to_numpy(), names.to_list()


def _chunks(cpu: np.ndarray) -> list[tuple[int, int, int]]:
    """(cpu, i, j) row ranges of a frame sorted by (cpu, ts): one per CPU, cut every BUNDLE_EVENTS rows."""
    out = []
    if len(cpu) == 0:
        return out
    cuts = np.flatnonzero(np.diff(cpu)) + 1
    for i, j in zip(np.r_[0, cuts], np.r_[cuts, len(cpu)]):
        for k in range(int(i), int(j), BUNDLE_EVENTS):
            out.append((int(cpu[i]), k, min(k + BUNDLE_EVENTS, int(j))))
    return out


def _packet(bundle: bytes) -> bytes:
    return wire.framed_packet(wire.field_bytes(PACKET_FTRACE_EVENTS, bundle))


def _sorted(df: pl.DataFrame, cpu_col: str = "cpu") -> pl.DataFrame:
    keep = pl.col(cpu_col).is_not_null() & pl.col("ts").is_not_null()
    return df.filter(keep).sort(cpu_col, "ts", maintain_order=True)


def _interned(codes: np.ndarray, names: list[str]) -> tuple[bytes, np.ndarray]:
    """(repeated intern_table fields of the names these codes use, each row's index into that table)."""
    used, idx = np.unique(codes, return_inverse=True)
    table = b"".join(wire.field_string(CS_INTERN_TABLE, names[int(c)]) for c in used)
    return table, idx.astype(np.int64)


def _deltas(ts: np.ndarray) -> np.ndarray:
    return np.diff(ts, prepend=0)


def compact_switch_packets(sched_switch: pl.DataFrame) -> list[bytes]:
    """sched_switch rows -> framed packets of per-CPU bundles with compact_sched switch arrays."""
    sw = _sorted(sched_switch)
    cpu, ts = _int_col(sw, "cpu"), _int_col(sw, "ts")
    state, pid, prio = _int_col(sw, "prev_state"), _int_col(sw, "next_pid"), _int_col(sw, "next_prio", 120)
    comms, names = _codes(sw, "next_comm")
    out = []
    for c, i, j in _chunks(cpu):
        intern, idx = _interned(comms[i:j], names)
        cs = (
            intern
            + wire.packed_varints(CS_SWITCH_TS, _deltas(ts[i:j]))
            + wire.packed_varints(CS_SWITCH_PREV_STATE, state[i:j])
            + wire.packed_varints(CS_SWITCH_NEXT_PID, pid[i:j])
            + wire.packed_varints(CS_SWITCH_NEXT_PRIO, prio[i:j])
            + wire.packed_varints(CS_SWITCH_NEXT_COMM, idx)
        )
        out.append(_packet(wire.field_varint(BUNDLE_CPU, c) + wire.field_bytes(BUNDLE_COMPACT_SCHED, cs)))
    return out


def compact_waking_packets(sched_waking: pl.DataFrame) -> list[bytes]:
    """sched_waking rows -> framed packets of per-CPU (the CPU that recorded the event) compact bundles."""
    wk = _sorted(sched_waking)
    cpu, ts = _int_col(wk, "cpu"), _int_col(wk, "ts")
    pid, prio = _int_col(wk, "pid"), _int_col(wk, "prio", 120)
    target = _int_col(wk, "target_cpu") if "target_cpu" in wk.columns else cpu
    comms, names = _codes(wk, "comm")
    out = []
    for c, i, j in _chunks(cpu):
        intern, idx = _interned(comms[i:j], names)
        cs = (
            intern
            + wire.packed_varints(CS_WAKING_TS, _deltas(ts[i:j]))
            + wire.packed_varints(CS_WAKING_PID, pid[i:j])
            + wire.packed_varints(CS_WAKING_TARGET_CPU, target[i:j])
            + wire.packed_varints(CS_WAKING_PRIO, prio[i:j])
            + wire.packed_varints(CS_WAKING_COMM, idx)
        )
        out.append(_packet(wire.field_varint(BUNDLE_CPU, c) + wire.field_bytes(BUNDLE_COMPACT_SCHED, cs)))
    return out


def plain_event_packets(name: str, df: pl.DataFrame) -> list[bytes]:
    """Rows of one canonical table in _PLAIN -> framed packets of per-CPU bundles of FtraceEvents."""
    ev_field, fields = _PLAIN[name]
    d = _sorted(df)
    if d.is_empty():
        return []
    inner = wire.Rows(d.height)
    for num, col, kind in fields:
        if kind == "str":
            inner.strings(num, _str_col(d, col))
        else:
            vals = _int_col(d, col)
            inner.varint(num, vals & 0xFFFFFFFF if kind == "u32" else vals)
    ev = wire.Rows(d.height)
    ev.varint(EV_TIMESTAMP, _int_col(d, "ts"))
    ev.varint(EV_PID, _int_col(d, "pid" if name == "marker" else "common_pid"))
    ev.message(ev_field, inner)
    framed = wire.Rows(d.height).message(BUNDLE_EVENT, ev)
    flat = framed.to_flat().tobytes()
    offs = np.r_[0, np.cumsum(framed.lens)]
    return [
        _packet(wire.field_varint(BUNDLE_CPU, c) + flat[offs[i] : offs[j]]) for c, i, j in _chunks(_int_col(d, "cpu"))
    ]


def system_info_packet(meta: dict) -> bytes:
    """SystemInfo with the kernel's uname when the trace states it (trace_processor reads prev_state bits by
    kernel version); empty bytes when the release is unknown."""
    k = meta.get("kernel") or {}
    release = k.get("release")
    if not release:
        return b""
    uts = (
        wire.field_string(1, "Linux")
        + wire.field_string(2, str(k.get("version") or ""))
        + wire.field_string(3, str(release))
        + wire.field_string(4, str(k.get("arch") or ""))
    )
    return wire.framed_packet(wire.field_bytes(PACKET_SYSTEM_INFO, wire.field_bytes(1, uts)))


def ftrace_packets(tables: dict[str, pl.DataFrame], meta: dict) -> tuple[bytes, dict[str, int]]:
    """The trace's scheduling data as perfetto ftrace packets: (bytes, rows written per canonical table)."""
    parts, counts = [system_info_packet(meta)], {}
    if "sched_switch" in tables:
        parts += compact_switch_packets(tables["sched_switch"])
        counts["sched_switch"] = tables["sched_switch"].height
    if "sched_waking" in tables:
        parts += compact_waking_packets(tables["sched_waking"])
        counts["sched_waking"] = tables["sched_waking"].height
    for name in _PLAIN:
        if name == "sched_wakeup" and "sched_waking" in tables:
            continue  # trace_processor's runnable states come from sched_waking; sched_wakeup would only add size
        if name in tables and tables[name].height:
            df = tables[name]
            if name == "marker" and "event" in df.columns:  # print/tracing_mark_write/bputs/bprint all as print
                df = df.filter(pl.col("text").is_not_null())
            parts += plain_event_packets(name, df)
            counts[name] = df.height
    return b"".join(parts), counts
