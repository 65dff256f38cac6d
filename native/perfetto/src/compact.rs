//! CompactSched (FtraceEventBundle field 4): sched_switch / sched_waking as delta-encoded columns with an
//! intern table of comms (field numbers of perfetto.protos.FtraceEventBundle.CompactSched).

use crate::table::Interner;
use crate::wire::{bytes_of, err, packed_varints, DResult, DecodeError, Msg};

/// Switches: only the next task is stored; prev_* are derived after sorting (sort::derive_prev).
#[derive(Default)]
pub struct CompactSwitch {
    pub ts: Vec<i64>,
    pub cpu: Vec<i32>,
    pub prev_state: Vec<i64>,
    pub next_pid: Vec<i32>,
    pub next_prio: Vec<i32>,
    pub next_comm: Vec<u32>,
}

#[derive(Default)]
pub struct CompactWaking {
    pub ts: Vec<i64>,
    pub cpu: Vec<i32>,
    pub pid: Vec<i32>,
    pub target_cpu: Vec<i32>,
    pub prio: Vec<i32>,
    pub comm: Vec<u32>,
    pub common_flags: Vec<u32>,
    pub flags_valid: Vec<bool>,
    /// the waker (task running on `cpu`), derived after sorting (sort::waker_pids)
    pub waker_pid: Vec<i32>,
    pub waker_valid: Vec<bool>,
}

/// Scratch columns reused from bundle to bundle.
#[derive(Default)]
pub struct Scratch {
    cols: [Vec<u64>; 13],
    interned: Vec<u32>,
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

/// Decode one CompactSched message of CPU `cpu` (at offset `off`), appending to `sw` and `wk`.
#[allow(clippy::needless_range_loop)] // row i of several parallel columns
pub fn decode(
    b: &[u8],
    off: usize,
    cpu: i32,
    strings: &mut Interner,
    sc: &mut Scratch,
    sw: &mut CompactSwitch,
    wk: &mut CompactWaking,
) -> DResult<()> {
    let Scratch { cols, interned } = sc;
    for c in cols.iter_mut() {
        c.clear();
    }
    interned.clear();
    let mut m = Msg::new(b, off);
    while let Some((num, v)) = m.next_field()? {
        match num {
            5 => interned.push(strings.intern(bytes_of(&v))),
            1..=12 => packed_varints(&v, &mut cols[num as usize])?,
            _ => {}
        }
    }
    let n = same_lengths(
        &cols[..],
        off,
        (1, "switch_timestamp"),
        &[(2, "switch_prev_state"), (3, "switch_next_pid"), (4, "switch_next_prio"), (6, "switch_next_comm_index")],
    )?;
    let nw = same_lengths(
        &cols[..],
        off,
        (7, "waking_timestamp"),
        &[(8, "waking_pid"), (9, "waking_target_cpu"), (10, "waking_prio"), (11, "waking_comm_index")],
    )?;
    let comm = |idx: u64| -> DResult<u32> {
        interned.get(idx as usize).copied().ok_or_else(|| DecodeError {
            offset: off,
            msg: format!("CompactSched comm index {idx} outside its intern table of {} strings", interned.len()),
        })
    };
    let mut acc: u64 = 0;
    for i in 0..n {
        acc = acc.wrapping_add(cols[1][i]);
        sw.ts.push(acc as i64);
        sw.cpu.push(cpu);
        sw.prev_state.push(cols[2][i] as i64);
        sw.next_pid.push(cols[3][i] as i32);
        sw.next_prio.push(cols[4][i] as i32);
        sw.next_comm.push(comm(cols[6][i])?);
    }
    let has_flags = cols[12].len() == nw;
    let mut acc: u64 = 0;
    for i in 0..nw {
        acc = acc.wrapping_add(cols[7][i]);
        wk.ts.push(acc as i64);
        wk.cpu.push(cpu);
        wk.pid.push(cols[8][i] as i32);
        wk.target_cpu.push(cols[9][i] as i32);
        wk.prio.push(cols[10][i] as i32);
        wk.comm.push(comm(cols[11][i])?);
        wk.common_flags.push(if has_flags { cols[12][i] as u32 } else { 0 });
        wk.flags_valid.push(has_flags);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(field: u8, vals: &[u8]) -> Vec<u8> {
        [vec![field << 3 | 2, vals.len() as u8], vals.to_vec()].concat()
    }

    #[test]
    fn delta_timestamps_and_interned_comms() {
        let mut b = [packed(1, &[10, 5]), packed(2, &[0, 1]), packed(3, &[7, 8]), packed(4, &[120, 120])].concat();
        b.extend([0x2a, 1, b'x', 0x2a, 1, b'y']); // field 5: interned comms
        b.extend(packed(6, &[1, 0]));
        let (mut strings, mut sc) = (Interner::default(), Scratch::default());
        let (mut sw, mut wk) = (CompactSwitch::default(), CompactWaking::default());
        decode(&b, 0, 3, &mut strings, &mut sc, &mut sw, &mut wk).unwrap();
        assert_eq!((sw.ts.clone(), sw.cpu.clone(), sw.next_pid.clone()), (vec![10, 15], vec![3, 3], vec![7, 8]));
        assert_eq!(strings.values[sw.next_comm[0] as usize].as_ref(), b"y");
        b.extend(packed(1, &[1])); // one more timestamp than the other switch columns
        let e = decode(&b, 50, 3, &mut strings, &mut sc, &mut sw, &mut wk).unwrap_err();
        assert_eq!(e.offset, 50);
        assert!(e.msg.contains("switch_prev_state has 2 entries"), "{}", e.msg);
    }
}
