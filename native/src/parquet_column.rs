//! One Arrow column (raw buffers from Python) and its encoding into parquet pages, streamed into a
//! `Sink` (the file being written). Used by `parquet_write`.
//!
//! Every column is OPTIONAL, as polars writes them: flat columns carry definition levels (width 1,
//! taken straight from the Arrow validity bitmap), List columns repetition (width 1) and definition
//! levels (width 2: 0 null list, 1 empty list, 2 null element, 3 element). Values: PLAIN floats,
//! booleans, strings, binary and list elements; integers as `parquet_ints` chooses (delta, dictionary
//! or PLAIN); a PLAIN dictionary page + RLE_DICTIONARY indices for Categorical columns. v1 data pages
//! of at most `page_rows` rows.
use std::io::Write;
use std::sync::Arc;

use crate::tracedat::tracedat_lazy::RunField;

use super::enc;
use super::ints;
use super::thrift::{self, Logical};

#[cfg(not(target_endian = "little"))]
compile_error!("parquet_write assumes a little-endian host (Arrow buffers are written as parquet PLAIN)");

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    Bool,
    Str,
    Bin,
    /// dictionary codes of 1, 2 or 4 bytes; the categories are the child (a Str column)
    Cat(usize),
    /// large list (i64 offsets); the elements are the child (a fixed-width numeric column)
    List,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "i8" => Kind::I8,
            "i16" => Kind::I16,
            "i32" => Kind::I32,
            "i64" => Kind::I64,
            "u8" => Kind::U8,
            "u16" => Kind::U16,
            "u32" => Kind::U32,
            "u64" => Kind::U64,
            "f32" => Kind::F32,
            "f64" => Kind::F64,
            "bool" => Kind::Bool,
            "str" => Kind::Str,
            "bin" => Kind::Bin,
            "cat8" => Kind::Cat(1),
            "cat16" => Kind::Cat(2),
            "cat32" => Kind::Cat(4),
            "list" => Kind::List,
            _ => return None,
        })
    }

    /// Bytes per value in the Arrow values buffer (offsets: 8; booleans: 0 = bits).
    pub fn width(self) -> usize {
        match self {
            Kind::I8 | Kind::U8 => 1,
            Kind::I16 | Kind::U16 => 2,
            Kind::I32 | Kind::U32 | Kind::F32 => 4,
            Kind::I64 | Kind::U64 | Kind::F64 => 8,
            Kind::Cat(w) => w,
            Kind::Str | Kind::Bin | Kind::List => 8,
            Kind::Bool => 0,
        }
    }

    pub fn is_int(self) -> bool {
        matches!(self, Kind::I8 | Kind::I16 | Kind::I32 | Kind::I64 | Kind::U8 | Kind::U16 | Kind::U32 | Kind::U64)
    }

    /// Parquet physical type (BOOLEAN 0, INT32 1, INT64 2, FLOAT 4, DOUBLE 5, BYTE_ARRAY 6).
    pub fn physical(self) -> i32 {
        match self {
            Kind::Bool => 0,
            Kind::I8 | Kind::I16 | Kind::I32 | Kind::U8 | Kind::U16 | Kind::U32 => 1,
            Kind::I64 | Kind::U64 => 2,
            Kind::F32 => 4,
            Kind::F64 => 5,
            Kind::Str | Kind::Bin | Kind::Cat(_) | Kind::List => 6,
        }
    }

    /// (converted type, logical type) as polars / Arrow annotate them.
    pub fn annotation(self) -> (Option<i32>, Logical) {
        match self {
            Kind::I8 => (Some(15), Logical::Int { bits: 8, signed: true }),
            Kind::I16 => (Some(16), Logical::Int { bits: 16, signed: true }),
            Kind::U8 => (Some(11), Logical::Int { bits: 8, signed: false }),
            Kind::U16 => (Some(12), Logical::Int { bits: 16, signed: false }),
            Kind::U32 => (Some(13), Logical::Int { bits: 32, signed: false }),
            Kind::U64 => (Some(14), Logical::Int { bits: 64, signed: false }),
            Kind::Str | Kind::Cat(_) => (Some(0), Logical::String),
            _ => (None, Logical::None),
        }
    }
}

