//! Fuzz target: the trace.dat decoder on mutants of every shared trace.dat (see the crate docs). A mutant
//! that decodes is also decoded in rounds of a few pages (`decode_rounds`): unless the rounds give up (a
//! CPU's timestamps going backwards), they must emit every table's rows, timestamps in the whole decode's
//! order, and the same metadata counts.

use std::collections::BTreeMap;

use arrow_array::{Array, Int64Array, RecordBatch};

fn ts_of(batch: &RecordBatch) -> Vec<i64> {
    let col = batch.column_by_name("ts").expect("every table has ts");
    let ts = col.as_any().downcast_ref::<Int64Array>().expect("ts is Int64");
    ts.values().to_vec()
}

fn decode(data: &[u8]) -> Result<(), String> {
    let limits = tracedat::Limits { inflate_ratio: 250.0, inflate_floor: 64 << 20, inflated_bytes: 1 << 30 };
    let opts = tracedat::Options { limits, threads: 2, release_input: false, fields_of: None };
    let whole = tracedat::decode(data, &opts).map_err(|e| e.to_string())?;
    let sizes = tracedat::RoundSizes { piece_bytes: 8 << 10, round_bytes: 64 << 10 };
    let mut rounds: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let meta = tracedat::decode_rounds(data, &opts, sizes, &mut |tables, _| {
        for (name, batch) in tables {
            rounds.entry(name).or_default().extend(ts_of(&batch));
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let Some(meta) = meta else {
        return Ok(()); // timestamps go backwards on a CPU: decoded whole only
    };
    let expected: BTreeMap<String, Vec<i64>> = whole.tables.iter().map(|(n, b)| (n.clone(), ts_of(b))).collect();
    assert_eq!(rounds, expected, "rounds and the whole decode differ");
    assert_eq!((meta.records, meta.ring_buffer_pages), (whole.meta.records, whole.meta.ring_buffer_pages));
    assert_eq!(meta.lost_events, whole.meta.lost_events);
    Ok(())
}

#[test]
fn fuzz_tracedat() {
    let (runs, _) = abtest_fuzz::run("tracedat", abtest_fuzz::seeds(|n| n.ends_with(".dat")), decode);
    assert!(runs > 0);
}
