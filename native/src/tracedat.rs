//! trace-cmd trace.dat ring-buffer decoding: pages -> event records -> typed columns.
//!
//! Python (abtest/trace/tracedat.py) parses the file layout and event formats and passes, per CPU,
//! the raw ring-buffer pages plus the field layout of every event type. This module
//! 1. walks every page (header: u64 timestamp, `commit` of long size with the
//!    RB_MISSED_EVENTS (bit 31) / RB_MISSED_STORED (bit 30) flags; a stored missed count
//!    sits right after the committed data) and every event header (type_len 1..28: data of
//!    type_len*4 bytes, 0: u32 length word, 29: padding, 30: time extend, 31: absolute time),
//! 2. sorts all records by timestamp (stable, so events of one CPU keep their order),
//! 3. fills one typed column per field per event type, read straight from the record bytes.
//!
//! Columns come back as numpy arrays (integers), ("utf8"|"binary", offsets i64, bytes u8)
//! triples (strings/blobs, Arrow layout) or ("list", flat values, elements per row).
use std::collections::HashMap;

use numpy::IntoPyArray;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

#[path = "tracedat_printf.rs"]
mod tracedat_printf;
use tracedat_printf::format_bprint;

// field kinds: keep in sync with abtest/trace/tracedat_format.py
const KIND_INT: u8 = 0;
const KIND_CHAR_ARRAY: u8 = 1;
const KIND_DATA_LOC_STR: u8 = 2;
const KIND_DATA_LOC_BIN: u8 = 3;
const KIND_NUM_ARRAY: u8 = 4;
const KIND_BYTES: u8 = 5;
const KIND_REL_LOC_STR: u8 = 6;
const KIND_REL_LOC_BIN: u8 = 7;
const KIND_TAIL_STR: u8 = 8;
const KIND_TAIL_BIN: u8 = 9;
const KIND_BPRINT_TEXT: u8 = 10;
const KIND_PRINTK_STR: u8 = 11;
const KIND_TAIL_LIST: u8 = 12;

const RB_MISSED_EVENTS: u64 = 1 << 31;
const RB_MISSED_STORED: u64 = 1 << 30;
const RB_COMMIT_MASK: u64 = (1 << 30) - 1;
const TS_SHIFT: u32 = 27;

/// (name, offset, size, kind, signed, elem_size, aux_offset, aux_size)
type FieldSpec = (String, usize, usize, u8, bool, usize, usize, usize);

