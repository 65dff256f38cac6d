//! Column builders: one per field of an event type, filled record by record from the record bytes, and
//! turned into Arrow arrays without copying.
//!
//! Integers keep the kernel width and signedness; names (`char comm[16]`, `__data_loc` comms) are
//! dictionary-encoded (Arrow Dictionary(UInt32, LargeUtf8) -> polars Categorical); other text is
//! LargeUtf8 (invalid UTF-8 replaced), other bytes LargeBinary, arrays LargeList.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::types::UInt32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int16Array, Int32Array, Int64Array, Int8Array, LargeBinaryArray, LargeListArray,
    LargeStringArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::Field;

use crate::bytes::rd;
use crate::format::Kind;
use crate::printf::format_bprint;
use rustc_hash::FxHashMap;

/// How to fill one column: the field's place in the record and its kind. `aux_*`: the place of the
/// field a kind also reads (bprint: the format address; kernel_stack: the entry count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub kind: Kind,
    pub signed: bool,
    pub elem: usize,
    pub aux_off: usize,
    pub aux_size: usize,
}

/// Kernel symbols for bprint `%pS` (sorted addresses, names), parsed on first use.
pub struct Syms<'a> {
    cell: OnceLock<(Vec<u64>, Vec<String>)>,
    load: Box<dyn Fn() -> (Vec<u64>, Vec<String>) + Send + Sync + 'a>,
}

impl<'a> Syms<'a> {
    pub fn new(load: Box<dyn Fn() -> (Vec<u64>, Vec<String>) + Send + Sync + 'a>) -> Syms<'a> {
        Syms { cell: OnceLock::new(), load }
    }

    pub fn get(&self) -> (&[u64], &[String]) {
        let (a, n) = self.cell.get_or_init(|| (self.load)());
        (a, n)
    }
}

/// What builders read besides the record; counters of values that could not be read.
pub struct Env<'a> {
    pub be: bool,
    pub long_size: usize,
    pub printk: &'a HashMap<u64, Vec<u8>>,
    pub syms: &'a Syms<'a>,
    /// field values beyond their record's end (read as 0)
    pub short_fields: u64,
    /// bprint / bputs records whose printk format is not in the file
    pub missing_formats: u64,
}

/// Integers of one width and signedness.
#[derive(Debug, Clone, PartialEq)]
pub enum Ints {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
}

/// Apply `$body` to the vector inside any `Ints` variant.
macro_rules! each_int {
    ($ints:expr, $v:ident => $body:expr) => {
        match $ints {
            Ints::U8($v) => $body,
            Ints::I8($v) => $body,
            Ints::U16($v) => $body,
            Ints::I16($v) => $body,
            Ints::U32($v) => $body,
            Ints::I32($v) => $body,
            Ints::U64($v) => $body,
            Ints::I64($v) => $body,
        }
    };
}

impl Ints {
    pub fn new(size: usize, signed: bool, cap: usize) -> Ints {
        match (size, signed) {
            (1, false) => Ints::U8(Vec::with_capacity(cap)),
            (1, true) => Ints::I8(Vec::with_capacity(cap)),
            (2, false) => Ints::U16(Vec::with_capacity(cap)),
            (2, true) => Ints::I16(Vec::with_capacity(cap)),
            (4, false) => Ints::U32(Vec::with_capacity(cap)),
            (4, true) => Ints::I32(Vec::with_capacity(cap)),
            (_, false) => Ints::U64(Vec::with_capacity(cap)),
            (_, true) => Ints::I64(Vec::with_capacity(cap)),
        }
    }

    /// Append `v` truncated to the width (two's complement).
    #[inline(always)]
    pub fn push(&mut self, v: u64) {
        match self {
            Ints::U8(x) => x.push(v as u8),
            Ints::I8(x) => x.push(v as u8 as i8),
            Ints::U16(x) => x.push(v as u16),
            Ints::I16(x) => x.push(v as u16 as i16),
            Ints::U32(x) => x.push(v as u32),
            Ints::I32(x) => x.push(v as u32 as i32),
            Ints::U64(x) => x.push(v),
            Ints::I64(x) => x.push(v as i64),
        }
    }