/// One Arrow array as raw buffers (values, plus string bytes for Str/Bin), `offset` in elements; or
/// a trace.dat table's column held as its per-CPU runs (`runs`: values gathered per row group by
/// `Table::write`, see tracedat_lazy; `values` empty, `child` the Categorical dictionary).
pub struct Col {
    pub name: String,
    pub kind: Kind,
    pub len: usize,
    pub offset: usize,
    pub validity: Option<&'static [u8]>,
    pub values: &'static [u8],
    pub data: &'static [u8],
    pub child: Option<Box<Col>>,
    pub runs: Option<Arc<RunField>>,
}

impl Col {
    #[inline]
    pub fn valid(&self, i: usize) -> bool {
        match self.validity {
            None => true,
            Some(v) => v[(self.offset + i) >> 3] >> ((self.offset + i) & 7) & 1 == 1,
        }
    }

    fn has_nulls(&self, r0: usize, r1: usize) -> bool {
        self.validity.is_some() && (r0..r1).any(|i| !self.valid(i))
    }

    /// Raw values buffer bytes of rows [r0, r1) (fixed-width kinds).
    fn raw(&self, r0: usize, r1: usize) -> &[u8] {
        let w = self.kind.width();
        &self.values[(self.offset + r0) * w..(self.offset + r1) * w]
    }

    #[inline]
    fn u64_at(&self, i: usize) -> u64 {
        let j = self.offset + i;
        let b = self.values;
        match self.kind.width() {
            1 => b[j] as u64,
            2 => u16::from_le_bytes([b[2 * j], b[2 * j + 1]]) as u64,
            4 => u32::from_le_bytes(b[4 * j..4 * j + 4].try_into().unwrap()) as u64,
            _ => u64::from_le_bytes(b[8 * j..8 * j + 8].try_into().unwrap()),
        }
    }

    /// Offsets [start, end) of value `i` of a Str / Bin / List column.
    #[inline]
    fn range(&self, i: usize) -> (usize, usize) {
        (self.u64_at(i) as usize, self.u64_at(i + 1) as usize)
    }

    fn bytes_at(&self, i: usize) -> &[u8] {
        let (a, b) = self.range(i);
        &self.data[a..b]
    }

    /// Value `i` of an INT32-physical column (narrow types sign- or zero-extended).
    #[inline]
    fn i32_at(&self, i: usize) -> i32 {
        let v = self.u64_at(i);
        match self.kind {
            Kind::I8 => v as u8 as i8 as i32,
            Kind::I16 => v as u16 as i16 as i32,
            _ => v as u32 as i32,
        }
    }

