"""trace.dat file layout (trace-cmd file versions 6 and 7): everything except the event data itself.

Walks the header, header_page/header_event, ftrace and event format sections, kallsyms,
printk formats, saved cmdlines, options (v6 options block; v7 option sections with their
compressed HEADER_INFO / EVENT_FORMATS / ... sections) and locates the per-CPU ring-buffer
data (v7 compressed flyrecord chunks are inflated here with zlib / zstandard, or only located when
the streaming decoder inflates them itself).
Every malformed or truncated structure raises TraceFormatError with the file byte offset.
"""
from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass, field

from abtest.trace.errors import TraceFormatError

MAGIC = b"\x17\x08\x44tracing"

# option ids (trace-cmd.dat(5))
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_HOOK, OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_PROCMAPS, OPT_TRACEID = 6, 7, 8, 9, 10, 11
OPT_TIME_SHIFT, OPT_GUEST, OPT_TSC2NSEC, OPT_STRINGS = 12, 13, 14, 15
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS = 16, 17, 18
OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES, OPT_BUFFER_TEXT = 19, 20, 21, 22

SECTION_COMPRESSED = 1


@dataclass
class CpuData:
    """Ring-buffer pages of one CPU: `buf[start:start+size]`; file_offset is None when inflated."""

    cpu: int
    buf: object  # bytes / mmap (buffer protocol)
    start: int
    size: int
    file_offset: int | None
    chunk: int | None = None  # v7 compressed data: index of the inflated chunk (whole pages)


@dataclass
class Instance:
    """A named trace instance (tracefs `instances/NAME`, `trace-cmd record -B NAME`): its own ring buffers,
    clock and saved per-CPU statistics; event formats and everything else are shared with the file."""

    name: str
    clock: str | None = None
    cpu_data: list[CpuData] = field(default_factory=list)
    chunks: list[tuple[int, list[tuple[int, int, int]]]] = field(default_factory=list)  # as Layout.chunks
    cpustats: dict[int, str] = field(default_factory=dict)


@dataclass
class Layout:
    """Everything trace.dat holds besides the event records."""

    version: int = 6
    big_endian: bool = False
    long_size: int = 8
    page_size: int = 4096
    compression: str | None = None
    compression_version: str | None = None
    header_page: str = ""
    header_event: str = ""
    ftrace_formats: list[str] = field(default_factory=list)
    event_formats: list[tuple[str, str]] = field(default_factory=list)  # (system, format text)
    # /proc/kallsyms text (only bprint %pS needs it): validated while parsing, then read again on demand
    # by load_kallsyms() so its megabytes are not held while the ring buffers are decoded
    kallsyms_loader: object = None
    printk: str = ""
    cmdlines: str = ""
    cpus: int = 0
    cpu_data: list[CpuData] = field(default_factory=list)
    clock: str | None = None
    uname: str | None = None
    tracer_version: str | None = None
    ts_offset_ns: int = 0
    date_offset_ns: int = 0
    tsc2nsec: tuple[int, int, int] | None = None  # (mult, shift, offset)
    cpustats: dict[int, str] = field(default_factory=dict)
    trace_id: int | None = None
    guests: list[str] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)  # named (non-top) buffers, in file order
    warnings: list[str] = field(default_factory=list)
    has_time_shift: bool = False
    # v7 compressed data located but not inflated (parse_layout(..., inflate=False)): per CPU in file
    # order, (cpu, [(file offset of the compressed chunk data, compressed size, inflated size), ...])
    chunks: list[tuple[int, list[tuple[int, int, int]]]] = field(default_factory=list)
    # compressed sections not inflated yet (parse_layout(..., inflate=False)): (file offset of the
    # compressed data, compressed size, inflated size) of sections that start with a u32 length of the
    # rest (kallsyms); the decoder checks that they inflate (else the full parse reports the error)
    deferred_sections: list[tuple[int, int, int]] = field(default_factory=list)
    # names the buffer in error messages: "" for the top buffer, "instance 'NAME' " in an instance's view
    buffer_label: str = ""


