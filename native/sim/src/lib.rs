//! abtest's simulators and matchers over scheduler events replayed in time order. Each module is the
//! compiled form of a model documented in abtest/analysis (pelt_sim.py, window_sim.py, boost.py,
//! latency.py, placement.py), whose Python implementations stay as the reference the tests compare against. Slices in,
//! vectors out; nothing here knows Python (the extension crate binds them: native/src/sim.rs).
pub mod boost;
pub mod events;
pub mod latency;
pub mod pelt;
pub mod placement;
pub mod stats;
pub mod tasks;
pub mod window;
