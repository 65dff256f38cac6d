//! Python entry point of the perfetto decoder (crate `perfetto`).
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3_arrow::PyRecordBatch;

use perfetto::Limits;

/// Decode a whole perfetto Trace held in `data` (bytes or mmap) with the GIL released.
/// Returns ([(table name, arrow RecordBatch)], meta dict); ValueError((offset, message, expected)) on
/// bad input.
#[pyfunction]
fn perfetto_decode<'py>(
    py: Python<'py>,
    data: PyBuffer<u8>,
    inflate_ratio: f64,
    inflate_floor: u64,
    inflated_bytes: u64,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
    let bytes = crate::tracedat::bytes_of(&data)?;
    let limits = Limits { inflate_ratio, inflate_floor, inflated_bytes };
    let decoded = py
        .detach(|| perfetto::decode(bytes, limits))
        .map_err(|e| PyValueError::new_err((Some(e.offset), e.message, Some(e.expected))))?;
    let tables = PyList::empty(py);
    for (name, batch) in decoded.tables {
        tables.append((name, Py::new(py, PyRecordBatch::new(batch))?))?;
    }
    Ok((tables, decoded.meta.into_pyobject(py)?.into_any()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(perfetto_decode, m)?)?;
    Ok(())
}
