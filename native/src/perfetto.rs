//! Python entry points of the perfetto protobuf reader (decoding lives in perfetto_decode.rs and
//! the perfetto_* modules it uses).
//!
//! `perfetto_schema(events)` builds the ftrace field schema once (from the JSON in
//! abtest/trace/data); `perfetto_decode(buffer, schema)` walks a whole Trace with the GIL released
//! and returns numpy columns plus metadata (see abtest/trace/perfetto.py for the layout).
use numpy::{IntoPyArray, PyArray1};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::perfetto_decode::{Decoder, Schema};
use crate::perfetto_merge::decode_all;
use crate::perfetto_tables::{Column, Data, EventSpec, FieldSpec, Kind};

#[pyclass(name = "PerfettoSchema", module = "abtest._native", frozen)]
pub struct PySchema {
    inner: Schema,
}

/// events: list of (FtraceEvent field number, event name, [(field number, field name, proto type, repeated)])
#[pyfunction]
fn perfetto_schema(events: Vec<(u32, String, Vec<(u32, String, String, bool)>)>) -> PySchema {
    let max = events.iter().map(|e| e.0).max().unwrap_or(0) as usize;
    let mut specs: Vec<Option<EventSpec>> = vec![None; max + 1];
    for (id, name, fields) in events {
        let fields = fields
            .iter()
            .map(|(n, fname, ty, rep)| FieldSpec::from_proto(*n, fname, ty, *rep))
            .collect();
        specs[id as usize] = Some(EventSpec { name, fields });
    }
    PySchema {
        inner: Schema { events: specs },
    }
}

fn np<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>) -> Bound<'py, PyArray1<T>> {
    v.into_pyarray(py)
}

fn column_tuple<'py>(py: Python<'py>, c: Column) -> PyResult<Bound<'py, PyAny>> {
    // repeated fields: text column, elements separated by \x1f; kind names the element type
    let list_kind = match (c.spec.repeated, c.spec.elem) {
        (false, _) => None,
        (true, Kind::Str) => Some("list_str"),
        (true, Kind::F64) => Some("list_f64"),
        (true, Kind::I32 | Kind::I64) => Some("list_i64"),
        (true, _) => Some("list_u64"),
    };
    let (kind, values): (&str, Bound<'py, PyAny>) = match c.data {
        Data::I32(v) => ("i32", np(py, v).into_any()),
        Data::I64(v) => ("i64", np(py, v).into_any()),
        Data::U32(v) => ("u32", np(py, v).into_any()),
        Data::U64(v) => ("u64", np(py, v).into_any()),
        Data::Bool(v) => ("bool", np(py, v).into_any()),
        Data::F64(v) => ("f64", np(py, v).into_any()),
        Data::Str(v) => ("str", np(py, v).into_any()),
    };
    let valid: Bound<'py, PyAny> = match c.valid {
        Some(m) => np(py, m).into_any(),
        None => py.None().into_bound(py),
    };
    let kind = list_kind.unwrap_or(kind);
    Ok((c.spec.name, kind, values, valid).into_pyobject(py)?.into_any())
}

/// Decode a whole perfetto Trace. Raises ValueError((offset, message)) on malformed input.
#[pyfunction]
fn perfetto_decode<'py>(py: Python<'py>, data: PyBuffer<u8>, schema: &PySchema) -> PyResult<Bound<'py, PyDict>> {
    if !data.is_c_contiguous() {
        return Err(PyValueError::new_err((0usize, "buffer is not contiguous")));
    }
    // SAFETY: the buffer stays alive (and is read-only for us) for the whole call.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(data.buf_ptr() as *const u8, data.len_bytes()) };
    let inner = &schema.inner;
    let result = py.detach(|| decode_all(bytes, inner));
    let d = result.map_err(|e| PyValueError::new_err((e.offset, e.msg)))?;
    to_python(py, d)
}

