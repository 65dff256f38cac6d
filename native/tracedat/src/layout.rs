//! The file layout of trace.dat versions 6 and 7 (trace-cmd.dat.v6(5), trace-cmd.dat.v7(5)): everything but
//! the event records. Walks the header, header_page, the ftrace and event format sections, kallsyms,
//! printk formats, saved cmdlines, the options (v6 options block; v7 option sections and the compressed
//! sections they point to) and locates every buffer's per-CPU ring-buffer data: stored pages, or v7
//! compressed chunks (located and size-checked here, inflated by the decode).
//!
//! Malformed or truncated structure is an `Error` with the file offset; an option or statistics text
//! that cannot be read is a warning (and counted), the rest of the file is used.

use std::collections::BTreeMap;

use crate::bytes::{cstr_of, rd, repr, Reader};
use crate::error::{Error, ImportLog, Result};
use crate::format::parse_int;
use crate::inflate::{Codec, Inflater, Limits};
use crate::text::parse_trace_clock;

pub const MAGIC: &[u8] = b"\x17\x08\x44tracing";

// option ids (trace-cmd.dat.v7(5))
const OPT_DONE: u16 = 0;
const OPT_DATE: u16 = 1;
const OPT_CPUSTAT: u16 = 2;
const OPT_BUFFER: u16 = 3;
const OPT_TRACECLOCK: u16 = 4;
const OPT_UNAME: u16 = 5;
const OPT_OFFSET: u16 = 7;
const OPT_CPUCOUNT: u16 = 8;
const OPT_VERSION: u16 = 9;
const OPT_TIME_SHIFT: u16 = 12;
const OPT_GUEST: u16 = 13;
const OPT_TSC2NSEC: u16 = 14;
const OPT_HEADER_INFO: u16 = 16;
const OPT_FTRACE_EVENTS: u16 = 17;
const OPT_EVENT_FORMATS: u16 = 18;
const OPT_KALLSYMS: u16 = 19;
const OPT_PRINTK: u16 = 20;
const OPT_CMDLINES: u16 = 21;
const OPT_BUFFER_TEXT: u16 = 22;
const SECTION_COMPRESSED: u16 = 1;
/// Linux's largest NR_CPUS: a CPU id at or above it (or above the file's CPU count) is not a CPU.
pub const MAX_CPUS: u32 = 8192;

/// One compressed chunk of ring-buffer pages: file offset of its compressed bytes, their size, and the
/// inflated size its header declares (checked against the limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub offset: usize,
    pub size: usize,
    pub inflated: usize,
}

/// Ring-buffer pages of one CPU of one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuPages {
    /// stored: `size` bytes at file offset `offset`
    Stored { offset: usize, size: usize },
    /// v7 compressed chunks, in order
    Chunks(Vec<Chunk>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuData {
    pub cpu: u32,
    pub pages: CpuPages,
}

impl CpuData {
    pub fn has_data(&self) -> bool {
        match &self.pages {
            CpuPages::Stored { size, .. } => *size > 0,
            CpuPages::Chunks(c) => !c.is_empty(),
        }
    }
}

/// A ring buffer: the top one (name None) or a named instance (tracefs `instances/NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buffer {
    pub name: Option<String>,
    pub clock: Option<String>,
    pub cpus: Vec<CpuData>,
    /// CPUSTAT texts by CPU (tracefs per_cpu/cpuN/stats when the file was written)
    pub cpustats: BTreeMap<u32, String>,
}

/// Where the kallsyms text is: stored in the file, or a compressed v7 section (inflated on demand).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kallsyms {
    #[default]
    None,
    Stored {
        offset: usize,
        size: usize,
    },
    /// compressed v7 section at file offset `section`: u32 size + text once inflated
    Compressed {
        section: u64,
        chunk: Chunk,
    },
}

