//! trace.dat layout helpers: the per-file loops of abtest/trace/tracedat_layout.py that touch thousands
//! of small structures (v7 chunk headers, event format texts), done in one native call each.
//!
//! Every function here is a fast path only: on anything unusual (a truncated or malformed structure,
//! text that is not valid UTF-8 / not ASCII, an absurdly long number) it returns None and the Python
//! code runs its own loop over the same bytes, which reports the error with the file and offset. On
//! well-formed input the results equal the Python loops' results exactly.
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

/// Read-only view of a buffer object kept alive by `buf` for the duration of the call.
fn bytes_of(buf: &PyBuffer<u8>) -> &[u8] {
    // SAFETY: PyBuffer holds the exporter's buffer (bytes / mmap / bytearray) for its lifetime; the
    // slice does not outlive `buf` and nothing here writes to it.
    unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) }
}

fn rd_u32(d: &[u8], at: usize, be: bool) -> Option<u32> {
    let b: [u8; 4] = d.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if be { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
}

fn rd_u64(d: &[u8], at: usize, be: bool) -> Option<u64> {
    let b: [u8; 8] = d.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(if be { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
}

/// v7 compressed flyrecord data of one CPU in `data[off:end]`: u32 chunk count, then per chunk
/// (u32 compressed size, u32 inflated size, compressed bytes). Returns [(file offset of the compressed
/// bytes, compressed size, inflated size), ...] in file order, or None when a header or a chunk runs
/// past `end` (the Python walk then raises with the offset).
#[pyfunction]
fn tracedat_chunk_spans(data: PyBuffer<u8>, off: usize, end: usize, big_endian: bool)
                        -> Option<Vec<(usize, usize, usize)>> {
    let d = bytes_of(&data);
    let end = end.min(d.len());
    if off.checked_add(4)? > end {
        return None;
    }
    let n = rd_u32(d, off, big_endian)? as usize;
    let mut pos = off + 4;
    let mut out = Vec::with_capacity(n.min((end - pos) / 8 + 1));
    for _ in 0..n {
        if pos + 8 > end {
            return None;
        }
        let csize = rd_u32(d, pos, big_endian)? as usize;
        let usize_ = rd_u32(d, pos + 4, big_endian)? as usize;
        if pos + 8 + csize > end {
            return None;
        }
        out.push((pos + 8, csize, usize_));
        pos += 8 + csize;
    }
    Some(out)
}

/// `str` from bytes that must be valid UTF-8 (what Python's `decode("utf-8", "replace")` gives
/// unchanged); None otherwise, so that the Python code decodes them with its own replacement rules.
fn text<'py>(py: Python<'py>, b: &[u8]) -> Option<Bound<'py, PyString>> {
    std::str::from_utf8(b).ok().map(|s| PyString::new(py, s))
}

/// The event format section (file versions 6 and 7) in `data[pos:end]`: u32 system count, then per
/// system a NUL-terminated name (searched within 64 KiB, as the Python cursor does), u32 format count
/// and per format (u64 size, text). Returns (position after the section, [(system, [format text, ...]),
/// ...]) or None on a truncated / malformed section or text that is not valid UTF-8.
#[pyfunction]
fn tracedat_event_formats<'py>(py: Python<'py>, data: PyBuffer<u8>, pos: usize, end: usize, big_endian: bool)
                               -> PyResult<Option<(usize, Bound<'py, PyList>)>> {
    let d = bytes_of(&data);
    let end = end.min(d.len());
    let mut pos = pos;
    let out = PyList::empty(py);
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    if pos.checked_add(4).map_or(true, |e| e > end) {
        return Ok(None);
    }
    let nsys = need!(rd_u32(d, pos, big_endian));
    pos += 4;
    for _ in 0..nsys {
        let lim = end.min(pos.saturating_add(1 << 16));
        let nul = need!(d.get(pos..lim).and_then(|s| s.iter().position(|&c| c == 0)));
        let system = need!(text(py, &d[pos..pos + nul]));
        pos += nul + 1;
        if pos + 4 > end {
            return Ok(None);
        }
        let n = need!(rd_u32(d, pos, big_endian));
        pos += 4;
        let texts = PyList::empty(py);
        for _ in 0..n {
            if pos + 8 > end {
                return Ok(None);
            }
            let size = need!(rd_u64(d, pos, big_endian));
            pos += 8;
            let size = need!(usize::try_from(size).ok());
            if size > end - pos {
                return Ok(None);
            }
            texts.append(need!(text(py, &d[pos..pos + size])))?;
            pos += size;
        }
        out.append(PyTuple::new(py, [system.into_any(), texts.into_any()])?)?;
    }
    Ok(Some((pos, out)))
}

/// Python `re`'s `\s` on ASCII text (str patterns): \t \n \v \f \r, \x1c-\x1f, space.
fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f | b' ')
}

/// Start of the first match of the multi-line pattern `^KEY\s*(X+)` in `t` (X = digits or non-space):
/// the captured bytes, or None when no line matches.
fn line_value<'t>(t: &'t [u8], key: &[u8], digits: bool) -> Option<&'t [u8]> {
    let mut p = 0usize;
    loop {
        if t[p..].starts_with(key) {
            let mut q = p + key.len();
            while q < t.len() && is_space(t[q]) {
                q += 1;
            }
            let s = q;
            while q < t.len() && (if digits { t[q].is_ascii_digit() } else { !is_space(t[q]) }) {
                q += 1;
            }
            if q > s {
                return Some(&t[s..q]);
            }
        }
        // next line start (after a '\n'), as `^` in re.MULTILINE
        p += t[p..].iter().position(|&c| c == b'\n')? + 1;
    }
}

/// For each format text, what `^ID:\s*(\d+)` and `^name:\s*(\S+)` (re.MULTILINE) find:
/// (id, name), None when either is missing, or False when the text is not ASCII (or the id has more
/// than 18 digits) and the caller must use the regular expressions itself.
#[pyfunction]
fn tracedat_format_ids<'py>(py: Python<'py>, texts: Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let f = pyo3::types::PyBool::new(py, false).to_owned().into_any();
    for item in texts.iter() {
        let s = item.downcast::<PyString>()?;
        let t = s.to_str()?.as_bytes();
        if !t.is_ascii() {
            out.append(&f)?;
            continue;
        }
        match (line_value(t, b"ID:", true), line_value(t, b"name:", false)) {
            (Some(id), Some(name)) => {
                if id.len() > 18 {
                    out.append(&f)?;
                    continue;
                }
                let v: u64 = id.iter().fold(0u64, |a, &c| a * 10 + (c - b'0') as u64);
                // ASCII, so valid UTF-8
                let name = PyString::new(py, std::str::from_utf8(name).unwrap_or_default());
                out.append((v, name))?;
            }
            _ => out.append(py.None())?,
        }
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tracedat_chunk_spans, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_event_formats, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_format_ids, m)?)?;
    Ok(())
}
