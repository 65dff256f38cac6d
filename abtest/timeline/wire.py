"""Protocol Buffers wire format, written by hand (the public encoding spec: varints, tags, length-delimited
fields, fixed 64-bit doubles), for the few perfetto messages the timeline writes.

Two levels:

* scalar helpers (``field_varint``, ``field_bytes``, ``field_double`` ...) build one small message (a track
  descriptor, a bundle header) as ``bytes``;
* ``Rows``: the same message built for many rows at once with numpy (one row = one encoded message), for the
  hot kinds (sched switches, counter samples, slice events): varint columns are encoded into an (n, 10)
  byte matrix and scattered into one flat buffer, so that 3 M rows cost numpy passes rather than 3 M Python
  calls. A ``Rows`` can be nested as a length-delimited field of an outer ``Rows`` (a TrackEvent inside a
  TracePacket) and finally framed as the repeated ``packet`` field of the Trace message.

Signed int32/int64 fields are written as their 64-bit two's complement (10 bytes for a negative value), as
protobuf does for ``int32``/``int64`` (not ``sint``).
"""

from __future__ import annotations

import struct

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2

_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # the 10 possible 7-bit groups of a 64-bit value


# -- scalars -------------------------------------------------------------------------------------
def varint(n: int) -> bytes:
    """Unsigned LEB128 of ``n`` (a negative int: its 64-bit two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def field_varint(field: int, value: int) -> bytes:
    return tag(field, VARINT) + varint(int(value))


def field_bytes(field: int, payload: bytes) -> bytes:
    return tag(field, LEN) + varint(len(payload)) + payload


def field_string(field: int, text: str) -> bytes:
    return field_bytes(field, text.encode("utf-8", "replace"))


def field_double(field: int, value: float) -> bytes:
    return tag(field, FIXED64) + struct.pack("<d", float(value))


# -- columns -------------------------------------------------------------------------------------
def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes (n, w) uint8, lengths (n,) int64) of the varints of ``values`` (any integer dtype; negative
    values as 64-bit two's complement); w is the longest varint's length (at most 10)."""
    v = np.ascontiguousarray(values).astype(np.int64, copy=False).view(np.uint64)
    if len(v) == 0:
        return np.zeros((0, 1), dtype=np.uint8), np.zeros(0, dtype=np.int64)
    top = int(v.max())
    width = max(1, -(-top.bit_length() // 7))
    shifts = _SHIFTS[:width]
    groups = v[:, None] >> shifts[None, :]
    lens = np.maximum((groups != 0).sum(axis=1), 1).astype(np.int64)
    cont = np.arange(width)[None, :] < (lens[:, None] - 1)
    out = ((groups & np.uint64(0x7F)) | (cont.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    return out, lens


def packed_varints(field: int, values: np.ndarray) -> bytes:
    """A packed repeated varint field (``repeated int64 x = N [packed = true]``); empty bytes for no values."""
    if len(values) == 0:
        return b""
    m, lens = varint_matrix(values)
    payload = m[np.arange(m.shape[1])[None, :] < lens[:, None]].tobytes()
    return field_bytes(field, payload)


def _ragged(data: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Byte strings given as their concatenation ``data`` (uint8) and ``lens`` as an (n, longest) matrix (zero
    padded)."""
    n = len(lens)
    width = int(lens.max()) if n else 0
    mat = np.zeros((n, max(width, 1)), dtype=np.uint8)
    if width:
        row = np.repeat(np.arange(n), lens)
        col = np.arange(len(data)) - np.repeat(np.cumsum(lens) - lens, lens)
        mat[row, col] = data
    return mat


def byte_strings(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(concatenation, lengths) of a list of byte strings."""
    lens = np.fromiter((len(b) for b in values), dtype=np.int64, count=len(values))
    return np.frombuffer(b"".join(values), dtype=np.uint8), lens


def arrow_strings(arr) -> tuple[np.ndarray, np.ndarray]:
    """(concatenation, lengths) of a pyarrow string/binary array, nulls as empty strings, without a Python
    object per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pc.fill_null(arr.cast(pa.large_binary()), b"")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data[offsets[0] : offsets[-1]], np.diff(offsets)


class Rows:
    """n messages of the same shape, built field by field; ``lens`` (n,) is each message's encoded size.

    Pieces are appended in field order: a constant (the same bytes in every row, e.g. a tag or a fixed
    field), a varint column, a double column, a column of byte strings, or a nested ``Rows`` as a
    length-delimited field. ``mask`` (bool (n,)) leaves the field out of the rows where it is False (an
    absent optional field). ``to_bytes()`` concatenates the rows."""

    def __init__(self, n: int):
        self.n = int(n)
        self._pieces: list[tuple[np.ndarray, np.ndarray]] = []  # (bytes matrix (n, w) uint8, lengths (n,))
        self.lens = np.zeros(self.n, dtype=np.int64)

    def _add(self, mat: np.ndarray, lens: np.ndarray, mask: np.ndarray | None) -> Rows:
        if mask is not None:
            lens = np.where(mask, lens, 0)
        self._pieces.append((mat, lens))
        self.lens = self.lens + lens
        return self

    def const(self, data: bytes, mask: np.ndarray | None = None) -> Rows:
        mat = np.frombuffer(data, dtype=np.uint8)[None, :]
        return self._add(mat, np.full(self.n, len(data), dtype=np.int64), mask)

    def varint(self, field: int, values: np.ndarray, mask: np.ndarray | None = None) -> Rows:
        self.const(tag(field, VARINT), mask)
        m, lens = varint_matrix(values)
        return self._add(m, lens, mask)

    def double(self, field: int, values: np.ndarray, mask: np.ndarray | None = None) -> Rows:
        self.const(tag(field, FIXED64), mask)
        mat = np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(self.n, 8)
        return self._add(mat, np.full(self.n, 8, dtype=np.int64), mask)

    def strings(self, field: int, values: tuple[np.ndarray, np.ndarray], mask: np.ndarray | None = None) -> Rows:
        """A length-delimited field whose payload differs per row (names, arguments): ``values`` = (the
        payloads concatenated, uint8; their lengths), see byte_strings / arrow_strings."""
        data, lens = values
        self.const(tag(field, LEN), mask)
        lm, ll = varint_matrix(lens)
        self._add(lm, ll, mask)
        return self._add(_ragged(data, lens), lens, mask)

    def raw(self, values: tuple[np.ndarray, np.ndarray]) -> Rows:
        """Already encoded fields, per row (length 0: nothing); ``values`` as for strings."""
        data, lens = values
        return self._add(_ragged(data, lens), lens, None)

    def message(self, field: int, inner: Rows, mask: np.ndarray | None = None) -> Rows:
        """``inner`` (one message per row) as a length-delimited field (its pieces are taken over as they are:
        nothing is copied until to_flat)."""
        self.const(tag(field, LEN), mask)
        lm, ll = varint_matrix(inner.lens)
        self._add(lm, ll, mask)
        for mat, lens in inner._pieces:
            self._add(mat, lens, mask)
        return self

    def to_flat(self, block_rows: int = 1 << 18) -> np.ndarray:
        """All rows concatenated (uint8): the pieces side by side as one (rows, total width) matrix, kept where
        a piece's column is within its row's length (row-major order is the wire order), in blocks of rows."""
        out = []
        for lo in range(0, self.n, block_rows):
            hi = min(lo + block_rows, self.n)
            mats, keeps = [], []
            for mat, lens in self._pieces:
                w = mat.shape[1]
                mats.append(np.broadcast_to(mat, (hi - lo, w)) if mat.shape[0] == 1 else mat[lo:hi])
                keeps.append(np.arange(w)[None, :] < lens[lo:hi, None])
            out.append(np.concatenate(mats, axis=1)[np.concatenate(keeps, axis=1)])
        return np.concatenate(out) if out else np.zeros(0, dtype=np.uint8)

    def to_bytes(self) -> bytes:
        return self.to_flat().tobytes()


TRACE_PACKET = 1  # Trace.packet (repeated TracePacket)


def framed_packets(packets: Rows) -> bytes:
    """Each row of ``packets`` (an encoded TracePacket) as one ``Trace.packet`` field: the bytes of a
    .perfetto-trace file (any number of these concatenate)."""
    outer = Rows(packets.n)
    outer.message(TRACE_PACKET, packets)
    return outer.to_bytes()


def framed_packet(packet: bytes) -> bytes:
    return field_bytes(TRACE_PACKET, packet)
