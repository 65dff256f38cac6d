"""Derived tracks as perfetto ``TrackDescriptor`` + ``TrackEvent`` packets (the SDK's track-event format,
which trace_processor imports into its ``track``/``counter``/``slice``/``args`` tables and the Perfetto UI
shows as tracks nested under their parents).

A ``Track`` is one row of the UI: a group (no events: a header others nest under), a counter (``counter``
table rows: ts, value) or a slice track (``slice`` rows: ts, dur, name, args). Events are one polars frame
for the whole file (``EVENT_SCHEMA``), written on one packet sequence in time order with an incremental
clock: each packet's timestamp is the delta (ns) from the previous one (a ClockSnapshot on the sequence
maps that clock to BOOTTIME, the domain the ftrace packets use), so a counter sample costs ~15-25 bytes.

EVENT_SCHEMA columns:
  track (UInt64)   the Track's uuid
  ts (Int64)       ns on the trace clock
  type (Int8)      1 slice begin, 2 slice end, 3 instant, 4 counter (TrackEvent.Type)
  value (Float64)  counter value (null otherwise)
  name (Utf8)      slice / instant name (null otherwise)
  args (Binary)    encoded DebugAnnotation fields (annotations()), null for none
Field numbers: perfetto's protos/perfetto/trace/track_event/*.proto and trace_packet.proto (public).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from abtest.timeline import wire

SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
EVENT_SCHEMA = {
    "track": pl.UInt64,
    "ts": pl.Int64,
    "type": pl.Int8,
    "value": pl.Float64,
    "name": pl.Utf8,
    "args": pl.Binary,
}

SEQUENCE_ID = 0xAB7  # the derived tracks' trusted_packet_sequence_id (distinct from a recorder's ids)
INCREMENTAL_CLOCK = 64  # a sequence-scoped clock id (64..127), incremental, 1 ns units
BOOTTIME = 6

# TracePacket fields
P_CLOCK_SNAPSHOT, P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_SEQ_FLAGS = 6, 8, 10, 11, 13
P_TRACK_DESCRIPTOR, P_DEFAULTS, P_TS_CLOCK = 60, 59, 58
SEQ_CLEARED = 1  # sequence_flags of the first packet: incremental state (the clock) starts here
# TrackEvent fields
TE_TYPE, TE_TRACK, TE_NAME, TE_DOUBLE, TE_INT, TE_ANNOTATIONS = 9, 11, 23, 44, 30, 4


@dataclass(frozen=True)
class Track:
    """One UI track. kind: "group" | "counter" | "slice"; unit: shown beside counter values (mW, kHz,
    util); description: the track's tooltip (what it is, its source, units); rank: order among siblings."""

    uuid: int
    name: str
    kind: str
    parent: int | None = None
    unit: str | None = None
    description: str = ""
    rank: int = 0
    share_axis: str | None = None


def track_uuid(*parts: object) -> int:
    """A stable 63-bit uuid from a path of names (the same track gets the same uuid in every file)."""
    h = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1 or 1


def descriptor_packet(t: Track) -> bytes:
    """TrackDescriptor packet of a track."""
    body = wire.field_varint(1, t.uuid)
    if t.parent is not None:
        body += wire.field_varint(5, t.parent)
    body += wire.field_string(2, t.name)
    if t.description:
        body += wire.field_string(14, t.description)
    if t.kind == "counter":
        counter = b""
        if t.unit:
            counter += wire.field_string(6, t.unit)
        if t.share_axis:
            counter += wire.field_string(7, t.share_axis)
        body += wire.field_bytes(8, counter)
    if t.kind == "group":
        body += wire.field_varint(11, 3)  # child_ordering EXPLICIT: children by sibling_order_rank
    body += wire.field_varint(12, t.rank)
    return wire.framed_packet(wire.field_bytes(P_TRACK_DESCRIPTOR, body) + wire.field_varint(P_SEQ_ID, SEQUENCE_ID))


