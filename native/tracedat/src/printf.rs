//! Kernel `trace_printk()` (bprint) formatting: apply a printk-style format to the binary
//! argument block the kernel's vbin_printf() stored in the ring buffer.
//!
//! Argument storage rules (lib/vsprintf.c vbin_printf, described, not copied):
//! - `int`-sized and smaller integers: aligned to their own size (char 1, short 2, int 4);
//! - 8-byte values (long long, 64-bit long/pointer): aligned to 4 bytes;
//! - `%s`: the string bytes inline, NUL-terminated, no alignment;
//! - `%p` with an alphanumeric extension other than S s x K e: the already formatted text inline;
//! - `*` width/precision: an int.
//!
//! Widths and precisions are capped at MAX_WIDTH characters (a hostile format or argument would
//! otherwise size a padding of up to 2^31 characters per record).

/// Longest text one record formats to: twice the format, 16 characters per argument byte, plus 256
/// (real records stay far below; widths could otherwise grow a record's text without bound).
pub fn max_text_len(fmt: &[u8], args: &[u8]) -> usize {
    2 * fmt.len() + 16 * args.len() + 256
}

/// Largest field width / precision applied (characters).
pub const MAX_WIDTH: usize = 4096;

/// Read unsigned little/big endian integer of `size` bytes at `*pos` (after aligning), advance.
fn take_uint(args: &[u8], pos: &mut usize, size: usize, align: usize, be: bool) -> Option<u64> {
    if align > 1 {
        *pos = pos.checked_add(align - 1)? & !(align - 1);
    }
    let b = args.get(*pos..pos.checked_add(size)?)?;
    *pos += size;
    let mut v: u64 = 0;
    if be {
        for &x in b {
            v = (v << 8) | x as u64;
        }
    } else {
        for &x in b.iter().rev() {
            v = (v << 8) | x as u64;
        }
    }
    Some(v)
}

fn take_cstr<'a>(args: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let rest = args.get(*pos..).unwrap_or(&[]);
    let n = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
    *pos += (n + 1).min(rest.len());
    &rest[..n]
}

fn sign_extend(v: u64, size: usize) -> i64 {
    match size {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    }
}

struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    prec: Option<usize>,
}

/// Pad `body` (digits, already with prefix/sign handled by the caller) to the spec's width.
fn pad(out: &mut String, sign: &str, prefix: &str, digits: &str, sp: &Spec, numeric: bool) {
    let mut digits = digits.to_string();
    if numeric {
        if let Some(p) = sp.prec {
            if digits == "0" && p == 0 {
                digits.clear();
            }
            if digits.len() < p {
                digits = "0".repeat(p - digits.len()) + &digits;
            }
        }
    }
    let len = sign.len() + prefix.len() + digits.len();
    let fill = sp.width.saturating_sub(len);
    if sp.left {
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(&digits);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if sp.zero && numeric && sp.prec.is_none() {
        out.push_str(sign);
        out.push_str(prefix);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(&digits);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(&digits);
    }
}

/// Symbol lookup for `%pS` / `%ps`: the greatest kallsyms address <= addr.
pub fn lookup_symbol<'a>(addrs: &[u64], names: &'a [String], addr: u64) -> Option<(&'a str, u64)> {
    let i = match addrs.binary_search(&addr) {
        Ok(i) => i,
        Err(0) => return None,
        Err(i) => i - 1,
    };
    Some((names[i].as_str(), addr - addrs[i]))
}

