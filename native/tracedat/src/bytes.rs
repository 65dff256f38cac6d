//! Bounds-checked reads from the file (or from an inflated section of it) in the file's byte order;
//! every failure is an `Error` naming the byte offset in the file.

use crate::error::{Error, Result};

/// Unsigned integer of 1, 2, 4 or 8 bytes at `off` of `b` (None: out of range or another width).
#[inline]
pub fn rd(b: &[u8], off: usize, size: usize, be: bool) -> Option<u64> {
    let s = b.get(off..off.checked_add(size)?)?;
    Some(match (size, be) {
        (1, _) => s[0] as u64,
        (2, false) => u16::from_le_bytes([s[0], s[1]]) as u64,
        (2, true) => u16::from_be_bytes([s[0], s[1]]) as u64,
        (4, false) => u32::from_le_bytes(s.try_into().ok()?) as u64,
        (4, true) => u32::from_be_bytes(s.try_into().ok()?) as u64,
        (8, false) => u64::from_le_bytes(s.try_into().ok()?),
        (8, true) => u64::from_be_bytes(s.try_into().ok()?),
        _ => return None,
    })
}

/// Python-style `repr` of bytes, for messages (`b'abc\x00'`).
pub fn show(b: &[u8]) -> String {
    let mut s = String::from("b'");
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\'' => s.push_str("\\'"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\r' => s.push_str("\\r"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('\'');
    s
}

/// Python-style `repr` of a str (`'abc'`, or `"it's"`), for messages.
pub fn repr(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// A cursor over `data[pos..end]`. `section`: Some((file offset, description)) when `data` is an inflated
/// section: an error inside it names the section's offset (the inflated bytes have no file offset).
pub struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
    pub end: usize,
    pub be: bool,
    section: Option<(u64, String)>,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], pos: usize, be: bool) -> Reader<'a> {
        Reader { data, pos, end: data.len(), be, section: None }
    }

    /// A cursor over bytes that are not the file's own (an inflated section, an option's payload) and
    /// start at file offset `at`; errors name `at` and `what` ("compressed X section at offset N").
    pub fn within(data: &'a [u8], be: bool, at: u64, what: &str) -> Reader<'a> {
        Reader { data, pos: 0, end: data.len(), be, section: Some((at, what.to_string())) }
    }

    /// File offset of position `pos` (inside a `within` cursor: its start plus `pos`).
    pub fn file_offset(&self, pos: usize) -> u64 {
        self.section.as_ref().map_or(0, |s| s.0) + pos as u64
    }

    pub fn left(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    /// An error at position `at` of the data (the section's offset inside an inflated section).
    pub fn error_at(&self, at: usize, msg: impl Into<String>) -> Error {
        let msg = msg.into();
        match &self.section {
            None => Error::at(at as u64, msg),
            Some((off, what)) => Error::at(*off, format!("{msg} (inside {what})")),
        }
    }

    pub fn fail<T>(&self, msg: impl Into<String>, expected: &str) -> Result<T> {
        Err(self.error_at(self.pos, msg).expected(expected))
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.left() {
            return self.fail(format!("truncated while reading {what}: need {n} bytes, {} left", self.left()), what);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// `n` bytes of text (invalid UTF-8 replaced).
    pub fn text(&mut self, n: u64, what: &str) -> Result<String> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        Ok(String::from_utf8_lossy(self.take(n, what)?).into_owned())
    }

    fn uint(&mut self, size: usize, what: &str) -> Result<u64> {
        let at = self.pos;
        let b = self.take(size, what)?;
        rd(b, 0, size, self.be).ok_or_else(|| self.error_at(at, format!("cannot read {what}")))
    }

    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(self.uint(2, what)? as u16)
    }

    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(self.uint(4, what)? as u32)
    }

    pub fn u64(&mut self, what: &str) -> Result<u64> {
        self.uint(8, what)
    }

    /// A NUL-terminated string searched within `limit` bytes (invalid UTF-8 replaced).
    pub fn cstr(&mut self, what: &str, limit: usize) -> Result<String> {
        let stop = self.end.min(self.pos.saturating_add(limit));
        match self.data[self.pos..stop].iter().position(|&c| c == 0) {
            Some(n) => {
                let s = String::from_utf8_lossy(&self.data[self.pos..self.pos + n]).into_owned();
                self.pos += n + 1;
                Ok(s)
            }
            None => self.fail(format!("unterminated string while reading {what}"), &format!("NUL-terminated {what}")),
        }
    }

    /// The bytes `token` must come next.
    pub fn expect(&mut self, token: &[u8], what: &str) -> Result<()> {
        let at = self.pos;
        let got = self.take(token.len(), what)?;
        if got != token {
            return Err(self.error_at(at, format!("found {} instead of {}", show(got), show(token))).expected(what));
        }
        Ok(())
    }
}

/// The text up to the first NUL of an option payload.
pub fn cstr_of(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_byte_orders_and_fails_with_offsets() {
        let d = [1u8, 0, 0, 2, b'h', b'i', 0, 9];
        let mut r = Reader::new(&d, 0, false);
        assert_eq!(r.u16("a").unwrap(), 1);
        let mut b = Reader::new(&d, 2, true);
        assert_eq!(b.u16("b").unwrap(), 2);
        assert_eq!(b.cstr("name", 16).unwrap(), "hi");
        let e = b.u32("x").unwrap_err();
        assert_eq!(e.offset, Some(7));
        assert!(e.message.contains("need 4 bytes, 1 left"));
        let mut c = Reader::new(&d, 4, false);
        assert!(c.cstr("s", 1).is_err());
        assert!(c.expect(b"ho", "ho").unwrap_err().message.contains("b'hi'"));
    }

    #[test]
    fn errors_inside_inflated_sections_name_the_section() {
        let d = [0u8; 2];
        let mut r = Reader::within(&d, false, 4096, "compressed options section at offset 4096");
        let e = r.u32("id").unwrap_err();
        assert_eq!(e.offset, Some(4096));
        assert!(e.message.ends_with("(inside compressed options section at offset 4096)"));
    }

    #[test]
    fn python_repr() {
        assert_eq!(repr("abx_a"), "'abx_a'");
        assert_eq!(repr("it's"), "\"it's\"");
        assert_eq!(repr("a\nb'\"c"), "'a\\nb\\'\"c'");
    }

    #[test]
    fn rd_widths() {
        let d = [0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0];
        assert_eq!(rd(&d, 0, 2, true), Some(0x1234));
        assert_eq!(rd(&d, 0, 4, false), Some(0x7856_3412));
        assert_eq!(rd(&d, 0, 3, false), None);
        assert_eq!(rd(&d, 6, 4, false), None);
        assert_eq!(rd(&d, usize::MAX, 4, false), None);
    }
}
