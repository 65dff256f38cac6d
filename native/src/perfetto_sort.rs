//! Ordering of decoded rows by timestamp (stable: ties keep file order), done once in the decoder so
//! that the Python side receives tables already sorted by ts (and flags them sorted).
use crate::perfetto_decode::{CompactSwitch, CompactWaking, Rails};
use crate::perfetto_tables::{Column, Data, Table};

/// Stable permutation that orders `ts` ascending, or None when it already is.
/// LSD radix sort on (ts - min): O(n) per pass, digits of at most 12 bits. When the span and the row
/// index fit together in 64 bits, each key carries its row index in its low bits (one array moved).
pub fn argsort_ts(ts: &[i64]) -> Option<Vec<u32>> {
    if ts.windows(2).all(|w| w[0] <= w[1]) {
        return None;
    }
    let n = ts.len();
    let min = *ts.iter().min().unwrap();
    let span = ts.iter().map(|&t| t.wrapping_sub(min) as u64).max().unwrap_or(0);
    let bits = 64 - span.leading_zeros();
    let idx_bits = 64 - ((n as u64).saturating_sub(1)).leading_zeros().min(63);
    if bits + idx_bits > 64 {
        return Some(argsort_pairs(ts, min, bits));
    }
    let mut keys: Vec<u64> = ts
        .iter()
        .enumerate()
        .map(|(i, &t)| ((t.wrapping_sub(min) as u64) << idx_bits) | i as u64)
        .collect();
    radix_passes(&mut keys, None, bits, idx_bits);
    let mask = (1u64 << idx_bits) - 1;
    Some(keys.iter().map(|&k| (k & mask) as u32).collect())
}

/// Fallback for spans too wide to share 64 bits with the row index: (key, index) moved together.
fn argsort_pairs(ts: &[i64], min: i64, bits: u32) -> Vec<u32> {
    let mut keys: Vec<u64> = ts.iter().map(|&t| t.wrapping_sub(min) as u64).collect();
    let mut idx: Vec<u32> = (0..ts.len() as u32).collect();
    radix_passes(&mut keys, Some(&mut idx), bits, 0);
    idx
}

/// Stable LSD radix sort of `keys` on bits [low, low + bits), carrying `idx` along when given.
fn radix_passes(keys: &mut Vec<u64>, mut idx: Option<&mut Vec<u32>>, bits: u32, low: u32) {
    let n = keys.len();
    // as few passes as digits of at most 12 bits allow (e.g. 3 passes for a 68 s span in ns)
    let passes = bits.div_ceil(12).max(1);
    let digit = bits.div_ceil(passes);
    let buckets = 1usize << digit;
    let mask = (buckets - 1) as u64;
    // histograms of every digit in one read of the keys
    let mut counts = vec![0usize; passes as usize * buckets];
    for &k in keys.iter() {
        for p in 0..passes {
            counts[p as usize * buckets + ((k >> (low + p * digit)) & mask) as usize] += 1;
        }
    }
    let mut keys2 = vec![0u64; n];
    let mut idx2 = if idx.is_some() { vec![0u32; n] } else { Vec::new() };
    for p in 0..passes {
        let shift = low + p * digit;
        let count = &mut counts[p as usize * buckets..(p as usize + 1) * buckets];
        if count.iter().any(|&c| c == n) {
            continue; // every key has the same digit: this pass would not move anything
        }
        let mut sum = 0;
        for c in count.iter_mut() {
            let here = *c;
            *c = sum;
            sum += here;
        }
        match idx.as_deref_mut() {
            None => {
                for &k in keys.iter() {
                    let d = ((k >> shift) & mask) as usize;
                    keys2[count[d]] = k;
                    count[d] += 1;
                }
            }
            Some(ix) => {
                for j in 0..n {
                    let k = keys[j];
                    let d = ((k >> shift) & mask) as usize;
                    keys2[count[d]] = k;
                    idx2[count[d]] = ix[j];
                    count[d] += 1;
                }
                std::mem::swap(ix, &mut idx2);
            }
        }
        std::mem::swap(keys, &mut keys2);
    }
}

