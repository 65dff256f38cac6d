//! Perfetto protobuf traces (a serialized `Trace`: repeated TracePacket) -> one Arrow table per event
//! kind, plus metadata.
//!
//! The decoder owns the format: the wire walk (wire), the ftrace schema compiled in (schema), packets
//! (decoder: ftrace bundles and events; compact: CompactSched; generic: events described in the trace;
//! packets: power rails, battery, system / CPU info, statistics, clocks), compressed packets (within
//! `Limits`), time order and derived columns (sort), the tables (frames) and the metadata (meta). Tables are sorted by ts (stable: ties keep file order).
//! Bad input is an `Error` naming the byte offset (inside a compressed block: the block's offset).

mod compact;
mod decoder;
mod frames;
mod generic;
mod meta;
mod packets;
mod schema;
mod sort;
mod table;
mod wire;

use arrow_array::RecordBatch;

pub use meta::{Meta, Perfetto, Platform, PlatformCpu, Scalar};

/// Largest size a compressed block may inflate to: max(ratio x compressed size, floor), at most
/// `absolute` (bytes); the same rule and defaults as abtest's other readers (abtest/trace/limits.py).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub inflate_ratio: f64,
    pub inflate_floor: u64,
    pub inflated_bytes: u64,
}

impl Limits {
    /// Largest inflated size allowed for `compressed` bytes (see above).
    pub fn max_inflated(&self, compressed: usize) -> u64 {
        ((self.inflate_ratio * compressed as f64).min(u64::MAX as f64) as u64)
            .max(self.inflate_floor)
            .min(self.inflated_bytes)
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { inflate_ratio: 250.0, inflate_floor: 64 << 20, inflated_bytes: 8 << 30 }
    }
}

/// The trace cannot be decoded: byte offset, what was wrong and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub offset: usize,
    pub message: String,
    pub expected: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte offset {}: {}; expected {}", self.offset, self.message, self.expected)
    }
}

impl std::error::Error for Error {}

/// A decoded trace: (table name, columns) and the metadata.
pub struct Decoded {
    pub tables: Vec<(String, RecordBatch)>,
    pub meta: Meta,
}

/// Decode the perfetto trace in `data` (on the calling thread).
pub fn decode(data: &[u8], limits: Limits) -> Result<Decoded, Error> {
    let schema = schema::Schema::builtin();
    let mut d = decoder::Decoder::new(schema, limits);
    d.decode_trace(data, 0, 0).map_err(|e| Error {
        offset: e.offset,
        message: format!("corrupt perfetto protobuf: {}", e.msg),
        expected: "a serialized perfetto Trace (repeated TracePacket, field 1)".into(),
    })?;
    d.finish();
    if d.meta.packets == 0 {
        return Err(Error {
            offset: 0,
            message: "no TracePacket found".into(),
            expected: "at least one TracePacket".into(),
        });
    }
    let mut warnings = d.warnings.clone();
    let tables = frames::tables(&d, &mut warnings);
    Ok(Decoded { tables, meta: meta::build(&d.meta, warnings, schema) })
}