#[inline]
fn rd(b: &[u8], off: usize, size: usize, be: bool) -> Option<u64> {
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

struct PageLayout {
    page_size: usize,
    ts_off: usize,
    ts_size: usize,
    commit_off: usize,
    commit_size: usize,
    data_off: usize,
    be: bool,
    id_off: usize,
    id_size: usize,
}

/// Timestamp corrections trace-cmd applies: TSC2NSEC (mult, shift, offset), then a fixed offset (ns).
struct Clock {
    tsc: Option<(u32, u32, u64)>,
    offset_ns: i64,
}

impl Clock {
    #[inline]
    fn apply(&self, raw: u64) -> i64 {
        let t = match self.tsc {
            Some((mult, shift, off)) => ((raw.wrapping_sub(off) as u128 * mult as u128) >> shift) as u64,
            None => raw,
        };
        (t as i64).wrapping_add(self.offset_ns)
    }
}

/// Event records of all CPUs, struct-of-arrays (20 bytes per event).
#[derive(Default)]
struct Records {
    ts: Vec<i64>,
    src: Vec<u16>,
    pos: Vec<u32>,
    len: Vec<u32>,
    ty: Vec<u16>,
}

struct DecodeError {
    src: usize,
    pos: usize,
    msg: String,
}

#[derive(Default)]
struct CpuStats {
    lost: u64,
    lost_unknown_pages: u64,
    pages: u64,
}

/// Walk every page of one CPU's ring-buffer data, appending records.
fn walk_cpu(si: usize, data: &[u8], lay: &PageLayout, clock: &Clock, recs: &mut Records, st: &mut CpuStats)
    -> Result<(), DecodeError> {
    let ps = lay.page_size;
    let err = |pos: usize, msg: String| DecodeError { src: si, pos, msg };
    if data.len() % ps != 0 {
        return Err(err(data.len() - data.len() % ps, format!(
            "CPU data ends with a partial ring-buffer page ({} of {} bytes)", data.len() % ps, ps)));
    }
    if data.len() > u32::MAX as usize {
        return Err(err(0, "CPU data larger than 4 GiB is not supported".into()));
    }
    for (pi, page) in data.chunks_exact(ps).enumerate() {
        let base = pi * ps;
        st.pages += 1;
        let mut ts = rd(page, lay.ts_off, lay.ts_size, lay.be).unwrap_or(0);
        let commit_raw = rd(page, lay.commit_off, lay.commit_size, lay.be).unwrap_or(0);
        let commit = (commit_raw & RB_COMMIT_MASK) as usize;
        let end = lay.data_off + commit;
        if end > ps {
            return Err(err(base + lay.commit_off, format!(
                "page header commit {} exceeds the page's data area ({} bytes)", commit, ps - lay.data_off)));
        }
        if commit_raw & RB_MISSED_EVENTS != 0 {
            if commit_raw & RB_MISSED_STORED != 0 {
                st.lost += rd(page, end, lay.commit_size, lay.be).unwrap_or(0);
            } else {
                st.lost_unknown_pages += 1;
            }
        }
        let mut i = lay.data_off;
        while i < end {
            if i + 4 > end {
                return Err(err(base + i, "event header crosses the end of the page's committed data".into()));
            }
            let w = rd(page, i, 4, lay.be).unwrap() as u32;
            let (type_len, delta) = if lay.be { (w >> 27, (w & 0x07ff_ffff) as u64) } else { (w & 31, (w >> 5) as u64) };
            let word = |j: usize| -> Result<u64, DecodeError> {
                if j + 4 > end {
                    return Err(err(base + i, format!("event of type {} truncated by the page commit", type_len)));
                }
                Ok(rd(page, j, 4, lay.be).unwrap())
            };
            let (data_at, data_len) = match type_len {
                29 => {
                    // padding (discarded event); time_delta 0 = rest of page unused
                    if delta == 0 {
                        break;
                    }
                    let l = word(i + 4)? as usize;
                    ts = ts.wrapping_add(delta);
                    i += 4 + l;
                    continue;
                }
                30 => {
                    ts = ts.wrapping_add((word(i + 4)? << TS_SHIFT) + delta);
                    i += 8;
                    continue;
                }
                31 => {
                    ts = (word(i + 4)? << TS_SHIFT) + delta;
                    i += 8;
                    continue;
                }
                0 => {
                    let l = word(i + 4)? as usize;
                    if l < 4 {
                        return Err(err(base + i, format!("event length word {} is below its own 4 bytes", l)));
                    }
                    (i + 8, (l - 4 + 3) & !3)
                }
                n => (i + 4, n as usize * 4),
            };
            if data_at + data_len > end {
                return Err(err(base + i, format!(
                    "event record of {} bytes runs past the page's committed data ({} bytes left)",
                    data_len, end.saturating_sub(data_at))));
            }
            ts = ts.wrapping_add(delta);
            let rec = &page[data_at..data_at + data_len];
            let ty = match rd(rec, lay.id_off, lay.id_size, lay.be) {
                Some(t) => t as u16,
                None => return Err(err(base + i, format!("event record of {} bytes too short for its type id", data_len))),
            };
            recs.ts.push(clock.apply(ts));
            recs.src.push(si as u16);
            recs.pos.push((base + data_at) as u32);
            recs.len.push(data_len as u32);
            recs.ty.push(ty);
            i = data_at + data_len;
        }
    }
    Ok(())
}

struct Ctx<'a> {
    srcs: Vec<&'a [u8]>,
    recs: Records,
    be: bool,
    long_size: usize,
    printk: HashMap<u64, Vec<u8>>,
    sym_addrs: Vec<u64>,
    sym_names: Vec<String>,
    short_fields: u64,
    missing_formats: u64,
}

