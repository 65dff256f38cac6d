//! Perfetto Trace -> columnar tables. A Trace is `repeated TracePacket packet = 1`.
//!
//! Decoded packets (field numbers of perfetto.protos.TracePacket): ftrace_events (1), process_tree (2),
//! clock_snapshot (6), timestamp (8), ftrace_stats (34), trace_stats (35), power_rails (40),
//! battery (38), sys_stats (7, cpufreq_khz only), previous_packet_dropped (42), system_info (45), compressed_packets (50, zlib),
//! timestamp_clock_id (58), cpu_info (67), zstd_compressed_packets (133).
//! Other packet kinds are counted per field number (meta "packets_not_decoded").
use std::io::Read;

use crate::compact::{self, CompactSwitch, CompactWaking};
use crate::generic::{decode_generic_fields, event_descriptor, generic_name};
use crate::packets::{self, Meta, ProcessTree, Rails};
use crate::schema::{EventSpec, Schema};
use crate::sort::{
    derive_prev, sort_compact_switch, sort_compact_waking, sort_rails, sort_table, waker_pids, PrevTask, Renames,
    Switches,
};
use crate::table::{Data, Interner, Table, COL_FLAGS, COL_PID};
use crate::wire::{err, DResult, DecodeError, Msg, Value};
use crate::Limits;
use rustc_hash::{FxHashMap, FxHashSet};

/// FtraceEvent field number of GenericFtraceEvent.
const GENERIC_EVENT_ID: u32 = 327;
const MAX_NESTING: u32 = 4;

pub struct Decoder<'s> {
    schema: &'s Schema,
    limits: Limits,
    pub tables: Vec<Table>,
    by_id: Vec<i32>,
    by_name: FxHashMap<Box<[u8]>, usize>,
    dyn_ids: FxHashMap<u32, usize>,
    pub strings: Interner,
    pub switch: CompactSwitch,
    pub waking: CompactWaking,
    pub prev: PrevTask,
    pub rails: Rails,
    pub procs: ProcessTree,
    pub meta: Meta,
    pub warnings: Vec<String>,
    /// tables of event ids outside the schema (one warning each)
    unknown_ids: FxHashMap<u32, usize>,
    sequences_seen: FxHashSet<u32>,
    event_spans: Vec<(usize, usize)>,
    scratch: Vec<(usize, String)>,
    packed: Vec<u64>,
    compact: compact::Scratch,
    /// absolute offset of the top-level TracePacket being read (or of the bytes being read as one)
    pub packet_start: usize,
    /// a compressed block exceeded its inflate limit (a limit, not damage: never read past)
    pub limit_hit: bool,
}

/// Packet fields that carry bookkeeping rather than data (not reported as "not decoded").
fn is_bookkeeping(field: u32) -> bool {
    matches!(field, 3 | 12 | 13 | 36 | 41 | 59 | 79 | 87 | 98 | 33 | 69)
}

impl<'s> Decoder<'s> {
    pub fn new(schema: &'s Schema, limits: Limits) -> Self {
        Decoder {
            schema,
            limits,
            tables: Vec::new(),
            by_id: vec![-1; schema.events.len()],
            by_name: FxHashMap::default(),
            dyn_ids: FxHashMap::default(),
            strings: Interner::default(),
            switch: CompactSwitch::default(),
            waking: CompactWaking::default(),
            prev: PrevTask::default(),
            rails: Rails::default(),
            procs: ProcessTree::default(),
            meta: Meta::default(),
            warnings: Vec::new(),
            unknown_ids: FxHashMap::default(),
            sequences_seen: FxHashSet::default(),
            event_spans: Vec::new(),
            scratch: Vec::new(),
            packed: Vec::new(),
            compact: compact::Scratch::default(),
            packet_start: 0,
            limit_hit: false,
        }
    }