class _Cursor:
    """Bounds-checked reads from a buffer; errors name the file and byte offset."""

    def __init__(self, path, data, pos: int = 0, end: int | None = None, base: int = 0, what: str = ""):
        self.path, self.data, self.pos = path, data, pos
        self.end = len(data) if end is None else end
        self.base = base  # file offset of data[0] (non-zero for inflated sections: offset of the section)
        self.what = what
        self.endian = "<"
        self._view = None

    @property
    def view(self) -> memoryview:
        """Zero-copy view of the whole buffer (for large compressed blobs)."""
        if self._view is None:
            self._view = memoryview(self.data)
        return self._view

    def fail(self, msg: str, expected: str | None = None, at: int | None = None):
        off = (self.pos if at is None else at) if self.base == 0 else self.base
        where = f" (inside {self.what})" if self.what else ""
        raise TraceFormatError(self.path, msg + where, offset=off, expected=expected)

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.end:
            self.fail(f"truncated while reading {what}: need {n} bytes, {max(0, self.end - self.pos)} left",
                      expected=what)
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def u16(self, what: str) -> int:
        return struct.unpack(self.endian + "H", self.take(2, what))[0]

    def u32(self, what: str) -> int:
        return struct.unpack(self.endian + "I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack(self.endian + "Q", self.take(8, what))[0]

    def cstr(self, what: str, limit: int = 1 << 16) -> str:
        end = min(self.end, self.pos + limit)
        idx = bytes(self.data[self.pos:end]).find(b"\0")
        if idx < 0:
            self.fail(f"unterminated string while reading {what}", expected=f"NUL-terminated {what}")
        s = bytes(self.data[self.pos:self.pos + idx]).decode("utf-8", "replace")
        self.pos += idx + 1
        return s

    def text(self, n: int, what: str) -> str:
        return self.take(n, what).decode("utf-8", "replace")

    def expect(self, token: bytes, what: str) -> None:
        at = self.pos
        got = self.take(len(token), what)
        if got != token:
            self.fail(f"found {got!r} instead of {token!r}", expected=what, at=at)


def _cstr_of(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


class _Inflater:
    """Decompresses v7 sections / flyrecord chunks with the algorithm named in the file header."""

    def __init__(self, path, name: str | None):
        self.path, self.name = path, name
        self._zstd = None
        if name == "zstd":
            import zstandard
            self._zstd = zstandard.ZstdDecompressor()
        elif name not in (None, "zlib"):
            raise TraceFormatError(path, f"unsupported compression algorithm {name!r}", offset=None,
                                   expected="none, zlib or zstd")

    def inflate(self, blob: bytes, out_size: int, offset: int, what: str) -> bytes:
        try:
            if self.name == "zstd":
                out = self._zstd.decompress(blob, max_output_size=out_size)
            else:
                out = zlib.decompress(blob)
        except Exception as e:  # zstandard.ZstdError / zlib.error
            raise TraceFormatError(self.path, f"corrupt {self.name} stream in {what} ({e})", offset=offset,
                                   expected=f"a valid {self.name} stream") from e
        if len(out) != out_size:
            raise TraceFormatError(self.path, f"{what}: inflated to {len(out)} bytes, header says {out_size}",
                                   offset=offset, expected=f"{out_size} bytes after decompression")
        return out


    def inflate_many(self, items: list[tuple[bytes, int, int, str]]) -> list:
        """Inflate many (blob, uncompressed size, file offset, what) chunks; zstd uses all cores.

        Returns buffer objects (bytes or zstandard BufferSegments) in the order given."""
        if self.name == "zstd" and len(items) > 1:
            sizes = struct.pack(f"={len(items)}Q", *(u for _, u, _, _ in items))
            try:
                out = self._zstd.multi_decompress_to_buffer([b for b, _, _, _ in items],
                                                            decompressed_sizes=sizes, threads=-1)
                segs = [out[i] for i in range(len(out))]
                if all(len(seg) == u for seg, (_, u, _, _) in zip(segs, items)):
                    return segs
            except Exception:  # locate the bad chunk (and its offset) one by one below
                pass
        return [self.inflate(b, u, at, what) for b, u, at, what in items]


def _read_header_info(c: _Cursor, lay: Layout) -> None:
    c.expect(b"header_page\0", "the string 'header_page'")
    lay.header_page = c.text(c.u64("header_page size"), "header_page")
    c.expect(b"header_event\0", "the string 'header_event'")
    lay.header_event = c.text(c.u64("header_event size"), "header_event")


def _read_ftrace_events(c: _Cursor, lay: Layout) -> None:
    n = c.u32("ftrace event format count")
    for _ in range(n):
        lay.ftrace_formats.append(c.text(c.u64("ftrace event format size"), "ftrace event format"))


def _read_event_formats(c: _Cursor, lay: Layout) -> None:
    from abtest import _native

    # one native pass over the ~2,300 formats; anything unusual (truncation, invalid UTF-8) is left to
    # the Python loop below, which raises with the offset
    got = _native.tracedat_event_formats(c.data, c.pos, c.end, c.endian == ">")
    if got is not None:
        c.pos, systems = got
        for system, texts in systems:
            lay.event_formats += [(system, t) for t in texts]
        return
    nsys = c.u32("event system count")
    for _ in range(nsys):
        system = c.cstr("event system name")
        n = c.u32(f"event count of system {system}")
        for _ in range(n):
            lay.event_formats.append((system, c.text(c.u64("event format size"), f"{system} event format")))


def _apply_option(path, lay: Layout, opt_id: int, payload: bytes, at: int, e: str, sections: dict) -> None:
    """Interpret one option (v6 and v7). `sections` collects v7 section offsets and buffers."""
    if opt_id == OPT_DATE:
        txt = _cstr_of(payload).strip()
        try:
            lay.date_offset_ns = int(txt, 0) * 1000  # microseconds in the file
        except ValueError:
            lay.warnings.append(f"ignored unparsable DATE option {txt!r}")
    elif opt_id == OPT_OFFSET:
        txt = _cstr_of(payload).strip()
        try:
            lay.ts_offset_ns += int(txt, 0)
        except ValueError:
            lay.warnings.append(f"ignored unparsable OFFSET option {txt!r}")
    elif opt_id == OPT_CPUSTAT:
        txt = _cstr_of(payload)
        first = txt.strip().splitlines()[0] if txt.strip() else ""
        if first.startswith("Buffer:"):  # the statistics that follow belong to this named instance
            sections["cpustat_buffer"] = first[len("Buffer:"):].strip()
            return
        name = sections.get("cpustat_buffer")
        stats = sections.setdefault("instance_cpustats", {}).setdefault(name, {}) if name else lay.cpustats
        cpu = int(first.split()[-1]) if first.startswith("CPU:") else len(stats)
        stats[cpu] = txt
    elif opt_id == OPT_TRACECLOCK:
        from abtest.trace.tracedat_format import parse_trace_clock
        lay.clock = parse_trace_clock(_cstr_of(payload))
    elif opt_id == OPT_UNAME:
        lay.uname = _cstr_of(payload)
    elif opt_id == OPT_VERSION:
        lay.tracer_version = _cstr_of(payload)
    elif opt_id == OPT_CPUCOUNT and len(payload) >= 4:
        lay.cpus = struct.unpack(e + "I", payload[:4])[0]
    elif opt_id == OPT_TRACEID and len(payload) >= 8:
        lay.trace_id = struct.unpack(e + "Q", payload[:8])[0]
    elif opt_id == OPT_TSC2NSEC and len(payload) >= 16:
        lay.tsc2nsec = struct.unpack(e + "IIQ", payload[:16])
    elif opt_id == OPT_GUEST:
        lay.guests.append(_cstr_of(payload))
    elif opt_id == OPT_TIME_SHIFT:
        lay.has_time_shift = True
    elif opt_id in (OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS, OPT_KALLSYMS, OPT_PRINTK,
                    OPT_CMDLINES) and len(payload) >= 8:
        sections[opt_id] = struct.unpack(e + "Q", payload[:8])[0]
    elif opt_id == OPT_BUFFER:
        sections.setdefault("buffers", []).append((payload, at))
    elif opt_id == OPT_BUFFER_TEXT:
        sections["latency"] = True


def _read_v6_options(c: _Cursor, lay: Layout, sections: dict) -> None:
    while True:
        at = c.pos
        opt_id = c.u16("option id")
        if opt_id == OPT_DONE:
            return
        size = c.u32("option size")
        _apply_option(c.path, lay, opt_id, c.take(size, f"option {opt_id} data"), at, c.endian, sections)


def _parse_v6(c: _Cursor, lay: Layout) -> None:
    _read_header_info(c, lay)
    _read_ftrace_events(c, lay)
    _read_event_formats(c, lay)
    n = c.u32("kallsyms size")
    at = c.pos
    c.take(n, "kallsyms")
    data = c.data
    lay.kallsyms_loader = lambda: bytes(data[at:at + n])
    lay.printk = c.text(c.u32("printk formats size"), "printk formats")
    lay.cmdlines = c.text(c.u64("saved cmdlines size"), "saved cmdlines")
    header_cpus = c.u32("cpu count")
    sections: dict = {}
    at = c.pos
    kind = c.take(10, "'options  ', 'latency  ' or 'flyrecord'")
    if kind == b"options  \0":
        _read_v6_options(c, lay, sections)
        at = c.pos
        kind = c.take(10, "'latency  ' or 'flyrecord'")
    if kind == b"latency  \0":
        raise TraceFormatError(c.path, "latency-tracer text trace (no binary event data)", offset=at,
                               expected="a flyrecord (binary ring-buffer) trace")
    if kind != b"flyrecord\0":
        raise TraceFormatError(c.path, f"found {kind!r}", offset=at, expected="'flyrecord\\0' after the cpu count")
    lay.cpus = lay.cpus or header_cpus
    for cpu in range(header_cpus):
        off = c.u64(f"CPU {cpu} data offset")
        size = c.u64(f"CPU {cpu} data size")
        _check_span(c.path, c.data, off, size, f"CPU {cpu} ring-buffer data")
        lay.cpu_data.append(CpuData(cpu, c.data, off, size, off))
    for payload, at in sections.get("buffers", []):
        lay.instances.append(_v6_instance(c, payload, at, header_cpus, sections))


def _v6_instance(c: _Cursor, payload: bytes, at: int, cpus: int, sections: dict) -> Instance:
    """v6 BUFFER option (u64 offset, name): at the offset 'flyrecord\0', (u64 offset, u64 size) per CPU,
    then the instance's trace clock (u64 length, text such as `[boot]`)."""
    if len(payload) < 9:
        raise TraceFormatError(c.path, f"BUFFER option of {len(payload)} bytes", offset=at,
                               expected="a u64 offset and an instance name")
    off = struct.unpack(c.endian + "Q", payload[:8])[0]
    inst = Instance(_cstr_of(payload[8:]))
    what = f"trace instance {inst.name!r} flyrecord header (BUFFER option at offset {at})"
    if off >= len(c.data):
        raise TraceFormatError(c.path, f"{what} points past the end of the file ({off} >= {len(c.data)} bytes)",
                               offset=at, expected="an offset inside the file (truncated?)")
    s = _Cursor(c.path, c.data, off)
    s.endian = c.endian
    s.expect(b"flyrecord\0", f"'flyrecord\\0' at the start of the {what}")
    for cpu in range(cpus):
        data_off = s.u64(f"instance {inst.name!r} CPU {cpu} data offset")
        size = s.u64(f"instance {inst.name!r} CPU {cpu} data size")
        _check_span(c.path, c.data, data_off, size, f"instance {inst.name!r} CPU {cpu} ring-buffer data")
        inst.cpu_data.append(CpuData(cpu, c.data, data_off, size, data_off))
    if s.end - s.pos >= 8:
        n = s.u64(f"instance {inst.name!r} clock length")
        if 0 < n <= 4096 and s.end - s.pos >= n:
            from abtest.trace.tracedat_format import parse_trace_clock
            inst.clock = parse_trace_clock(s.take(n, "instance clock").decode("utf-8", "replace"))
    inst.cpustats = sections.get("instance_cpustats", {}).get(inst.name, {})
    return inst


def _check_span(path, data, off: int, size: int, what: str) -> None:
    if off + size > len(data):
        raise TraceFormatError(path, f"{what} runs past the end of the file ({off}+{size} > {len(data)} bytes)",
                               offset=min(off, len(data)), expected=f"{size} bytes of {what} (file truncated?)")


def _read_section(c: _Cursor, off: int, inflater: _Inflater, want_id: int | None, what: str,
                  defer: list | None = None) -> _Cursor | None:
    """v7: read the section header at `off` and return a cursor over its (inflated) contents.

    With `defer` (a list), a compressed section is checked up to its compressed data, which is not
    inflated: (data offset, compressed size, inflated size) is appended to `defer` and None returned."""
    if off >= len(c.data):
        raise TraceFormatError(c.path, f"file ends before the {what} section it points to (section offset {off}, "
                               f"file size {len(c.data)} bytes: truncated?)", offset=len(c.data),
                               expected=f"the {what} section at offset {off}")
    s = _Cursor(c.path, c.data, off)
    s.endian = c.endian
    sec_id = s.u16(f"{what} section id")
    flags = s.u16(f"{what} section flags")
    s.u32(f"{what} section description string id")
    size = s.u64(f"{what} section size")
    if want_id is not None and sec_id != want_id:
        raise TraceFormatError(c.path, f"section id {sec_id} where {what} (id {want_id}) should be", offset=off,
                               expected=f"section id {want_id}")
    start = s.pos
    _check_span(c.path, c.data, start, size, f"{what} section")
    if flags & SECTION_COMPRESSED:
        csize = s.u32(f"{what} compressed size")
        usize = s.u32(f"{what} uncompressed size")
        if defer is not None:  # checked and located only: the caller inflates it later
            if s.pos + csize > s.end:
                s.take(csize, f"{what} compressed data")  # raises with the offset
            defer.append((s.pos, csize, usize))
            return None
        blob = s.take(csize, f"{what} compressed data")
        inner = _Cursor(c.path, inflater.inflate(blob, usize, start, f"{what} section"), 0, base=start,
                        what=f"compressed {what} section at offset {start}")
    else:
        inner = _Cursor(c.path, c.data, start, start + size, what="")
    inner.endian = c.endian
    return inner


def _cpu_chunks(c: _Cursor, off: int, size: int, cpu: int, buffer: str = "") -> list[tuple[bytes, int, int, str]]:
    """v7 compressed flyrecord data of one CPU: u32 chunk count, then (u32 csize, u32 usize, data) chunks.
    `buffer` prefixes the descriptions (e.g. "instance 'foo' ").

    Returns (compressed data view, uncompressed size, file offset of the chunk header, description)."""
    # the recorded size counts the chunks, not the leading u32 chunk count
    end = min(len(c.data), off + 4 + size)
    s = _Cursor(c.path, c.data, off, end)
    s.endian = c.endian
    n = s.u32(f"{buffer}CPU {cpu} chunk count")
    hdr = struct.Struct(c.endian + "II")
    view, pos, items = c.view, s.pos, []
    for i in range(n):
        if pos + 8 > end:
            s.pos = pos
            s.take(8, f"{buffer}CPU {cpu} chunk {i} header")  # raises with the offset
        csize, usize = hdr.unpack_from(view, pos)
        if pos + 8 + csize > end:
            s.pos = pos + 8
            s.take(csize, f"{buffer}CPU {cpu} chunk {i} data")  # raises with the offset
        items.append((view[pos + 8:pos + 8 + csize], usize, pos, f"{buffer}CPU {cpu} chunk {i}"))
        pos += 8 + csize
    return items


def _parse_v7(c: _Cursor, lay: Layout, inflate: bool = True) -> None:
    from abtest import _native

    lay.compression = c.cstr("compression algorithm name") or None
    lay.compression_version = c.cstr("compression algorithm version") or None
    if lay.compression == "none":
        lay.compression = None
    inflater = _Inflater(c.path, lay.compression)
    opt_off = c.u64("first options section offset")
    sections: dict = {}
    seen = set()
    while opt_off:
        if opt_off in seen:
            raise TraceFormatError(c.path, "options sections form a loop", offset=opt_off)
        seen.add(opt_off)
        s = _read_section(c, opt_off, inflater, OPT_DONE, "options")
        opt_off = 0
        while True:
            at = s.pos
            opt_id = s.u16("option id")
            size = s.u32("option size")
            payload = s.take(size, f"option {opt_id} data")
            if opt_id == OPT_DONE:
                opt_off = struct.unpack(c.endian + "Q", payload[:8])[0] if len(payload) >= 8 else 0
                break
            _apply_option(c.path, lay, opt_id, payload, s.base + at, c.endian, sections)
    if sections.get("latency"):
        lay.warnings.append("latency-tracer text buffer present but not decoded")
    readers = ((OPT_HEADER_INFO, "header info", _read_header_info),
               (OPT_FTRACE_EVENTS, "ftrace events", _read_ftrace_events),
               (OPT_EVENT_FORMATS, "event formats", _read_event_formats))
    for opt, what, fn in readers:
        if opt not in sections:
            if opt == OPT_HEADER_INFO:
                raise TraceFormatError(c.path, "no HEADER_INFO option", expected="a HEADER_INFO section")
            continue
        fn(_read_section(c, sections[opt], inflater, opt, what), lay)
    if OPT_KALLSYMS in sections:
        def load_kallsyms(at=sections[OPT_KALLSYMS]) -> bytes:
            s = _read_section(c, at, inflater, OPT_KALLSYMS, "kallsyms")
            return s.take(s.u32("kallsyms size"), "kallsyms")
        # validated now (a corrupt section is an error even when unused), kept on demand; with
        # inflate=False a compressed section is only located and the streaming decoder inflates it to check
        if inflate or _read_section(c, sections[OPT_KALLSYMS], inflater, OPT_KALLSYMS, "kallsyms",
                                    defer=lay.deferred_sections) is not None:
            load_kallsyms()
        lay.kallsyms_loader = load_kallsyms
    if OPT_PRINTK in sections:
        s = _read_section(c, sections[OPT_PRINTK], inflater, OPT_PRINTK, "printk formats")
        lay.printk = s.text(s.u32("printk formats size"), "printk formats")
    if OPT_CMDLINES in sections:
        s = _read_section(c, sections[OPT_CMDLINES], inflater, OPT_CMDLINES, "saved cmdlines")
        lay.cmdlines = s.text(s.u64("saved cmdlines size"), "saved cmdlines")
    top, named = None, []
    for payload, at in sections.get("buffers", []):
        b = _Cursor(c.path, payload, 0, base=at, what=f"BUFFER option at offset {at}")
        b.endian = c.endian
        b.u64("buffer section offset")
        name = b.cstr("buffer instance name")
        if name:
            named.append((name, b))
        else:
            top = b
    if top is None and not named:
        raise TraceFormatError(c.path, "no BUFFER option for the top trace instance", offset=None,
                               expected="a flyrecord BUFFER option")
    if top is not None:  # `trace-cmd extract -B NAME` without -t writes only the named instances
        clock = _v7_buffer(c, top, lay, lay, inflate, inflater)
        lay.clock = lay.clock or clock
    for name, b in named:
        inst = Instance(name, cpustats=sections.get("instance_cpustats", {}).get(name, {}))
        inst.clock = _v7_buffer(c, b, lay, inst, inflate, inflater)
        lay.instances.append(inst)
    cpus_seen = [d.cpu for d in lay.cpu_data] + [cpu for cpu, _ in lay.chunks]
    lay.cpus = lay.cpus or (max(cpus_seen, default=-1) + 1)


def _v7_buffer(c: _Cursor, b: _Cursor, lay: Layout, into, inflate: bool, inflater: "_Inflater") -> str | None:
    """The rest of a v7 BUFFER option (clock, page size, per-CPU data): the CPU data goes to
    `into.cpu_data` (stored, or inflated chunks) or `into.chunks` (located only). Returns the clock."""
    from abtest import _native

    clock = b.cstr("buffer trace clock") or None
    b.u32("buffer page size")
    ncpu = b.u32("buffer cpu count")
    buffer = f"instance {into.name!r} " if isinstance(into, Instance) else ""
    pending = []  # compressed chunks: (cpu, chunk index, item)
    for _ in range(ncpu):
        cpu = b.u32("buffer cpu id")
        off = b.u64(f"{buffer}CPU {cpu} data offset")
        size = b.u64(f"{buffer}CPU {cpu} data size")
        _check_span(c.path, c.data, off, size, f"{buffer}CPU {cpu} ring-buffer data")
        if size == 0:
            continue
        if lay.compression and not inflate:  # located only: the decoder inflates them
            spans = _native.tracedat_chunk_spans(c.data, off, off + 4 + size, lay.big_endian)
            if spans is None:  # a chunk runs past the CPU's data: the Python walk raises with the offset
                spans = [(at + 8, len(blob), usize) for blob, usize, at, _ in _cpu_chunks(c, off, size, cpu, buffer)]
            if spans:
                into.chunks.append((cpu, spans))
        elif lay.compression:  # chunks hold whole pages: each one is decoded as its own source
            pending += [(cpu, i, item) for i, item in enumerate(_cpu_chunks(c, off, size, cpu, buffer))]
        else:
            into.cpu_data.append(CpuData(cpu, c.data, off, size, off))
    if pending:
        bufs = inflater.inflate_many([item for _, _, item in pending])
        for (cpu, i, _), buf in zip(pending, bufs):
            into.cpu_data.append(CpuData(cpu, buf, 0, len(buf), None, chunk=i))
        first = min(item[2] for _, _, item in pending)
        last = max(item[2] + 8 + len(item[0]) for _, _, item in pending)
        del pending
        _drop_mapped_pages(c.data, first, last)
    return clock


def load_kallsyms(lay: Layout) -> bytes:
    """The file's /proc/kallsyms text (empty when the file has none)."""
    return lay.kallsyms_loader() if lay.kallsyms_loader is not None else b""


def _drop_mapped_pages(data, start: int, end: int) -> None:
    """Release the resident pages of [start, end) of a read-only file mapping (the compressed chunks, once
    inflated: ~1/6 of the inflated size) so they do not count in the peak RSS while the columns are built.
    The mapping stays valid (pages fault back in from the file if read again); no-op for bytes."""
    if not isinstance(data, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    lo = (start // mmap.PAGESIZE) * mmap.PAGESIZE
    if end > lo:
        try:
            data.madvise(mmap.MADV_DONTNEED, lo, min(end, len(data)) - lo)
        except (OSError, ValueError):
            pass


def parse_layout(path, data, inflate: bool = True) -> Layout:
    """Parse the trace.dat at `path` (contents `data`: bytes or mmap) up to the event data.

    v7 compressed CPU data: inflated into `cpu_data` (one entry per chunk), or with inflate=False only
    located (`chunks`; the streaming decoder inflates them)."""
    c = _Cursor(path, data, 0)
    if len(data) == 0:
        raise TraceFormatError(path, "file is empty", offset=0, expected="a trace.dat file")
    c.expect(MAGIC, "trace.dat magic 17 08 44 'tracing'")
    at = c.pos
    ver_txt = c.cstr("file version", limit=16)
    if ver_txt not in ("6", "7"):
        raise TraceFormatError(path, f"unsupported trace.dat version {ver_txt!r}", offset=at,
                               expected="version 6 or 7")
    lay = Layout(version=int(ver_txt))
    at = c.pos
    endian = c.take(1, "endianness byte")[0]
    if endian not in (0, 1):
        raise TraceFormatError(path, f"bad endianness byte {endian}", offset=at, expected="0 (little) or 1 (big)")
    lay.big_endian = endian == 1
    c.endian = ">" if lay.big_endian else "<"
    at = c.pos
    lay.long_size = c.take(1, "long size byte")[0]
    if lay.long_size not in (4, 8):
        raise TraceFormatError(path, f"bad long size {lay.long_size}", offset=at, expected="4 or 8")
    at = c.pos
    lay.page_size = c.u32("page size")
    if lay.page_size < 64 or lay.page_size > (1 << 24) or lay.page_size & (lay.page_size - 1):
        raise TraceFormatError(path, f"implausible page size {lay.page_size}", offset=at,
                               expected="a power of two between 64 B and 16 MiB")
    if lay.version == 6:
        _parse_v6(c, lay)
    else:
        _parse_v7(c, lay, inflate)
    return lay