/// Everything a trace.dat holds besides the event records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    pub version: u32,
    pub big_endian: bool,
    pub long_size: usize,
    pub page_size: usize,
    pub codec: Option<Codec>,
    pub header_page: String,
    /// (system, format text) of every event format: ftrace's first (system "ftrace")
    pub formats: Vec<(String, String)>,
    pub kallsyms: Kallsyms,
    pub printk: String,
    pub cmdlines: String,
    pub cpus: u32,
    pub clock: Option<String>,
    pub uname: Option<String>,
    pub tracer_version: Option<String>,
    pub ts_offset_ns: i64,
    pub date_offset_ns: i64,
    /// TSC2NSEC option: (mult, shift, offset)
    pub tsc2nsec: Option<(u32, u32, u64)>,
    pub has_time_shift: bool,
    pub guests: Vec<String>,
    /// the top buffer first when the file has one, then the named instances in file order
    pub buffers: Vec<Buffer>,
    pub warnings: Vec<String>,
    pub skipped: ImportLog,
    /// v7: declared ring-buffer bytes per CPU that no chunk covers (not decoded; all buffers)
    pub undecoded_bytes: BTreeMap<u32, u64>,
}

/// A v7 section's data: stored in the file, or compressed (`start`: file offset of the section data).
enum Section {
    Stored { pos: usize, end: usize },
    Compressed { start: u64, chunk: Chunk },
}

/// Inflate a compressed v7 section (its declared size already checked against the limits).
fn inflate_section(
    data: &[u8],
    codec: Option<Codec>,
    inflater: Option<&mut Inflater>,
    start: u64,
    chunk: Chunk,
    what: &str,
) -> Result<Vec<u8>> {
    let codec_name = codec.map_or("none", Codec::name);
    let Some(inf) = inflater else {
        return Err(Error::at(start, format!("compressed {what} section in a file without compression")));
    };
    let mut out = Vec::new();
    let src = &data[chunk.offset..chunk.offset + chunk.size];
    inf.inflate(src, chunk.inflated, &mut out).map_err(|e| {
        Error::at(start, format!("{e} in {what} section")).expected(format!("a valid {codec_name} stream"))
    })?;
    Ok(out)
}

/// The kallsyms text of the file (empty when it has none); a compressed section is inflated and its
/// length word checked here.
pub fn kallsyms_text(data: &[u8], lay: &Layout) -> Result<Vec<u8>> {
    match lay.kallsyms {
        Kallsyms::None => Ok(Vec::new()),
        Kallsyms::Stored { offset, size } => Ok(data[offset..offset + size].to_vec()),
        Kallsyms::Compressed { section, chunk } => {
            let mut inf = lay.codec.map(Inflater::new).transpose().map_err(Error::nowhere)?;
            let out = inflate_section(data, lay.codec, inf.as_mut(), section, chunk, "kallsyms")?;
            let mut c = Reader::within(
                &out,
                lay.big_endian,
                section,
                &format!("compressed kallsyms section at offset {section}"),
            );
            let n = c.u32("kallsyms size")? as usize;
            Ok(c.take(n, "kallsyms")?.to_vec())
        }
    }
}

/// Option state while walking the options (both versions).
#[derive(Default)]
struct Options {
    sections: BTreeMap<u16, u64>,
    /// (payload, file offset of the option)
    buffer_options: Vec<(Vec<u8>, u64)>,
    cpustat_buffer: Option<String>,
    instance_cpustats: BTreeMap<String, BTreeMap<u32, String>>,
    top_cpustats: BTreeMap<u32, String>,
    latency: bool,
}

struct Parser<'a> {
    data: &'a [u8],
    be: bool,
    limits: Limits,
    inflater: Option<Inflater>,
    lay: Layout,
}

fn check_span(data: &[u8], off: u64, size: u64, what: &str) -> Result<()> {
    if off.checked_add(size).is_none_or(|end| end > data.len() as u64) {
        let msg = format!("{what} runs past the end of the file ({off}+{size} > {} bytes)", data.len());
        return Err(
            Error::at(off.min(data.len() as u64), msg).expected(format!("{size} bytes of {what} (file truncated?)"))
        );
    }
    Ok(())
}

