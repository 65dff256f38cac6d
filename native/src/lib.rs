//! abtest's compiled core, as a Python extension: the trace.dat and perfetto decoders (crates
//! `tracedat` and the perfetto modules here) with their tables handed to Python as Arrow record
//! batches through the Arrow PyCapsule interface (pyo3-arrow) and their metadata as dicts.
//! Python wrappers live in abtest/trace/ (tracedat.py, perfetto.py).
use pyo3::prelude::*;

mod perfetto;
mod perfetto_compact;
mod perfetto_decode;
mod perfetto_generic;
mod perfetto_merge;
mod perfetto_packets;
mod perfetto_sort;
mod perfetto_tables;
mod perfetto_wire;
mod tracedat;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    tracedat::register(m)?;
    perfetto::register(m)?;
    Ok(())
}