/// Format `fmt` with the vbin_printf argument block `args`.
/// `long_size` is the kernel's `long` width in bytes (4 or 8); `be` the file endianness.
/// The text stops at `max_text_len(fmt, args)` bytes (see there).
pub fn format_bprint(fmt: &[u8], args: &[u8], long_size: usize, be: bool, syms: (&[u64], &[String])) -> String {
    let mut out = String::with_capacity(fmt.len() + 16);
    let cap = max_text_len(fmt, args);
    let mut pos = 0usize;
    let mut i = 0usize;
    while i < fmt.len() {
        if out.len() > cap {
            break;
        }
        let c = fmt[i];
        if c != b'%' {
            let start = i;
            while i < fmt.len() && fmt[i] != b'%' {
                i += 1;
            }
            out.push_str(&String::from_utf8_lossy(&fmt[start..i]));
            continue;
        }
        i += 1;
        if i >= fmt.len() {
            out.push('%');
            break;
        }
        if fmt[i] == b'%' {
            out.push('%');
            i += 1;
            continue;
        }
        let mut sp = Spec { left: false, zero: false, plus: false, space: false, alt: false, width: 0, prec: None };
        while i < fmt.len() {
            match fmt[i] {
                b'-' => sp.left = true,
                b'0' => sp.zero = true,
                b'+' => sp.plus = true,
                b' ' => sp.space = true,
                b'#' => sp.alt = true,
                _ => break,
            }
            i += 1;
        }
        if i < fmt.len() && fmt[i] == b'*' {
            let w = sign_extend(take_uint(args, &mut pos, 4, 4, be).unwrap_or(0), 4);
            if w < 0 {
                sp.left = true;
            }
            sp.width = (w.unsigned_abs() as usize).min(MAX_WIDTH);
            i += 1;
        } else {
            while i < fmt.len() && fmt[i].is_ascii_digit() {
                sp.width = (sp.width * 10 + (fmt[i] - b'0') as usize).min(MAX_WIDTH);
                i += 1;
            }
        }
        if i < fmt.len() && fmt[i] == b'.' {
            i += 1;
            let mut p = 0usize;
            if i < fmt.len() && fmt[i] == b'*' {
                p = (sign_extend(take_uint(args, &mut pos, 4, 4, be).unwrap_or(0), 4).max(0) as usize).min(MAX_WIDTH);
                i += 1;
            } else {
                while i < fmt.len() && fmt[i].is_ascii_digit() {
                    p = (p * 10 + (fmt[i] - b'0') as usize).min(MAX_WIDTH);
                    i += 1;
                }
            }
            sp.prec = Some(p);
        }
        // length modifier -> argument size in bytes
        let (mut n_h, mut n_l, mut size) = (0usize, 0usize, 4usize);
        while i < fmt.len() {
            match fmt[i] {
                b'h' => n_h += 1,
                b'l' => n_l += 1,
                b'L' | b'q' | b'j' => n_l = 2,
                b'z' | b't' | b'Z' => size = long_size,
                _ => break,
            }
            i += 1;
        }
        if n_l >= 2 {
            size = 8;
        } else if n_l == 1 {
            size = long_size;
        } else if n_h >= 2 {
            size = 1;
        } else if n_h == 1 {
            size = 2;
        }
        if i >= fmt.len() {
            break;
        }
        let conv = fmt[i];
        i += 1;
        let align8 = |s: usize| if s == 8 { 4 } else { s };
        match conv {
            b'd' | b'i' => {
                let v = sign_extend(take_uint(args, &mut pos, size, align8(size), be).unwrap_or(0), size);
                let sign = if v < 0 {
                    "-"
                } else if sp.plus {
                    "+"
                } else if sp.space {
                    " "
                } else {
                    ""
                };
                pad(&mut out, sign, "", &v.unsigned_abs().to_string(), &sp, true);
            }
            b'u' | b'x' | b'X' | b'o' => {
                let mut v = take_uint(args, &mut pos, size, align8(size), be).unwrap_or(0);
                if size < 8 {
                    v &= (1u64 << (size * 8)) - 1;
                }
                let (digits, prefix) = match conv {
                    b'u' => (v.to_string(), ""),
                    b'x' => (format!("{:x}", v), if sp.alt && v != 0 { "0x" } else { "" }),
                    b'X' => (format!("{:X}", v), if sp.alt && v != 0 { "0X" } else { "" }),
                    _ => (format!("{:o}", v), if sp.alt && v != 0 { "0" } else { "" }),
                };
                pad(&mut out, "", prefix, &digits, &sp, true);
            }
            b'c' => {
                let v = take_uint(args, &mut pos, 1, 1, be).unwrap_or(0) as u8;
                pad(&mut out, "", "", &(v as char).to_string(), &sp, false);
            }
            b's' => {
                let s = take_cstr(args, &mut pos);
                let s = match sp.prec {
                    Some(p) if p < s.len() => &s[..p],
                    _ => s,
                };
                pad(&mut out, "", "", &String::from_utf8_lossy(s), &sp, false);
            }
            b'p' => {
                let ext = if i < fmt.len() { fmt[i] } else { 0 };
                if ext.is_ascii_alphanumeric() && !matches!(ext, b'S' | b's' | b'x' | b'K' | b'e') {
                    let s = take_cstr(args, &mut pos);
                    out.push_str(&String::from_utf8_lossy(s));
                } else {
                    let v = take_uint(args, &mut pos, long_size, align8(long_size), be).unwrap_or(0);
                    match (ext, lookup_symbol(syms.0, syms.1, v)) {
                        (b's', Some((name, _))) => out.push_str(name),
                        (b'S', Some((name, off))) => out.push_str(&format!("{}+0x{:x}", name, off)),
                        _ => pad(&mut out, "", "0x", &format!("{:x}", v), &sp, true),
                    }
                }
                while i < fmt.len() && fmt[i].is_ascii_alphanumeric() {
                    i += 1;
                }
            }
            other => {
                out.push('%');
                out.push(other as char);
            }
        }
    }
    if out.len() > cap {
        let mut end = cap;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(f: &str, args: &[u8]) -> String {
        format_bprint(f.as_bytes(), args, 8, false, (&[0x1000], &["sym".to_string()]))
    }

    #[test]
    fn integers_strings_and_symbols() {
        let mut a = Vec::new();
        a.extend((-5i32).to_le_bytes());
        a.extend(b"hi\0\0");
        a.extend(0x1010u64.to_le_bytes());
        assert_eq!(fmt("%d %s %pS|%-4s|", &a), "-5 hi sym+0x10|    |");
        assert_eq!(fmt("%05x %%", &255u32.to_le_bytes()), "000ff %");
    }

    #[test]
    fn hostile_widths_are_capped() {
        let s = fmt("%999999999999999999999d", &1i32.to_le_bytes());
        assert_eq!(s.len(), max_text_len(b"%999999999999999999999d", &[0; 4]));
        assert!(fmt("%4000d%4000d%4000d", &[0; 12]).len() <= max_text_len(b"%4000d%4000d%4000d", &[0; 12]));
        let mut a = i32::MIN.to_le_bytes().to_vec();
        a.extend(1i32.to_le_bytes());
        assert_eq!(fmt("%*d", &a).len(), max_text_len(b"%*d", &a));
        assert_eq!(fmt("%.*s", &[0xff, 0xff, 0xff, 0x7f, b'x', 0]), "x");
    }
}