def sequence_start_packet(first_ts: int) -> bytes:
    """The sequence's first packet: incremental state cleared, the incremental clock defined at ``first_ts``
    (as BOOTTIME) and made the sequence's default timestamp clock."""
    clock = wire.field_bytes(
        1,
        wire.field_varint(1, INCREMENTAL_CLOCK)
        + wire.field_varint(2, first_ts)
        + wire.field_varint(3, 1)
        + wire.field_varint(4, 1),
    ) + wire.field_bytes(1, wire.field_varint(1, BOOTTIME) + wire.field_varint(2, first_ts))
    body = (
        wire.field_varint(P_TIMESTAMP, first_ts)
        + wire.field_varint(P_TS_CLOCK, BOOTTIME)
        + wire.field_bytes(P_CLOCK_SNAPSHOT, clock)
        + wire.field_varint(P_SEQ_ID, SEQUENCE_ID)
        + wire.field_varint(P_SEQ_FLAGS, SEQ_CLEARED)
        + wire.field_bytes(P_DEFAULTS, wire.field_varint(P_TS_CLOCK, INCREMENTAL_CLOCK))
    )
    return wire.framed_packet(body)


def annotations(**values: object) -> bytes:
    """DebugAnnotation fields (TrackEvent.debug_annotations) for one event: ints, floats, strings."""
    out = b""
    for k, v in values.items():
        if v is None:
            continue
        ann = wire.field_string(10, k)
        if isinstance(v, bool):
            ann += wire.field_varint(2, int(v))
        elif isinstance(v, int):
            ann += wire.field_varint(4, v)
        elif isinstance(v, float):
            ann += wire.field_double(5, v)
        else:
            ann += wire.field_string(6, str(v))
        out += wire.field_bytes(TE_ANNOTATIONS, ann)
    return out


def event_packets(events: pl.DataFrame, first_ts: int) -> bytes:
    """EVENT_SCHEMA rows -> framed TrackEvent packets on the derived sequence, in time order (the clock is
    incremental: deltas from ``first_ts``). Counter values that are whole numbers are written as integers."""
    # at one ts: ends first (a slice ending where the next one on its track begins), then begins, instants, counters
    order = pl.col("type").replace_strict({SLICE_END: 0, SLICE_BEGIN: 1, INSTANT: 2, COUNTER: 3}, return_dtype=pl.Int8)
    ev = events.sort(pl.col("ts"), order, maintain_order=True)
    n = ev.height
    if n == 0:
        return b""
    ts = ev["ts"].to_numpy()
    delta = np.diff(ts, prepend=first_ts)
    if (delta < 0).any():
        raise ValueError("derived events before the sequence start")
    typ = ev["type"].to_numpy().astype(np.int64)
    is_counter = typ == COUNTER
    value = ev["value"].fill_null(0.0).to_numpy()
    whole = is_counter & (value == np.round(value)) & (np.abs(value) < 2**53)
    named = ev["name"].is_not_null().to_numpy()
    args = ev["args"]
    has_args = args.is_not_null().to_numpy()

    te = wire.Rows(n)
    te.varint(TE_TYPE, typ)
    te.varint(TE_TRACK, ev["track"].cast(pl.Int64).to_numpy())
    if named.any():
        te.strings(TE_NAME, wire.arrow_strings(ev["name"].to_arrow()), mask=named)
    if whole.any():
        te.varint(TE_INT, np.where(whole, value, 0).astype(np.int64), mask=whole)
    if (is_counter & ~whole).any():
        te.double(TE_DOUBLE, value, mask=is_counter & ~whole)
    if has_args.any():
        te.raw(wire.arrow_strings(args.to_arrow()))
    pkt = wire.Rows(n)
    pkt.varint(P_TIMESTAMP, delta)
    pkt.message(P_TRACK_EVENT, te)
    pkt.varint(P_SEQ_ID, np.full(n, SEQUENCE_ID))
    return wire.framed_packets(pkt)