impl<'a> Ctx<'a> {
    #[inline]
    fn rec(&self, i: u32) -> &'a [u8] {
        let i = i as usize;
        let p = self.recs.pos[i] as usize;
        &self.srcs[self.recs.src[i] as usize][p..p + self.recs.len[i] as usize]
    }
}

fn arr<T: numpy::Element>(py: Python<'_>, v: Vec<T>) -> PyObject {
    v.into_pyarray(py).into_any().unbind()
}

fn int_column(py: Python<'_>, cx: &mut Ctx, idx: &[u32], off: usize, size: usize, signed: bool) -> PyObject {
    let mut short = 0u64;
    let mut get = |i: u32| -> u64 {
        rd(cx.rec(i), off, size, cx.be).unwrap_or_else(|| {
            short += 1;
            0
        })
    };
    let out = match (size, signed) {
        (1, false) => arr(py, idx.iter().map(|&i| get(i) as u8).collect::<Vec<_>>()),
        (1, true) => arr(py, idx.iter().map(|&i| get(i) as u8 as i8).collect::<Vec<_>>()),
        (2, false) => arr(py, idx.iter().map(|&i| get(i) as u16).collect::<Vec<_>>()),
        (2, true) => arr(py, idx.iter().map(|&i| get(i) as u16 as i16).collect::<Vec<_>>()),
        (4, false) => arr(py, idx.iter().map(|&i| get(i) as u32).collect::<Vec<_>>()),
        (4, true) => arr(py, idx.iter().map(|&i| get(i) as u32 as i32).collect::<Vec<_>>()),
        (_, false) => arr(py, idx.iter().map(|&i| get(i)).collect::<Vec<_>>()),
        (_, true) => arr(py, idx.iter().map(|&i| get(i) as i64).collect::<Vec<_>>()),
    };
    cx.short_fields += short;
    out
}

/// Strings / blobs in Arrow layout: ("utf8" | "binary", offsets i64 (n+1), bytes u8).
fn var_column<'b>(py: Python<'_>, idx: &[u32], text: bool, mut get: impl FnMut(u32) -> std::borrow::Cow<'b, [u8]>) -> PyObject {
    let mut offsets: Vec<i64> = Vec::with_capacity(idx.len() + 1);
    let mut bytes: Vec<u8> = Vec::with_capacity(idx.len() * 8);
    offsets.push(0);
    for &i in idx {
        let v = get(i);
        let v: &[u8] = if text {
            let n = v.iter().position(|&c| c == 0).unwrap_or(v.len());
            &v[..n]
        } else {
            &v
        };
        if text && std::str::from_utf8(v).is_err() {
            bytes.extend_from_slice(String::from_utf8_lossy(v).as_bytes());
        } else {
            bytes.extend_from_slice(v);
        }
        offsets.push(bytes.len() as i64);
    }
    let tag = if text { "utf8" } else { "binary" };
    PyTuple::new(py, [tag.into_pyobject(py).unwrap().into_any().unbind(), arr(py, offsets), arr(py, bytes)])
        .unwrap()
        .into_any()
        .unbind()
}

fn list_column(py: Python<'_>, cx: &Ctx, idx: &[u32], off: usize, size: usize, elem: usize, signed: bool) -> PyObject {
    let count = size / elem;
    let mut flat_u: Vec<u64> = Vec::with_capacity(idx.len() * count);
    for &i in idx {
        let r = cx.rec(i);
        for k in 0..count {
            flat_u.push(rd(r, off + k * elem, elem, cx.be).unwrap_or(0));
        }
    }
    let flat = match (elem, signed) {
        (1, false) => arr(py, flat_u.iter().map(|&v| v as u8).collect::<Vec<_>>()),
        (1, true) => arr(py, flat_u.iter().map(|&v| v as u8 as i8).collect::<Vec<_>>()),
        (2, false) => arr(py, flat_u.iter().map(|&v| v as u16).collect::<Vec<_>>()),
        (2, true) => arr(py, flat_u.iter().map(|&v| v as u16 as i16).collect::<Vec<_>>()),
        (4, false) => arr(py, flat_u.iter().map(|&v| v as u32).collect::<Vec<_>>()),
        (4, true) => arr(py, flat_u.iter().map(|&v| v as u32 as i32).collect::<Vec<_>>()),
        (_, true) => arr(py, flat_u.iter().map(|&v| v as i64).collect::<Vec<_>>()),
        (_, false) => arr(py, flat_u),
    };
    PyTuple::new(py, [
        "list".into_pyobject(py).unwrap().into_any().unbind(),
        flat,
        count.into_pyobject(py).unwrap().into_any().unbind(),
    ]).unwrap().into_any().unbind()
}