impl<'a> Parser<'a> {
    fn reader(&self, pos: usize) -> Reader<'a> {
        Reader::new(self.data, pos, self.be)
    }

    fn header_info(&mut self, c: &mut Reader) -> Result<()> {
        c.expect(b"header_page\0", "the string 'header_page'")?;
        let n = c.u64("header_page size")?;
        self.lay.header_page = c.text(n, "header_page")?;
        c.expect(b"header_event\0", "the string 'header_event'")?;
        let n = c.u64("header_event size")?;
        c.text(n, "header_event")?;
        Ok(())
    }

    fn ftrace_events(&mut self, c: &mut Reader) -> Result<()> {
        let n = c.u32("ftrace event format count")?;
        for _ in 0..n {
            let size = c.u64("ftrace event format size")?;
            let text = c.text(size, "ftrace event format")?;
            self.lay.formats.push(("ftrace".into(), text));
        }
        Ok(())
    }

    fn event_formats(&mut self, c: &mut Reader) -> Result<()> {
        let nsys = c.u32("event system count")?;
        for _ in 0..nsys {
            let system = c.cstr("event system name", 1 << 16)?;
            let n = c.u32(&format!("event count of system {system}"))?;
            for _ in 0..n {
                let size = c.u64("event format size")?;
                let text = c.text(size, &format!("{system} event format"))?;
                self.lay.formats.push((system.clone(), text));
            }
        }
        Ok(())
    }

    fn option(&mut self, id: u16, payload: &[u8], at: u64, o: &mut Options) {
        let be = self.be;
        let lay = &mut self.lay;
        match id {
            OPT_DATE | OPT_OFFSET => {
                let txt = cstr_of(payload).trim().to_string();
                let v = parse_int(&txt).and_then(|v| i64::try_from(v).ok());
                let name = if id == OPT_DATE { "DATE" } else { "OFFSET" };
                match v {
                    // DATE is in microseconds
                    Some(v) if id == OPT_DATE && v.checked_mul(1000).is_some() => lay.date_offset_ns = v * 1000,
                    Some(v) if id == OPT_OFFSET && lay.ts_offset_ns.checked_add(v).is_some() => lay.ts_offset_ns += v,
                    _ => {
                        lay.warnings.push(format!("ignored unparsable {name} option {}", repr(&txt)));
                        lay.skipped.add("tracedat_option_unreadable", 1, at, format!("{name} option {}", repr(&txt)));
                    }
                }
            }
            OPT_CPUSTAT => {
                let txt = cstr_of(payload);
                let first = txt.trim().lines().next().unwrap_or("").to_string();
                if let Some(name) = first.strip_prefix("Buffer:") {
                    // the statistics that follow belong to this named instance
                    o.cpustat_buffer = Some(name.trim().to_string());
                    return;
                }
                let stats = match &o.cpustat_buffer {
                    Some(name) => o.instance_cpustats.entry(name.clone()).or_default(),
                    None => &mut o.top_cpustats,
                };
                let cpu = match first.strip_prefix("CPU:") {
                    Some(_) => first.split_whitespace().last().and_then(|t| t.parse::<u32>().ok()),
                    None => Some(stats.len() as u32),
                };
                match cpu {
                    Some(cpu) => {
                        stats.insert(cpu, txt);
                    }
                    None => {
                        lay.warnings.push(format!(
                            "CPUSTAT option at offset {at} names no readable CPU ({}): its statistics are not used",
                            repr(&first)
                        ));
                        lay.skipped.add("tracedat_cpustat_unreadable", 1, at, first);
                    }
                }
            }
            OPT_TRACECLOCK => lay.clock = parse_trace_clock(&cstr_of(payload)),
            OPT_UNAME => lay.uname = Some(cstr_of(payload)),
            OPT_VERSION => lay.tracer_version = Some(cstr_of(payload)),
            OPT_CPUCOUNT if payload.len() >= 4 => lay.cpus = rd(payload, 0, 4, be).unwrap_or(0) as u32,
            OPT_TSC2NSEC if payload.len() >= 16 => {
                let (m, s, off) = (rd(payload, 0, 4, be), rd(payload, 4, 4, be), rd(payload, 8, 8, be));
                lay.tsc2nsec = Some((m.unwrap_or(0) as u32, s.unwrap_or(0) as u32, off.unwrap_or(0)));
            }
            OPT_GUEST => lay.guests.push(cstr_of(payload)),
            OPT_TIME_SHIFT => lay.has_time_shift = true,
            OPT_HEADER_INFO | OPT_FTRACE_EVENTS | OPT_EVENT_FORMATS | OPT_KALLSYMS | OPT_PRINTK | OPT_CMDLINES
                if payload.len() >= 8 =>
            {
                o.sections.insert(id, rd(payload, 0, 8, be).unwrap_or(0));
            }
            OPT_BUFFER => o.buffer_options.push((payload.to_vec(), at)),
            OPT_BUFFER_TEXT => o.latency = true,
            _ => {}
        }
    }

    fn parse_v6(&mut self, c: &mut Reader) -> Result<()> {
        self.header_info(c)?;
        self.ftrace_events(c)?;
        self.event_formats(c)?;
        let n = c.u32("kallsyms size")? as usize;
        let at = c.pos;
        c.take(n, "kallsyms")?;
        self.lay.kallsyms = Kallsyms::Stored { offset: at, size: n };
        let n = c.u32("printk formats size")?;
        self.lay.printk = c.text(n as u64, "printk formats")?;
        let n = c.u64("saved cmdlines size")?;
        self.lay.cmdlines = c.text(n, "saved cmdlines")?;
        let header_cpus = c.u32("cpu count")?;
        let mut o = Options::default();
        let mut at = c.pos;
        let mut kind = c.take(10, "'options  ', 'latency  ' or 'flyrecord'")?;
        if kind == b"options  \0" {
            loop {
                let opt_at = c.pos as u64;
                let id = c.u16("option id")?;
                if id == OPT_DONE {
                    break;
                }
                let size = c.u32("option size")? as usize;
                let payload = c.take(size, &format!("option {id} data"))?;
                self.option(id, payload, opt_at, &mut o);
            }
            at = c.pos;
            kind = c.take(10, "'latency  ' or 'flyrecord'")?;
        }
        if kind == b"latency  \0" {
            return Err(Error::at(at as u64, "latency-tracer text trace (no binary event data)")
                .expected("a flyrecord (binary ring-buffer) trace"));
        }
        if kind != b"flyrecord\0" {
            return Err(Error::at(at as u64, format!("found {}", crate::bytes::show(kind)))
                .expected("'flyrecord\\0' after the cpu count"));
        }
        if self.lay.cpus == 0 {
            self.lay.cpus = header_cpus;
        }
        let mut top = Buffer { cpustats: std::mem::take(&mut o.top_cpustats), ..Buffer::default() };
        for cpu in 0..header_cpus {
            let (off, size) = self.cpu_span(c, "", cpu)?;
            top.cpus.push(CpuData { cpu, pages: CpuPages::Stored { offset: off as usize, size: size as usize } });
        }
        self.lay.buffers.push(top);
        for (payload, at) in std::mem::take(&mut o.buffer_options) {
            let inst = self.v6_instance(&payload, at, header_cpus, &mut o)?;
            self.lay.buffers.push(inst);
        }
        Ok(())
    }

    /// A CPU's (u64 offset, u64 size) of ring-buffer data, checked against the file. `label`: "" or
    /// "instance 'name' ", for the messages.
    fn cpu_span(&self, r: &mut Reader, label: &str, cpu: u32) -> Result<(u64, u64)> {
        let off = r.u64(&format!("{label}CPU {cpu} data offset"))?;
        let size = r.u64(&format!("{label}CPU {cpu} data size"))?;
        check_span(self.data, off, size, &format!("{label}CPU {cpu} ring-buffer data"))?;
        Ok((off, size))
    }

    /// v6 BUFFER option (u64 offset, name): at the offset 'flyrecord\0', (u64 offset, u64 size) per CPU,
    /// then the instance's trace clock (u64 length, text such as `[boot]`).
    fn v6_instance(&mut self, payload: &[u8], at: u64, cpus: u32, o: &mut Options) -> Result<Buffer> {
        if payload.len() < 9 {
            return Err(Error::at(at, format!("BUFFER option of {} bytes", payload.len()))
                .expected("a u64 offset and an instance name"));
        }
        let off = rd(payload, 0, 8, self.be).unwrap_or(0);
        let name = cstr_of(&payload[8..]);
        let q = repr(&name);
        let what = format!("trace instance {} flyrecord header (BUFFER option at offset {at})", repr(&name));
        if off >= self.data.len() as u64 {
            return Err(Error::at(
                at,
                format!("{what} points past the end of the file ({off} >= {} bytes)", self.data.len()),
            )
            .expected("an offset inside the file (truncated?)"));
        }
        let mut s = self.reader(off as usize);
        s.expect(b"flyrecord\0", &format!("'flyrecord\\0' at the start of the {what}"))?;
        let mut b = Buffer { name: Some(name.clone()), ..Buffer::default() };
        for cpu in 0..cpus {
            let (data_off, size) = self.cpu_span(&mut s, &format!("instance {q} "), cpu)?;
            b.cpus.push(CpuData { cpu, pages: CpuPages::Stored { offset: data_off as usize, size: size as usize } });
        }
        if s.left() >= 8 {
            let n = s.u64(&format!("instance {q} clock length"))?;
            if n > 0 && n <= 4096 && s.left() as u64 >= n {
                b.clock = parse_trace_clock(&s.text(n, "instance clock")?);
            }
        }
        b.cpustats = o.instance_cpustats.remove(&name).unwrap_or_default();
        Ok(b)
    }

    /// The v7 section at `off`: its header checked, its data located (a compressed one size-checked).
    fn locate(&mut self, off: u64, want: u16, what: &str) -> Result<Section> {
        let data = self.data;
        if off >= data.len() as u64 {
            return Err(Error::at(data.len() as u64, format!(
                "file ends before the {what} section it points to (section offset {off}, file size {} bytes: truncated?)",
                data.len())).expected(format!("the {what} section at offset {off}")));
        }
        let mut s = self.reader(off as usize);
        let id = s.u16(&format!("{what} section id"))?;
        let flags = s.u16(&format!("{what} section flags"))?;
        s.u32(&format!("{what} section description string id"))?;
        let size = s.u64(&format!("{what} section size"))?;
        if id != want {
            return Err(Error::at(off, format!("section id {id} where {what} (id {want}) should be"))
                .expected(format!("section id {want}")));
        }
        let start = s.pos as u64;
        check_span(data, start, size, &format!("{what} section"))?;
        if flags & SECTION_COMPRESSED == 0 {
            return Ok(Section::Stored { pos: start as usize, end: (start + size) as usize });
        }
        let csize = s.u32(&format!("{what} compressed size"))? as usize;
        let inflated = s.u32(&format!("{what} uncompressed size"))? as usize;
        let at = s.pos;
        s.take(csize, &format!("{what} compressed data"))?;
        self.limits.check(inflated as u64, csize).map_err(|m| Error::at(start, format!("{what} section {m}")))?;
        Ok(Section::Compressed { start, chunk: Chunk { offset: at, size: csize, inflated } })
    }

    /// Run `f` over the contents of the v7 section at `off` (inflated first when compressed).
    fn with_section<T>(
        &mut self,
        off: u64,
        want: u16,
        what: &str,
        f: impl FnOnce(&mut Self, &mut Reader) -> Result<T>,
    ) -> Result<T> {
        match self.locate(off, want, what)? {
            Section::Stored { pos, end } => {
                let mut c = self.reader(pos);
                c.end = end;
                f(self, &mut c)
            }
            Section::Compressed { start, chunk } => {
                let out = inflate_section(self.data, self.lay.codec, self.inflater.as_mut(), start, chunk, what)?;
                let mut c =
                    Reader::within(&out, self.be, start, &format!("compressed {what} section at offset {start}"));
                f(self, &mut c)
            }
        }
    }

    fn parse_v7(&mut self, c: &mut Reader) -> Result<()> {
        let at = c.pos as u64;
        let name = c.cstr("compression algorithm name", 1 << 16)?;
        c.cstr("compression algorithm version", 1 << 16)?;
        self.lay.codec = match name.as_str() {
            "" | "none" => None,
            "zstd" => Some(Codec::Zstd),
            "zlib" => Some(Codec::Zlib),
            other => {
                return Err(Error::at(at, format!("unsupported compression algorithm {}", repr(other)))
                    .expected("none, zlib or zstd"))
            }
        };
        if let Some(codec) = self.lay.codec {
            self.inflater = Some(Inflater::new(codec).map_err(Error::nowhere)?);
        }
        let mut opt_off = c.u64("first options section offset")?;
        // where a missing option is reported: the first options section (its header's offset in the file)
        let options_at = opt_off;
        let mut o = Options::default();
        let mut seen = std::collections::BTreeSet::new();
        while opt_off != 0 {
            if !seen.insert(opt_off) {
                return Err(Error::at(opt_off, "options sections form a loop"));
            }
            opt_off = self.with_section(opt_off, OPT_DONE, "options", |p, s| loop {
                let at = s.pos;
                let id = s.u16("option id")?;
                let size = s.u32("option size")? as usize;
                let payload = s.take(size, &format!("option {id} data"))?;
                if id == OPT_DONE {
                    return Ok(if payload.len() >= 8 { rd(payload, 0, 8, p.be).unwrap_or(0) } else { 0 });
                }
                p.option(id, payload, s.file_offset(at), &mut o);
            })?;
        }
        if o.latency {
            self.lay.warnings.push("latency-tracer text buffer present but not decoded".into());
        }
        let Some(&hi) = o.sections.get(&OPT_HEADER_INFO) else {
            return Err(Error::at(options_at, "no HEADER_INFO option in the options sections from here")
                .expected("a HEADER_INFO section"));
        };
        self.with_section(hi, OPT_HEADER_INFO, "header info", |p, s| p.header_info(s))?;
        if let Some(&off) = o.sections.get(&OPT_FTRACE_EVENTS) {
            self.with_section(off, OPT_FTRACE_EVENTS, "ftrace events", |p, s| p.ftrace_events(s))?;
        }
        if let Some(&off) = o.sections.get(&OPT_EVENT_FORMATS) {
            self.with_section(off, OPT_EVENT_FORMATS, "event formats", |p, s| p.event_formats(s))?;
        }
        if let Some(&off) = o.sections.get(&OPT_KALLSYMS) {
            self.lay.kallsyms = self.kallsyms_section(off)?;
        }
        if let Some(&off) = o.sections.get(&OPT_PRINTK) {
            self.lay.printk = self.with_section(off, OPT_PRINTK, "printk formats", |_, s| {
                let n = s.u32("printk formats size")?;
                s.text(n as u64, "printk formats")
            })?;
        }
        if let Some(&off) = o.sections.get(&OPT_CMDLINES) {
            self.lay.cmdlines = self.with_section(off, OPT_CMDLINES, "saved cmdlines", |_, s| {
                let n = s.u64("saved cmdlines size")?;
                s.text(n, "saved cmdlines")
            })?;
        }
        let known_cpus = self.lay.cpus;
        let (mut top, mut named) = (None, Vec::new());
        for (payload, at) in std::mem::take(&mut o.buffer_options) {
            let mut b = Reader::within(&payload, self.be, at, &format!("BUFFER option at offset {at}"));
            b.u64("buffer section offset")?;
            let name = b.cstr("buffer instance name", 1 << 16)?;
            let dup = if name.is_empty() {
                top.is_some()
            } else {
                named.iter().any(|n: &Buffer| n.name.as_ref() == Some(&name))
            };
            if dup {
                // not merged into the first option's buffer: which one is the recorded buffer is unknown
                let what =
                    if name.is_empty() { "the top buffer".to_string() } else { format!("instance {}", repr(&name)) };
                self.lay
                    .warnings
                    .push(format!("another BUFFER option for {what} at offset {at}: its ring-buffer data not decoded"));
                self.lay.skipped.add("tracedat_buffer_duplicate", 1, at, format!("second BUFFER option for {what}"));
                continue;
            }
            let buf = self.v7_buffer(&mut b, at, (!name.is_empty()).then_some(name), known_cpus)?;
            match buf.name {
                None => top = Some(buf),
                Some(_) => named.push(buf),
            }
        }
        if top.is_none() && named.is_empty() {
            return Err(Error::at(options_at, "no BUFFER option in the options sections from here")
                .expected("a flyrecord BUFFER option for the top trace instance"));
        }
        if let Some(mut t) = top {
            // `trace-cmd extract -B NAME` without -t writes only the named instances
            if self.lay.clock.is_none() {
                self.lay.clock = t.clock.clone();
            }
            t.cpustats = std::mem::take(&mut o.top_cpustats);
            if self.lay.cpus == 0 {
                self.lay.cpus = t.cpus.iter().map(|c| c.cpu + 1).max().unwrap_or(0);
            }
            self.lay.buffers.push(t);
        }
        for mut b in named {
            b.cpustats = o.instance_cpustats.remove(b.name.as_deref().unwrap_or("")).unwrap_or_default();
            self.lay.buffers.push(b);
        }
        Ok(())
    }

    /// The kallsyms section: a stored one is checked now; a compressed one is located (the decode
    /// inflates and checks it on its threads, `kallsyms_text`).
    fn kallsyms_section(&mut self, off: u64) -> Result<Kallsyms> {
        match self.locate(off, OPT_KALLSYMS, "kallsyms")? {
            Section::Stored { pos, end } => {
                let mut c = self.reader(pos);
                c.end = end;
                let n = c.u32("kallsyms size")? as usize;
                let at = c.pos;
                c.take(n, "kallsyms")?;
                Ok(Kallsyms::Stored { offset: at, size: n })
            }
            Section::Compressed { start, chunk } => Ok(Kallsyms::Compressed { section: start, chunk }),
        }
    }

    /// The rest of a v7 BUFFER option (clock, page size, per-CPU data).
    fn v7_buffer(&mut self, b: &mut Reader, at: u64, name: Option<String>, known_cpus: u32) -> Result<Buffer> {
        let clock = b.cstr("buffer trace clock", 1 << 16)?;
        b.u32("buffer page size")?;
        let ncpu = b.u32("buffer cpu count")?;
        let label = name.as_ref().map(|n| format!("instance {} ", repr(n))).unwrap_or_default();
        let mut buf = Buffer { name, clock: (!clock.is_empty()).then_some(clock), ..Buffer::default() };
        let bound = if known_cpus > 0 { known_cpus } else { MAX_CPUS };
        let mut listed = std::collections::BTreeSet::new();
        for _ in 0..ncpu {
            let cpu = b.u32("buffer cpu id")?;
            let (off, size) = self.cpu_span(b, &label, cpu)?;
            if !listed.insert(cpu) {
                // a second entry for a CPU is not merged into the first one's data (it is not that CPU's)
                self.lay.warnings.push(format!(
                    "{label}CPU id {cpu} listed again in the BUFFER option at offset {at}: the second entry's \
                     {size} bytes at offset {off} not decoded"
                ));
                self.lay.skipped.add(
                    "tracedat_cpu_id_duplicate",
                    1,
                    at,
                    format!("{label}CPU id {cpu} listed twice; {size} bytes at offset {off} not decoded"),
                );
                continue;
            }
            if size == 0 {
                continue;
            }
            if cpu >= bound {
                let why = if known_cpus > 0 {
                    format!("the file records {known_cpus} CPUs")
                } else {
                    format!("Linux has at most {MAX_CPUS} CPUs")
                };
                self.lay.warnings.push(format!(
                    "{label}ring-buffer data of CPU id {cpu} (BUFFER option at offset {at}) skipped: {why}; \
                     {size} bytes at offset {off} not decoded"
                ));
                self.lay.skipped.add("tracedat_cpu_id_out_of_range", 1, at, format!("{label}CPU id {cpu}: {why}"));
                continue;
            }
            let pages = match self.lay.codec {
                None => CpuPages::Stored { offset: off as usize, size: size as usize },
                Some(_) => {
                    let (chunks, used) = self.chunks(off as usize, size, cpu, &label)?;
                    if used < size {
                        let lost = size - used;
                        let what = if chunks.is_empty() {
                            format!("{label}CPU {cpu} declares {size} bytes of ring-buffer data at offset {off} but 0 chunks")
                        } else {
                            format!(
                                "{label}CPU {cpu} declares {size} bytes of ring-buffer data at offset {off}, its {} \
                                 chunks hold {used}",
                                chunks.len()
                            )
                        };
                        self.lay.warnings.push(format!(
                            "{what} (BUFFER option at offset {at}): {lost} bytes not decoded, their events are missing"
                        ));
                        self.lay.skipped.add(
                            "tracedat_cpu_data_undecoded",
                            1,
                            off,
                            format!("{what}: {lost} bytes not decoded"),
                        );
                        *self.lay.undecoded_bytes.entry(cpu).or_insert(0) += lost;
                    }
                    CpuPages::Chunks(chunks)
                }
            };
            buf.cpus.push(CpuData { cpu, pages });
        }
        Ok(buf)
    }

    /// v7 compressed data of one CPU: u32 chunk count, then (u32 compressed size, u32 inflated size, data).
    /// Returns the chunks and how many of the `size` declared bytes (after the count) they cover.
    fn chunks(&mut self, off: usize, size: u64, cpu: u32, label: &str) -> Result<(Vec<Chunk>, u64)> {
        // the recorded size counts the chunks, not the leading chunk count
        let end = (self.data.len() as u64).min(off as u64 + 4 + size) as usize;
        let mut s = self.reader(off);
        s.end = end;
        let n = s.u32(&format!("{label}CPU {cpu} chunk count"))? as usize;
        let mut out = Vec::with_capacity(n.min(s.left() / 8));
        for i in 0..n {
            let hdr = s.pos;
            let csize = s.u32(&format!("{label}CPU {cpu} chunk {i} header"))? as usize;
            let isize = s.u32(&format!("{label}CPU {cpu} chunk {i} header"))? as usize;
            let at = s.pos;
            s.take(csize, &format!("{label}CPU {cpu} chunk {i} data"))?;
            self.limits
                .check(isize as u64, csize)
                .map_err(|m| Error::at(hdr as u64, format!("{label}CPU {cpu} chunk {i} {m}")))?;
            if !isize.is_multiple_of(self.lay.page_size) {
                return Err(Error::at(hdr as u64, format!(
                    "{label}CPU {cpu} chunk {i} declares {isize} inflated bytes, not whole ring-buffer pages of {} bytes",
                    self.lay.page_size)).expected("a multiple of the page size"));
            }
            out.push(Chunk { offset: at, size: csize, inflated: isize });
        }
        Ok((out, (s.pos - off).saturating_sub(4) as u64))
    }
}

