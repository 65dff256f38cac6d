//! Perfetto CompactSched (FtraceEventBundle field 4): sched_switch / sched_waking as delta-encoded
//! columns with an intern table of comms (field numbers of perfetto.protos.*, see docs/perfetto.md).
use crate::perfetto_decode::Decoder;
use crate::perfetto_wire::{bytes_of, err, packed_varints, DResult, DecodeError, Msg};

impl<'s> Decoder<'s> {
    /// CompactSched: delta-encoded switch / waking columns with an intern table of comms.
    pub(crate) fn decode_compact(&mut self, b: &[u8], off: usize, cpu: i32) -> DResult<()> {
        let mut cols = std::mem::take(&mut self.compact_cols);
        for c in cols.iter_mut() {
            c.clear();
        }
        let mut interned = std::mem::take(&mut self.compact_interned);
        interned.clear();
        let r = self.decode_compact_into(b, off, cpu, &mut cols, &mut interned);
        self.compact_cols = cols;
        self.compact_interned = interned;
        r
    }

    fn decode_compact_into(
        &mut self,
        b: &[u8],
        off: usize,
        cpu: i32,
        cols: &mut [Vec<u64>; 13],
        interned: &mut Vec<u32>,
    ) -> DResult<()> {
        let mut m = Msg::new(b, off);
        while let Some((num, v)) = m.next_field()? {
            match num {
                5 => interned.push(self.strings.intern(bytes_of(&v))),
                1..=12 => packed_varints(&v, &mut cols[num as usize])?,
                _ => {}
            }
        }
        let n = same_lengths(&cols[..], off, (1, "switch_timestamp"), &[
            (2, "switch_prev_state"),
            (3, "switch_next_pid"),
            (4, "switch_next_prio"),
            (6, "switch_next_comm_index"),
        ])?;
        let nw = same_lengths(&cols[..], off, (7, "waking_timestamp"), &[
            (8, "waking_pid"),
            (9, "waking_target_cpu"),
            (10, "waking_prio"),
            (11, "waking_comm_index"),
        ])?;
        let comm = |idx: u64, interned: &[u32]| -> DResult<u32> {
            interned.get(idx as usize).copied().ok_or_else(|| DecodeError {
                offset: off,
                msg: format!(
                    "CompactSched comm index {} outside its intern table of {} strings",
                    idx,
                    interned.len()
                ),
            })
        };
        let s = &mut self.switch;
        let mut acc: u64 = 0;
        for i in 0..n {
            acc = acc.wrapping_add(cols[1][i]);
            s.ts.push(acc as i64);
            s.cpu.push(cpu);
            s.prev_state.push(cols[2][i] as i64);
            s.next_pid.push(cols[3][i] as i32);
            s.next_prio.push(cols[4][i] as i32);
            s.next_comm.push(comm(cols[6][i], interned)?);
        }
        let w = &mut self.waking;
        let has_flags = cols[12].len() == nw;
        let mut acc: u64 = 0;
        for i in 0..nw {
            acc = acc.wrapping_add(cols[7][i]);
            w.ts.push(acc as i64);
            w.cpu.push(cpu);
            w.pid.push(cols[8][i] as i32);
            w.target_cpu.push(cols[9][i] as i32);
            w.prio.push(cols[10][i] as i32);
            w.comm.push(comm(cols[11][i], interned)?);
            w.common_flags.push(if has_flags { cols[12][i] as u32 } else { 0 });
            w.flags_valid.push(has_flags);
        }
        Ok(())
    }
}

/// Entries of the CompactSched column `first` (field number, name), after checking that each of the
/// `others` has as many (an error at `off` names the first that does not).
fn same_lengths(cols: &[Vec<u64>], off: usize, first: (usize, &str), others: &[(usize, &str)]) -> DResult<usize> {
    let n = cols[first.0].len();
    for &(f, what) in others {
        if cols[f].len() != n {
            return err(off, format!("CompactSched {} has {} entries, {} has {}", what, cols[f].len(), first.1, n));
        }
    }
    Ok(n)
}
