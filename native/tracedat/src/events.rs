//! Event types: which format text describes each event id, the columns its records fill, the table
//! they go to. Formats are parsed on first use (a file carries thousands; a trace uses a few dozen).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::columns::Spec;
use crate::format::{format_id, parse_event_format, EventFormat, Field, Kind};

/// How the records of one event id are decoded.
#[derive(Debug)]
pub struct EventType {
    pub id: u16,
    /// table name: the event name, `system:name` when two systems share it, `unknown_event_<id>`
    /// when the id has no usable format
    pub table: String,
    pub specs: Vec<Spec>,
    /// per spec: the field is declared `char *` (may point to a constant string of the printk formats)
    pub char_pointer: Vec<bool>,
    /// false: no usable format (records kept whole in `payload`)
    pub known: bool,
    /// why the format could not be used
    pub warning: Option<String>,
}

/// The file's event formats, indexed by id.
pub struct Events {
    /// (system, name, format text) by id; `order`: ids in order of first appearance
    index: HashMap<u64, (String, String, usize)>,
    texts: Vec<(String, String)>,
    name_counts: HashMap<String, usize>,
    /// ids per (system, name): more than one only in a damaged file (each then gets a table of its own)
    pair_counts: HashMap<(String, String), usize>,
    long_size: usize,
    /// common_type of every record: (offset, size)
    pub id_field: (usize, usize),
    unknown: Vec<Spec>,
    cache: Mutex<HashMap<u16, Arc<EventType>>>,
    /// formats in the file (distinct ids)
    pub count: usize,
}

/// common_pid first, then the event's own fields, then the other common_* fields; no common_type.
fn ordered(fields: &[Field]) -> Vec<&Field> {
    let f: Vec<&Field> = fields.iter().filter(|f| f.name != "common_type").collect();
    let pid = f.iter().copied().filter(|f| f.name == "common_pid");
    let own = f.iter().copied().filter(|f| !f.name.starts_with("common_"));
    let other = f.iter().copied().filter(|f| f.name.starts_with("common_") && f.name != "common_pid");
    pid.chain(own).chain(other).collect()
}

/// The column of field `f` of event `ev` (`long_size`: the kernel's long, for stack entries).
fn spec(ev: &EventFormat, f: &Field, long_size: usize) -> Spec {
    let mut s = Spec {
        name: f.name.clone(),
        offset: f.offset,
        size: f.size,
        kind: f.kind,
        signed: f.signed,
        elem: f.elem,
        aux_off: 0,
        aux_size: 0,
    };
    let ftrace = ev.system == "ftrace";
    match (ftrace, ev.name.as_str(), f.name.as_str(), f.kind) {
        (true, "bprint", "buf", _) => {
            if let Some(fmt) = ev.field("fmt") {
                (s.kind, s.aux_off, s.aux_size) = (Kind::BprintText, fmt.offset, fmt.size);
            }
        }
        (true, "bputs", "str", Kind::Int) => s.kind = Kind::PrintkStr,
        // trace_marker_raw writes binary data (declared `char buf[]`), kept as the record's bytes
        (true, "raw_data", "buf", Kind::TailStr) => s.kind = Kind::TailBin,
        // the format declares caller[8] (or a bare `caller`), the record holds `size` entries
        (true, "kernel_stack" | "user_stack", "caller", _) => {
            let count = ev.field("size");
            s.kind = Kind::TailList;
            s.size = 0;
            s.elem = if f.elem > 0 { f.elem } else { long_size };
            (s.aux_off, s.aux_size) = count.map_or((0, 0), |c| (c.offset, c.size));
        }
        // newer kernels store comm as __data_loc: the same dictionary column as char[16]
        (_, _, name, Kind::DataLocStr) if name == "comm" || name.ends_with("_comm") => s.kind = Kind::DataLocCat,
        _ => {}
    }
    s
}

/// Column names of a table must be distinct and must not take `ts` / the CPU column names: a field
/// that would is renamed `<name>_field` (only malformed or exotic formats have such fields).
fn distinct_names(specs: &mut [Spec]) {
    let mut taken: Vec<String> = vec!["ts".into(), "cpu".into(), "buffer_cpu".into(), "instance".into()];
    let own_cpu = specs.iter().any(|s| s.name == "cpu");
    if own_cpu {
        taken.retain(|n| n != "cpu");
    }
    for s in specs.iter_mut() {
        while taken.contains(&s.name) {
            s.name.push_str("_field");
        }
        taken.push(s.name.clone());
    }
}

