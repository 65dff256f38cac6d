//! Thrift compact-protocol output for the parquet structures abtest writes: page headers and the
//! file footer (`FileMetaData`). Only the fields abtest fills are modelled.
//!
//! Compact protocol facts used: a field header is one byte `(id delta << 4) | type` when the delta
//! to the previous field id of the same struct is 1..=15, else the type byte and the id as a zigzag
//! varint; integers are zigzag varints; binary = varint length + bytes; a list header is one byte
//! `(size << 4) | elem type` for size < 15, else `0xF0 | elem type` + varint size; a struct ends with
//! a 0 byte; booleans live in the field type (1 = true, 2 = false).

const T_TRUE: u8 = 1;
const T_FALSE: u8 = 2;
const T_I8: u8 = 3;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_BINARY: u8 = 8;
const T_LIST: u8 = 9;
const T_STRUCT: u8 = 12;

/// A compact-protocol writer over a byte vector; tracks the last field id per open struct.
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
    last: Vec<i16>,
}

impl<'a> Writer<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Writer { out, last: vec![0] }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn field(&mut self, id: i16, ty: u8) {
        let last = self.last.last_mut().expect("field outside a struct");
        let delta = id - *last;
        *last = id;
        if (1..=15).contains(&delta) {
            self.out.push(((delta as u8) << 4) | ty);
        } else {
            self.out.push(ty);
            let z = ((id as i64) << 1) ^ ((id as i64) >> 63);
            self.varint(z as u64);
        }
    }

    pub fn i32(&mut self, id: i16, v: i32) {
        self.field(id, T_I32);
        self.zigzag(v as i64);
    }

    pub fn i64(&mut self, id: i16, v: i64) {
        self.field(id, T_I64);
        self.zigzag(v);
    }

    pub fn i8(&mut self, id: i16, v: i8) {
        self.field(id, T_I8);
        self.out.push(v as u8);
    }

    pub fn bool(&mut self, id: i16, v: bool) {
        self.field(id, if v { T_TRUE } else { T_FALSE });
    }

    pub fn binary(&mut self, id: i16, v: &[u8]) {
        self.field(id, T_BINARY);
        self.varint(v.len() as u64);
        self.out.extend_from_slice(v);
    }

    /// Open a nested struct as field `id`; close it with `end`.
    pub fn begin(&mut self, id: i16) {
        self.field(id, T_STRUCT);
        self.last.push(0);
    }

    /// Close the innermost struct (also used to terminate the top-level struct).
    pub fn end(&mut self) {
        self.out.push(0);
        self.last.pop();
    }

    fn list_header(&mut self, id: i16, elem: u8, n: usize) {
        self.field(id, T_LIST);
        if n < 15 {
            self.out.push(((n as u8) << 4) | elem);
        } else {
            self.out.push(0xF0 | elem);
            self.varint(n as u64);
        }
    }

    pub fn list_i32(&mut self, id: i16, v: &[i32]) {
        self.list_header(id, T_I32, v.len());
        for &x in v {
            self.zigzag(x as i64);
        }
    }

    pub fn list_binary(&mut self, id: i16, v: &[&[u8]]) {
        self.list_header(id, T_BINARY, v.len());
        for x in v {
            self.varint(x.len() as u64);
            self.out.extend_from_slice(x);
        }
    }

    /// List of structs: the header, then the caller writes each element with `elem_begin` / `end`.
    pub fn list_struct(&mut self, id: i16, n: usize) {
        self.list_header(id, T_STRUCT, n);
    }

    pub fn elem_begin(&mut self) {
        self.last.push(0);
    }
}

// parquet.thrift enum values
pub const PAGE_DATA: i32 = 0;
pub const PAGE_DICTIONARY: i32 = 2;
pub const ENC_PLAIN: i32 = 0;
pub const ENC_RLE: i32 = 3;
pub const ENC_DELTA_BINARY_PACKED: i32 = 5;
pub const ENC_RLE_DICTIONARY: i32 = 8;
pub const CODEC_UNCOMPRESSED: i32 = 0;
pub const CODEC_LZ4_RAW: i32 = 7;

