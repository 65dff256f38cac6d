//! Protobuf wire-format walker used by the perfetto reader.
//!
//! A `Msg` is a view of one serialized message plus the absolute offset of its first byte in the
//! decoded stream, so that every error names the byte offset where decoding failed.
//! Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 (groups 3/4 are rejected).

/// A decoding failure: absolute byte offset in the stream and what was wrong / expected.
#[derive(Debug, Clone)]
pub struct DecodeError {
    pub offset: usize,
    pub msg: String,
}

pub type DResult<T> = Result<T, DecodeError>;

pub fn err<T>(offset: usize, msg: impl Into<String>) -> DResult<T> {
    Err(DecodeError { offset, msg: msg.into() })
}

/// The value of one field as found on the wire.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8], usize), // payload and the absolute offset of its first byte
}

impl<'a> Value<'a> {
    /// The value as an unsigned integer (length-delimited values give 0).
    #[inline]
    pub fn as_u64(&self) -> u64 {
        match *self {
            Value::Varint(v) | Value::Fixed64(v) => v,
            Value::Fixed32(v) => v as u64,
            Value::Bytes(..) => 0,
        }
    }
}

/// Iterator over the fields of one serialized message.
pub struct Msg<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Msg<'a> {
    pub fn new(buf: &'a [u8], base: usize) -> Self {
        Msg { buf, pos: 0, base }
    }

    pub fn from_value(v: &Value<'a>) -> Option<Self> {
        match *v {
            Value::Bytes(b, off) => Some(Msg::new(b, off)),
            _ => None,
        }
    }

    /// Absolute offset of the next byte to be read.
    #[inline]
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    #[inline(always)]
    fn varint(&mut self) -> DResult<u64> {
        let b = self.buf;
        let mut p = self.pos;
        // fast path: one byte
        if p < b.len() && b[p] < 0x80 {
            self.pos = p + 1;
            return Ok(b[p] as u64);
        }
        // unrolled path when a whole 10-byte varint fits (no per-byte bounds checks)
        if b.len() - p.min(b.len()) >= 10 {
            let w = &b[p..p + 10];
            let mut v: u64 = 0;
            for (i, &byte) in w.iter().enumerate() {
                v |= ((byte & 0x7f) as u64) << (7 * i as u32);
                if byte < 0x80 {
                    if i == 9 && byte > 1 {
                        break;
                    }
                    self.pos = p + i + 1;
                    return Ok(v);
                }
            }
            return err(self.base + p, "varint longer than 64 bits");
        }
        let start = p;
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            if p >= b.len() {
                return err(self.base + start, "truncated varint (message ends inside it)");
            }
            let byte = b[p];
            p += 1;
            if shift == 63 && byte > 1 {
                return err(self.base + start, "varint longer than 64 bits");
            }
            v |= ((byte & 0x7f) as u64) << shift;
            if byte < 0x80 {
                break;
            }
            shift += 7;
        }
        self.pos = p;
        Ok(v)
    }

    /// Next (field number, value), or None at the end of the message.
    #[inline(always)]
    pub fn next_field(&mut self) -> DResult<Option<(u32, Value<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let tag_off = self.offset();
        let tag = self.varint()?;
        let field = tag >> 3;
        if field == 0 || field > (1 << 29) {
            return err(tag_off, format!("invalid field number {} in tag 0x{:x}", field, tag));
        }
        let v = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                if self.buf.len() - self.pos < 8 {
                    return err(self.offset(), "truncated fixed64 field (message ends inside it)");
                }
                let mut a = [0u8; 8];
                a.copy_from_slice(&self.buf[self.pos..self.pos + 8]);
                self.pos += 8;
                Value::Fixed64(u64::from_le_bytes(a))
            }
            2 => {
                let len_off = self.offset();
                let len = self.varint()?;
                let remain = (self.buf.len() - self.pos) as u64;
                if len > remain {
                    return err(
                        len_off,
                        format!(
                            "field {} declares {} bytes but only {} remain in the enclosing message (truncated or corrupt)",
                            field, len, remain
                        ),
                    );
                }
                let start = self.pos;
                self.pos += len as usize;
                Value::Bytes(&self.buf[start..self.pos], self.base + start)
            }
            5 => {
                if self.buf.len() - self.pos < 4 {
                    return err(self.offset(), "truncated fixed32 field (message ends inside it)");
                }
                let mut a = [0u8; 4];
                a.copy_from_slice(&self.buf[self.pos..self.pos + 4]);
                self.pos += 4;
                Value::Fixed32(u32::from_le_bytes(a))
            }
            wt => {
                return err(tag_off, format!("unsupported wire type {} (field {}) in tag 0x{:x}", wt, field, tag));
            }
        };
        Ok(Some((field as u32, v)))
    }
}

/// Decode a packed repeated varint field (or a single unpacked varint) into `out`.
pub fn packed_varints(v: &Value, out: &mut Vec<u64>) -> DResult<()> {
    match *v {
        Value::Varint(x) => out.push(x),
        Value::Bytes(b, off) => {
            let mut m = Msg { buf: b, pos: 0, base: off };
            while m.pos < b.len() {
                out.push(m.varint()?);
            }
        }
        Value::Fixed64(x) => out.push(x),
        Value::Fixed32(x) => out.push(x as u64),
    }
    Ok(())
}

#[inline]
pub fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Length-delimited payload as bytes (empty for other wire types).
#[inline]
pub fn bytes_of<'a>(v: &Value<'a>) -> &'a [u8] {
    match *v {
        Value::Bytes(b, _) => b,
        _ => &[],
    }
}

pub fn string_of(v: &Value) -> String {
    String::from_utf8_lossy(bytes_of(v)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_varints_and_errors_with_offsets() {
        // field 1 varint 300, field 2 bytes "ab", field 3 fixed32 7
        let b = [0x08, 0xac, 0x02, 0x12, 0x02, b'a', b'b', 0x1d, 7, 0, 0, 0];
        let mut m = Msg::new(&b, 100);
        assert_eq!(m.next_field().unwrap().map(|(n, v)| (n, v.as_u64())), Some((1, 300)));
        let (n, v) = m.next_field().unwrap().unwrap();
        assert_eq!((n, bytes_of(&v), Msg::from_value(&v).unwrap().offset()), (2, &b"ab"[..], 105));
        assert_eq!(m.next_field().unwrap().map(|(n, v)| (n, v.as_u64())), Some((3, 7)));
        assert!(m.next_field().unwrap().is_none());
        let e = Msg::new(&[0x12, 0x05, b'a'], 10).next_field().unwrap_err();
        assert_eq!(e.offset, 11);
        assert!(Msg::new(&[0xff; 11], 0).next_field().is_err());
        assert!(Msg::new(&[0x0b], 0).next_field().unwrap_err().msg.contains("wire type 3"));
        assert_eq!((zigzag(1), zigzag(4)), (-1, 2));
        let mut out = Vec::new();
        packed_varints(&Value::Bytes(&[1, 0x96, 0x01], 0), &mut out).unwrap();
        assert_eq!(out, vec![1, 150]);
    }
}