/// Parse the layout of the trace.dat in `data`.
pub fn parse(data: &[u8], limits: Limits) -> Result<Layout> {
    if data.is_empty() {
        return Err(Error::at(0, "file is empty").expected("a trace.dat file"));
    }
    let mut c = Reader::new(data, 0, false);
    c.expect(MAGIC, "trace.dat magic 17 08 44 'tracing'")?;
    let at = c.pos as u64;
    let version = c.cstr("file version", 16)?;
    if version != "6" && version != "7" {
        return Err(
            Error::at(at, format!("unsupported trace.dat version {}", repr(&version))).expected("version 6 or 7")
        );
    }
    let at = c.pos as u64;
    let endian = c.u8("endianness byte")?;
    if endian > 1 {
        return Err(Error::at(at, format!("bad endianness byte {endian}")).expected("0 (little) or 1 (big)"));
    }
    let be = endian == 1;
    c.be = be;
    let at = c.pos as u64;
    let long_size = c.u8("long size byte")? as usize;
    if long_size != 4 && long_size != 8 {
        return Err(Error::at(at, format!("bad long size {long_size}")).expected("4 or 8"));
    }
    let at = c.pos as u64;
    let page_size = c.u32("page size")? as usize;
    if !(64..=1 << 24).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(Error::at(at, format!("implausible page size {page_size}"))
            .expected("a power of two between 64 B and 16 MiB"));
    }
    let lay = Layout {
        version: if version == "6" { 6 } else { 7 },
        big_endian: be,
        long_size,
        page_size,
        ..Default::default()
    };
    let mut p = Parser { data, be, limits, inflater: None, lay };
    if p.lay.version == 6 {
        p.parse_v6(&mut c)?;
    } else {
        p.parse_v7(&mut c)?;
    }
    Ok(p.lay)
}
