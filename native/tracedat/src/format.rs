//! Event `format` texts (tracefs events/*/*/format, as saved in the file), the ring-buffer page header
//! layout (events/header_page) and the per-field column kinds the decoder fills.

/// How a field's bytes become a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// integer of 1, 2, 4 or 8 bytes -> its kernel width
    Int,
    /// `char name[N]`: text up to the first NUL -> Categorical
    CharArray,
    /// `__data_loc char[]`: u32 (length << 16 | offset) -> Utf8
    DataLocStr,
    /// `__data_loc <other>[]` -> Binary
    DataLocBin,
    /// fixed numeric array `name[N]` -> List(elem)
    NumArray,
    /// anything else with a fixed place -> Binary
    Bytes,
    /// `__rel_loc char[]`: offset relative to the end of the field -> Utf8
    RelLocStr,
    /// `__rel_loc <other>[]` -> Binary
    RelLocBin,
    /// `char name[]` of size 0: text to the end of the record -> Utf8
    TailStr,
    /// `<other> name[]` of size 0: bytes to the end of the record -> Binary
    TailBin,
    /// bprint `buf`: the printk format (address in the field at `aux`) applied to the binary arguments
    BprintText,
    /// bputs `str`: address of a constant string of the printk formats -> Utf8
    PrintkStr,
    /// integers to the end of the record, at most the count in the field at `aux` -> List
    TailList,
    /// `__data_loc char[]` task names (comm, *_comm) -> Categorical
    DataLocCat,
}

/// One field of an event record (offset and size in bytes from the start of the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub type_name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    pub kind: Kind,
    /// bytes per element (NumArray), scalar size (Int), 4 (__data_loc / __rel_loc)
    pub elem: usize,
}

impl Field {
    /// Declared `char *` (a pointer that may point to a constant string of the printk formats).
    pub fn is_char_pointer(&self) -> bool {
        self.kind == Kind::Int
            && self.type_name.strip_suffix('*').is_some_and(|t| {
                let t = t.trim_end();
                t.ends_with("char") && !t[..t.len() - 4].ends_with(|c: char| c.is_alphanumeric() || c == '_')
            })
    }
}

/// An event type: numeric id, system, name and fields in record order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub id: u64,
    pub system: String,
    pub name: String,
    pub fields: Vec<Field>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// The parts of a `field:` line: declaration, offset, size, signed (when given).
fn field_line(s: &str) -> Option<(&str, usize, usize, Option<bool>)> {
    let rest = &s[s.find("field:")? + 6..];
    let (decl, rest) = rest.split_once(';')?;
    fn num<'s>(rest: &'s str, key: &str) -> Option<(usize, &'s str)> {
        let rest = rest.trim_start().strip_prefix(key)?;
        let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let v = rest[..end].parse().ok()?;
        Some((v, rest[end..].strip_prefix(';')?))
    }
    let (offset, rest) = num(rest, "offset:")?;
    let (size, rest) = num(rest, "size:")?;
    let signed = rest.trim_start().strip_prefix("signed:").and_then(|r| {
        let end = r.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(r.len());
        r[end..].starts_with(';').then(|| r[..end].parse::<i64>().ok()).flatten().map(|v| v != 0)
    });
    Some((decl, offset, size, signed))
}

/// `name[count]` -> (name, count text) for a plain identifier name.
fn array_name(name: &str) -> Option<(&str, &str)> {
    let open = name.find('[')?;
    let (ident, rest) = (name[..open].trim_end(), &name[open + 1..]);
    let count = rest.strip_suffix(']')?;
    let ok = !ident.is_empty() && ident.chars().all(|c| c.is_alphanumeric() || c == '_') && !count.contains(']');
    ok.then_some((ident, count))
}

/// Python's `int(text, 0)`: decimal (no leading zeros), 0x / 0o / 0b, `_` between digits, a sign.
pub fn parse_int(text: &str) -> Option<i128> {
    let t = text.trim();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = t.to_ascii_lowercase();
    let (radix, digits) = match lower.get(..2) {
        Some("0x") => (16, &t[2..]),
        Some("0o") => (8, &t[2..]),
        Some("0b") => (2, &t[2..]),
        _ => (10, t),
    };
    let digits = digits.strip_prefix('_').filter(|_| radix != 10).unwrap_or(digits);
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if radix == 10 && clean.len() > 1 && clean.starts_with('0') && clean.chars().any(|c| c != '0') {
        return None;
    }
    let v = i128::from_str_radix(&clean, radix).ok()?;
    Some(if neg { -v } else { v })
}