    pub fn len(&self) -> usize {
        each_int!(self, v => v.len())
    }

    /// The value at `i` as u64 (two's complement for signed widths).
    #[allow(clippy::unnecessary_cast)] // u64 for the U64 variant, a conversion for the others
    pub fn get(&self, i: usize) -> u64 {
        each_int!(self, v => v[i] as u64)
    }

    pub fn into_arrow(self) -> ArrayRef {
        match self {
            Ints::U8(v) => Arc::new(UInt8Array::new(ScalarBuffer::from(v), None)),
            Ints::I8(v) => Arc::new(Int8Array::new(ScalarBuffer::from(v), None)),
            Ints::U16(v) => Arc::new(UInt16Array::new(ScalarBuffer::from(v), None)),
            Ints::I16(v) => Arc::new(Int16Array::new(ScalarBuffer::from(v), None)),
            Ints::U32(v) => Arc::new(UInt32Array::new(ScalarBuffer::from(v), None)),
            Ints::I32(v) => Arc::new(Int32Array::new(ScalarBuffer::from(v), None)),
            Ints::U64(v) => Arc::new(UInt64Array::new(ScalarBuffer::from(v), None)),
            Ints::I64(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), None)),
        }
    }
}

/// Variable-length values (Arrow large offsets + bytes); `utf8`: text, kept valid UTF-8.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Var {
    pub offsets: Vec<i64>,
    pub bytes: Vec<u8>,
    pub utf8: bool,
}

impl Var {
    pub fn new(utf8: bool) -> Var {
        Var { offsets: vec![0], bytes: Vec::new(), utf8 }
    }

    #[inline]
    pub fn push(&mut self, v: &[u8]) {
        if self.utf8 && std::str::from_utf8(v).is_err() {
            self.bytes.extend_from_slice(String::from_utf8_lossy(v).as_bytes());
        } else {
            self.bytes.extend_from_slice(v);
        }
        self.offsets.push(self.bytes.len() as i64);
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn get(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    pub fn into_arrow(self) -> ArrayRef {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        let bytes = Buffer::from_vec(self.bytes);
        if self.utf8 {
            // SAFETY: `push` stores only valid UTF-8 when utf8 is set; the offsets are monotonic (checked
            // by OffsetBuffer::new) and end at bytes.len()
            Arc::new(unsafe { LargeStringArray::new_unchecked(offsets, bytes, None) })
        } else {
            Arc::new(LargeBinaryArray::new(offsets, bytes, None))
        }
    }
}

/// Entries of a dictionary's cache of recent short texts.
const RECENT: usize = 64;

/// Distinct texts in order of first use, and the code of each. A trace repeats a few task names
/// millions of times: texts of up to 16 bytes are keyed by their bytes zero-padded to a u128, looked up
/// in a small direct-mapped cache of recent keys before the hash map.
#[derive(Debug, Clone)]
pub struct Dict {
    short: FxHashMap<u128, u32>,
    long: FxHashMap<Vec<u8>, u32>,
    recent: Box<[(u128, u32); RECENT]>,
    pub values: Var,
}

impl Default for Dict {
    fn default() -> Dict {
        Dict::new()
    }
}

/// Index of the first zero byte of 16 little-endian bytes (16 if none).
#[inline(always)]
fn first_nul(v: u128) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let a = zero_in(v as u64);
    if a != 0 {
        return (a.trailing_zeros() / 8) as usize;
    }
    let b = zero_in((v >> 64) as u64);
    if b != 0 {
        return 8 + (b.trailing_zeros() / 8) as usize;
    }
    16
}

impl Dict {
    pub fn new() -> Dict {
        Dict {
            short: FxHashMap::default(),
            long: FxHashMap::default(),
            recent: Box::new([(0, u32::MAX); RECENT]),
            values: Var::new(true),
        }
    }