fn to_python<'py>(py: Python<'py>, d: Decoder) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let tables = PyList::empty(py);
    for t in d.tables {
        let td = PyDict::new(py);
        td.set_item("name", &t.name)?;
        td.set_item("ts", np(py, t.ts))?;
        td.set_item("cpu", np(py, t.cpu))?;
        let cols = PyList::empty(py);
        for c in t.cols {
            if c.written() {
                cols.append(column_tuple(py, c)?)?;
            }
        }
        td.set_item("columns", cols)?;
        tables.append(td)?;
    }
    out.set_item("tables", tables)?;
    let strings: Vec<String> = d
        .strings
        .values
        .iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    out.set_item("strings", strings)?;

    let s = d.switch;
    let sw = PyDict::new(py);
    sw.set_item("ts", np(py, s.ts))?;
    sw.set_item("cpu", np(py, s.cpu))?;
    sw.set_item("prev_state", np(py, s.prev_state))?;
    sw.set_item("next_pid", np(py, s.next_pid))?;
    sw.set_item("next_prio", np(py, s.next_prio))?;
    sw.set_item("next_comm", np(py, s.next_comm))?;
    let p = d.prev;
    sw.set_item("prev_pid", np(py, p.pid))?;
    sw.set_item("prev_prio", np(py, p.prio))?;
    sw.set_item("prev_comm", np(py, p.comm))?;
    sw.set_item("prev_valid", np(py, p.valid))?;
    out.set_item("compact_switch", sw)?;

    let w = d.waking;
    let wk = PyDict::new(py);
    wk.set_item("ts", np(py, w.ts))?;
    wk.set_item("cpu", np(py, w.cpu))?;
    wk.set_item("pid", np(py, w.pid))?;
    wk.set_item("target_cpu", np(py, w.target_cpu))?;
    wk.set_item("prio", np(py, w.prio))?;
    wk.set_item("comm", np(py, w.comm))?;
    wk.set_item("common_flags", np(py, w.common_flags))?;
    wk.set_item("common_flags_valid", np(py, w.flags_valid))?;
    wk.set_item("waker_pid", np(py, w.waker_pid))?;
    wk.set_item("waker_valid", np(py, w.waker_valid))?;
    out.set_item("compact_waking", wk)?;

    let r = d.rails;
    let rd = PyDict::new(py);
    let desc: Vec<(u32, String, String, u32)> = r
        .desc
        .into_iter()
        .map(|x| (x.index, x.name, x.subsys, x.sampling_rate))
        .collect();
    rd.set_item("descriptors", desc)?;
    rd.set_item("ts", np(py, r.ts))?;
    rd.set_item("index", np(py, r.index))?;
    rd.set_item("packet_ts", np(py, r.packet_ts))?;
    rd.set_item("energy_uws", np(py, r.energy_uws))?;
    out.set_item("power_rails", rd)?;

    let m = d.meta;
    let md = PyDict::new(py);
    let si = PyDict::new(py);
    for (k, v) in m.system_info {
        si.set_item(k, v)?;
    }
    for (k, v) in m.system_info_int {
        si.set_item(k, v)?;
    }
    md.set_item("system_info", si)?;
    let un = PyDict::new(py);
    for (k, v) in m.utsname {
        un.set_item(k, v)?;
    }
    md.set_item("utsname", un)?;
    let cpus = PyList::empty(py);
    for c in m.cpus {
        let cd = PyDict::new(py);
        cd.set_item("processor", c.processor)?;
        cd.set_item("frequencies_khz", c.frequencies_khz)?;
        cd.set_item("capacity", c.capacity)?;
        cpus.append(cd)?;
    }
    md.set_item("cpu_info", cpus)?;
    let fs = PyList::empty(py);
    for s in m.ftrace_cpu_stats {
        let sd = PyDict::new(py);
        sd.set_item("phase", s.phase)?;
        sd.set_item("cpu", s.cpu)?;
        sd.set_item("entries", s.entries)?;
        sd.set_item("overrun", s.overrun)?;
        sd.set_item("commit_overrun", s.commit_overrun)?;
        sd.set_item("dropped_events", s.dropped_events)?;
        fs.append(sd)?;
    }
    md.set_item("ftrace_cpu_stats", fs)?;
    md.set_item("trace_loss", m.trace_loss)?;
    let bl: Vec<(i32, u64)> = m.bundles_lost_per_cpu.into_iter().collect();
    md.set_item("bundles_with_lost_events", bl)?;
    md.set_item("ftrace_errors", m.ftrace_errors)?;
    md.set_item("bundles_without_cpu", m.bundles_without_cpu)?;
    md.set_item("ftrace_clocks", m.ftrace_clocks)?;
    md.set_item("packet_clock_ids", m.packet_clock_ids)?;
    let nd: Vec<(u32, u64)> = m.packets_not_decoded.into_iter().collect();
    md.set_item("packets_not_decoded", nd)?;
    md.set_item("packets", m.packets)?;
    md.set_item("compressed_blocks", m.compressed_blocks)?;
    md.set_item("previous_packet_dropped", m.previous_packet_dropped)?;
    md.set_item("events_without_timestamp", m.events_without_timestamp)?;
    md.set_item("events_without_payload", m.events_without_payload)?;
    md.set_item("clock_snapshots", m.clock_snapshots)?;
    out.set_item("meta", md)?;
    out.set_item("warnings", d.warnings)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySchema>()?;
    m.add_function(wrap_pyfunction!(perfetto_schema, m)?)?;
    m.add_function(wrap_pyfunction!(perfetto_decode, m)?)?;
    Ok(())
}