/// Stable reorder of `perm` (row indices) grouped by cpu: per-CPU sequences in the order of `perm`.
fn group_by_cpu(perm: &[u32], cpu: &[i32]) -> Vec<u32> {
    let mut ids: Vec<i32> = cpu.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let bucket = |c: i32| ids.binary_search(&c).unwrap();
    let mut count = vec![0usize; ids.len() + 1];
    let dense: Vec<usize> = cpu.iter().map(|&c| bucket(c)).collect();
    for &d in &dense {
        count[d + 1] += 1;
    }
    for b in 0..ids.len() {
        count[b + 1] += count[b];
    }
    let mut out = vec![0u32; perm.len()];
    for &i in perm {
        let d = dense[i as usize];
        out[count[d]] = i;
        count[d] += 1;
    }
    out
}

#[inline]
fn gather<T: Copy>(v: &[T], perm: &[u32]) -> Vec<T> {
    perm.iter().map(|&i| v[i as usize]).collect()
}

fn permute_column(c: &mut Column, perm: &[u32]) {
    match &mut c.data {
        Data::I32(v) => *v = gather(v, perm),
        Data::I64(v) => *v = gather(v, perm),
        Data::U32(v) => *v = gather(v, perm),
        Data::U64(v) => *v = gather(v, perm),
        Data::Bool(v) => *v = gather(v, perm),
        Data::F64(v) => *v = gather(v, perm),
        Data::Str(v) => *v = gather(v, perm),
    }
    if let Some(m) = &mut c.valid {
        *m = gather(m, perm);
    }
}

/// Sort a finished table (columns padded to the row count) by ts.
pub fn sort_table(t: &mut Table) {
    if let Some(perm) = argsort_ts(&t.ts) {
        t.ts = gather(&t.ts, &perm);
        t.cpu = gather(&t.cpu, &perm);
        for c in &mut t.cols {
            permute_column(c, &perm);
        }
    }
}

/// prev_* of compact sched switches, filled by `sort_compact_switch` (valid = false: first on its CPU).
#[derive(Default)]
pub struct PrevTask {
    pub pid: Vec<i32>,
    pub prio: Vec<i32>,
    pub comm: Vec<u32>,
    pub valid: Vec<bool>,
}

/// Derive prev_* (the next_* of the previous switch on the same CPU, in ts order) and sort by ts.
pub fn sort_compact_switch(s: &mut CompactSwitch) -> PrevTask {
    let n = s.ts.len();
    let perm = argsort_ts(&s.ts).unwrap_or_else(|| (0..n as u32).collect());
    let mut prev = PrevTask {
        pid: vec![0; n],
        prio: vec![0; n],
        comm: vec![0; n],
        valid: vec![false; n],
    };
    let by_cpu = group_by_cpu(&perm, &s.cpu);
    let mut last: Option<u32> = None;
    for &i in &by_cpu {
        let i = i as usize;
        if let Some(p) = last {
            let p = p as usize;
            if s.cpu[p] == s.cpu[i] {
                prev.pid[i] = s.next_pid[p];
                prev.prio[i] = s.next_prio[p];
                prev.comm[i] = s.next_comm[p];
                prev.valid[i] = true;
            }
        }
        last = Some(i as u32);
    }
    if perm.iter().enumerate().any(|(k, &i)| k as u32 != i) {
        s.ts = gather(&s.ts, &perm);
        s.cpu = gather(&s.cpu, &perm);
        s.prev_state = gather(&s.prev_state, &perm);
        s.next_pid = gather(&s.next_pid, &perm);
        s.next_prio = gather(&s.next_prio, &perm);
        s.next_comm = gather(&s.next_comm, &perm);
        prev.pid = gather(&prev.pid, &perm);
        prev.prio = gather(&prev.prio, &perm);
        prev.comm = gather(&prev.comm, &perm);
        prev.valid = gather(&prev.valid, &perm);
    }
    prev
}

pub fn sort_compact_waking(w: &mut CompactWaking) {
    if let Some(perm) = argsort_ts(&w.ts) {
        w.ts = gather(&w.ts, &perm);
        w.cpu = gather(&w.cpu, &perm);
        w.pid = gather(&w.pid, &perm);
        w.target_cpu = gather(&w.target_cpu, &perm);
        w.prio = gather(&w.prio, &perm);
        w.comm = gather(&w.comm, &perm);
        w.common_flags = gather(&w.common_flags, &perm);
        w.flags_valid = gather(&w.flags_valid, &perm);
    }
}

pub fn sort_rails(r: &mut Rails) {
    if let Some(perm) = argsort_ts(&r.ts) {
        r.ts = gather(&r.ts, &perm);
        r.index = gather(&r.index, &perm);
        r.packet_ts = gather(&r.packet_ts, &perm);
        r.energy_uws = gather(&r.energy_uws, &perm);
    }
}