    /// Code of the text up to the first NUL of 16 bytes (a `char comm[16]`).
    #[inline(always)]
    pub fn code16(&mut self, raw: &[u8; 16]) -> u32 {
        let v = u128::from_le_bytes(*raw);
        let n = first_nul(v);
        let key = if n >= 16 { v } else { v & ((1u128 << (8 * n)) - 1) };
        self.code_short(key, &raw[..n])
    }

    /// Code of `v` (text without NUL), added when new.
    #[inline]
    pub fn code(&mut self, v: &[u8]) -> u32 {
        if v.len() <= 16 {
            let mut k = [0u8; 16];
            k[..v.len()].copy_from_slice(v);
            return self.code_short(u128::from_le_bytes(k), v);
        }
        if let Some(&c) = self.long.get(v) {
            return c;
        }
        let c = self.values.len() as u32;
        self.values.push(v);
        self.long.insert(v.to_vec(), c);
        c
    }

    /// Code of the text `v` whose zero-padded bytes are `key`.
    #[inline(always)]
    fn code_short(&mut self, key: u128, v: &[u8]) -> u32 {
        let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let e = &mut self.recent[(h >> 58) as usize % RECENT];
        if e.0 == key && e.1 != u32::MAX {
            return e.1;
        }
        let c = match self.short.get(&key) {
            Some(&c) => c,
            None => {
                let c = self.values.len() as u32;
                self.values.push(v);
                self.short.insert(key, c);
                c
            }
        };
        *e = (key, c);
        c
    }
}

/// The values of one column.
#[derive(Debug, Clone)]
pub enum Data {
    Int(Ints),
    Var(Var),
    Cat {
        codes: Vec<u32>,
        dict: Dict,
    },
    /// `count` elements per row
    List {
        count: usize,
        flat: Ints,
    },
    VarList {
        offsets: Vec<i64>,
        flat: Ints,
    },
}

impl Default for Data {
    /// An empty column (what a column's data is replaced with once taken).
    fn default() -> Data {
        Data::Int(Ints::U8(Vec::new()))
    }
}

impl Data {
    /// The integers of an Int or List column (the flat elements of a list); empty for other kinds.
    pub fn into_ints(self) -> Ints {
        match self {
            Data::Int(i) | Data::List { flat: i, .. } => i,
            _ => Ints::U8(Vec::new()),
        }
    }
}

/// One column being filled.
#[derive(Debug, Clone)]
pub struct Builder {
    pub spec: Spec,
    pub data: Data,
}

fn trim_nul(v: &[u8]) -> &[u8] {
    &v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())]
}

/// Slice of a __data_loc / __rel_loc field: u32 = (length << 16) | offset.
fn dyn_slice(r: &[u8], off: usize, size: usize, be: bool, rel: bool) -> &[u8] {
    let v = rd(r, off, 4, be).unwrap_or(0) as usize;
    let start = (v & 0xffff) + if rel { off + size } else { 0 };
    let end = start.saturating_add(v >> 16).min(r.len());
    r.get(start..end).unwrap_or(&[])
}

impl Builder {
    /// A column with room for `cap` rows.
    pub fn new(spec: &Spec, cap: usize) -> Builder {
        let data = match spec.kind {
            Kind::Int => Data::Int(Ints::new(spec.size, spec.signed, cap)),
            Kind::CharArray | Kind::DataLocCat => Data::Cat { codes: Vec::with_capacity(cap), dict: Dict::new() },
            Kind::NumArray => {
                let count = spec.size / spec.elem.max(1);
                Data::List { count, flat: Ints::new(spec.elem, spec.signed, cap * count) }
            }
            Kind::TailList => Data::VarList { offsets: vec![0], flat: Ints::new(spec.elem, spec.signed, 0) },
            Kind::DataLocStr | Kind::RelLocStr | Kind::TailStr | Kind::BprintText | Kind::PrintkStr => {
                Data::Var(Var::new(true))
            }
            Kind::DataLocBin | Kind::RelLocBin | Kind::TailBin | Kind::Bytes => Data::Var(Var::new(false)),
        };
        Builder { spec: spec.clone(), data }
    }

