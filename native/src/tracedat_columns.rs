//! Typed column builders for trace.dat event fields: one builder per field, filled row by row
//! (one pass over each event type's records, so each record is touched once).
//!
//! Output per column (to Python):
//! - integers: a numpy array of the field's kernel width/signedness;
//! - ("utf8" | "binary", offsets i64[n+1], bytes u8): Arrow large string / binary layout;
//! - ("cat", codes u32[n], dict offsets i64, dict bytes): dictionary-encoded text (fixed char[N] names);
//! - ("list", flat values, per-row count) and ("varlist", offsets i64[n+1], flat values).
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::tracedat_merge::{grow, push};
use super::tracedat_printf::format_bprint;

// field kinds: keep in sync with abtest/trace/tracedat_format.py
pub const KIND_INT: u8 = 0;
pub const KIND_CHAR_ARRAY: u8 = 1;
pub const KIND_DATA_LOC_STR: u8 = 2;
pub const KIND_DATA_LOC_BIN: u8 = 3;
pub const KIND_NUM_ARRAY: u8 = 4;
pub const KIND_BYTES: u8 = 5;
pub const KIND_REL_LOC_STR: u8 = 6;
pub const KIND_REL_LOC_BIN: u8 = 7;
pub const KIND_TAIL_STR: u8 = 8;
#[allow(dead_code)]
pub const KIND_TAIL_BIN: u8 = 9;
pub const KIND_BPRINT_TEXT: u8 = 10;
pub const KIND_PRINTK_STR: u8 = 11;
pub const KIND_TAIL_LIST: u8 = 12;
pub const KIND_DATA_LOC_CAT: u8 = 13;

/// (name, offset, size, kind, signed, elem_size, aux_offset, aux_size)
pub type FieldSpec = (String, usize, usize, u8, bool, usize, usize, usize);

#[inline]
pub fn rd(b: &[u8], off: usize, size: usize, be: bool) -> Option<u64> {
    let s = b.get(off..off.checked_add(size)?)?;
    Some(match (size, be) {
        (1, _) => s[0] as u64,
        (2, false) => u16::from_le_bytes([s[0], s[1]]) as u64,
        (2, true) => u16::from_be_bytes([s[0], s[1]]) as u64,
        (4, false) => u32::from_le_bytes(s.try_into().unwrap()) as u64,
        (4, true) => u32::from_be_bytes(s.try_into().unwrap()) as u64,
        (8, false) => u64::from_le_bytes(s.try_into().unwrap()),
        (8, true) => u64::from_be_bytes(s.try_into().unwrap()),
        _ => return None,
    })
}

/// FxHash-style multiplicative hasher for the string dictionaries (short comm strings).
#[derive(Default)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut v = 0u64;
            for (k, &b) in chunk.iter().enumerate() {
                v |= (b as u64) << (8 * k);
            }
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u128(&mut self, v: u128) {
        let lo = v as u64;
        let hi = (v >> 64) as u64;
        self.0 = (self.0.rotate_left(5) ^ lo).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        self.0 = (self.0.rotate_left(5) ^ hi).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap = HashMap<Vec<u8>, u32, BuildHasherDefault<FxHasher>>;
type FxMap128 = HashMap<u128, u32, BuildHasherDefault<FxHasher>>;

/// Everything a builder needs besides the record itself.
pub struct Env<'a> {
    pub be: bool,
    pub long_size: usize,
    pub printk: &'a HashMap<u64, Vec<u8>>,
    pub syms: &'a Syms,
    pub short_fields: u64,
    pub missing_formats: u64,
}

/// Kernel symbols for bprint `%pS` (sorted addresses, names): given up front, or loaded on first use
/// (the streaming decode only learns that a bprint event exists when it meets one).
pub struct Syms {
    cell: std::sync::OnceLock<(Vec<u64>, Vec<String>)>,
    loader: Option<SymLoader>,
}

pub type SymLoader = Box<dyn Fn() -> (Vec<u64>, Vec<String>) + Send + Sync>;

impl Syms {
    pub fn ready(syms: (Vec<u64>, Vec<String>)) -> Syms {
        Syms { cell: std::sync::OnceLock::from(syms), loader: None }
    }

    pub fn lazy(loader: Option<SymLoader>) -> Syms {
        Syms { cell: std::sync::OnceLock::new(), loader }
    }

    pub fn get(&self) -> (&[u64], &[String]) {
        let (a, n) = self.cell.get_or_init(|| self.loader.as_ref().map(|f| f()).unwrap_or_default());
        (a, n)
    }
}

