//! abtest's compiled core: trace decoding hot paths.
//!
//! Each format lives in its own module, which registers its Python functions
//! through its `register` function. Python wrappers live in `abtest/trace/`.
use pyo3::prelude::*;

#[cfg(target_os = "linux")]
mod alloc_reuse;
mod perfetto;
mod perfetto_compact;
mod perfetto_decode;
mod perfetto_generic;
mod perfetto_merge;
mod perfetto_packets;
mod perfetto_sort;
mod perfetto_tables;
mod perfetto_wire;
mod sim;
mod parquet_write;
mod tracedat;
mod tracedat_layout;

/// Large blocks, once freed, stay mapped for reuse (alloc_reuse).
#[cfg(target_os = "linux")]
#[global_allocator]
static GLOBAL: alloc_reuse::ReuseAlloc = alloc_reuse::ReuseAlloc;

/// Unmap the large blocks kept for reuse; returns the bytes given back to the kernel.
#[pyfunction]
fn release_cached_memory() -> usize {
    #[cfg(target_os = "linux")]
    return alloc_reuse::release_cached();
    #[cfg(not(target_os = "linux"))]
    0
}

/// (blocks, bytes) of freed large blocks kept for reuse.
#[pyfunction]
fn cached_memory() -> (usize, usize) {
    #[cfg(target_os = "linux")]
    return alloc_reuse::cached();
    #[cfg(not(target_os = "linux"))]
    (0, 0)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    #[cfg(target_os = "linux")]
    alloc_reuse::configure();
    m.add_function(wrap_pyfunction!(release_cached_memory, m)?)?;
    m.add_function(wrap_pyfunction!(cached_memory, m)?)?;
    tracedat::register(m)?;
    tracedat_layout::register(m)?;
    perfetto::register(m)?;
    parquet_write::register(m)?;
    sim::register(m)?;
    Ok(())
}
