//! abtest's compiled core, as a Python extension: the trace.dat and perfetto decoders (crates
//! `tracedat` and `perfetto`) with their tables handed to Python as Arrow record batches through the
//! Arrow PyCapsule interface (pyo3-arrow) and their metadata as dicts. No Python code runs during a
//! decode (the GIL is released). The scheduler simulators (crate `sim`) take and give numpy arrays.
//! Python wrappers live in abtest/trace/ (tracedat.py, perfetto.py). The cache's Arrow IPC files are
//! memory-mapped here too (`ipc_map`, abtest/trace/cache.py).
use pyo3::prelude::*;

mod cache_ipc;
mod perfetto;
mod sim;
mod tracedat;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    tracedat::register(m)?;
    perfetto::register(m)?;
    sim::register(m)?;
    cache_ipc::register(m)?;
    Ok(())
}