pub enum Num {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
}

impl Num {
    fn new(size: usize, signed: bool, cap: usize) -> Num {
        match (size, signed) {
            (1, false) => Num::U8(Vec::with_capacity(cap)),
            (1, true) => Num::I8(Vec::with_capacity(cap)),
            (2, false) => Num::U16(Vec::with_capacity(cap)),
            (2, true) => Num::I16(Vec::with_capacity(cap)),
            (4, false) => Num::U32(Vec::with_capacity(cap)),
            (4, true) => Num::I32(Vec::with_capacity(cap)),
            (_, false) => Num::U64(Vec::with_capacity(cap)),
            (_, true) => Num::I64(Vec::with_capacity(cap)),
        }
    }
    #[inline(always)]
    fn push(&mut self, v: u64) {
        match self {
            Num::U8(x) => x.push(v as u8),
            Num::I8(x) => x.push(v as u8 as i8),
            Num::U16(x) => x.push(v as u16),
            Num::I16(x) => x.push(v as u16 as i16),
            Num::U32(x) => x.push(v as u32),
            Num::I32(x) => x.push(v as u32 as i32),
            Num::U64(x) => x.push(v),
            Num::I64(x) => x.push(v as i64),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Num::U8(x) => x.len(),
            Num::I8(x) => x.len(),
            Num::U16(x) => x.len(),
            Num::I16(x) => x.len(),
            Num::U32(x) => x.len(),
            Num::I32(x) => x.len(),
            Num::U64(x) => x.len(),
            Num::I64(x) => x.len(),
        }
    }
    fn into_py(self, py: Python<'_>) -> PyObject {
        match self {
            Num::U8(x) => x.into_pyarray(py).into_any().unbind(),
            Num::I8(x) => x.into_pyarray(py).into_any().unbind(),
            Num::U16(x) => x.into_pyarray(py).into_any().unbind(),
            Num::I16(x) => x.into_pyarray(py).into_any().unbind(),
            Num::U32(x) => x.into_pyarray(py).into_any().unbind(),
            Num::I32(x) => x.into_pyarray(py).into_any().unbind(),
            Num::U64(x) => x.into_pyarray(py).into_any().unbind(),
            Num::I64(x) => x.into_pyarray(py).into_any().unbind(),
        }
    }
}

pub enum Col {
    Num(Num),
    Var { text: bool, offsets: Vec<i64>, bytes: Vec<u8> },
    Cat { codes: Vec<u32>, map: FxMap, small: FxMap128, cache: Box<NameCache>, offsets: Vec<i64>, bytes: Vec<u8> },
    List { count: usize, flat: Num },
    VarList { offsets: Vec<i64>, flat: Num },
}

/// Direct-mapped cache in front of a Categorical's dictionary for names up to 16 bytes (key: the name
/// zero-padded to a u128): a trace repeats a few task names millions of times.
pub struct NameCache([(u128, u32); NAME_CACHE]);

const NAME_CACHE: usize = 64;

impl Default for NameCache {
    fn default() -> Self {
        NameCache([(0, u32::MAX); NAME_CACHE])
    }
}

/// Code of the name `v` whose key is `key` (see NameCache), added to the dictionary if new.
#[inline(always)]
fn small_code(cache: &mut NameCache, small: &mut FxMap128, offsets: &mut Vec<i64>, bytes: &mut Vec<u8>, key: u128,
              v: &[u8]) -> u32 {
    let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let e = &mut cache.0[(h >> 58) as usize % NAME_CACHE];
    if e.0 == key && e.1 != u32::MAX {
        return e.1;
    }
    let c = match small.get(&key) {
        Some(&c) => c,
        None => {
            let c = (offsets.len() - 1) as u32;
            push_var(offsets, bytes, v, true);
            small.insert(key, c);
            c
        }
    };
    *e = (key, c);
    c
}

pub struct Builder {
    pub spec: FieldSpec,
    pub col: Col,
}

/// Index of the first zero byte of 16 little-endian bytes (16 if none), branch-free per half.
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

fn trim_nul(v: &[u8]) -> &[u8] {
    let n = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    &v[..n]
}

fn push_var(offsets: &mut Vec<i64>, bytes: &mut Vec<u8>, v: &[u8], text: bool) {
    if text && std::str::from_utf8(v).is_err() {
        bytes.extend_from_slice(String::from_utf8_lossy(v).as_bytes());
    } else {
        bytes.extend_from_slice(v);
    }
    offsets.push(bytes.len() as i64);
}

