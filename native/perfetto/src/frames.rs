//! The decoder's columns as Arrow tables, in the reader conventions of abtest/trace/schema.py.
//!
//! - an event table: ts (Int64 ns), cpu (Int32, the bundle's CPU; `buffer_cpu` when the event has its
//!   own `cpu` field), common_pid (Int32, FtraceEvent.pid), common_flags (UInt32, when some event has
//!   it), then the event's fields (a name already taken gets `_field`); strings are Utf8, task and rail
//!   names Dictionary (polars Categorical), repeated fields lists; absent values are nulls;
//! - CompactSched rows join sched_switch / sched_waking (after the full events' rows; the readers' common
//!   step orders every table by ts, ties in that order): prev_* of a compact switch are the next_* of the
//!   previous switch on that CPU (null for the first), common_pid the same prev_pid; the waker of a compact
//!   waking is the task running on its CPU (sort.rs);
//! - power_rail: ts (energy_data.timestamp_ms in ns; the packet time when absent), rail, subsystem (from
//!   the rail_descriptor of that index, first one wins), energy_uj (Float64, cumulative uWs = uJ as
//!   sampled), packet_ts (null when the packet had no timestamp), rail_index;
//! - battery_counters has no cpu; cpu_frequency_polled's frequency_khz is Int64 like cpu_frequency's;
//! - process (ProcessTree packets; no ts: it describes the system): one row per pid, sorted by pid, in the
//!   shape of the text readers' ps listings (abtest/trace/text_process.py): pid (Int32: process or thread
//!   id), tgid (Int32: = pid for a process), ppid (Int32: the process's parent, for a thread its
//!   process's), name (Utf8: a process's cmdline[0], a thread's name; null when none), user (Utf8, null:
//!   ProcessTree has only the uid). A pid listed as a process and as a thread is the process's row.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{LargeListBuilder, LargeStringBuilder, PrimitiveBuilder, StringDictionaryBuilder};
use arrow_array::types::{Float64Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, LargeStringArray, RecordBatch,
    UInt32Array, UInt64Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Schema};

use crate::decoder::Decoder;
use crate::schema::{Kind, LIST_SEP};
use crate::table::{Column, Data, Interner};

/// String columns that repeat a few values (task names, rails): dictionary-encoded.
const CATEGORICAL: &[&str] = &[
    "comm",
    "prev_comm",
    "next_comm",
    "common_comm",
    "oldcomm",
    "newcomm",
    "parent_comm",
    "child_comm",
    "rail",
    "subsystem",
];

fn nulls(valid: Option<&[bool]>) -> Option<NullBuffer> {
    valid.map(|v| NullBuffer::from(v.to_vec())).filter(|n| n.null_count() > 0)
}

/// Text of interned string `id`.
fn text(strings: &Interner, id: u32) -> String {
    String::from_utf8_lossy(&strings.values[id as usize]).into_owned()
}

/// A string column: ids into the interner, nulls where not valid.
fn strings_array(name: &str, ids: &[u32], valid: Option<&[bool]>, strings: &Interner) -> ArrayRef {
    let texts = ids.iter().enumerate().map(|(i, &id)| valid.is_none_or(|v| v[i]).then(|| text(strings, id)));
    if CATEGORICAL.contains(&name) {
        let mut b = StringDictionaryBuilder::<UInt32Type>::new();
        texts.for_each(|t| b.append_option(t));
        return Arc::new(b.finish());
    }
    Arc::new(texts.collect::<LargeStringArray>())
}