/// Variable-length integer list running to the end of the record (e.g. kernel_stack `caller`),
/// capped by a count field at (aux_off, aux_size) when aux_size > 0:
/// ("varlist", offsets i64 (n+1), flat values).
fn tail_list_column(py: Python<'_>, cx: &Ctx, idx: &[u32], f: &FieldSpec) -> PyObject {
    let (off, elem, signed, aux_off, aux_size) = (f.1, f.5.max(1), f.4, f.6, f.7);
    let mut offsets: Vec<i64> = Vec::with_capacity(idx.len() + 1);
    let mut flat: Vec<u64> = Vec::new();
    offsets.push(0);
    for &i in idx {
        let r = cx.rec(i);
        let mut n = r.len().saturating_sub(off) / elem;
        if aux_size > 0 {
            let c = rd(r, aux_off, aux_size, cx.be).unwrap_or(0) as usize;
            n = n.min(c);
        }
        for k in 0..n {
            flat.push(rd(r, off + k * elem, elem, cx.be).unwrap_or(0));
        }
        offsets.push(flat.len() as i64);
    }
    let values = match (elem, signed) {
        (1, _) => arr(py, flat.iter().map(|&v| v as u8).collect::<Vec<_>>()),
        (2, _) => arr(py, flat.iter().map(|&v| v as u16).collect::<Vec<_>>()),
        (4, false) => arr(py, flat.iter().map(|&v| v as u32).collect::<Vec<_>>()),
        (4, true) => arr(py, flat.iter().map(|&v| v as u32 as i32).collect::<Vec<_>>()),
        (_, true) => arr(py, flat.iter().map(|&v| v as i64).collect::<Vec<_>>()),
        (_, false) => arr(py, flat),
    };
    PyTuple::new(py, ["varlist".into_pyobject(py).unwrap().into_any().unbind(), arr(py, offsets), values])
        .unwrap().into_any().unbind()
}

/// Slice of a __data_loc / __rel_loc field: u32 = (length << 16) | offset.
fn dyn_slice<'r>(r: &'r [u8], f: &FieldSpec, be: bool, rel: bool) -> &'r [u8] {
    let v = rd(r, f.1, 4, be).unwrap_or(0) as usize;
    let mut start = v & 0xffff;
    if rel {
        start += f.1 + f.2;
    }
    let len = v >> 16;
    r.get(start..(start + len).min(r.len())).unwrap_or(&[])
}