impl Events {
    /// Index `formats` ((system, text), file order; a later text of the same id replaces an earlier).
    pub fn new(formats: Vec<(String, String)>, long_size: usize) -> Events {
        let mut index: HashMap<u64, (String, String, usize)> = HashMap::new();
        let mut order = Vec::new();
        for (i, (system, text)) in formats.iter().enumerate() {
            if let Some((id, name)) = format_id(text) {
                if index.insert(id, (system.clone(), name, i)).is_none() {
                    order.push(id);
                }
            }
        }
        let mut name_counts = HashMap::new();
        let mut pair_counts = HashMap::new();
        for (system, name, _) in index.values() {
            *name_counts.entry(name.clone()).or_insert(0) += 1;
            *pair_counts.entry((system.clone(), name.clone())).or_insert(0) += 1;
        }
        let mut ev = Events {
            count: index.len(),
            index,
            texts: formats,
            name_counts,
            pair_counts,
            long_size,
            id_field: (0, 2),
            unknown: Vec::new(),
            cache: Mutex::new(HashMap::new()),
        };
        // the common fields of records without a usable format come from the first format that parses
        let first = order.iter().find_map(|id| ev.parse(*id).ok());
        if let Some(first) = first {
            if let Some(ct) = first.field("common_type") {
                ev.id_field = (ct.offset, ct.size);
            }
            ev.unknown = ordered(&first.fields)
                .into_iter()
                .filter(|f| f.name.starts_with("common_"))
                .map(|f| spec(&first, f, long_size))
                .collect();
        }
        ev.unknown.push(Spec {
            name: "payload".into(),
            offset: 0,
            size: 0,
            kind: Kind::TailBin,
            signed: false,
            elem: 0,
            aux_off: 0,
            aux_size: 0,
        });
        distinct_names(&mut ev.unknown);
        ev
    }

    fn parse(&self, id: u64) -> Result<EventFormat, String> {
        let (system, _, i) = self.index.get(&id).ok_or("no format")?;
        parse_event_format(&self.texts[*i].1, system)
    }

    /// How records of event id `id` are decoded (parsed once, then shared).
    pub fn get(&self, id: u16) -> Arc<EventType> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.entry(id).or_insert_with(|| Arc::new(self.resolve(id))).clone()
    }

    fn resolve(&self, id: u16) -> EventType {
        let unknown = |warning| EventType {
            id,
            table: format!("unknown_event_{id}"),
            specs: self.unknown.clone(),
            char_pointer: vec![false; self.unknown.len()],
            known: false,
            warning,
        };
        let Some((system, name, _)) = self.index.get(&(id as u64)) else { return unknown(None) };
        let ev = match self.parse(id as u64) {
            Ok(ev) => ev,
            Err(e) => return unknown(Some(format!(
                "event {system}:{name} (id {id}) has an unparsable format ({e}); its records are kept as raw bytes in `payload`"))),
        };
        let fields = ordered(&ev.fields);
        let mut specs: Vec<Spec> = fields.iter().map(|f| spec(&ev, f, self.long_size)).collect();
        let char_pointer = fields.iter().zip(&specs).map(|(f, s)| f.is_char_pointer() && s.kind == Kind::Int).collect();
        distinct_names(&mut specs);
        let pair = (system.clone(), name.clone());
        let table = if self.pair_counts.get(&pair).copied().unwrap_or(0) > 1 {
            // two ids with one system and name (a damaged file): one table each, never one name for two tables
            format!("{system}:{name}#{id}")
        } else if self.name_counts.get(name).copied().unwrap_or(0) == 1 {
            name.clone()
        } else {
            format!("{system}:{name}")
        };
        EventType { id, table, specs, char_pointer, known: true, warning: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(name: &str, id: u32, fields: &str) -> String {
        format!("name: {name}\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n{fields}")
    }

    #[test]
    fn names_specs_and_unknown_ids() {
        let a = fmt("sched_switch", 5, "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:int cpu;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int ts;\toffset:28;\tsize:4;\tsigned:1;\n");
        let b = fmt("dup", 6, "");
        let c = fmt("dup", 7, "");
        let bad = "name: broken\nID: 8\n\tfield:int x;\toffset:zz;\n".to_string();
        let ev = Events::new(vec![("sched".into(), a), ("s1".into(), b), ("s2".into(), c), ("s3".into(), bad)], 8);
        assert_eq!(ev.count, 4);
        let t = ev.get(5);
        let names: Vec<_> = t.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["common_pid", "prev_comm", "cpu", "ts_field"]);
        assert_eq!(ev.get(6).table, "s1:dup");
        let u = ev.get(8);
        assert!(!u.known && u.warning.as_ref().unwrap().contains("unparsable"));
        assert_eq!(u.table, "unknown_event_8");
        assert_eq!(ev.get(99).specs.last().unwrap().name, "payload");
        assert_eq!(ev.id_field, (0, 2));
    }

    #[test]
    fn two_ids_with_one_system_and_name_get_a_table_each() {
        // a damaged file (a fuzz mutant of a real trace.dat): two formats named power:cpu_idle with different
        // ids; before, both went to one table name and a reader's dict kept only one of them
        let a = fmt("cpu_idle", 10, "");
        let b = fmt("cpu_idle", 11, "");
        let ev = Events::new(vec![("power".into(), a), ("power".into(), b)], 8);
        assert_eq!((ev.get(10).table.as_str(), ev.get(11).table.as_str()), ("power:cpu_idle#10", "power:cpu_idle#11"));
    }
}