    /// Non-null values of rows [r0, r1) of an INT32-physical column (narrow types sign- or
    /// zero-extended, UInt32 reinterpreted) appended to `out`.
    fn gather_i32(&self, r0: usize, r1: usize, out: &mut Vec<i32>) {
        if self.has_nulls(r0, r1) {
            out.extend((r0..r1).filter(|&i| self.valid(i)).map(|i| self.i32_at(i)));
            return;
        }
        let raw = self.raw(r0, r1);
        match self.kind {
            Kind::I8 => out.extend(raw.iter().map(|&b| b as i8 as i32)),
            Kind::U8 => out.extend(raw.iter().map(|&b| b as i32)),
            Kind::I16 => out.extend(raw.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as i32)),
            Kind::U16 => out.extend(raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as i32)),
            _ => out.extend(raw.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()))),
        }
    }

    /// Rows [r0, r1) as a typed slice without copying (no nulls, buffer aligned), else None.
    fn view<T: Copy>(&self, r0: usize, r1: usize) -> Option<&[T]> {
        if self.kind.width() != std::mem::size_of::<T>() || self.has_nulls(r0, r1) {
            return None;
        }
        // SAFETY: T is a plain integer type of the column's width; any bit pattern is valid
        let (pre, mid, post) = unsafe { self.raw(r0, r1).align_to::<T>() };
        (pre.is_empty() && post.is_empty()).then_some(mid)
    }

    /// Non-null values of rows [r0, r1) of an 8-byte column appended to `out`.
    fn gather_i64(&self, r0: usize, r1: usize, out: &mut Vec<i64>) {
        if self.has_nulls(r0, r1) {
            out.extend((r0..r1).filter(|&i| self.valid(i)).map(|i| self.u64_at(i) as i64));
        } else {
            out.extend(self.raw(r0, r1).chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())));
        }
    }

    /// Check that every buffer covers what the array's length and offset say it holds.
    pub fn check(&self) -> Result<(), String> {
        if self.runs.is_some() {
            return self.child.as_ref().map_or(Ok(()), |c| c.check()); // filled per row group
        }
        let need_bits = self.offset + self.len;
        if let Some(v) = self.validity {
            if v.len() * 8 < need_bits {
                return Err(format!("column {}: validity buffer too short", self.name));
            }
        }
        let need = match self.kind {
            Kind::Bool => need_bits.div_ceil(8),
            Kind::Str | Kind::Bin | Kind::List => (need_bits + 1) * 8,
            k => need_bits * k.width(),
        };
        if self.values.len() < need {
            return Err(format!("column {}: values buffer holds {} bytes, need {need}", self.name, self.values.len()));
        }
        if matches!(self.kind, Kind::Str | Kind::Bin | Kind::List) {
            let mut prev = self.u64_at(0);
            for i in 1..=self.len {
                let o = self.u64_at(i);
                if o < prev {
                    return Err(format!("column {}: offsets decrease at row {i}", self.name));
                }
                prev = o;
            }
            let limit = match self.kind {
                Kind::List => self.child.as_ref().map_or(0, |c| c.len) as u64,
                _ => self.data.len() as u64,
            };
            if prev > limit {
                return Err(format!("column {}: offsets run past the data ({prev} > {limit})", self.name));
            }
        }
        if let Some(c) = &self.child {
            c.check()?;
        }
        Ok(())
    }
}

/// How integer columns are encoded (see `parquet_ints`).
#[derive(Clone, Copy)]
pub enum IntMode {
    /// per chunk: DELTA_BINARY_PACKED when sorted 64-bit, dictionary when the span is small, else PLAIN
    Auto,
    /// DELTA_BINARY_PACKED everywhere
    Delta,
    /// PLAIN everywhere
    Plain,
}

pub struct Opts {
    pub lz4: bool,
    pub page_rows: usize,
    pub ints: IntMode,
}

/// What the footer needs to know about one written column chunk (absolute file offsets).
pub struct ChunkStats {
    pub physical: i32,
    pub encodings: Vec<i32>,
    pub num_values: i64,
    pub uncompressed: i64,
    pub compressed: i64,
    pub data_page_offset: i64,
    pub dictionary_page_offset: Option<i64>,
}

/// The file being written plus per-thread scratch buffers reused across pages and columns.
pub struct Sink {
    /// the file being written (replaced per table)
    pub w: Box<dyn Write + Send>,
    pub pos: u64,
    pub lz4: bool,
    comp: Vec<u8>,
    hdr: Vec<u8>,
    pub body: Vec<u8>,
    i32s: Vec<i32>,
    i64s: Vec<i64>,
    pub idx: Vec<u32>,
    /// value -> dictionary index of small-span integer chunks
    pub table: Vec<u32>,
    levels: [Vec<u8>; 2],
    /// one row group's values of a column held as its runs (see `Col::runs`), 8-byte aligned
    pub runs: Vec<u64>,
}