    /// Append this field of record `r`.
    #[inline(always)]
    pub fn push(&mut self, r: &[u8], env: &mut Env) {
        let Spec { offset: off, size, kind, elem, aux_off, aux_size, .. } = self.spec;
        let be = env.be;
        match &mut self.data {
            Data::Int(v) => {
                let x = rd(r, off, size, be).unwrap_or_else(|| {
                    env.short_fields += 1;
                    0
                });
                v.push(x);
            }
            Data::Cat { codes, dict } => {
                let v = match kind {
                    Kind::DataLocCat => trim_nul(dyn_slice(r, off, size, be, false)),
                    _ => trim_nul(r.get(off..off + size).unwrap_or(&[])),
                };
                codes.push(dict.code(v));
            }
            Data::List { count, flat } => {
                for k in 0..*count {
                    flat.push(rd(r, off + k * elem, elem, be).unwrap_or(0));
                }
            }
            Data::VarList { offsets, flat } => {
                let mut n = r.len().saturating_sub(off) / elem.max(1);
                if aux_size > 0 {
                    n = n.min(rd(r, aux_off, aux_size, be).unwrap_or(0) as usize);
                }
                for k in 0..n {
                    flat.push(rd(r, off + k * elem, elem, be).unwrap_or(0));
                }
                offsets.push(flat.len() as i64);
            }
            Data::Var(var) => match kind {
                Kind::Bytes => var.push(r.get(off..off + size).unwrap_or(&[])),
                Kind::DataLocStr | Kind::RelLocStr => {
                    var.push(trim_nul(dyn_slice(r, off, size, be, kind == Kind::RelLocStr)))
                }
                Kind::DataLocBin | Kind::RelLocBin => var.push(dyn_slice(r, off, size, be, kind == Kind::RelLocBin)),
                Kind::TailStr => var.push(trim_nul(r.get(off..).unwrap_or(&[]))),
                Kind::BprintText => {
                    let addr = rd(r, aux_off, aux_size, be).unwrap_or(0);
                    let text = match env.printk.get(&addr) {
                        Some(fmt) => format_bprint(fmt, r.get(off..).unwrap_or(&[]), env.long_size, be, env.syms.get()),
                        None => {
                            env.missing_formats += 1;
                            format!("[UNKNOWN PRINTK FORMAT 0x{addr:x}]")
                        }
                    };
                    var.push(text.as_bytes())
                }
                Kind::PrintkStr => {
                    let addr = rd(r, off, size, be).unwrap_or(0);
                    match env.printk.get(&addr) {
                        Some(s) => var.push(s),
                        None => {
                            env.missing_formats += 1;
                            var.push(format!("[UNKNOWN PRINTK STRING 0x{addr:x}]").as_bytes())
                        }
                    }
                }
                _ => var.push(r.get(off..).unwrap_or(&[])),
            },
        }
    }

    /// Bytes of the record this field reads when it has a fixed place (None: variable place).
    fn fixed_extent(&self) -> Option<usize> {
        match (&self.data, self.spec.kind) {
            (Data::Int(_) | Data::List { .. }, _) | (Data::Cat { .. }, Kind::CharArray) => {
                Some(self.spec.offset + self.spec.size)
            }
            _ => None,
        }
    }

