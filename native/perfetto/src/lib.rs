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

pub use meta::{Damage, Meta, Perfetto, Platform, PlatformCpu, Scalar};

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
///
/// A trace whose packets are valid up to some byte and damaged after it (a capture interrupted while
/// writing, a stale tail left by an earlier, longer trace) keeps the packets before the first damaged one:
/// the file is decoded again up to that packet's start, and the metadata says from where the rest was not
/// read and why (`perfetto.damaged_from`, a warning). Damage in the first packet, and a compressed block
/// beyond its inflate limit (a limit, not damage), are errors.
pub fn decode(data: &[u8], limits: Limits) -> Result<Decoded, Error> {
    let schema = schema::Schema::builtin();
    let as_error = |e: wire::DecodeError| Error {
        offset: e.offset,
        message: format!("corrupt perfetto protobuf: {}", e.msg),
        expected: "a serialized perfetto Trace (repeated TracePacket, field 1)".into(),
    };
    let mut d = decoder::Decoder::new(schema, limits);
    let mut damage = None;
    if let Err(e) = d.decode_trace(data, 0, 0) {
        let start = d.packet_start;
        if start == 0 || d.limit_hit {
            return Err(as_error(e));
        }
        d = decoder::Decoder::new(schema, limits);
        d.decode_trace(&data[..start], 0, 0).map_err(as_error)?;
        d.meta.damaged_from = Some((start, e.offset, data.len() - start, e.msg.clone()));
        damage = Some(e);
    }
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
    if let Some(e) = damage {
        // packets that decode but carry no data before the damage: garbage that began like a packet
        if tables.iter().all(|(_, batch)| batch.num_rows() == 0) {
            return Err(as_error(e));
        }
    }
    Ok(Decoded { tables, meta: meta::build(&d.meta, warnings, schema) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TracePacket{timestamp = 5, battery = {charge_counter_uah = 100}}, framed as Trace.packet.
    const BATTERY_PACKET: [u8; 9] = [0x0a, 0x07, 0x40, 0x05, 0xb2, 0x02, 0x02, 0x08, 0x64];

    #[test]
    fn damaged_tail_keeps_the_packets_before_it() {
        let mut data = BATTERY_PACKET.repeat(2);
        data.extend_from_slice(&[0x12, 0x05, 0x01]); // field 2 at top level: not a TracePacket
        let d = decode(&data, Limits::default()).unwrap();
        let (_, battery) = d.tables.iter().find(|(n, _)| n == "battery_counters").unwrap();
        assert_eq!(battery.num_rows(), 2);
        let damage = d.meta.perfetto.damaged_from.unwrap();
        assert_eq!((damage.offset, damage.damage_offset, damage.bytes_not_read), (18, 19, 3));
        assert!(d.meta.warnings.iter().any(|w| w.contains("damaged from byte 18")));
    }

    #[test]
    fn damage_in_the_first_packet_or_before_any_data_is_an_error() {
        let garbage = [0x12, 0x05, 0x01];
        assert!(decode(&garbage, Limits::default()).err().unwrap().offset <= 1);
        // a packet that decodes to no data, then garbage: nothing was read, the file is refused
        let mut data = vec![0x0a, 0x02, 0x40, 0x05];
        data.extend_from_slice(&garbage);
        assert!(decode(&data, Limits::default()).is_err());
    }

    fn ld(field: u8, payload: &[u8]) -> Vec<u8> {
        assert!(payload.len() < 128);
        let mut out = vec![field << 3 | 2, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn process_tree_becomes_the_process_table() {
        use arrow_array::{Array, Int32Array, LargeStringArray};
        // Process{pid 10, ppid 1, cmdline ["/vendor/bin/hw/hal", "-x"]}; Thread{tid 11, name "hal_worker", tgid 10};
        // Thread{tid 12, name "old", tgid 10}, then in a later packet Thread{tid 12, name "new", tgid 10}
        let mut proc10 = vec![0x08, 10, 0x10, 1];
        proc10.extend(ld(3, b"/vendor/bin/hw/hal"));
        proc10.extend(ld(3, b"-x"));
        let mut t11 = vec![0x08, 11];
        t11.extend(ld(2, b"hal_worker"));
        t11.extend([0x18, 10]);
        let mut t12 = vec![0x08, 12, 0x18, 10];
        t12.extend(ld(2, b"old"));
        let mut tree = ld(1, &proc10);
        tree.extend(ld(2, &t11));
        tree.extend(ld(2, &t12));
        let mut later = vec![0x08, 12, 0x18, 10];
        later.extend(ld(2, b"new"));
        let mut data = ld(1, &ld(2, &tree));
        data.extend(ld(1, &ld(2, &ld(2, &later))));
        let d = decode(&data, Limits::default()).unwrap();
        let (_, t) = d.tables.iter().find(|(n, _)| n == "process").unwrap();
        let ints = |c: &str| t.column_by_name(c).unwrap().as_any().downcast_ref::<Int32Array>().unwrap().clone();
        let names = t.column_by_name("name").unwrap().as_any().downcast_ref::<LargeStringArray>().unwrap().clone();
        assert_eq!(ints("pid").values().to_vec(), vec![10, 11, 12]);
        assert_eq!(ints("tgid").values().to_vec(), vec![10, 10, 10]);
        assert_eq!(ints("ppid").values().to_vec(), vec![1, 1, 1]);
        assert_eq!((names.value(0), names.value(1), names.value(2)), ("/vendor/bin/hw/hal", "hal_worker", "new"));
        assert!(!d.meta.perfetto.packets_not_decoded.contains_key("process_tree"));
    }
}