impl Sink {
    pub fn new() -> Self {
        Sink { w: Box::new(std::io::sink()), pos: 0, lz4: false, comp: Vec::new(), hdr: Vec::new(), body: Vec::new(), i32s: Vec::new(),
               i64s: Vec::new(), idx: Vec::new(), table: Vec::new(), levels: [Vec::new(), Vec::new()],
               runs: Vec::new() }
    }

    /// Free the scratch buffers larger than 2 MiB (a whole chunk's values or indices) at the end of a
    /// call, so that the process does not keep them; page-sized ones stay for the next call.
    pub fn shrink(&mut self) {
        fn cap<T>(v: &mut Vec<T>) {
            if v.capacity() * std::mem::size_of::<T>() > 2 << 20 {
                *v = Vec::new();
            }
        }
        cap(&mut self.body);
        cap(&mut self.comp);
        cap(&mut self.i32s);
        cap(&mut self.i64s);
        cap(&mut self.idx);
        cap(&mut self.table);
        cap(&mut self.levels[0]);
        cap(&mut self.levels[1]);
        cap(&mut self.runs);
    }

    pub fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.pos += b.len() as u64;
        self.w.write_all(b)
    }

    /// Header + (compressed) `self.body` as one page.
    pub fn page(&mut self, st: &mut ChunkStats, kind: i32, num_values: usize, encoding: i32) -> std::io::Result<()> {
        let body = std::mem::take(&mut self.body);
        let stored: &[u8] = if self.lz4 {
            self.comp.resize(lz4_flex::block::get_maximum_output_size(body.len()), 0);
            let n = lz4_flex::block::compress_into(&body, &mut self.comp)
                .map_err(|e| std::io::Error::other(format!("lz4: {e}")))?;
            &self.comp[..n]
        } else {
            &body
        };
        self.hdr.clear();
        thrift::page_header(&mut self.hdr, kind, body.len(), stored.len(), num_values, encoding);
        st.uncompressed += (self.hdr.len() + body.len()) as i64;
        st.compressed += (self.hdr.len() + stored.len()) as i64;
        self.pos += (self.hdr.len() + stored.len()) as u64;
        self.w.write_all(&self.hdr)?;
        self.w.write_all(stored)?;
        self.body = body;
        self.body.clear();
        Ok(())
    }
}

/// Definition levels of a flat column for rows [p0, p1), with the v1 4-byte length prefix.
pub fn flat_def_levels(body: &mut Vec<u8>, col: &Col, p0: usize, p1: usize) {
    let at = body.len();
    body.extend_from_slice(&[0; 4]);
    match col.validity {
        Some(v) if col.has_nulls(p0, p1) => enc::def_levels_from_bitmap(body, v, col.offset + p0, p1 - p0),
        _ => enc::rle_run(body, p1 - p0, 1, 1),
    }
    let n = (body.len() - at - 4) as u32;
    body[at..at + 4].copy_from_slice(&n.to_le_bytes());
}

pub fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain integers; the host is little-endian (compile_error above), as PLAIN requires
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Write the column chunk of rows [r0, r1) as pages into `sink`.
pub fn write_chunk(sink: &mut Sink, col: &Col, r0: usize, r1: usize, opts: &Opts)
                             -> Result<ChunkStats, String> {
    let mut st = ChunkStats {
        physical: match col.kind {
            Kind::List => col.child.as_ref().unwrap().kind.physical(),
            k => k.physical(),
        },
        encodings: vec![thrift::ENC_RLE],
        num_values: (r1 - r0) as i64,
        uncompressed: 0,
        compressed: 0,
        data_page_offset: sink.pos as i64,
        dictionary_page_offset: None,
    };
    let res = match col.kind {
        Kind::Cat(_) => write_cat(sink, &mut st, col, r0, r1, opts),
        Kind::List => write_list(sink, &mut st, col, r0, r1, opts),
        _ => write_flat(sink, &mut st, col, r0, r1, opts),
    };
    res.map_err(|e| format!("column {}: {e}", col.name))?;
    Ok(st)
}

