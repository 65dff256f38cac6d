//! Mutation fuzzing of the decoders, run by `cargo test` (tests/tracedat.rs, tests/perfetto.rs): mutants
//! of the shared real traces (../shared/traces beside the repository, or $ABTEST_SHARED/traces): cut
//! short, bits flipped, ranges zeroed / copied / swapped / inserted, huge values written over length and
//! count fields. The rule: every mutant decodes or is refused with the decoder's error; anything else (a
//! panic), a decode slower than TIME_BOUND or a peak RSS growth above MEMORY_BOUND is a failure, whose
//! input is saved under $TMPDIR/abtest-fuzz-failures/ and named in the panic message.
//!
//! Settings (environment): ABTEST_FUZZ_SECONDS (per target, default 20; the CI runs the default, the
//! bench script bench/fuzz_native.sh longer), ABTEST_FUZZ_SEED (default: the clock; printed, so a run can
//! be repeated).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Slowest decode of one mutant accepted (the seeds decode in milliseconds).
pub const TIME_BOUND: Duration = Duration::from_secs(20);
/// Largest growth of the peak RSS during the decode of one mutant (the seeds need tens of MB).
pub const MEMORY_BOUND_KB: u64 = 1536 << 10;

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// A position, half the time in the first `head` bytes (where headers, sections and options are).
fn position(rng: &mut Rng, len: usize, head: usize) -> usize {
    if rng.below(2) == 0 {
        rng.below(head.min(len))
    } else {
        rng.below(len)
    }
}

/// One to three random mutations of `seed`.
pub fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    let head = (d.len() / 64).max(64 << 10);
    for _ in 0..1 + rng.below(3) {
        if d.is_empty() {
            break;
        }
        let len = d.len();
        let at = position(rng, len, head);
        let n = (1 + rng.below(4096)).min(len - at);
        match rng.below(7) {
            0 => d.truncate(at),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let p = position(rng, len, head);
                    d[p] ^= 1 << rng.below(8);
                }
            }
            2 => d[at..at + n].fill(0),
            3 => {
                let from = rng.below(len - n + 1);
                let chunk = d[from..from + n].to_vec();
                d[at..at + n].copy_from_slice(&chunk);
            }
            4 => {
                let other = rng.below(len - n + 1);
                let chunk = d[other..other + n].to_vec();
                let here = d[at..at + n].to_vec();
                d[at..at + n].copy_from_slice(&chunk);
                d[other..other + n].copy_from_slice(&here);
            }
            5 => {
                let values: [u64; 6] = [u64::MAX, 0xFFFF_FFFF, 0x7FFF_FFFF, 0x8000_0000, i64::MAX as u64, 1 << 40];
                let v = values[rng.below(values.len())];
                let bytes = if rng.below(2) == 0 { v.to_le_bytes() } else { v.to_be_bytes() };
                let w = [1, 2, 4, 8][rng.below(4)].min(len - at);
                d[at..at + w].copy_from_slice(&bytes[..w]);
            }
            _ => {
                let insert: Vec<u8> = (0..1 + rng.below(64)).map(|_| rng.next_u64() as u8).collect();
                d.splice(at..at, insert);
            }
        }
    }
    d
}

/// The shared real traces whose file name `keep` accepts.
pub fn seeds(keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut roots: Vec<PathBuf> =
        std::env::var("ABTEST_SHARED").map(|s| vec![PathBuf::from(s).join("traces")]).unwrap_or_default();
    roots.extend(manifest.ancestors().skip(2).map(|a| a.join("shared").join("traces")));
    let root =
        roots.into_iter().find(|r| r.is_dir()).expect("../shared/traces beside the repository (or $ABTEST_SHARED)");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).expect("traces dir").flatten() {
        for f in std::fs::read_dir(dir.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if keep(&name) {
                out.push((
                    format!("{}/{name}", dir.file_name().to_string_lossy()),
                    std::fs::read(f.path()).expect("read seed"),
                ));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no seed traces under {}", root.display());
    out
}

/// A `/proc/self/status` value in kB (VmRSS, VmHWM).
fn status_kb(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(key));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

fn save(target: &str, seed: u64, data: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join("abtest-fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{target}-{seed}.bin"));
    let _ = std::fs::write(&p, data);
    p
}

/// Fuzz `decode` (Ok(()) or Err(clean error text)) with mutants of `seeds` for ABTEST_FUZZ_SECONDS.
/// Returns (executions, refused); panics on the first failure (see the module docs).
pub fn run(target: &str, seeds: Vec<(String, Vec<u8>)>, decode: fn(&[u8]) -> Result<(), String>) -> (u64, u64) {
    let secs: u64 = std::env::var("ABTEST_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("ABTEST_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("fuzz {target}: {} seeds, {secs} s, ABTEST_FUZZ_SEED={seed}", seeds.len());
    let (runs, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let seeds = Arc::new(seeds);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut rng = Rng::new(seed);
    let (mut max_kb, mut max_time) = (0u64, Duration::ZERO);
    while Instant::now() < end {
        let case = rng.next_u64();
        let mut r = Rng::new(case);
        let (name, data) = &seeds[r.below(seeds.len())];
        let input = Arc::new(mutate(data, &mut r));
        // the peak RSS (VmHWM) restarts from the current RSS (Linux /proc/self/clear_refs)
        let base = status_kb("VmRSS:");
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let job = input.clone();
        std::thread::spawn(move || {
            let out = std::panic::catch_unwind(|| decode(&job));
            let _ = tx.send(out);
        });
        let fail = |why: String| -> ! {
            let p = save(target, case, &input);
            panic!("fuzz {target}: {why} on a mutant of {name} (case {case}, saved as {})", p.display());
        };
        match rx.recv_timeout(TIME_BOUND) {
            Err(_) => fail(format!("no result within {TIME_BOUND:?}")),
            Ok(Err(_)) => fail("the decoder panicked".into()),
            Ok(Ok(res)) => {
                if res.is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        max_time = max_time.max(t0.elapsed());
        let grew = status_kb("VmHWM:").saturating_sub(base);
        max_kb = max_kb.max(grew);
        if grew > MEMORY_BOUND_KB {
            fail(format!("peak RSS grew by {grew} kB (bound {MEMORY_BOUND_KB} kB)"));
        }
        runs.fetch_add(1, Ordering::Relaxed);
    }
    let (n, e) = (runs.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!(
        "fuzz {target}: {n} executions, {e} refused with an error, {} decoded, 0 failures; slowest {max_time:?}, \
         largest peak RSS growth {max_kb} kB",
        n - e
    );
    (n, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_per_case() {
        let seed: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        for case in 1..200u64 {
            let (a, b) = (mutate(&seed, &mut Rng::new(case)), mutate(&seed, &mut Rng::new(case)));
            assert_eq!(a, b);
        }
        assert_ne!(mutate(&seed, &mut Rng::new(3)), seed);
    }
}
