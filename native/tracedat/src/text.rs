//! The small text sections of a trace.dat: printk formats, kallsyms, uname, trace clock, CPU statistics.

use std::collections::{BTreeMap, HashMap};

/// Undo the C escapes printk_formats uses (\n, \t, \", \\, \r, \a, \e); others stay as written.
fn unescape_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' || it.peek().is_none() {
            out.push(c);
            continue;
        }
        let n = it.next().unwrap_or('\\');
        match n {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'e' => out.push('\x1b'),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// printk_formats: `0xffffffc000a1b2c3 : "format\n"` lines -> {address: format bytes}.
pub fn parse_printk_formats(text: &str) -> HashMap<u64, Vec<u8>> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((addr, rest)) = line.trim_start().split_once(':') else { continue };
        let Some(hex) = addr.trim_end().strip_prefix("0x") else { continue };
        if hex.is_empty() || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let rest = rest.trim();
        let Some(body) = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else { continue };
        if rest.len() < 2 {
            continue;
        }
        let Ok(a) = u64::from_str_radix(hex, 16) else { continue };
        out.insert(a, unescape_c(body).into_bytes());
    }
    out
}

/// /proc/kallsyms text (`address type name [module]` lines) -> (sorted addresses, names).
pub fn parse_kallsyms(text: &[u8]) -> (Vec<u64>, Vec<String>) {
    let mut pairs: Vec<(u64, String)> = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let mut it = line.split(|&c| c == b' ' || c == b'\t').filter(|t| !t.is_empty());
        let (Some(addr), Some(_kind), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
        let Ok(addr) = std::str::from_utf8(addr) else { continue };
        if let Ok(a) = u64::from_str_radix(addr, 16) {
            pairs.push((a, String::from_utf8_lossy(name).into_owned()));
        }
    }
    pairs.sort_by_key(|p| p.0);
    pairs.into_iter().unzip()
}

/// The kernel identity of a `uname -a`-like text: `Linux host 5.15.0-50-generic #56-Ubuntu SMP ... x86_64`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uname {
    pub uname: Option<String>,
    pub release: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
}

pub fn parse_uname(text: Option<&str>) -> Uname {
    let Some(t) = text.map(str::trim).filter(|t| !t.is_empty()) else { return Uname::default() };
    let parts: Vec<&str> = t.split_whitespace().collect();
    if parts.len() < 4 {
        return Uname { uname: Some(t.to_string()), ..Uname::default() };
    }
    Uname {
        uname: Some(t.to_string()),
        release: Some(parts[2].to_string()),
        version: Some(parts[3..parts.len() - 1].join(" ")),
        arch: Some(parts[parts.len() - 1].to_string()),
    }
}

/// trace_clock file content `[local] global counter` -> `local`; a bare name passes through.
pub fn parse_trace_clock(text: &str) -> Option<String> {
    if let Some(open) = text.find('[') {
        if let Some(len) = text[open + 1..].find(']').filter(|&n| n > 0) {
            return Some(text[open + 1..open + 1 + len].to_string());
        }
    }
    let t = text.trim().trim_matches('\0');
    (!t.is_empty()).then(|| t.to_string())
}

/// tracefs per-CPU `stats` text -> {counter name: value} of its `name: number` lines.
pub fn parse_cpustat(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let ok_name = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c == ' ');
        let v = value.trim();
        if ok_name && !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) {
            if let Ok(n) = v.parse() {
                out.insert(name.to_string(), n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printk_formats() {
        let t = "0xffffffc000a1b2c3 : \"hello %d\\n\"\n  0x10 : \"q\\\"x\\\\\"\nbad line\n0xzz : \"no\"\n";
        let p = parse_printk_formats(t);
        assert_eq!(p[&0xffff_ffc0_00a1_b2c3], b"hello %d\n");
        assert_eq!(p[&0x10], b"q\"x\\");
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn kallsyms_sorted() {
        let (a, n) = parse_kallsyms(b"ffff0002 T b\nffff0001 t a [mod]\nnot a line\n");
        assert_eq!(a, vec![0xffff_0001, 0xffff_0002]);
        assert_eq!(n, vec!["a", "b"]);
    }

    #[test]
    fn uname_clock_cpustat() {
        let u = parse_uname(Some("Linux vm 6.1.0 #1 SMP x86_64"));
        assert_eq!(
            (u.release.as_deref(), u.version.as_deref(), u.arch.as_deref()),
            (Some("6.1.0"), Some("#1 SMP"), Some("x86_64"))
        );
        assert_eq!(parse_uname(Some("Linux x")).release, None);
        assert_eq!(parse_trace_clock("[local] global"), Some("local".into()));
        assert_eq!(parse_trace_clock("boot\0"), Some("boot".into()));
        assert_eq!(parse_trace_clock(""), None);
        let s = parse_cpustat("entries: 5\noverrun: 12\ncommit overrun: 0\nbytes: 9a\noldest event ts:  1.5\n");
        assert_eq!(s.get("overrun"), Some(&12));
        assert_eq!(s.len(), 3);
    }
}