fn classify(decl: &str, offset: usize, size: usize, signed: Option<bool>) -> Field {
    let decl = decl.split_whitespace().collect::<Vec<_>>().join(" ");
    let (data_loc, rel_loc, decl) = if let Some(d) = decl.strip_prefix("__data_loc ") {
        (true, false, d.to_string())
    } else if let Some(d) = decl.strip_prefix("__rel_loc ") {
        (false, true, d.to_string())
    } else {
        (false, false, decl)
    };
    let (mut type_part, mut name) = match decl.rsplit_once(' ') {
        Some((t, n)) => (t.trim().to_string(), n.to_string()),
        None => (String::new(), decl.clone()),
    };
    if name.starts_with('*') {
        // "const char *name": the stars belong to the type
        let stars = name.len() - name.trim_start_matches('*').len();
        type_part = format!("{type_part} {}", "*".repeat(stars)).trim().to_string();
        name = name[stars..].to_string();
    }
    let mut count: Option<String> = None;
    if let Some((n, c)) = array_name(&name) {
        count = Some(c.to_string());
        name = n.to_string();
    } else if let Some(t) = type_part.strip_suffix("[]") {
        type_part = t.trim().to_string();
        count = Some(String::new());
    }
    let signed = signed
        .unwrap_or(!(type_part.starts_with("unsigned") || type_part.starts_with('u') || type_part.starts_with("bool")));
    let base = type_part.replace("const ", "");
    let base = base.trim();
    let is_char = matches!(base, "char" | "signed char" | "const char");
    let field = |type_name: String, kind: Kind, elem: usize| Field {
        name: name.clone(),
        type_name,
        offset,
        size,
        signed,
        kind,
        elem,
    };
    if data_loc || rel_loc {
        let kind = match (data_loc, is_char) {
            (true, true) => Kind::DataLocStr,
            (true, false) => Kind::DataLocBin,
            (false, true) => Kind::RelLocStr,
            (false, false) => Kind::RelLocBin,
        };
        let prefix = if data_loc { "__data_loc" } else { "__rel_loc" };
        return field(format!("{prefix} {type_part}[]"), kind, 4);
    }
    let tail = if is_char { Kind::TailStr } else { Kind::TailBin };
    if let Some(count) = count {
        if size == 0 {
            return field(format!("{type_part}[]"), tail, 0);
        }
        if is_char {
            return field(format!("{type_part}[{count}]"), Kind::CharArray, 1);
        }
        let n = parse_int(&count).and_then(|v| usize::try_from(v).ok()).unwrap_or(0);
        let elem = size.checked_div(n).unwrap_or(0);
        if matches!(elem, 1 | 2 | 4 | 8) && elem * n == size {
            return field(format!("{type_part}[{count}]"), Kind::NumArray, elem);
        }
        return field(format!("{type_part}[{count}]"), Kind::Bytes, 0);
    }
    match size {
        0 => field(format!("{type_part}[]"), tail, 0),
        1 | 2 | 4 | 8 => field(type_part.clone(), Kind::Int, size),
        _ => field(type_part.clone(), Kind::Bytes, 0),
    }
}

/// Parse one `format` text. Err names what is missing or malformed.
pub fn parse_event_format(text: &str, system: &str) -> Result<EventFormat, String> {
    let (mut name, mut id, mut fields) = (None, None, Vec::new());
    for line in text.lines() {
        let s = line.trim();
        if let Some(v) = s.strip_prefix("name:") {
            name = Some(v.trim().to_string());
        } else if let Some(v) = s.strip_prefix("ID:") {
            id = Some(v.trim().parse::<u64>().map_err(|_| format!("unparsable ID line {s:?}"))?);
        } else if s.starts_with("field:") {
            let (decl, offset, size, signed) = field_line(s).ok_or_else(|| format!("unparsable field line {s:?}"))?;
            fields.push(classify(decl, offset, size, signed));
        }
    }
    match (name, id) {
        (Some(name), Some(id)) => Ok(EventFormat { id, system: system.to_string(), name, fields }),
        _ => Err("event format without name: or ID: line".into()),
    }
}