    /// Append this field of `n` records laid out at `stride` bytes in `rows` (fixed-place fields, records
    /// at least `stride` long): one tight loop per field.
    fn push_block(&mut self, rows: &[u8], stride: usize, n: usize, env: &mut Env) {
        let (off, size, be) = (self.spec.offset, self.spec.size, env.be);
        macro_rules! ints {
            ($v:expr, $w:literal, $conv:expr) => {{
                $v.reserve(n);
                for k in 0..n {
                    let at = k * stride + off;
                    let b: [u8; $w] = rows[at..at + $w].try_into().expect("field inside the staged row");
                    $v.push($conv(b));
                }
            }};
        }
        match (&mut self.data, be) {
            (Data::Int(Ints::U8(v)), _) => ints!(v, 1, |b: [u8; 1]| b[0]),
            (Data::Int(Ints::I8(v)), _) => ints!(v, 1, |b: [u8; 1]| b[0] as i8),
            (Data::Int(Ints::U16(v)), false) => ints!(v, 2, u16::from_le_bytes),
            (Data::Int(Ints::U16(v)), true) => ints!(v, 2, u16::from_be_bytes),
            (Data::Int(Ints::I16(v)), false) => ints!(v, 2, i16::from_le_bytes),
            (Data::Int(Ints::I16(v)), true) => ints!(v, 2, i16::from_be_bytes),
            (Data::Int(Ints::U32(v)), false) => ints!(v, 4, u32::from_le_bytes),
            (Data::Int(Ints::U32(v)), true) => ints!(v, 4, u32::from_be_bytes),
            (Data::Int(Ints::I32(v)), false) => ints!(v, 4, i32::from_le_bytes),
            (Data::Int(Ints::I32(v)), true) => ints!(v, 4, i32::from_be_bytes),
            (Data::Int(Ints::U64(v)), false) if size == 8 => ints!(v, 8, u64::from_le_bytes),
            (Data::Int(Ints::U64(v)), true) if size == 8 => ints!(v, 8, u64::from_be_bytes),
            (Data::Int(Ints::I64(v)), false) if size == 8 => ints!(v, 8, i64::from_le_bytes),
            (Data::Int(Ints::I64(v)), true) if size == 8 => ints!(v, 8, i64::from_be_bytes),
            (Data::Cat { codes, dict }, _) if size == 16 => {
                codes.reserve(n);
                for k in 0..n {
                    let at = k * stride + off;
                    codes.push(dict.code16(rows[at..at + 16].try_into().expect("16 bytes")));
                }
            }
            (Data::Cat { codes, dict }, _) => {
                codes.reserve(n);
                for k in 0..n {
                    let at = k * stride + off;
                    codes.push(dict.code(trim_nul(&rows[at..at + size])));
                }
            }
            _ => {
                for k in 0..n {
                    self.push(&rows[k * stride..(k + 1) * stride], env);
                }
            }
        }
    }

    /// The column as an Arrow array (moves the buffers; no copy).
    pub fn into_arrow(self) -> ArrayRef {
        match self.data {
            Data::Int(v) => v.into_arrow(),
            Data::Var(v) => v.into_arrow(),
            Data::Cat { codes, dict } => {
                let keys = UInt32Array::new(ScalarBuffer::from(codes), None);
                let values = dict.values.into_arrow();
                // the codes index the dictionary built from the same records
                Arc::new(DictionaryArray::<UInt32Type>::try_new(keys, values).expect("codes within the dictionary"))
            }
            Data::List { count, flat } => {
                let rows = flat.len().checked_div(count).unwrap_or(0);
                let offsets: Vec<i64> = (0..=rows).map(|i| (i * count) as i64).collect();
                list_array(offsets, flat)
            }
            Data::VarList { offsets, flat } => list_array(offsets, flat),
        }
    }
}

/// Records staged per block for the fields of fixed place (at most BLOCK_BYTES of them: a file with
/// thousands of wide formats cannot make the blocks large).
const BLOCK_ROWS: usize = 1024;
const BLOCK_BYTES: usize = 16 << 10;
/// Records are staged only up to this many bytes (a field further in is filled record by record).
const MAX_STRIDE: usize = 512;