/// Slice of a __data_loc / __rel_loc field: u32 = (length << 16) | offset.
fn dyn_slice<'r>(r: &'r [u8], off: usize, size: usize, be: bool, rel: bool) -> &'r [u8] {
    let v = rd(r, off, 4, be).unwrap_or(0) as usize;
    let mut start = v & 0xffff;
    if rel {
        start += off + size;
    }
    let len = v >> 16;
    r.get(start..(start + len).min(r.len())).unwrap_or(&[])
}

fn arr<T: numpy::Element>(py: Python<'_>, v: Vec<T>) -> PyObject {
    v.into_pyarray(py).into_any().unbind()
}

fn tag(py: Python<'_>, t: &str) -> PyObject {
    t.into_pyobject(py).unwrap().into_any().unbind()
}

impl Builder {
    pub fn new(spec: &FieldSpec, n: usize) -> Builder {
        let (size, kind, signed, elem) = (spec.2, spec.3, spec.4, spec.5);
        let var = |text| Col::Var { text, offsets: { let mut o = Vec::with_capacity(n + 1); o.push(0); o }, bytes: Vec::new() };
        let col = match kind {
            KIND_INT => Col::Num(Num::new(size, signed, n)),
            KIND_CHAR_ARRAY | KIND_DATA_LOC_CAT => Col::Cat {
                codes: Vec::with_capacity(n), map: FxMap::default(), small: FxMap128::default(),
                cache: Box::default(), offsets: vec![0], bytes: Vec::new(),
            },
            KIND_NUM_ARRAY => Col::List { count: size / elem.max(1), flat: Num::new(elem, signed, n * (size / elem.max(1))) },
            KIND_TAIL_LIST => Col::VarList { offsets: vec![0], flat: Num::new(elem, signed, n) },
            KIND_DATA_LOC_STR | KIND_REL_LOC_STR | KIND_TAIL_STR | KIND_BPRINT_TEXT | KIND_PRINTK_STR => var(true),
            _ => var(false),
        };
        Builder { spec: spec.clone(), col }
    }