fn write_flat(sink: &mut Sink, st: &mut ChunkStats, col: &Col, r0: usize, r1: usize, opts: &Opts)
              -> std::io::Result<()> {
    if col.kind.is_int() {
        return if col.kind.physical() == 2 {
            let mut scratch = std::mem::take(&mut sink.i64s);
            let vals = col.view::<i64>(r0, r1).unwrap_or_else(|| {
                scratch.clear();
                col.gather_i64(r0, r1, &mut scratch);
                &scratch
            });
            let res = ints::write_ints(sink, st, col, r0, r1, opts, vals);
            sink.i64s = scratch;
            res
        } else {
            let mut scratch = std::mem::take(&mut sink.i32s);
            let view = if matches!(col.kind, Kind::I32 | Kind::U32) { col.view::<i32>(r0, r1) } else { None };
            let vals = view.unwrap_or_else(|| {
                scratch.clear();
                col.gather_i32(r0, r1, &mut scratch);
                &scratch
            });
            let res = ints::write_ints(sink, st, col, r0, r1, opts, vals);
            sink.i32s = scratch;
            res
        };
    }
    st.encodings.push(thrift::ENC_PLAIN);
    let mut p0 = r0;
    while p0 < r1 {
        let p1 = (p0 + opts.page_rows).min(r1);
        let mut body = std::mem::take(&mut sink.body);
        flat_def_levels(&mut body, col, p0, p1);
        match col.kind {
            Kind::Bool => enc::plain_bools(
                &mut body,
                (p0..p1).filter(|&i| col.valid(i)).map(|i| {
                    let j = col.offset + i;
                    col.values[j >> 3] >> (j & 7) & 1 == 1
                }),
            ),
            Kind::Str | Kind::Bin => {
                for i in p0..p1 {
                    if col.valid(i) {
                        enc::plain_bytes(&mut body, col.bytes_at(i));
                    }
                }
            }
            _ if !col.has_nulls(p0, p1) => body.extend_from_slice(col.raw(p0, p1)),
            _ => {
                for i in (p0..p1).filter(|&i| col.valid(i)) {
                    body.extend_from_slice(col.raw(i, i + 1));
                }
            }
        }
        sink.body = body;
        sink.page(st, thrift::PAGE_DATA, p1 - p0, thrift::ENC_PLAIN)?;
        p0 = p1;
    }
    Ok(())
}