/// The columns of one event type being filled: fields of variable place record by record, fields of
/// fixed place staged: each record's first `stride` bytes are copied into a block, and every
/// BLOCK_ROWS records each such field is filled in one loop over the block (no dispatch per field per
/// record).
pub struct Filler {
    pub cols: Vec<Builder>,
    fixed: Vec<usize>,
    var: Vec<usize>,
    stride: usize,
    rows: usize,
    block: Vec<u8>,
    pending: usize,
}

impl Filler {
    pub fn new(specs: &[Spec], cap: usize) -> Filler {
        let cols: Vec<Builder> = specs.iter().map(|s| Builder::new(s, cap)).collect();
        let stride = cols.iter().filter_map(Builder::fixed_extent).max().unwrap_or(0);
        let staged = |b: &Builder| stride <= MAX_STRIDE && b.fixed_extent().is_some();
        let fixed = (0..cols.len()).filter(|&j| staged(&cols[j])).collect();
        let var = (0..cols.len()).filter(|&j| !staged(&cols[j])).collect();
        let rows = (BLOCK_BYTES / stride.max(1)).clamp(1, BLOCK_ROWS);
        let block = if stride <= MAX_STRIDE { vec![0u8; stride * rows] } else { Vec::new() };
        Filler { cols, fixed, var, stride, rows, block, pending: 0 }
    }

    #[inline(always)]
    pub fn push(&mut self, r: &[u8], env: &mut Env) {
        if !self.fixed.is_empty() {
            if r.len() >= self.stride {
                let at = self.pending * self.stride;
                self.block[at..at + self.stride].copy_from_slice(&r[..self.stride]);
                self.pending += 1;
            } else {
                // a record shorter than the format: its fields one by one (values beyond it read as 0)
                self.flush(env);
                for &j in &self.fixed {
                    self.cols[j].push(r, env);
                }
            }
        }
        for &j in &self.var {
            self.cols[j].push(r, env);
        }
        if self.pending == self.rows {
            self.flush(env);
        }
    }

    pub fn flush(&mut self, env: &mut Env) {
        if self.pending > 0 {
            for &j in &self.fixed {
                self.cols[j].push_block(&self.block, self.stride, self.pending, env);
            }
            self.pending = 0;
        }
    }
}

