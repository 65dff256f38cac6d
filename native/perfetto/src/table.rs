//! Columnar tables of the perfetto decoder: a string interner and one table per event kind.
//!
//! Every ftrace event kind becomes one `Table`: `ts` (i64 ns), `cpu` (i32) and one `Column` per
//! field. Columns are filled row by row; a field absent from an event becomes a null (a validity
//! vector is created lazily, so fully populated columns carry none).

use crate::schema::{Enc, EventSpec, FieldSpec, Kind, LIST_SEP};
use crate::wire::{bytes_of, packed_varints, zigzag, DResult, Msg, Value};
use rustc_hash::FxHashMap;

/// Deduplicated strings; columns hold u32 ids into `values`.
#[derive(Default)]
pub struct Interner {
    map: FxHashMap<Box<[u8]>, u32>,
    pub values: Vec<Box<[u8]>>,
}

impl Interner {
    #[inline]
    pub fn intern(&mut self, s: &[u8]) -> u32 {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = self.values.len() as u32;
        let b: Box<[u8]> = s.into();
        self.values.push(b.clone());
        self.map.insert(b, id);
        id
    }
}

/// The values of one column.
pub enum Data {
    I32(Vec<i32>),
    I64(Vec<i64>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    F64(Vec<f64>),
    Str(Vec<u32>),
}

impl Data {
    fn new(kind: Kind) -> Data {
        match kind {
            Kind::I32 => Data::I32(Vec::new()),
            Kind::I64 => Data::I64(Vec::new()),
            Kind::U32 => Data::U32(Vec::new()),
            Kind::U64 => Data::U64(Vec::new()),
            Kind::Bool => Data::Bool(Vec::new()),
            Kind::F64 => Data::F64(Vec::new()),
            Kind::Str => Data::Str(Vec::new()),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::U64(v) => v.len(),
            Data::Bool(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::Str(v) => v.len(),
        }
    }
}

pub struct Column {
    pub spec: FieldSpec,
    pub data: Data,
    /// None = every row valid; Some(v): v[i] false = null
    pub valid: Option<Vec<bool>>,
}

/// Place `x` at `row` (padding skipped rows with nulls; a repeat within the same row overwrites).
#[inline(always)]
fn put<T: Copy + Default>(v: &mut Vec<T>, valid: &mut Option<Vec<bool>>, row: usize, x: T) {
    let n = v.len();
    if n == row {
        v.push(x);
        if let Some(m) = valid {
            m.push(true);
        }
    } else if n < row {
        let m = valid.get_or_insert_with(|| vec![true; n]);
        m.resize(row, false);
        m.push(true);
        v.resize(row, T::default());
        v.push(x);
    } else {
        v[row] = x;
    }
}

#[inline]
fn pad<T: Copy + Default>(v: &mut Vec<T>, valid: &mut Option<Vec<bool>>, rows: usize) {
    let n = v.len();
    if n < rows {
        let m = valid.get_or_insert_with(|| vec![true; n]);
        m.resize(rows, false);
        v.resize(rows, T::default());
    }
}

impl Column {
    pub fn new(spec: FieldSpec) -> Column {
        let data = Data::new(spec.kind);
        Column { spec, data, valid: None }
    }

    /// True if at least one row has a value.
    pub fn written(&self) -> bool {
        match &self.valid {
            None => self.data.len() > 0,
            Some(m) => m.iter().any(|&b| b),
        }
    }

    #[inline]
    pub fn put_i64(&mut self, row: usize, x: i64) {
        match &mut self.data {
            Data::I32(v) => put(v, &mut self.valid, row, x as i32),
            Data::I64(v) => put(v, &mut self.valid, row, x),
            Data::U32(v) => put(v, &mut self.valid, row, x as u32),
            Data::U64(v) => put(v, &mut self.valid, row, x as u64),
            Data::Bool(v) => put(v, &mut self.valid, row, x != 0),
            Data::F64(v) => put(v, &mut self.valid, row, x as f64),
            Data::Str(_) => {}
        }
    }

    #[inline]
    pub fn put_str(&mut self, row: usize, id: u32) {
        if let Data::Str(v) = &mut self.data {
            put(v, &mut self.valid, row, id);
        }
    }

    #[inline]
    pub fn put_f64(&mut self, row: usize, x: f64) {
        if let Data::F64(v) = &mut self.data {
            put(v, &mut self.valid, row, x);
        }
    }