    #[inline(always)]
    pub fn push(&mut self, r: &[u8], env: &mut Env) {
        let (off, size, kind, elem) = (self.spec.1, self.spec.2, self.spec.3, self.spec.5);
        let be = env.be;
        match &mut self.col {
            Col::Num(num) => {
                let v = rd(r, off, size, be).unwrap_or_else(|| {
                    env.short_fields += 1;
                    0
                });
                num.push(v);
            }
            Col::Cat { codes, map, small, cache, offsets, bytes } if kind == KIND_DATA_LOC_CAT => {
                // __data_loc name: u32 (length << 16) | offset; the text ends at its first NUL
                let dl = rd(r, off, 4, be).unwrap_or(0) as usize;
                let (start, len) = (dl & 0xffff, dl >> 16);
                if r.len() >= 16 && start <= r.len() {
                    // the 16 bytes from `start` (or the record's last 16, shifted down) as one u128
                    let (raw, avail) = if start + 16 <= r.len() {
                        (u128::from_le_bytes(r[start..start + 16].try_into().unwrap()), 16)
                    } else {
                        let tail = u128::from_le_bytes(r[r.len() - 16..].try_into().unwrap());
                        let shift = start + 16 - r.len();
                        (if shift >= 16 { 0 } else { tail >> (8 * shift) }, 16 - shift)
                    };
                    let n = first_nul(raw).min(len).min(avail);
                    // n == 16 with more bytes available and no NUL: maybe longer than 16, so the slow path
                    if n < 16 || len <= 16 || avail < 16 {
                        let key = if n >= 16 { raw } else { raw & ((1u128 << (8 * n)) - 1) };
                        push(codes, small_code(cache, small, offsets, bytes, key, &r[start..start + n]));
                        return;
                    }
                }
                let v = trim_nul(dyn_slice(r, off, size, be, false));
                let code = if v.len() <= 16 {
                    let mut k = [0u8; 16];
                    k[..v.len()].copy_from_slice(v);
                    let key = u128::from_le_bytes(k);
                    small_code(cache, small, offsets, bytes, key, v)
                } else {
                    match map.get(v) {
                        Some(&c) => c,
                        None => {
                            let c = (offsets.len() - 1) as u32;
                            push_var(offsets, bytes, v, true);
                            map.insert(v.to_vec(), c);
                            c
                        }
                    }
                };
                push(codes, code);
            }
            Col::Cat { codes, map, small, cache, offsets, bytes } => {
                if size == 16 && off + 16 <= r.len() {
                    // TASK_COMM_LEN names: the 16 bytes, zeroed from the first NUL on, are the key
                    let raw = u128::from_le_bytes(r[off..off + 16].try_into().unwrap());
                    let len = first_nul(raw);
                    let key = if len >= 16 { raw } else { raw & ((1u128 << (8 * len)) - 1) };
                    push(codes, small_code(cache, small, offsets, bytes, key, &r[off..off + len]));
                    return;
                }
                let v = trim_nul(r.get(off..off + size).unwrap_or(&[]));
                if v.len() <= 16 {
                    // names up to 16 bytes (TASK_COMM_LEN): key = the zero-padded bytes as one u128
                    let mut k = [0u8; 16];
                    k[..v.len()].copy_from_slice(v);
                    let key = u128::from_le_bytes(k) ^ ((v.len() as u128) << 120);
                    push(codes, small_code(cache, small, offsets, bytes, key, v));
                    return;
                }
                let code = match map.get(v) {
                    Some(&c) => c,
                    None => {
                        let c = (offsets.len() - 1) as u32;
                        push_var(offsets, bytes, v, true);
                        map.insert(v.to_vec(), c);
                        c
                    }
                };
                push(codes, code);
            }
            Col::List { count, flat } => {
                let count = *count;
                for k in 0..count {
                    flat.push(rd(r, off + k * elem, elem, be).unwrap_or(0));
                }
            }
            Col::VarList { offsets, flat } => {
                let mut n = r.len().saturating_sub(off) / elem.max(1);
                if self.spec.7 > 0 {
                    n = n.min(rd(r, self.spec.6, self.spec.7, be).unwrap_or(0) as usize);
                }
                for k in 0..n {
                    flat.push(rd(r, off + k * elem, elem, be).unwrap_or(0));
                }
                offsets.push(flat.len() as i64);
            }
            Col::Var { text, offsets, bytes } => {
                let text = *text;
                match kind {
                    KIND_BYTES => push_var(offsets, bytes, r.get(off..off + size).unwrap_or(&[]), false),
                    KIND_DATA_LOC_STR | KIND_DATA_LOC_BIN | KIND_REL_LOC_STR | KIND_REL_LOC_BIN => {
                        let rel = kind == KIND_REL_LOC_STR || kind == KIND_REL_LOC_BIN;
                        let v = dyn_slice(r, off, size, be, rel);
                        push_var(offsets, bytes, if text { trim_nul(v) } else { v }, text)
                    }
                    KIND_TAIL_STR => push_var(offsets, bytes, trim_nul(r.get(off..).unwrap_or(&[])), true),
                    KIND_BPRINT_TEXT => {
                        let addr = rd(r, self.spec.6, self.spec.7, be).unwrap_or(0);
                        let s = match env.printk.get(&addr) {
                            Some(fmt) => format_bprint(fmt, r.get(off..).unwrap_or(&[]), env.long_size, be,
                                                       env.syms.get()),
                            None => {
                                env.missing_formats += 1;
                                format!("[UNKNOWN PRINTK FORMAT 0x{:x}]", addr)
                            }
                        };
                        push_var(offsets, bytes, s.as_bytes(), true)
                    }
                    KIND_PRINTK_STR => {
                        let addr = rd(r, off, size, be).unwrap_or(0);
                        match env.printk.get(&addr) {
                            Some(s) => push_var(offsets, bytes, s, true),
                            None => {
                                env.missing_formats += 1;
                                push_var(offsets, bytes, format!("[UNKNOWN PRINTK STRING 0x{:x}]", addr).as_bytes(), true)
                            }
                        }
                    }
                    _ => push_var(offsets, bytes, r.get(off..).unwrap_or(&[]), text),
                }
            }
        }
    }

    /// Bytes of the record this field needs when it has a fixed place (None: variable length or
    /// needs the whole record).
    pub fn fixed_extent(&self) -> Option<usize> {
        match self.col {
            Col::Num(_) | Col::List { .. } => Some(self.spec.1 + self.spec.2),
            Col::Cat { .. } if self.spec.3 == KIND_CHAR_ARRAY => Some(self.spec.1 + self.spec.2),
            _ => None,
        }
    }