fn build_column(py: Python<'_>, cx: &mut Ctx, idx: &[u32], f: &FieldSpec) -> PyObject {
    use std::borrow::Cow;
    let (off, size, kind, signed, elem) = (f.1, f.2, f.3, f.4, f.5);
    let be = cx.be;
    match kind {
        KIND_INT => int_column(py, cx, idx, off, size, signed),
        KIND_NUM_ARRAY => list_column(py, cx, idx, off, size, elem, signed),
        KIND_TAIL_LIST => tail_list_column(py, cx, idx, f),
        KIND_CHAR_ARRAY | KIND_BYTES => {
            let text = kind == KIND_CHAR_ARRAY;
            var_column(py, idx, text, |i| Cow::Borrowed(cx.rec(i).get(off..off + size).unwrap_or(&[])))
        }
        KIND_DATA_LOC_STR | KIND_DATA_LOC_BIN | KIND_REL_LOC_STR | KIND_REL_LOC_BIN => {
            let text = kind == KIND_DATA_LOC_STR || kind == KIND_REL_LOC_STR;
            let rel = kind == KIND_REL_LOC_STR || kind == KIND_REL_LOC_BIN;
            var_column(py, idx, text, |i| Cow::Borrowed(dyn_slice(cx.rec(i), f, be, rel)))
        }
        KIND_TAIL_STR | KIND_TAIL_BIN => {
            var_column(py, idx, kind == KIND_TAIL_STR, |i| Cow::Borrowed(cx.rec(i).get(off..).unwrap_or(&[])))
        }
        KIND_BPRINT_TEXT => {
            let (fmt_off, fmt_size) = (f.6, f.7);
            let mut missing = 0u64;
            let col = {
                let cxr: &Ctx = cx;
                var_column(py, idx, true, |i| {
                    let r = cxr.rec(i);
                    let addr = rd(r, fmt_off, fmt_size, be).unwrap_or(0);
                    match cxr.printk.get(&addr) {
                        Some(fmt) => Cow::Owned(format_bprint(fmt, r.get(off..).unwrap_or(&[]), cxr.long_size, be,
                                                              (&cxr.sym_addrs, &cxr.sym_names)).into_bytes()),
                        None => {
                            missing += 1;
                            Cow::Owned(format!("[UNKNOWN PRINTK FORMAT 0x{:x}]", addr).into_bytes())
                        }
                    }
                })
            };
            cx.missing_formats += missing;
            col
        }
        KIND_PRINTK_STR => {
            let mut missing = 0u64;
            let col = {
                let cxr: &Ctx = cx;
                var_column(py, idx, true, |i| {
                    let addr = rd(cxr.rec(i), off, size, be).unwrap_or(0);
                    match cxr.printk.get(&addr) {
                        Some(s) => Cow::Owned(s.clone()),
                        None => {
                            missing += 1;
                            Cow::Owned(format!("[UNKNOWN PRINTK STRING 0x{:x}]", addr).into_bytes())
                        }
                    }
                })
            };
            cx.missing_formats += missing;
            col
        }
        _ => var_column(py, idx, false, |i| Cow::Borrowed(cx.rec(i))),
    }
}