/// A repeated field (its elements' text joined by LIST_SEP) as a list of `elem` values (an element that
/// does not parse is null).
fn list_array(ids: &[u32], valid: Option<&[bool]>, elem: Kind, strings: &Interner) -> ArrayRef {
    macro_rules! lists {
        ($values:expr, |$e:ident| $elem:expr) => {{
            let mut b = LargeListBuilder::new($values);
            for (i, &id) in ids.iter().enumerate() {
                if valid.is_some_and(|v| !v[i]) {
                    b.append(false);
                    continue;
                }
                for $e in text(strings, id).split(LIST_SEP) {
                    b.values().append_option($elem);
                }
                b.append(true);
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    match elem {
        Kind::Str => lists!(LargeStringBuilder::new(), |e| Some(e)),
        Kind::F64 => lists!(PrimitiveBuilder::<Float64Type>::new(), |e| e.parse().ok()),
        Kind::I32 | Kind::I64 => lists!(PrimitiveBuilder::<Int64Type>::new(), |e| e.parse().ok()),
        _ => lists!(PrimitiveBuilder::<UInt64Type>::new(), |e| e.parse().ok()),
    }
}

fn column_array(c: &Column, strings: &Interner) -> ArrayRef {
    let valid = c.valid.as_deref();
    let n = nulls(valid);
    match &c.data {
        Data::Str(ids) if c.spec.repeated => list_array(ids, valid, c.spec.elem, strings),
        Data::Str(ids) => strings_array(&c.spec.name, ids, valid, strings),
        Data::I32(v) => Arc::new(Int32Array::new(v.clone().into(), n)),
        Data::I64(v) => Arc::new(Int64Array::new(v.clone().into(), n)),
        Data::U32(v) => Arc::new(UInt32Array::new(v.clone().into(), n)),
        Data::U64(v) => Arc::new(UInt64Array::new(v.clone().into(), n)),
        Data::F64(v) => Arc::new(Float64Array::new(v.clone().into(), n)),
        Data::Bool(v) => Arc::new(BooleanArray::new(v.iter().copied().collect(), n)),
    }
}

/// Named columns -> record batch (nullable where a column has nulls).
fn batch(cols: Vec<(String, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> =
        cols.iter().map(|(n, a)| Field::new(n, a.data_type().clone(), a.null_count() > 0)).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols.into_iter().map(|c| c.1).collect())
        .expect("columns of the table's length")
}

fn i32s(v: &[i32]) -> ArrayRef {
    Arc::new(Int32Array::from(v.to_vec()))
}

fn ts_array(v: &[i64]) -> ArrayRef {
    Arc::new(Int64Array::from(v.to_vec()))
}

/// One decoded event table.
fn event_table(t: &crate::table::Table, strings: &Interner) -> Vec<(String, ArrayRef)> {
    let written: Vec<&Column> = t.cols.iter().filter(|c| c.written()).collect();
    let own_cpu = written.iter().any(|c| c.spec.name == "cpu");
    let mut out = vec![
        ("ts".to_string(), ts_array(&t.ts)),
        ((if own_cpu { "buffer_cpu" } else { "cpu" }).to_string(), i32s(&t.cpu)),
    ];
    for c in written {
        let mut name = c.spec.name.clone();
        if out.iter().any(|(n, _)| *n == name) {
            name.push_str("_field");
        }
        let mut a = column_array(c, strings);
        if t.name == "cpu_frequency_polled" && name == "frequency_khz" {
            a = arrow_cast::cast(&a, &DataType::Int64).expect("u32 to i64");
        }
        out.push((name, a));
    }
    if t.name == "battery_counters" {
        out.retain(|(n, _)| n != "cpu"); // a device-wide counter
    }
    out
}

/// `b`'s rows after `a`'s; columns: `a`'s, then `b`'s others; absent values null; a column of two
/// types takes the wider integer type, or text.
fn concat(a: Vec<(String, ArrayRef)>, b: Vec<(String, ArrayRef)>) -> Vec<(String, ArrayRef)> {
    let (na, nb) = (a[0].1.len(), b[0].1.len());
    let mut names: Vec<String> = a.iter().map(|c| c.0.clone()).collect();
    names.extend(b.iter().map(|c| c.0.clone()).filter(|n| !a.iter().any(|c| c.0 == *n)));
    let get = |cols: &[(String, ArrayRef)], n: &str| cols.iter().find(|c| c.0 == n).map(|c| c.1.clone());
    names
        .into_iter()
        .map(|name| {
            let (x, y) = (get(&a, &name), get(&b, &name));
            let t = match (&x, &y) {
                (Some(x), Some(y)) => common_type(x.data_type(), y.data_type()),
                (Some(x), None) => x.data_type().clone(),
                (None, Some(y)) => y.data_type().clone(),
                (None, None) => DataType::Null,
            };
            let fit = |v: Option<ArrayRef>, len: usize| -> ArrayRef {
                match v {
                    Some(v) if v.data_type() == &t => v,
                    Some(v) => arrow_cast::cast(&v, &t).unwrap_or_else(|_| new_null_array(&t, len)),
                    None => new_null_array(&t, len),
                }
            };
            let (x, y) = (fit(x, na), fit(y, nb));
            let joined = arrow_select::concat::concat(&[x.as_ref(), y.as_ref()]).expect("columns of one type");
            (name, joined)
        })
        .collect()
}

fn common_type(x: &DataType, y: &DataType) -> DataType {
    use DataType::*;
    if x == y {
        return x.clone();
    }
    let rank = |t: &DataType| match t {
        Int32 | UInt32 => 1,
        Int64 => 2,
        UInt64 => 3,
        Float64 => 4,
        _ => 0,
    };
    match (rank(x), rank(y)) {
        (0, _) | (_, 0) => LargeUtf8,
        (a, b) if a >= b => x.clone(),
        _ => y.clone(),
    }
}

/// Compact sched_switch rows (sorted by ts; prev_* derived).
fn compact_switch(d: &Decoder) -> Vec<(String, ArrayRef)> {
    let (s, p) = (&d.switch, &d.prev);
    let valid = Some(&p.valid[..]);
    let n = nulls(valid);
    let prev_pid: ArrayRef = Arc::new(Int32Array::new(p.pid.clone().into(), n.clone()));
    vec![
        ("ts".into(), ts_array(&s.ts)),
        ("cpu".into(), i32s(&s.cpu)),
        ("common_pid".into(), prev_pid.clone()),
        ("prev_comm".into(), strings_array("prev_comm", &p.comm, valid, &d.strings)),
        ("prev_pid".into(), prev_pid),
        ("prev_prio".into(), Arc::new(Int32Array::new(p.prio.clone().into(), n))),
        ("prev_state".into(), Arc::new(Int64Array::from(s.prev_state.clone()))),
        ("next_comm".into(), strings_array("next_comm", &s.next_comm, None, &d.strings)),
        ("next_pid".into(), i32s(&s.next_pid)),
        ("next_prio".into(), i32s(&s.next_prio)),
    ]
}

/// Compact sched_waking rows (sorted by ts; the waker derived).
fn compact_waking(d: &Decoder) -> Vec<(String, ArrayRef)> {
    let w = &d.waking;
    vec![
        ("ts".into(), ts_array(&w.ts)),
        ("cpu".into(), i32s(&w.cpu)),
        ("common_pid".into(), Arc::new(Int32Array::new(w.waker_pid.clone().into(), nulls(Some(&w.waker_valid))))),
        ("common_flags".into(), Arc::new(UInt32Array::new(w.common_flags.clone().into(), nulls(Some(&w.flags_valid))))),
        ("comm".into(), strings_array("comm", &w.comm, None, &d.strings)),
        ("pid".into(), i32s(&w.pid)),
        ("prio".into(), i32s(&w.prio)),
        ("target_cpu".into(), i32s(&w.target_cpu)),
    ]
}

/// Power rail samples joined with their descriptors; `warnings` gets the indices without one.
fn power_rail(d: &Decoder, warnings: &mut Vec<String>) -> Vec<(String, ArrayRef)> {
    let r = &d.rails;
    let mut desc: HashMap<u32, (&str, &str)> = HashMap::new();
    for x in &r.desc {
        desc.entry(x.index).or_insert((&x.name, &x.subsys));
    }
    let mut rail = StringDictionaryBuilder::<UInt32Type>::new();
    let mut subsystem = StringDictionaryBuilder::<UInt32Type>::new();
    let mut missing: Vec<u32> = Vec::new();
    for &i in &r.index {
        match desc.get(&i) {
            Some((n, s)) => {
                rail.append_value(n);
                subsystem.append_value(s);
            }
            None => {
                rail.append_null();
                subsystem.append_null();
                missing.push(i);
            }
        }
    }
    if !missing.is_empty() {
        missing.sort_unstable();
        missing.dedup();
        let list: Vec<String> = missing.iter().map(u32::to_string).collect();
        warnings.push(format!(
            "power_rails: energy samples for rail indices [{}] have no rail_descriptor (rail name null)",
            list.join(", ")
        ));
    }
    let packet_ts: Int64Array = r.packet_ts.iter().map(|&t| (t >= 0).then_some(t)).collect();
    vec![
        ("ts".into(), ts_array(&r.ts)),
        ("rail".into(), Arc::new(rail.finish()) as ArrayRef),
        ("subsystem".into(), Arc::new(subsystem.finish())),
        ("energy_uj".into(), Arc::new(Float64Array::from_iter_values(r.energy_uws.iter().map(|&e| e as f64)))),
        ("packet_ts".into(), Arc::new(packet_ts)),
        ("rail_index".into(), Arc::new(UInt32Array::from(r.index.clone()))),
    ]
}

/// The `process` table from the ProcessTree packets (see the module doc).
fn process(d: &Decoder) -> Vec<(String, ArrayRef)> {
    let t = &d.procs;
    let mut rows: Vec<(i32, i32, Option<i32>, Option<&str>)> = Vec::new();
    for (&pid, p) in &t.processes {
        rows.push((pid, pid, p.parent, p.name.as_deref()));
    }
    for (&tid, th) in &t.threads {
        if t.processes.contains_key(&tid) {
            continue;
        }
        let tgid = th.parent.unwrap_or(tid);
        let ppid = t.processes.get(&tgid).and_then(|p| p.parent);
        rows.push((tid, tgid, ppid, th.name.as_deref()));
    }
    rows.sort_unstable_by_key(|r| r.0);
    let n = rows.len();
    vec![
        ("pid".into(), Arc::new(rows.iter().map(|r| r.0).collect::<Int32Array>()) as ArrayRef),
        ("tgid".into(), Arc::new(rows.iter().map(|r| r.1).collect::<Int32Array>())),
        ("ppid".into(), Arc::new(rows.iter().map(|r| r.2).collect::<Int32Array>())),
        ("name".into(), Arc::new(rows.iter().map(|r| r.3).collect::<LargeStringArray>())),
        ("user".into(), new_null_array(&DataType::LargeUtf8, n)),
    ]
}

/// Every table of a finished decoder (in order: event tables as first met, then the compact rows, then
/// power_rail, then process); `warnings` gets the rails without a descriptor.
pub fn tables(d: &Decoder, warnings: &mut Vec<String>) -> Vec<(String, RecordBatch)> {
    let mut out: Vec<(String, Vec<(String, ArrayRef)>)> =
        d.tables.iter().filter(|t| !t.ts.is_empty()).map(|t| (t.name.clone(), event_table(t, &d.strings))).collect();
    let mut add = |name: &str, cols: Vec<(String, ArrayRef)>| match out.iter_mut().find(|(n, _)| n == name) {
        Some((_, existing)) => *existing = concat(std::mem::take(existing), cols),
        None => out.push((name.to_string(), cols)),
    };
    if !d.switch.ts.is_empty() {
        add("sched_switch", compact_switch(d));
    }
    if !d.waking.ts.is_empty() {
        add("sched_waking", compact_waking(d));
    }
    if !d.rails.ts.is_empty() {
        let cols = power_rail(d, warnings);
        out.push(("power_rail".into(), cols));
    }
    if !d.procs.processes.is_empty() || !d.procs.threads.is_empty() {
        out.push(("process".into(), process(d)));
    }
    out.into_iter().map(|(n, cols)| (n, batch(cols))).collect()
}