    /// Store one wire value according to the column's spec (non-repeated fields).
    #[inline]
    pub fn put_value(&mut self, row: usize, v: &Value, strings: &mut Interner) {
        match self.spec.enc {
            Enc::Text => {
                let id = match v {
                    Value::Bytes(b, _) => strings.intern(b),
                    other => strings.intern(other.as_u64().to_string().as_bytes()),
                };
                self.put_str(row, id)
            }
            Enc::Double => self.put_f64(row, f64::from_bits(v.as_u64())),
            Enc::Float => self.put_f64(row, f32::from_bits(v.as_u64() as u32) as f64),
            Enc::Zigzag => self.put_i64(row, zigzag(scalar(v))),
            Enc::Plain => self.put_i64(row, scalar(v) as i64),
        }
    }

    pub fn finish(&mut self, rows: usize) {
        match &mut self.data {
            Data::I32(v) => pad(v, &mut self.valid, rows),
            Data::I64(v) => pad(v, &mut self.valid, rows),
            Data::U32(v) => pad(v, &mut self.valid, rows),
            Data::U64(v) => pad(v, &mut self.valid, rows),
            Data::Bool(v) => pad(v, &mut self.valid, rows),
            Data::F64(v) => pad(v, &mut self.valid, rows),
            Data::Str(v) => pad(v, &mut self.valid, rows),
        }
    }
}

/// Scalar from a wire value; a packed (length-delimited) scalar gives its last element.
#[inline]
fn scalar(v: &Value) -> u64 {
    match v {
        Value::Bytes(..) => {
            let mut out = Vec::new();
            let _ = packed_varints(v, &mut out);
            out.last().copied().unwrap_or(0)
        }
        other => other.as_u64(),
    }
}

/// Text of one element of a repeated scalar field.
pub fn element_text(spec: &FieldSpec, v: &Value, out: &mut String) {
    use std::fmt::Write;
    match (spec.enc, v) {
        (_, Value::Bytes(..)) if spec.enc != Enc::Text => {
            // packed repeated scalars
            let mut vals = Vec::new();
            let _ = packed_varints(v, &mut vals);
            for (i, x) in vals.iter().enumerate() {
                if i > 0 || !out.is_empty() {
                    out.push(LIST_SEP);
                }
                let _ = write!(out, "{}", x);
            }
        }
        _ => {
            if !out.is_empty() {
                out.push(LIST_SEP);
            }
            match spec.enc {
                Enc::Text => out.push_str(&String::from_utf8_lossy(bytes_of(v))),
                Enc::Zigzag => {
                    let _ = write!(out, "{}", zigzag(v.as_u64()));
                }
                Enc::Double => {
                    let _ = write!(out, "{}", f64::from_bits(v.as_u64()));
                }
                Enc::Float => {
                    let _ = write!(out, "{}", f32::from_bits(v.as_u64() as u32));
                }
                Enc::Plain => {
                    let _ = write!(out, "{}", v.as_u64());
                }
            }
        }
    }
}

/// One event kind: ts, cpu, common_pid, common_flags and the event's fields.
pub struct Table {
    pub name: String,
    pub ts: Vec<i64>,
    pub cpu: Vec<i32>,
    /// cols[0] = common_pid (i32), cols[1] = common_flags (u32), then the event fields
    pub cols: Vec<Column>,
    /// field number -> column index (-1 = not yet seen), for numbers below DIRECT_FIELD_NUMBERS
    by_number: Vec<i32>,
    /// (field number, column index) of larger field numbers
    far_fields: Vec<(u32, usize)>,
    /// field numbers outside the schema that were met (reported as a warning)
    pub unknown_fields: Vec<u32>,
    /// field values not kept because the table had MAX_COLUMNS columns (reported as a warning)
    pub dropped_values: u64,
}

/// Columns of one table at most: fields beyond the schema (field_<n>, generic events' names) could
/// otherwise add a column per event, each padded to every row (time and memory quadratic in the rows).
pub const MAX_COLUMNS: usize = 256;

pub const COL_PID: usize = 0;
/// Field numbers below this are looked up in a direct table (perfetto's events use < 100).
const DIRECT_FIELD_NUMBERS: usize = 1024;
pub const COL_FLAGS: usize = 1;

impl Table {
    pub fn new(name: &str, spec: Option<&EventSpec>) -> Table {
        let mut t = Table {
            name: name.to_string(),
            ts: Vec::new(),
            cpu: Vec::new(),
            cols: vec![
                Column::new(FieldSpec::from_proto(0, "common_pid", "int32", false)),
                Column::new(FieldSpec::from_proto(0, "common_flags", "uint32", false)),
            ],
            by_number: Vec::new(),
            far_fields: Vec::new(),
            unknown_fields: Vec::new(),
            dropped_values: 0,
        };
        if let Some(s) = spec {
            for f in &s.fields {
                t.add_column(f.clone());
            }
        }
        t
    }