/// Decode all CPUs' ring-buffer pages into per-event-type column dicts.
///
/// cpu_bufs: [(cpu, buffer, start, size)]; page: (page_size, ts_off, ts_size, commit_off, commit_size,
/// data_off); id_field: (offset, size) of common_type; events: {id: [FieldSpec]}; unknown_fields:
/// fields used for ids without a format; tsc2nsec: (mult, shift, offset) or None; ts_offset_ns added
/// to every timestamp; printk: {address: format bytes}; kallsyms: (sorted addresses, names).
/// Returns {"events": {id: {"ts", "cpu", field...}}, "lost": {cpu: n}, "lost_unknown_pages": {cpu: n},
/// "pages": n, "short_fields": n, "missing_formats": n}.
/// Raises ValueError((message, source_index, byte_position)) on corrupt data.
#[pyfunction]
#[pyo3(signature = (cpu_bufs, page, big_endian, id_field, events, unknown_fields, long_size, tsc2nsec, ts_offset_ns, printk, kallsyms))]
#[allow(clippy::too_many_arguments)]
fn tracedat_decode<'py>(
    py: Python<'py>,
    cpu_bufs: Vec<(i32, PyBuffer<u8>, usize, usize)>,
    page: (usize, usize, usize, usize, usize, usize),
    big_endian: bool,
    id_field: (usize, usize),
    events: HashMap<u16, Vec<FieldSpec>>,
    unknown_fields: Vec<FieldSpec>,
    long_size: usize,
    tsc2nsec: Option<(u32, u32, u64)>,
    ts_offset_ns: i64,
    printk: HashMap<u64, Vec<u8>>,
    kallsyms: (Vec<u64>, Vec<String>),
) -> PyResult<Bound<'py, PyDict>> {
    let lay = PageLayout {
        page_size: page.0, ts_off: page.1, ts_size: page.2, commit_off: page.3, commit_size: page.4,
        data_off: page.5, be: big_endian, id_off: id_field.0, id_size: id_field.1,
    };
    if lay.data_off >= lay.page_size {
        return Err(PyValueError::new_err(("page header larger than the page", 0usize, 0usize)));
    }
    let clock = Clock { tsc: tsc2nsec, offset_ns: ts_offset_ns };
    let mut srcs: Vec<&[u8]> = Vec::with_capacity(cpu_bufs.len());
    for (_, buf, start, size) in &cpu_bufs {
        // SAFETY: the buffers are read-only views kept alive by `cpu_bufs` for this whole call.
        let all = unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) };
        let s = all.get(*start..start + size).ok_or_else(|| PyValueError::new_err(("CPU data outside its buffer", 0usize, *start)))?;
        srcs.push(s);
    }
    let mut recs = Records::default();
    let stats_dict = PyDict::new(py);
    let lost = PyDict::new(py);
    let lost_unknown = PyDict::new(py);
    let mut pages = 0u64;
    for (si, s) in srcs.iter().enumerate() {
        let mut st = CpuStats::default();
        walk_cpu(si, s, &lay, &clock, &mut recs, &mut st)
            .map_err(|e| PyValueError::new_err((e.msg, e.src, e.pos)))?;
        let cpu = cpu_bufs[si].0;
        pages += st.pages;
        lost.set_item(cpu, st.lost + lost.get_item(cpu)?.map(|v| v.extract::<u64>().unwrap_or(0)).unwrap_or(0))?;
        if st.lost_unknown_pages > 0 {
            lost_unknown.set_item(cpu, st.lost_unknown_pages)?;
        }
    }
    // stable sort by timestamp: ties keep CPU order, each CPU keeps its own order
    let n = recs.ts.len();
    let mut perm: Vec<u32> = (0..n as u32).collect();
    perm.sort_by_key(|&i| recs.ts[i as usize]);
    // group by event type, in timestamp order
    let mut slot_of: Vec<i32> = vec![-1; 1 << 16];
    let mut groups: Vec<(u16, Vec<u32>)> = Vec::new();
    for &i in &perm {
        let t = recs.ty[i as usize];
        let s = slot_of[t as usize];
        if s < 0 {
            slot_of[t as usize] = groups.len() as i32;
            groups.push((t, vec![i]));
        } else {
            groups[s as usize].1.push(i);
        }
    }
    drop(perm);
    let cpu_of_src: Vec<i32> = cpu_bufs.iter().map(|c| c.0).collect();
    let mut cx = Ctx {
        srcs, recs, be: big_endian, long_size, printk, sym_addrs: kallsyms.0, sym_names: kallsyms.1,
        short_fields: 0, missing_formats: 0,
    };
    let out = PyDict::new(py);
    for (ty, idx) in &groups {
        let cols = PyDict::new(py);
        cols.set_item("ts", arr(py, idx.iter().map(|&i| cx.recs.ts[i as usize]).collect::<Vec<_>>()))?;
        cols.set_item("__buffer_cpu", arr(py, idx.iter().map(|&i| cpu_of_src[cx.recs.src[i as usize] as usize]).collect::<Vec<_>>()))?;
        let fields = events.get(ty).unwrap_or(&unknown_fields);
        for f in fields {
            let col = build_column(py, &mut cx, idx, f);
            cols.set_item(&f.0, col)?;
        }
        out.set_item(*ty, cols)?;
    }
    stats_dict.set_item("events", out)?;
    stats_dict.set_item("lost", lost)?;
    stats_dict.set_item("lost_unknown_pages", lost_unknown)?;
    stats_dict.set_item("pages", pages)?;
    stats_dict.set_item("records", n)?;
    stats_dict.set_item("short_fields", cx.short_fields)?;
    stats_dict.set_item("missing_formats", cx.missing_formats)?;
    Ok(stats_dict)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tracedat_decode, m)?)?;
    Ok(())
}
