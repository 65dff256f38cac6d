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

/// Give the memory the C allocator holds free back to the kernel (glibc's malloc_trim; nothing
/// elsewhere). For the points where a large piece of work has just freed what it used (a first open in
/// rounds, an analysis of `abtest analyze`): glibc otherwise keeps it in its heaps and the next piece of
/// work's memory adds to it in the peak RSS. No allocator setting is changed.
#[pyfunction]
fn release_freed_memory(py: Python<'_>) {
    py.detach(::tracedat::release_freed_memory);
}

/// This process keeps the memory it frees for reuse from now on (tracedat::keep_freed_memory): for a worker
/// that analyses one trace after another.
#[pyfunction]
fn keep_freed_memory() {
    ::tracedat::keep_freed_memory();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    tracedat::register(m)?;
    perfetto::register(m)?;
    sim::register(m)?;
    cache_ipc::register(m)?;
    m.add_function(wrap_pyfunction!(release_freed_memory, m)?)?;
    m.add_function(wrap_pyfunction!(keep_freed_memory, m)?)?;
    Ok(())
}