    /// Walk a serialized Trace (`buf` starts at absolute offset `base`).
    pub fn decode_trace(&mut self, buf: &[u8], base: usize, depth: u32) -> DResult<()> {
        let mut m = Msg::new(buf, base);
        loop {
            let at = m.offset();
            if depth == 0 {
                self.packet_start = at;
            }
            let next = m.next_field().map_err(|e| {
                if depth == 0 && e.offset > at && e.offset <= at + 2 && e.msg.contains("remain") {
                    DecodeError {
                        offset: e.offset,
                        msg: format!(
                            "the TracePacket starting at byte {} is cut short ({}): file truncated?",
                            at, e.msg
                        ),
                    }
                } else {
                    e
                }
            })?;
            match next {
                None => break,
                Some((1, Value::Bytes(b, off))) => self.decode_packet(b, off, depth)?,
                Some((f, _)) => {
                    return err(
                        at,
                        format!("field {} at top level; expected TracePacket (field 1, length-delimited)", f),
                    )
                }
            }
        }
        Ok(())
    }

    fn decode_packet(&mut self, b: &[u8], off: usize, depth: u32) -> DResult<()> {
        self.meta.packets += 1;
        let mut m = Msg::new(b, off);
        let mut ts: Option<u64> = None;
        let mut clock_id: Option<u32> = None;
        let mut payloads: [Option<(u32, Value)>; 2] = [None, None];
        let mut np = 0;
        let mut seq: Option<u32> = None;
        let mut dropped_before = false;
        while let Some((num, v)) = m.next_field()? {
            match num {
                8 => ts = Some(v.as_u64()),
                58 => clock_id = Some(v.as_u64() as u32),
                10 => seq = Some(v.as_u64() as u32),
                42 => dropped_before = v.as_u64() != 0,
                // sys_stats (7): only cpufreq_khz is read, so it also stays counted as not decoded
                7 | 1 | 2 | 6 | 34 | 35 | 38 | 40 | 45 | 50 | 67 | 133 => {
                    if num == 7 {
                        *self.meta.packets_not_decoded.entry(7).or_insert(0) += 1;
                    }
                    if np < 2 {
                        payloads[np] = Some((num, v));
                        np += 1;
                    }
                }
                f if is_bookkeeping(f) => {}
                f => *self.meta.packets_not_decoded.entry(f).or_insert(0) += 1,
            }
        }
        // perfetto also flags the first packet of every sequence (nothing precedes it): not a loss
        let first_on_seq = match seq {
            Some(id) => self.sequences_seen.insert(id),
            None => false,
        };
        if dropped_before && !first_on_seq {
            self.meta.previous_packet_dropped += 1;
        }
        if let Some(c) = clock_id {
            if !self.meta.packet_clock_ids.contains(&c) {
                self.meta.packet_clock_ids.push(c);
            }
        }
        for p in payloads.iter().take(np) {
            let (num, v) = p.unwrap();
            let (pb, poff) = match v {
                Value::Bytes(pb, poff) => (pb, poff),
                _ => return err(off, format!("TracePacket field {} is not length-delimited", num)),
            };
            match num {
                1 => self.decode_bundle(pb, poff)?,
                2 => packets::process_tree(pb, poff, &mut self.procs)?,
                6 => packets::clock_snapshot(pb, poff, &mut self.meta)?,
                34 => packets::ftrace_stats(pb, poff, &mut self.meta)?,
                35 => packets::trace_stats(pb, poff, &mut self.meta)?,
                40 => packets::power_rails(pb, poff, ts, clock_id, &mut self.rails, &mut self.warnings)?,
                45 => packets::system_info(pb, poff, &mut self.meta)?,
                67 => packets::cpu_info(pb, poff, &mut self.meta, &mut self.packed)?,
                38 => self.decode_battery(pb, poff, ts)?,
                7 => self.decode_sys_stats(pb, poff, ts)?,
                50 | 133 => self.decode_compressed(pb, poff, num == 133, depth)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// compressed_packets (zlib) / zstd_compressed_packets: inflated (at most `Limits::max_inflated` of
    /// its size) and walked as a Trace.
    fn decode_compressed(&mut self, b: &[u8], off: usize, zstd: bool, depth: u32) -> DResult<()> {
        let kind = if zstd { "zstd_compressed_packets" } else { "compressed_packets (zlib)" };
        if depth >= MAX_NESTING {
            return err(off, format!("{kind} nested more than {MAX_NESTING} deep"));
        }
        self.meta.compressed_blocks += 1;
        let limit = self.limits.max_inflated(b.len());
        let mut out = Vec::with_capacity((b.len() * 4).min(limit as usize));
        let res = if zstd {
            zstd::stream::read::Decoder::new(b).and_then(|d| d.take(limit.saturating_add(1)).read_to_end(&mut out))
        } else {
            flate2::read::ZlibDecoder::new(b).take(limit.saturating_add(1)).read_to_end(&mut out)
        };
        if let Err(e) = res {
            return err(off, format!("corrupt {kind}: {e}"));
        }
        if out.len() as u64 > limit {
            self.limit_hit = true;
            return err(
                off,
                format!(
                "{kind} of {} bytes inflates beyond {limit} bytes, the limit for its size (max(ratio {} x compressed \
                 size, floor {}), at most {}; settings ABTEST_MAX_INFLATE_RATIO / _FLOOR_BYTES, \
                 ABTEST_MAX_INFLATED_BYTES): a decompression bomb or an unusually large block",
                b.len(), self.limits.inflate_ratio, self.limits.inflate_floor, self.limits.inflated_bytes),
            );
        }
        self.decode_trace(&out, 0, depth + 1).map_err(|e| DecodeError {
            offset: off,
            msg: format!("inside {} (offset {} of the {} decompressed bytes): {}", kind, e.offset, out.len(), e.msg),
        })
    }

    /// BatteryCounters (packet field 38) -> table battery_counters (ts = packet timestamp, cpu = -1).
    fn decode_battery(&mut self, b: &[u8], off: usize, ts: Option<u64>) -> DResult<()> {
        let Some(ts) = ts else {
            return err(off, "BatteryCounters packet without a timestamp");
        };
        let ti = self.table_by_name(b"battery_counters", Some(&packets::battery_spec()));
        let t = &mut self.tables[ti];
        let row = t.rows();
        t.decode_fields(row, &mut Msg::new(b, off), &mut self.strings, &mut self.scratch)?;
        t.push_row(ts as i64, -1);
        Ok(())
    }

    /// SysStats cpufreq_khz -> table cpu_frequency_polled, one row per CPU: ts = packet timestamp (as
    /// trace_processor times it), cpu = position in the list, frequency_khz.
    fn decode_sys_stats(&mut self, b: &[u8], off: usize, ts: Option<u64>) -> DResult<()> {
        let mut khz = std::mem::take(&mut self.packed);
        packets::cpufreq_khz(b, off, &mut khz)?;
        match (khz.is_empty(), ts) {
            (true, _) => {}
            (false, None) => {
                let w = "sys_stats packets without a timestamp: their cpufreq_khz samples were skipped".to_string();
                if !self.warnings.contains(&w) {
                    self.warnings.push(w);
                }
            }
            (false, Some(ts)) => {
                let spec = EventSpec {
                    name: "cpu_frequency_polled".to_string(),
                    fields: vec![crate::schema::FieldSpec::from_proto(1, "frequency_khz", "uint32", false)],
                };
                let ti = self.table_by_name(b"cpu_frequency_polled", Some(&spec));
                let t = &mut self.tables[ti];
                let col = t.cols.iter().position(|c| c.spec.name == "frequency_khz").unwrap_or(0);
                for (cpu, &f) in khz.iter().enumerate() {
                    let row = t.rows();
                    t.cols[col].put_i64(row, f as i64);
                    t.push_row(ts as i64, cpu as i32);
                }
            }
        }
        self.packed = khz;
        Ok(())
    }

    // ---------------------------------------------------------------- ftrace bundles

    pub(crate) fn table_by_name(&mut self, name: &[u8], spec: Option<&EventSpec>) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let idx = self.tables.len();
        self.tables.push(Table::new(&String::from_utf8_lossy(name), spec));
        self.by_name.insert(name.into(), idx);
        idx
    }

    #[inline]
    fn table_for_id(&mut self, id: u32) -> usize {
        if !self.dyn_ids.is_empty() {
            if let Some(&t) = self.dyn_ids.get(&id) {
                return t;
            }
        }
        let i = id as usize;
        if i < self.by_id.len() && self.by_id[i] >= 0 {
            return self.by_id[i] as usize;
        }
        let schema = self.schema;
        let idx = match schema.events.get(i).and_then(|s| s.as_ref()) {
            Some(spec) => self.table_by_name(spec.name.as_bytes(), Some(spec)),
            None => {
                if let Some(&t) = self.unknown_ids.get(&id) {
                    return t;
                }
                self.warnings.push(format!(
                    "ftrace event with FtraceEvent field id {} is not in abtest's perfetto schema: \
                     kept as table ftrace_event_{} with raw field_<n> columns",
                    id, id
                ));
                let t = self.table_by_name(format!("ftrace_event_{}", id).as_bytes(), None);
                self.unknown_ids.insert(id, t);
                t
            }
        };
        if i < self.by_id.len() {
            self.by_id[i] = idx as i32;
        }
        idx
    }

    fn decode_bundle(&mut self, b: &[u8], off: usize) -> DResult<()> {
        let mut m = Msg::new(b, off);
        let mut cpu: Option<i32> = None;
        let mut lost = false;
        let mut compact: Option<(&[u8], usize)> = None;
        self.event_spans.clear();
        while let Some((num, v)) = m.next_field()? {
            match num {
                1 => cpu = Some(v.as_u64() as i32),
                2 => match v {
                    Value::Bytes(eb, eoff) => self.event_spans.push((eoff - off, eb.len())),
                    _ => return err(off, "FtraceEventBundle.event is not length-delimited"),
                },
                3 => lost |= v.as_u64() != 0,
                4 => {
                    if let Value::Bytes(cb, coff) = v {
                        compact = Some((cb, coff));
                    }
                }
                5 => {
                    let c = v.as_u64() as i32;
                    if !self.meta.ftrace_clocks.contains(&c) {
                        self.meta.ftrace_clocks.push(c);
                    }
                }
                8 => self.meta.ftrace_errors += 1,
                11 => {
                    if let Value::Bytes(db, doff) = v {
                        if let Some((id, spec)) = event_descriptor(db, doff)? {
                            let t = self.table_by_name(spec.name.as_bytes(), Some(&spec));
                            self.dyn_ids.insert(id, t);
                        }
                    }
                }
                _ => {}
            }
        }
        // proto2 default: a writer may leave out cpu 0
        let cpu = cpu.unwrap_or_else(|| {
            self.meta.bundles_without_cpu += 1;
            0
        });
        if lost {
            *self.meta.bundles_lost_per_cpu.entry(cpu).or_insert(0) += 1;
        }
        let spans = std::mem::take(&mut self.event_spans);
        for &(start, len) in &spans {
            self.decode_event(&b[start..start + len], off + start, cpu)?;
        }
        self.event_spans = spans;
        if let Some((cb, coff)) = compact {
            compact::decode(cb, coff, cpu, &mut self.strings, &mut self.compact, &mut self.switch, &mut self.waking)?;
        }
        Ok(())
    }

    fn decode_event(&mut self, b: &[u8], off: usize, cpu: i32) -> DResult<()> {
        let mut m = Msg::new(b, off);
        let mut ts: Option<u64> = None;
        let mut pid: Option<u64> = None;
        let mut flags: Option<u64> = None;
        let mut payload: Option<(u32, Value)> = None;
        while let Some((num, v)) = m.next_field()? {
            match num {
                1 => ts = Some(v.as_u64()),
                2 => pid = Some(v.as_u64()),
                5 => flags = Some(v.as_u64()),
                _ => payload = Some((num, v)),
            }
        }
        let Some((id, v)) = payload else {
            self.meta.events_without_payload += 1;
            return Ok(());
        };
        let Some(ts) = ts else {
            self.meta.events_without_timestamp += 1;
            return Ok(());
        };
        let Value::Bytes(pb, poff) = v else {
            return err(off, format!("FtraceEvent field {} (the event) is not length-delimited", id));
        };
        let generic = id == GENERIC_EVENT_ID && !self.dyn_ids.contains_key(&id);
        let ti = if generic {
            match generic_name(pb, poff)? {
                Some(name) => self.table_by_name(name, None),
                None => {
                    self.meta.events_without_payload += 1;
                    return Ok(());
                }
            }
        } else {
            self.table_for_id(id)
        };
        let t = &mut self.tables[ti];
        let row = t.rows();
        let mut em = Msg::new(pb, poff);
        if generic {
            decode_generic_fields(t, row, &mut em, &mut self.strings)?;
        } else {
            t.decode_fields(row, &mut em, &mut self.strings, &mut self.scratch)?;
        }
        if let Some(p) = pid {
            t.cols[COL_PID].put_i64(row, p as i64);
        }
        if let Some(f) = flags {
            t.cols[COL_FLAGS].put_i64(row, f as i64);
        }
        t.push_row(ts as i64, cpu);
        Ok(())
    }

    /// Pad columns, sort every table by ts (stable), derive compact prev_* and compact wakers.
    pub fn finish(&mut self) {
        for t in &mut self.tables {
            t.finish_written();
            if !t.unknown_fields.is_empty() {
                let mut u = t.unknown_fields.clone();
                u.sort_unstable();
                u.dedup();
                self.warnings.push(format!(
                    "{}: field numbers {:?} are not in abtest's perfetto schema; kept as field_<n> columns",
                    t.name, u
                ));
            }
            if t.dropped_values > 0 {
                self.warnings.push(format!(
                    "{}: {} field values not kept: the table reached its limit of {} columns (fields outside \
                     abtest's perfetto schema)",
                    t.name,
                    t.dropped_values,
                    crate::table::MAX_COLUMNS
                ));
            }
        }
        let renames = Renames::from_table(self.tables.iter().find(|t| t.name == "task_rename"));
        sort_compact_switch(&mut self.switch);
        sort_compact_waking(&mut self.waking);
        sort_rails(&mut self.rails);
        for t in self.tables.iter_mut() {
            sort_table(t);
        }
        // both derivations read the sorted switches
        derive_wakers(&mut self.waking, &self.switch, &self.tables);
        self.prev = derive_prev(&self.switch, &renames);
    }
}

/// common_pid of compact sched_waking rows: see `perfetto_sort::waker_pids`.
fn derive_wakers(w: &mut CompactWaking, s: &CompactSwitch, tables: &[Table]) {
    if w.ts.is_empty() {
        return;
    }
    let mut sources: Vec<Switches> = Vec::new();
    if !s.ts.is_empty() {
        sources.push((&s.ts, &s.cpu, &s.next_pid, None));
    }
    if let Some(t) = tables.iter().find(|t| t.name == "sched_switch") {
        if let Some(c) = t.cols.iter().find(|c| c.spec.name == "next_pid" && c.data.len() == t.rows()) {
            if let Data::I32(v) = &c.data {
                sources.push((&t.ts, &t.cpu, v, c.valid.as_deref()));
            }
        }
    }
    let (pid, valid) = waker_pids(&w.ts, &w.cpu, &sources);
    w.waker_pid = pid;
    w.waker_valid = valid;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_packets_stop_at_the_limit() {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![0u8; 1 << 20]).unwrap();
        let block = z.finish().unwrap();
        let varint = |mut n: usize, out: &mut Vec<u8>| {
            while n >= 0x80 {
                out.push((n as u8) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
        };
        let ld = |field: usize, p: &[u8]| {
            let mut out = Vec::new();
            varint(field << 3 | 2, &mut out);
            varint(p.len(), &mut out);
            out.extend(p);
            out
        };
        let trace = ld(1, &ld(50, &block));
        let limits = Limits { inflate_ratio: 10.0, inflate_floor: 1000, inflated_bytes: 1 << 30 };
        let mut d = Decoder::new(Schema::builtin(), limits);
        let e = d.decode_trace(&trace, 0, 0).unwrap_err();
        assert!(e.msg.contains("inflates beyond") && e.msg.contains(&limits.max_inflated(block.len()).to_string()));
        assert!(e.offset > 0 && e.offset < 8);
    }
}
