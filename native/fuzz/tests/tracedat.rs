//! Fuzz target: the trace.dat decoder on mutants of every shared trace.dat (see the crate docs).

fn decode(data: &[u8]) -> Result<(), String> {
    let limits = tracedat::Limits { inflate_ratio: 250.0, inflate_floor: 64 << 20, inflated_bytes: 1 << 30 };
    let opts = tracedat::Options { limits, threads: 2, release_input: false };
    tracedat::decode(data, &opts).map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn fuzz_tracedat() {
    let (runs, _) = abtest_fuzz::run("tracedat", abtest_fuzz::seeds(|n| n.ends_with(".dat")), decode);
    assert!(runs > 0);
}