fn list_array(offsets: Vec<i64>, flat: Ints) -> ArrayRef {
    let values = flat.into_arrow();
    let field = Arc::new(Field::new("item", values.data_type().clone(), false));
    Arc::new(LargeListArray::new(field, OffsetBuffer::new(ScalarBuffer::from(offsets)), values, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    fn spec(kind: Kind, offset: usize, size: usize) -> Spec {
        Spec { name: "f".into(), offset, size, kind, signed: true, elem: size, aux_off: 0, aux_size: 0 }
    }

    fn env<'a>(printk: &'a HashMap<u64, Vec<u8>>, syms: &'a Syms<'a>) -> Env<'a> {
        Env { be: false, long_size: 8, printk, syms, short_fields: 0, missing_formats: 0 }
    }

    #[test]
    fn kinds_fill_their_columns() {
        let printk = HashMap::from([(0x10u64, b"const".to_vec())]);
        let syms = Syms::new(Box::new(|| (Vec::new(), Vec::new())));
        let mut e = env(&printk, &syms);
        // record: i32 -5, "bash\0..." (8 bytes), __data_loc (len 3 << 16 | off 16), "xy\0", u64 0x10
        let mut r = (-5i32).to_le_bytes().to_vec();
        r.extend(b"bash\0\0\0\0");
        r.extend(((3u32 << 16) | 24).to_le_bytes());
        r.extend(0x10u64.to_le_bytes());
        r.extend(b"xy\0\0");
        let mut int = Builder::new(&spec(Kind::Int, 0, 4), 0);
        let mut cat = Builder::new(&spec(Kind::CharArray, 4, 8), 0);
        let mut dl = Builder::new(&spec(Kind::DataLocStr, 12, 4), 0);
        let mut pk = Builder::new(&spec(Kind::PrintkStr, 16, 8), 0);
        let mut short = Builder::new(&spec(Kind::Int, 40, 8), 0);
        for _ in 0..2 {
            for b in [&mut int, &mut cat, &mut dl, &mut pk, &mut short] {
                b.push(&r, &mut e);
            }
        }
        assert_eq!(e.short_fields, 2);
        let a = int.into_arrow();
        assert_eq!(a.as_any().downcast_ref::<Int32Array>().unwrap().values(), &[-5, -5]);
        let c = cat.into_arrow();
        let c = c.as_any().downcast_ref::<DictionaryArray<UInt32Type>>().unwrap();
        assert_eq!(c.keys().values(), &[0, 0]);
        assert_eq!(c.values().as_any().downcast_ref::<LargeStringArray>().unwrap().value(0), "bash");
        let d = dl.into_arrow();
        assert_eq!(d.as_any().downcast_ref::<LargeStringArray>().unwrap().value(1), "xy");
        let p = pk.into_arrow();
        assert_eq!(p.as_any().downcast_ref::<LargeStringArray>().unwrap().value(0), "const");
    }

    #[test]
    fn hostile_data_loc_stays_inside_the_record() {
        let printk = HashMap::new();
        let syms = Syms::new(Box::new(|| (Vec::new(), Vec::new())));
        let mut e = env(&printk, &syms);
        let r = 0xFFFF_FFF0u32.to_le_bytes();
        let mut b = Builder::new(&spec(Kind::RelLocBin, 0, 4), 0);
        b.push(&r, &mut e);
        let mut l = Builder::new(&Spec { elem: 8, aux_off: 0, aux_size: 4, ..spec(Kind::TailList, 4, 0) }, 0);
        l.push(&r, &mut e);
        assert_eq!(b.into_arrow().len(), 1);
        assert_eq!(l.into_arrow().len(), 1);
    }

    #[test]
    fn staged_blocks_equal_record_by_record() {
        let printk = HashMap::new();
        let syms = Syms::new(Box::new(|| (Vec::new(), Vec::new())));
        let specs = vec![
            spec(Kind::Int, 0, 4),
            spec(Kind::CharArray, 4, 8),
            Spec { elem: 2, ..spec(Kind::NumArray, 12, 4) },
            spec(Kind::TailBin, 16, 0),
            spec(Kind::Int, 14, 2),
        ];
        let mut staged = Filler::new(&specs, 0);
        let mut plain: Vec<Builder> = specs.iter().map(|s| Builder::new(s, 0)).collect();
        let (mut e1, mut e2) = (env(&printk, &syms), env(&printk, &syms));
        for i in 0..2500u32 {
            let mut r = i.to_le_bytes().to_vec();
            r.extend(format!("c{:06}", i % 7).as_bytes());
            r.extend((i as u16).to_le_bytes());
            r.extend(((i * 3) as u16).to_le_bytes());
            r.extend(vec![1u8; (i % 5) as usize]);
            if i % 997 == 0 {
                r.truncate(10); // a record shorter than the format
            }
            staged.push(&r, &mut e1);
            for b in plain.iter_mut() {
                b.push(&r, &mut e2);
            }
        }
        staged.flush(&mut e1);
        assert_eq!(e1.short_fields, e2.short_fields);
        for (a, b) in staged.cols.into_iter().zip(plain) {
            assert_eq!(a.into_arrow().to_data(), b.into_arrow().to_data());
        }
    }

    #[test]
    fn dictionary_codes_in_first_use_order() {
        let mut d = Dict::new();
        let long = [b'x'; 20];
        assert_eq!([d.code(b"a"), d.code(b"b"), d.code(b"a"), d.code(&long), d.code(&long)], [0, 1, 0, 2, 2]);
        assert_eq!(d.values.get(2), &long);
    }
}
