//! Python entry points of the trace.dat decoder (crate `tracedat`).
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3_arrow::PyRecordBatch;

use tracedat::{CpuPages, Error, Limits, Options, RoundSizes};

/// The bytes of a buffer object (bytes, mmap), valid while `buf` lives.
pub fn bytes_of(buf: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err((None::<u64>, "buffer is not contiguous", None::<String>)));
    }
    // SAFETY: PyBuffer holds the exporter's buffer (bytes / read-only mmap) for its lifetime; the slice
    // does not outlive `buf` and nothing writes to it.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

/// ValueError((offset or None, message, expected or None)): abtest/trace/tracedat.py turns it into a
/// TraceFormatError naming the file.
fn py_error(e: Error) -> PyErr {
    PyValueError::new_err((e.offset, e.message, e.expected))
}

/// Decode a whole trace.dat held in `data` (bytes or mmap) with the GIL released.
/// Returns ([(table name, arrow RecordBatch)], meta dict). Limits: see tracedat::Limits. `file_mapping`:
/// `data` is a read-only mmap of the file (its pages are released once decoded; never for bytes).
/// `fields_of`: the tables whose fields are decoded (None: all); any other table keeps `ts` and `cpu` only.
#[pyfunction]
#[pyo3(signature = (data, inflate_ratio, inflate_floor, inflated_bytes, file_mapping=false, threads=0, fields_of=None))]
#[allow(clippy::too_many_arguments)]
fn tracedat_decode<'py>(
    py: Python<'py>,
    data: PyBuffer<u8>,
    inflate_ratio: f64,
    inflate_floor: u64,
    inflated_bytes: u64,
    file_mapping: bool,
    threads: usize,
    fields_of: Option<Vec<String>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
    let bytes = bytes_of(&data)?;
    let opts = Options {
        limits: Limits { inflate_ratio, inflate_floor, inflated_bytes },
        threads,
        release_input: file_mapping && data.readonly(),
        fields_of: fields_of.map(|names| std::sync::Arc::new(names.into_iter().collect())),
    };
    let decoded = py.detach(|| tracedat::decode(bytes, &opts)).map_err(py_error)?;
    let tables = PyList::empty(py);
    for (name, batch) in decoded.tables {
        tables.append((name, Py::new(py, PyRecordBatch::new(batch))?))?;
    }
    Ok((tables, decoded.meta.into_pyobject(py)?.into_any()))
}

/// Decode a trace.dat in rounds of about `round_bytes` of ring-buffer data (tracedat::decode_rounds), the
/// GIL released while a round decodes: `emit` is called (on this thread) with each round's
/// [(table name, arrow RecordBatch)] and (ring-buffer bytes decoded so far, in all). Returns the meta dict, or None when the file's timestamps go
/// backwards on a CPU (rounds cannot keep the order: decode the whole file with tracedat_decode).
#[pyfunction]
#[pyo3(signature = (data, inflate_ratio, inflate_floor, inflated_bytes, emit, round_bytes, piece_bytes, file_mapping=false, threads=0))]
#[allow(clippy::too_many_arguments)]
fn tracedat_decode_rounds<'py>(
    py: Python<'py>,
    data: PyBuffer<u8>,
    inflate_ratio: f64,
    inflate_floor: u64,
    inflated_bytes: u64,
    emit: Py<PyAny>,
    round_bytes: usize,
    piece_bytes: usize,
    file_mapping: bool,
    threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = bytes_of(&data)?;
    let opts = Options {
        limits: Limits { inflate_ratio, inflate_floor, inflated_bytes },
        threads,
        release_input: file_mapping && data.readonly(),
        fields_of: None,
    };
    let sizes = RoundSizes { piece_bytes: piece_bytes.max(1), round_bytes: round_bytes.max(1) };
    let mut failed: Option<PyErr> = None;
    let meta = py.detach(|| {
        tracedat::decode_rounds(bytes, &opts, sizes, &mut |tables, progress| {
            Python::attach(|py| -> PyResult<()> {
                let list = PyList::empty(py);
                for (name, batch) in tables {
                    list.append((name, Py::new(py, PyRecordBatch::new(batch))?))?;
                }
                emit.call1(py, (list, progress))?;
                Ok(())
            })
            .map_err(|e| {
                failed = Some(e);
                Error::nowhere("the round's consumer failed")
            })
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    match meta.map_err(py_error)? {
        Some(m) => Ok(m.into_pyobject(py)?.into_any()),
        None => Ok(py.None().into_bound(py)),
    }
}

/// The file layout of a trace.dat (for tests and tools): {"version", "page_size", "big_endian",
/// "compression", "buffers": [{"name", "clock", "cpus": [{"cpu", "offset", "size", "chunks"}]}]};
/// stored data has offset/size, compressed data a list of (file offset of the compressed bytes,
/// compressed size, inflated size).
#[pyfunction]
fn tracedat_layout<'py>(py: Python<'py>, data: PyBuffer<u8>) -> PyResult<Bound<'py, PyDict>> {
    let lay = tracedat::layout(bytes_of(&data)?, Limits::default()).map_err(py_error)?;
    let d = PyDict::new(py);
    d.set_item("version", lay.version)?;
    d.set_item("page_size", lay.page_size)?;
    d.set_item("big_endian", lay.big_endian)?;
    d.set_item("compression", lay.codec.map(|c| c.name()))?;
    let buffers = PyList::empty(py);
    for b in &lay.buffers {
        let bd = PyDict::new(py);
        bd.set_item("name", &b.name)?;
        bd.set_item("clock", &b.clock)?;
        let cpus = PyList::empty(py);
        for c in &b.cpus {
            let cd = PyDict::new(py);
            cd.set_item("cpu", c.cpu)?;
            match &c.pages {
                CpuPages::Stored { offset, size } => {
                    cd.set_item("offset", offset)?;
                    cd.set_item("size", size)?;
                    cd.set_item("chunks", py.None())?;
                }
                CpuPages::Chunks(chunks) => {
                    let v: Vec<(usize, usize, usize)> = chunks.iter().map(|k| (k.offset, k.size, k.inflated)).collect();
                    cd.set_item("offset", py.None())?;
                    cd.set_item("size", py.None())?;
                    cd.set_item("chunks", v)?;
                }
            }
            cpus.append(cd)?;
        }
        bd.set_item("cpus", cpus)?;
        buffers.append(bd)?;
    }
    d.set_item("buffers", buffers)?;
    Ok(d)
}

/// ({address: printk format bytes}, kallsyms text bytes) of a trace.dat (for tests comparing bprint text
/// and symbols with trace-cmd).
#[pyfunction]
fn tracedat_printk_kallsyms<'py>(
    py: Python<'py>,
    data: PyBuffer<u8>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyBytes>)> {
    let (printk, kallsyms) = tracedat::printk_and_kallsyms(bytes_of(&data)?, Limits::default()).map_err(py_error)?;
    let d = PyDict::new(py);
    for (a, f) in printk {
        d.set_item(a, PyBytes::new(py, &f))?;
    }
    Ok((d, PyBytes::new(py, &kallsyms)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tracedat_decode, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_decode_rounds, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_layout, m)?)?;
    m.add_function(wrap_pyfunction!(tracedat_printk_kallsyms, m)?)?;
    Ok(())
}