def counter_events(track: int, ts: np.ndarray | pl.Series, value: np.ndarray | pl.Series) -> pl.DataFrame:
    """Counter samples of one track as EVENT_SCHEMA rows."""
    df = pl.DataFrame({"ts": pl.Series(ts).cast(pl.Int64), "value": pl.Series(value).cast(pl.Float64)})
    return df.select(
        pl.lit(track, pl.UInt64).alias("track"),
        "ts",
        pl.lit(COUNTER, pl.Int8).alias("type"),
        "value",
        pl.lit(None, pl.Utf8).alias("name"),
        pl.lit(None, pl.Binary).alias("args"),
    )


def slice_events(
    track: int, ts: pl.Series, dur: pl.Series, name: pl.Series, args: pl.Series | None = None
) -> pl.DataFrame:
    """Complete slices (ts, dur ns, name, optional encoded args) as begin/end EVENT_SCHEMA rows; a slice of
    dur 0 as an instant (its end would sort before its begin). Slices on one track must not overlap (they
    would nest)."""
    n = len(ts)
    a = args if args is not None else pl.Series([None] * n, dtype=pl.Binary)
    d = pl.DataFrame(
        {
            "ts": pl.Series(ts).cast(pl.Int64),
            "dur": pl.Series(dur).cast(pl.Int64),
            "name": pl.Series(name).cast(pl.Utf8),
            "args": a,
        }
    )
    point = d.filter(pl.col("dur") <= 0)
    begin = d.filter(pl.col("dur") > 0)
    end = begin.select((pl.col("ts") + pl.col("dur")).alias("ts"))
    return pl.concat(
        [
            instant_events(track, point["ts"], point["name"], point["args"]),
            begin.select(
                pl.lit(track, pl.UInt64).alias("track"),
                "ts",
                pl.lit(SLICE_BEGIN, pl.Int8).alias("type"),
                pl.lit(None, pl.Float64).alias("value"),
                "name",
                "args",
            ),
            end.select(
                pl.lit(track, pl.UInt64).alias("track"),
                "ts",
                pl.lit(SLICE_END, pl.Int8).alias("type"),
                pl.lit(None, pl.Float64).alias("value"),
                pl.lit(None, pl.Utf8).alias("name"),
                pl.lit(None, pl.Binary).alias("args"),
            ),
        ]
    )


def instant_events(track: int, ts: pl.Series, name: pl.Series, args: pl.Series | None = None) -> pl.DataFrame:
    n = len(ts)
    a = args if args is not None else pl.Series([None] * n, dtype=pl.Binary)
    df = pl.DataFrame({"ts": pl.Series(ts).cast(pl.Int64), "name": pl.Series(name).cast(pl.Utf8), "args": a})
    return df.select(
        pl.lit(track, pl.UInt64).alias("track"),
        "ts",
        pl.lit(INSTANT, pl.Int8).alias("type"),
        pl.lit(None, pl.Float64).alias("value"),
        "name",
        "args",
    )


QUANT_BITS = 10


def quantized(value: pl.Expr, bits: int = QUANT_BITS) -> pl.Expr:
    """``value`` at the resolution derived counters are written with: whole units while |value| < 2**bits,
    else ``bits`` significant bits (a step of 2**(floor(log2 |value|) - bits + 1): relative error < 2**-bits).
    PELT signals below 1024 keep the kernel's own resolution; a contended runqueue's runnable (tens of
    thousands) does not write a sample per scheduler event for changes of 0.01 %."""
    big = value.abs() >= 2**bits
    step = pl.lit(2.0).pow(value.abs().clip(1.0, None).log(2).floor() - (bits - 1))
    return pl.when(big).then((value / step).round(0) * step).otherwise(value.round(0))


def thinned(df: pl.DataFrame, key: str | list[str], value: str) -> pl.DataFrame:
    """Rows of a step signal (sorted by key, ts) where ``value`` differs from the key's previous row: a
    counter track holds its last value, so a repeated sample adds nothing."""
    prev = pl.col(value).shift(1).over(key)
    return df.filter(prev.is_null() | (pl.col(value) != prev) | (pl.col(value).is_null() != prev.is_null()))