/// First `^KEY\s*(VALUE)` of a multi-line text (`\s*` may cross lines), VALUE = digits or non-space
/// characters.
fn line_value<'t>(t: &'t str, key: &str, digits: bool) -> Option<&'t str> {
    let starts = std::iter::once(0).chain(t.match_indices('\n').map(|(i, _)| i + 1));
    starts.filter(|&p| t[p..].starts_with(key)).find_map(|p| {
        let rest = t[p + key.len()..].trim_start();
        let end =
            rest.find(|c: char| if digits { !c.is_ascii_digit() } else { c.is_whitespace() }).unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// (id, name) of a format text from a cheap scan (`^ID:\s*(\d+)`, `^name:\s*(\S+)`), None when either
/// is missing: the file carries thousands of formats, only those of events present are parsed.
pub fn format_id(text: &str) -> Option<(u64, String)> {
    let id = line_value(text, "ID:", true)?.parse().ok()?;
    Some((id, line_value(text, "name:", false)?.to_string()))
}

/// Ring-buffer page header layout (bytes): timestamp, commit (flags in bits 30/31), data start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    pub ts_offset: usize,
    pub ts_size: usize,
    pub commit_offset: usize,
    pub commit_size: usize,
    pub data_offset: usize,
}

/// events/header_page (`field: u64 timestamp; offset:0; size:8; signed:0;` ...); `long_size` gives the
/// defaults of a file without one.
pub fn parse_header_page(text: &str, long_size: usize) -> PageHeader {
    let mut ph =
        PageHeader { ts_offset: 0, ts_size: 8, commit_offset: 8, commit_size: long_size, data_offset: 8 + long_size };
    for part in text.split("field:").skip(1) {
        let line = format!("field:{part}");
        let Some((decl, off, size, _)) = field_line(&line) else { continue };
        let name = decl.split_whitespace().last().unwrap_or("").split('[').next().unwrap_or("");
        match name {
            "timestamp" => (ph.ts_offset, ph.ts_size) = (off, size),
            "commit" => (ph.commit_offset, ph.commit_size) = (off, size),
            "data" => ph.data_offset = off,
            _ => {}
        }
    }
    ph
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:40;\tsize:4;\tsigned:0;\n\tfield:u64 args[6];\toffset:48;\tsize:48;\tsigned:0;\n\tfield:const char * fmt;\toffset:96;\tsize:8;\tsigned:0;\n\tfield:char buf[];\toffset:104;\tsize:0;\tsigned:0;\n";

    #[test]
    fn parses_fields_and_kinds() {
        let ev = parse_event_format(SWITCH, "sched").unwrap();
        assert_eq!((ev.id, ev.name.as_str()), (316, "sched_switch"));
        let kinds: Vec<_> = ev.fields.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("common_type", Kind::Int),
                ("common_pid", Kind::Int),
                ("prev_comm", Kind::CharArray),
                ("prev_state", Kind::Int),
                ("name", Kind::DataLocStr),
                ("args", Kind::NumArray),
                ("fmt", Kind::Int),
                ("buf", Kind::TailStr)
            ]
        );
        assert!(ev.field("prev_state").unwrap().signed && !ev.field("common_type").unwrap().signed);
        assert_eq!(ev.field("args").unwrap().elem, 8);
        assert!(ev.field("fmt").unwrap().is_char_pointer());
        assert!(!ev.field("prev_state").unwrap().is_char_pointer());
        assert_eq!(format_id(SWITCH), Some((316, "sched_switch".into())));
    }

    #[test]
    fn star_on_the_name_belongs_to_the_type() {
        let a = classify("const char *filename", 16, 8, Some(false));
        assert_eq!(a, classify("const char * filename", 16, 8, Some(false)));
        let b = classify("const char **argv", 8, 8, Some(false));
        assert_eq!((b.name.as_str(), b.type_name.as_str()), ("argv", "const char **"));
        assert!(!b.is_char_pointer());
    }

    #[test]
    fn malformed_formats_are_errors_not_panics() {
        assert!(parse_event_format("name: x\nID: 1\n\tfield:int a;\toffset:0;\tsize:x4;\n", "s").is_err());
        assert!(parse_event_format("name: x\nID: 1z\n", "s").is_err());
        assert!(parse_event_format("ID: 1\n", "s").is_err());
        assert_eq!(classify("int a[4]", 0, 6, None).kind, Kind::Bytes);
        assert_eq!(classify("int a[TASK_LEN]", 0, 16, None).kind, Kind::Bytes);
        assert_eq!(classify("x", 0, 3, None).kind, Kind::Bytes);
    }

    #[test]
    fn python_int_literals() {
        assert_eq!(parse_int(" 0x1f "), Some(31));
        assert_eq!(parse_int("-12"), Some(-12));
        assert_eq!(parse_int("1_000"), Some(1000));
        assert_eq!(parse_int("010"), None);
        assert_eq!(parse_int("00"), Some(0));
        assert_eq!(parse_int("abc"), None);
    }

    #[test]
    fn header_page_layout() {
        let t = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n\tfield: char data;\toffset:12;\tsize:4084;\tsigned:1;\n";
        let ph = parse_header_page(t, 8);
        assert_eq!((ph.commit_size, ph.data_offset), (4, 12));
        assert_eq!(parse_header_page("", 4).data_offset, 12);
    }
}
