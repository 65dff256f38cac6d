//! Fuzz target: the perfetto decoder on mutants of every shared perfetto trace (see the crate docs).

fn decode(data: &[u8]) -> Result<(), String> {
    let limits = perfetto::Limits { inflate_ratio: 250.0, inflate_floor: 64 << 20, inflated_bytes: 1 << 30 };
    perfetto::decode(data, limits).map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn fuzz_perfetto() {
    let keep = |n: &str| n.ends_with(".pb") || n.ends_with(".perfetto-trace");
    let (runs, _) = abtest_fuzz::run("perfetto", abtest_fuzz::seeds(keep), decode);
    assert!(runs > 0);
}
