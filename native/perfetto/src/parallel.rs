//! Two-thread decoding of large traces (the default when the process may use >= 2 cores): the Trace is split at a TracePacket boundary near its
//! middle, each half is decoded by its own `Decoder`, and the second is appended to the first (file order is kept, so sorting ties still follow the file).
use crate::decoder::{Decoder, Inflate};
use crate::schema::Schema;
use crate::table::{Column, Data, Table};
use crate::wire::DResult;

/// Traces smaller than this are decoded on one thread.
const PARALLEL_MIN_BYTES: usize = 8 << 20;

/// Offset of the first top-level TracePacket starting at or after the middle of `buf`, or None
/// (small buffer, or anything unexpected: the single-threaded decoder then reports it).
fn split_point(buf: &[u8], two_threads: bool) -> Option<usize> {
    // two threads when the process may use two cores (measured on an otherwise idle 2-core machine:
    // native decode 168-196 -> 210-259 MB/s wall on 126 MB, docs/perfetto.md)
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let wanted = two_threads && cores >= 2;
    if !wanted || buf.len() < PARALLEL_MIN_BYTES {
        return None;
    }
    let half = buf.len() / 2;
    let mut pos = 0usize;
    while pos < half {
        if buf[pos] != 0x0a {
            return None;
        }
        pos += 1;
        let mut len: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *buf.get(pos)?;
            pos += 1;
            len |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
            if shift > 35 {
                return None;
            }
        }
        pos = pos.checked_add(len as usize)?;
    }
    (pos < buf.len()).then_some(pos)
}

/// Decode a whole Trace (two threads above PARALLEL_MIN_BYTES unless turned off) and finish it (sorted tables).
pub fn decode_all<'s>(buf: &[u8], schema: &'s Schema, inflate: Inflate, two_threads: bool) -> DResult<Decoder<'s>> {
    let mut d = match split_point(buf, two_threads) {
        None => {
            let mut d = Decoder::new(schema, inflate);
            d.decode_trace(buf, 0, 0)?;
            d
        }
        Some(mid) => {
            let (first, second) = std::thread::scope(|scope| {
                let later = scope.spawn(|| {
                    let mut d = Decoder::new(schema, inflate);
                    d.decode_trace(&buf[mid..], mid, 0).map(|_| d)
                });
                let mut d = Decoder::new(schema, inflate);
                let first = d.decode_trace(&buf[..mid], 0, 0).map(|_| d);
                (first, later.join().expect("decoding thread panicked"))
            });
            let mut d = first?; // the earliest error wins
            d.append(second?);
            d
        }
    };
    d.finish();
    Ok(d)
}

fn extend_valid(a: &mut Option<Vec<bool>>, a_len: usize, b: Option<Vec<bool>>, b_len: usize) {
    if a.is_none() && b.is_none() {
        return;
    }
    let m = a.get_or_insert_with(|| vec![true; a_len]);
    match b {
        Some(v) => m.extend(v),
        None => m.resize(a_len + b_len, true),
    }
}

/// Append column `b` (b_len rows, string ids already remapped) to `a` (a_len rows, padded).
fn append_column(a: &mut Column, a_len: usize, b: Column, b_len: usize) -> Result<(), Column> {
    match (&mut a.data, b.data) {
        (Data::I32(x), Data::I32(y)) => x.extend(y),
        (Data::I64(x), Data::I64(y)) => x.extend(y),
        (Data::U32(x), Data::U32(y)) => x.extend(y),
        (Data::U64(x), Data::U64(y)) => x.extend(y),
        (Data::Bool(x), Data::Bool(y)) => x.extend(y),
        (Data::F64(x), Data::F64(y)) => x.extend(y),
        (Data::Str(x), Data::Str(y)) => x.extend(y),
        (_, data) => {
            return Err(Column {
                spec: b.spec,
                data,
                valid: b.valid,
            })
        }
    }
    extend_valid(&mut a.valid, a_len, b.valid, b_len);
    Ok(())
}

fn append_table(a: &mut Table, mut b: Table, remap: &[u32]) {
    let (a_len, b_len) = (a.rows(), b.rows());
    a.finish();
    b.finish();
    for mut col in b.cols.drain(..) {
        if let Data::Str(ids) = &mut col.data {
            ids.iter_mut().for_each(|i| *i = remap[*i as usize]);
        }
        let pos = a.cols.iter().position(|c| c.spec.name == col.spec.name);
        let rejected = match pos {
            Some(p) => append_column(&mut a.cols[p], a_len, col, b_len).err(),
            None => Some(col),
        };
        if let Some(mut col) = rejected {
            // a column the first half did not have (or of another type): nulls for the first half's rows
            if pos.is_some() {
                col.spec.name = format!("{}_2", col.spec.name);
            }
            let mut spec = col.spec.clone();
            spec.number = 0; // field number already mapped in the first half, or unknown there
            let idx = a.add_column(spec);
            a.cols[idx].finish(a_len);
            append_column(&mut a.cols[idx], a_len, col, b_len).ok();
        }
    }
    a.ts.extend(b.ts);
    a.cpu.extend(b.cpu);
    a.unknown_fields.extend(b.unknown_fields);
    a.finish();
}