    #[inline]
    pub fn rows(&self) -> usize {
        self.ts.len()
    }

    pub fn add_column(&mut self, spec: FieldSpec) -> usize {
        let idx = self.cols.len();
        let n = spec.number as usize;
        if n >= DIRECT_FIELD_NUMBERS {
            // large field numbers (only in corrupt or exotic data): no table indexed by number
            self.far_fields.push((spec.number, idx));
        } else if n > 0 {
            if self.by_number.len() <= n {
                self.by_number.resize(n + 1, -1);
            }
            self.by_number[n] = idx as i32;
        }
        self.cols.push(Column::new(spec));
        idx
    }

    /// A new column, or None (and the value counted as dropped) when the table is full.
    fn new_column(&mut self, spec: FieldSpec) -> Option<usize> {
        if self.cols.len() >= MAX_COLUMNS {
            self.dropped_values += 1;
            return None;
        }
        Some(self.add_column(spec))
    }

    #[inline]
    pub fn column_for(&mut self, number: u32, v: &Value) -> Option<usize> {
        let n = number as usize;
        if n < self.by_number.len() && self.by_number[n] >= 0 {
            return Some(self.by_number[n] as usize);
        }
        if n >= DIRECT_FIELD_NUMBERS {
            if let Some(&(_, i)) = self.far_fields.iter().find(|(f, _)| *f == number) {
                return Some(i);
            }
        }
        let c = self.new_column(FieldSpec::unknown(number, v))?;
        self.unknown_fields.push(number);
        Some(c)
    }

    /// Column by name and kind (generic events); created on first use.
    pub fn column_named(&mut self, name: &str, kind: Kind) -> Option<usize> {
        if let Some(i) = self.cols.iter().position(|c| c.spec.name == name) {
            let existing = self.cols[i].spec.kind;
            if existing == kind || (kind != Kind::Str && existing != Kind::Str) {
                return Some(i);
            }
            let alt = format!("{}_{}", name, if kind == Kind::Str { "str" } else { "int" });
            return self.column_named(&alt, kind);
        }
        let proto = match kind {
            Kind::Str => "string",
            Kind::U64 => "uint64",
            _ => "int64",
        };
        self.new_column(FieldSpec::from_proto(0, name, proto, false))
    }

    /// Decode one serialized event message into row `row` (= self.rows() before push_row).
    pub fn decode_fields(
        &mut self,
        row: usize,
        msg: &mut Msg,
        strings: &mut Interner,
        scratch: &mut Vec<(usize, String)>,
    ) -> DResult<()> {
        while let Some((num, v)) = msg.next_field()? {
            let Some(ci) = self.column_for(num, &v) else { continue };
            let col = &mut self.cols[ci];
            if col.spec.repeated {
                let pos = match scratch.iter().position(|(c, _)| *c == ci) {
                    Some(p) => p,
                    None => {
                        scratch.push((ci, String::new()));
                        scratch.len() - 1
                    }
                };
                element_text(&col.spec, &v, &mut scratch[pos].1);
            } else {
                col.put_value(row, &v, strings);
            }
        }
        for (ci, text) in scratch.drain(..) {
            let id = strings.intern(text.as_bytes());
            self.cols[ci].put_str(row, id);
        }
        Ok(())
    }

    #[inline]
    pub fn push_row(&mut self, ts: i64, cpu: i32) {
        self.ts.push(ts);
        self.cpu.push(cpu);
    }

    /// Pad the columns some row wrote; columns no row wrote stay empty (not returned to Python).
    pub fn finish_written(&mut self) {
        let rows = self.rows();
        for c in &mut self.cols {
            if c.data.len() > 0 {
                c.finish(rows);
            }
        }
    }
}
