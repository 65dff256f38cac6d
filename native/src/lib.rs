//! abtest's compiled core: trace decoding hot paths.
//!
//! Each format lives in its own module, which registers its Python functions
//! through its `register` function. Python wrappers live in `abtest/trace/`.
use pyo3::prelude::*;

mod perfetto;
mod perfetto_decode;
mod perfetto_merge;
mod perfetto_packets;
mod perfetto_sort;
mod perfetto_tables;
mod perfetto_wire;
mod parquet_write;
mod tracedat;
mod tracedat_layout;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    tracedat::register(m)?;
    tracedat_layout::register(m)?;
    perfetto::register(m)?;
    parquet_write::register(m)?;
    Ok(())
}