impl<'s> Decoder<'s> {
    /// Append the tables, rows and metadata of `b` (decoded from the bytes after ours). The tables are
    /// appended on two threads (split by row count; the compact sched and rail rows on this one).
    pub fn append(&mut self, mut b: Decoder<'s>) {
        let remap: Vec<u32> = b.strings.values.iter().map(|s| self.strings.intern(s)).collect();
        let mut incoming: Vec<Option<Table>> = Vec::new();
        for t in b.tables.drain(..) {
            let ai = self.table_by_name(t.name.as_bytes(), None);
            if incoming.len() <= ai {
                incoming.resize_with(ai + 1, || None);
            }
            incoming[ai] = Some(t);
        }
        let mut pairs: Vec<(&mut Table, Table)> = self
            .tables
            .iter_mut()
            .zip(incoming)
            .filter_map(|(a, b)| b.map(|b| (a, b)))
            .collect();
        pairs.sort_by_key(|(_, b)| std::cmp::Reverse(b.rows()));
        let total: usize = pairs.iter().map(|(_, b)| b.rows()).sum::<usize>() + b.switch.ts.len() + b.waking.ts.len();
        // the largest tables go to the other thread until it has about half of the rows
        let (mut theirs_rows, mut split) = (0usize, 0usize);
        while split < pairs.len() && 2 * (theirs_rows + pairs[split].1.rows()) <= total + pairs[split].1.rows() {
            theirs_rows += pairs[split].1.rows();
            split += 1;
        }
        let mine = pairs.split_off(split);
        let theirs = pairs;
        let remap = &remap;
        let (s, w, r) = (&mut self.switch, &mut self.waking, &mut self.rails);
        let (bs, bw, br) = (b.switch, b.waking, b.rails);
        std::thread::scope(|scope| {
            let handle = scope.spawn(move || {
                for (a, b) in theirs {
                    append_table(a, b, remap);
                }
            });
            for (a, b) in mine {
                append_table(a, b, remap);
            }
            s.ts.extend(bs.ts);
            s.cpu.extend(bs.cpu);
            s.prev_state.extend(bs.prev_state);
            s.next_pid.extend(bs.next_pid);
            s.next_prio.extend(bs.next_prio);
            s.next_comm.extend(bs.next_comm.iter().map(|&i| remap[i as usize]));
            w.ts.extend(bw.ts);
            w.cpu.extend(bw.cpu);
            w.pid.extend(bw.pid);
            w.target_cpu.extend(bw.target_cpu);
            w.prio.extend(bw.prio);
            w.comm.extend(bw.comm.iter().map(|&i| remap[i as usize]));
            w.common_flags.extend(bw.common_flags);
            w.flags_valid.extend(bw.flags_valid);
            r.desc.extend(br.desc);
            r.ts.extend(br.ts);
            r.index.extend(br.index);
            r.packet_ts.extend(br.packet_ts);
            r.energy_uws.extend(br.energy_uws);
            handle.join().expect("appending thread panicked")
        });
        self.append_meta(b.meta, &b.first_seen_dropped, b.sequences_seen);
        for w in b.warnings {
            if !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
    }

    fn append_meta(
        &mut self,
        b: crate::packets::Meta,
        first_seen_dropped: &[u32],
        seqs: crate::table::FnvMap<u32, ()>,
    ) {
        let m = &mut self.meta;
        // a sequence that started in the first half: its drop flag in the second half is a real loss
        m.previous_packet_dropped += first_seen_dropped
            .iter()
            .filter(|s| self.sequences_seen.contains_key(s))
            .count() as u64;
        for (k, _) in seqs {
            self.sequences_seen.insert(k, ());
        }
        m.system_info.extend(b.system_info);
        m.system_info_int.extend(b.system_info_int);
        m.utsname.extend(b.utsname);
        if !b.cpus.is_empty() {
            m.cpus = b.cpus;
        }
        m.ftrace_cpu_stats.extend(b.ftrace_cpu_stats);
        if !b.trace_loss.is_empty() {
            m.trace_loss = b.trace_loss;
        }
        for (cpu, n) in b.bundles_lost_per_cpu {
            *m.bundles_lost_per_cpu.entry(cpu).or_insert(0) += n;
        }
        m.bundles_without_cpu += b.bundles_without_cpu;
        m.ftrace_errors += b.ftrace_errors;
        for c in b.ftrace_clocks {
            if !m.ftrace_clocks.contains(&c) {
                m.ftrace_clocks.push(c);
            }
        }
        for c in b.packet_clock_ids {
            if !m.packet_clock_ids.contains(&c) {
                m.packet_clock_ids.push(c);
            }
        }
        for (f, n) in b.packets_not_decoded {
            *m.packets_not_decoded.entry(f).or_insert(0) += n;
        }
        m.packets += b.packets;
        m.compressed_blocks += b.compressed_blocks;
        m.previous_packet_dropped += b.previous_packet_dropped;
        m.events_without_timestamp += b.events_without_timestamp;
        m.events_without_payload += b.events_without_payload;
        m.clock_snapshots.extend(b.clock_snapshots);
    }
}