/// Categorical: a dictionary page holding the categories the chunk uses (in code order), then data
/// pages of RLE_DICTIONARY indices.
fn write_cat(sink: &mut Sink, st: &mut ChunkStats, col: &Col, r0: usize, r1: usize, opts: &Opts)
                       -> std::io::Result<()> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    let dict = col.child.as_ref().ok_or_else(|| bad("no categories".into()))?;
    let mut remap = vec![u32::MAX; dict.len];
    let mut mark = |c: usize, i: usize| -> std::io::Result<()> {
        *remap.get_mut(c).ok_or_else(|| bad(format!("code {c} at row {i} >= {} categories", dict.len)))? = 0;
        Ok(())
    };
    if col.has_nulls(r0, r1) {
        for i in (r0..r1).filter(|&i| col.valid(i)) {
            mark(col.u64_at(i) as usize, i)?;
        }
    } else if let Some(codes) = col.view::<u32>(r0, r1) {
        // mark each distinct run once: codes repeat a lot
        let mut last = u32::MAX;
        for (k, &c) in codes.iter().enumerate() {
            if c != last {
                mark(c as usize, r0 + k)?;
                last = c;
            }
        }
    } else {
        for i in r0..r1 {
            mark(col.u64_at(i) as usize, i)?;
        }
    }
    let mut n = 0u32;
    for (c, slot) in remap.iter_mut().enumerate() {
        if *slot == 0 {
            *slot = n;
            n += 1;
            enc::plain_bytes(&mut sink.body, dict.bytes_at(c));
        }
    }
    st.dictionary_page_offset = Some(sink.pos as i64);
    sink.page(st, thrift::PAGE_DICTIONARY, n as usize, thrift::ENC_PLAIN)?;
    st.data_page_offset = sink.pos as i64;
    st.encodings.extend([thrift::ENC_PLAIN, thrift::ENC_RLE_DICTIONARY]);
    let width = enc::bit_width(n.saturating_sub(1) as u64).max(1);
    let mut p0 = r0;
    while p0 < r1 {
        let p1 = (p0 + opts.page_rows).min(r1);
        let mut body = std::mem::take(&mut sink.body);
        let mut idx = std::mem::take(&mut sink.idx);
        flat_def_levels(&mut body, col, p0, p1);
        idx.clear();
        if col.has_nulls(p0, p1) {
            idx.extend((p0..p1).filter(|&i| col.valid(i)).map(|i| remap[col.u64_at(i) as usize]));
        } else {
            let raw = col.raw(p0, p1);
            match col.kind.width() {
                1 => idx.extend(raw.iter().map(|&b| remap[b as usize])),
                2 => idx.extend(raw.chunks_exact(2).map(|c| remap[u16::from_le_bytes([c[0], c[1]]) as usize])),
                _ => idx.extend(raw.chunks_exact(4).map(|c| remap[u32::from_le_bytes(c.try_into().unwrap()) as usize])),
            }
        }
        body.push(width as u8);
        enc::hybrid(&mut body, &idx, width);
        sink.body = body;
        sink.idx = idx;
        sink.page(st, thrift::PAGE_DATA, p1 - p0, thrift::ENC_RLE_DICTIONARY)?;
        p0 = p1;
    }
    Ok(())
}

/// List of fixed-width numbers (PLAIN elements) with repetition and definition levels.
fn write_list(sink: &mut Sink, st: &mut ChunkStats, col: &Col, r0: usize, r1: usize, opts: &Opts)
                        -> std::io::Result<()> {
    let child = col.child.as_ref().unwrap();
    st.encodings.push(thrift::ENC_PLAIN);
    st.num_values = 0;
    let mut p0 = r0;
    while p0 < r1 {
        let p1 = (p0 + opts.page_rows).min(r1);
        let [mut rep, mut def] = std::mem::take(&mut sink.levels);
        rep.clear();
        def.clear();
        let mut vals = Vec::new();
        for i in p0..p1 {
            let (a, b) = col.range(i);
            if !col.valid(i) || a == b {
                rep.push(0);
                def.push(col.valid(i) as u8);
                continue;
            }
            for j in a..b {
                rep.push((j != a) as u8);
                // list offsets index the child array's logical positions
                let ok = child.valid(j);
                def.push(if ok { 3 } else { 2 });
                if ok {
                    match child.kind.physical() {
                        1 => vals.extend_from_slice(&child.i32_at(j).to_le_bytes()),
                        _ => vals.extend_from_slice(child.raw(j, j + 1)),
                    }
                }
            }
        }
        let mut body = std::mem::take(&mut sink.body);
        for (levels, width) in [(&rep, 1u32), (&def, 2u32)] {
            let at = body.len();
            body.extend_from_slice(&[0; 4]);
            enc::hybrid(&mut body, levels, width);
            let n = (body.len() - at - 4) as u32;
            body[at..at + 4].copy_from_slice(&n.to_le_bytes());
        }
        body.extend_from_slice(&vals);
        sink.body = body;
        let n = rep.len();
        sink.levels = [rep, def];
        sink.page(st, thrift::PAGE_DATA, n, thrift::ENC_PLAIN)?;
        st.num_values += n as i64;
        p0 = p1;
    }
    Ok(())
}