/// `PageHeader` of a v1 data page (field 5) or a dictionary page (field 7).
pub fn page_header(out: &mut Vec<u8>, kind: i32, uncompressed: usize, compressed: usize, num_values: usize,
                   encoding: i32) {
    let mut w = Writer::new(out);
    w.i32(1, kind);
    w.i32(2, uncompressed as i32);
    w.i32(3, compressed as i32);
    if kind == PAGE_DICTIONARY {
        w.begin(7);
        w.i32(1, num_values as i32);
        w.i32(2, encoding);
        w.end();
    } else {
        w.begin(5);
        w.i32(1, num_values as i32);
        w.i32(2, encoding);
        w.i32(3, ENC_RLE); // definition levels
        w.i32(4, ENC_RLE); // repetition levels
        w.end();
    }
    w.end();
}

/// One `SchemaElement`.
pub struct SchemaElem {
    pub name: String,
    pub physical: Option<i32>,
    /// 0 required, 1 optional, 2 repeated
    pub repetition: Option<i32>,
    pub num_children: Option<i32>,
    pub converted: Option<i32>,
    pub logical: Logical,
}

pub enum Logical {
    None,
    String,
    List,
    Int { bits: i8, signed: bool },
}

/// Where one column chunk of a row group sits in the file and what it holds.
pub struct ChunkMeta {
    pub physical: i32,
    pub encodings: Vec<i32>,
    pub path: Vec<String>,
    pub codec: i32,
    pub num_values: i64,
    pub uncompressed: i64,
    pub compressed: i64,
    pub data_page_offset: i64,
    pub dictionary_page_offset: Option<i64>,
}

pub struct RowGroupMeta {
    pub num_rows: i64,
    pub chunks: Vec<ChunkMeta>,
}

/// Serialise `FileMetaData` (version 1) into `out`.
pub fn file_metadata(out: &mut Vec<u8>, schema: &[SchemaElem], num_rows: i64, groups: &[RowGroupMeta],
                     kv: &[(&[u8], &[u8])], created_by: &str) {
    let mut w = Writer::new(out);
    w.i32(1, 1);
    w.list_struct(2, schema.len());
    for e in schema {
        w.elem_begin();
        if let Some(t) = e.physical {
            w.i32(1, t);
        }
        if let Some(r) = e.repetition {
            w.i32(3, r);
        }
        w.binary(4, e.name.as_bytes());
        if let Some(n) = e.num_children {
            w.i32(5, n);
        }
        if let Some(c) = e.converted {
            w.i32(6, c);
        }
        match e.logical {
            Logical::None => {}
            Logical::String => {
                w.begin(10);
                w.begin(1);
                w.end();
                w.end();
            }
            Logical::List => {
                w.begin(10);
                w.begin(3);
                w.end();
                w.end();
            }
            Logical::Int { bits, signed } => {
                w.begin(10);
                w.begin(10);
                w.i8(1, bits);
                w.bool(2, signed);
                w.end();
                w.end();
            }
        }
        w.end();
    }
    w.i64(3, num_rows);
    w.list_struct(4, groups.len());
    for g in groups {
        w.elem_begin();
        w.list_struct(1, g.chunks.len());
        let mut total = 0i64;
        let mut total_comp = 0i64;
        for c in &g.chunks {
            total += c.uncompressed;
            total_comp += c.compressed;
            w.elem_begin();
            w.i64(2, c.dictionary_page_offset.unwrap_or(c.data_page_offset));
            w.begin(3);
            w.i32(1, c.physical);
            w.list_i32(2, &c.encodings);
            let path: Vec<&[u8]> = c.path.iter().map(|s| s.as_bytes()).collect();
            w.list_binary(3, &path);
            w.i32(4, c.codec);
            w.i64(5, c.num_values);
            w.i64(6, c.uncompressed);
            w.i64(7, c.compressed);
            w.i64(9, c.data_page_offset);
            if let Some(d) = c.dictionary_page_offset {
                w.i64(11, d);
            }
            w.end();
            w.end();
        }
        w.i64(2, total);
        w.i64(3, g.num_rows);
        if let Some(first) = g.chunks.first() {
            w.i64(5, first.dictionary_page_offset.unwrap_or(first.data_page_offset));
        }
        w.i64(6, total_comp);
        w.end();
    }
    if !kv.is_empty() {
        w.list_struct(5, kv.len());
        for (k, v) in kv {
            w.elem_begin();
            w.binary(1, k);
            w.binary(2, v);
            w.end();
        }
    }
    w.binary(6, created_by.as_bytes());
    w.end();
}