    /// Push `n` rows laid out at a fixed `stride` in `rows` (fixed-extent fields only): one tight
    /// loop per field instead of a dispatch per field per record.
    pub fn push_block(&mut self, rows: &[u8], stride: usize, n: usize, env: &mut Env) {
        let (off, size, be) = (self.spec.1, self.spec.2, env.be);
        assert!(n * stride <= rows.len(), "staged block shorter than its rows");
        macro_rules! ints {
            ($v:expr, $t:ty, $w:expr, $conv:expr) => {{
                assert!(off + $w <= stride, "field outside the staged row");
                if $v.capacity() - $v.len() < n {
                    grow($v, n);
                }
                let len = $v.len();
                // SAFETY: row k's field is rows[k * stride + off..][..$w], inside `rows` (both checked above);
                // the n slots after len are reserved and each written once before set_len.
                unsafe {
                    let src = rows.as_ptr().add(off);
                    let dst = $v.as_mut_ptr().add(len);
                    for k in 0..n {
                        let b = std::ptr::read_unaligned(src.add(k * stride) as *const [u8; $w]);
                        dst.add(k).write($conv(b) as $t);
                    }
                    $v.set_len(len + n);
                }
            }};
        }
        match &mut self.col {
            Col::Num(num) => match (num, be) {
                (Num::U8(v), _) => ints!(v, u8, 1, |b: [u8; 1]| b[0]),
                (Num::I8(v), _) => ints!(v, i8, 1, |b: [u8; 1]| b[0] as i8),
                (Num::U16(v), false) => ints!(v, u16, 2, u16::from_le_bytes),
                (Num::U16(v), true) => ints!(v, u16, 2, u16::from_be_bytes),
                (Num::I16(v), false) => ints!(v, i16, 2, i16::from_le_bytes),
                (Num::I16(v), true) => ints!(v, i16, 2, i16::from_be_bytes),
                (Num::U32(v), false) => ints!(v, u32, 4, u32::from_le_bytes),
                (Num::U32(v), true) => ints!(v, u32, 4, u32::from_be_bytes),
                (Num::I32(v), false) => ints!(v, i32, 4, i32::from_le_bytes),
                (Num::I32(v), true) => ints!(v, i32, 4, i32::from_be_bytes),
                (Num::U64(v), false) if size == 8 => ints!(v, u64, 8, u64::from_le_bytes),
                (Num::U64(v), true) if size == 8 => ints!(v, u64, 8, u64::from_be_bytes),
                (Num::I64(v), false) if size == 8 => ints!(v, i64, 8, i64::from_le_bytes),
                (Num::I64(v), true) if size == 8 => ints!(v, i64, 8, i64::from_be_bytes),
                _ => {
                    for k in 0..n {
                        self.push(&rows[k * stride..(k + 1) * stride], env);
                    }
                }
            },
            _ => {
                for k in 0..n {
                    self.push(&rows[k * stride..(k + 1) * stride], env);
                }
            }
        }
    }

    /// Bytes per row this field's column holds (a size estimate for scheduling the merge).
    pub fn elem_bytes(&self) -> usize {
        match &self.col {
            Col::Num(n) => match n {
                Num::U8(_) | Num::I8(_) => 1,
                Num::U16(_) | Num::I16(_) => 2,
                Num::U32(_) | Num::I32(_) => 4,
                Num::U64(_) | Num::I64(_) => 8,
            },
            // codes, plus the dictionary pass
            Col::Cat { .. } => 8,
            Col::List { count, .. } => 8 * count,
            Col::Var { .. } | Col::VarList { .. } => 16,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.0
    }

    pub fn into_py(self, py: Python<'_>) -> PyResult<PyObject> {
        Ok(match self.col {
            Col::Num(num) => num.into_py(py),
            Col::Var { text, offsets, bytes } => {
                PyTuple::new(py, [tag(py, if text { "utf8" } else { "binary" }), arr(py, offsets), arr(py, bytes)])?
                    .into_any().unbind()
            }
            Col::Cat { codes, offsets, bytes, .. } => {
                PyTuple::new(py, [tag(py, "cat"), arr(py, codes), arr(py, offsets), arr(py, bytes)])?.into_any().unbind()
            }
            Col::List { count, flat } => {
                let c = count.into_pyobject(py)?.into_any().unbind();
                let _ = flat.len();
                PyTuple::new(py, [tag(py, "list"), flat.into_py(py), c])?.into_any().unbind()
            }
            Col::VarList { offsets, flat } => {
                PyTuple::new(py, [tag(py, "varlist"), arr(py, offsets), flat.into_py(py)])?.into_any().unbind()
            }
        })
    }
}
