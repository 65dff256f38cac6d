//! Perfetto GenericFtraceEvent (events without a typed proto, e.g. cpu_idle_miss, sched_pelt_*) and the
//! FtraceEventBundle's GenericEventDescriptors (field numbers of perfetto.protos.*, see docs/perfetto.md).
use crate::schema::{EventSpec, FieldSpec, Kind};
use crate::table::{Interner, Table};
use crate::wire::{bytes_of, string_of, DResult, Msg, Value};

/// GenericFtraceEvent: its event_name (field 1), the table it goes to; None when it has none.
pub fn generic_name(b: &[u8], off: usize) -> DResult<Option<&[u8]>> {
    let mut m = Msg::new(b, off);
    while let Some((num, v)) = m.next_field()? {
        if num == 1 {
            return Ok(Some(bytes_of(&v)));
        }
    }
    Ok(None)
}

/// FtraceEventBundle.GenericEventDescriptor: field_id (1) -> DescriptorProto (2) of an event.
pub fn event_descriptor(b: &[u8], off: usize) -> DResult<Option<(u32, EventSpec)>> {
    let mut m = Msg::new(b, off);
    let mut field_id: Option<u32> = None;
    let mut desc: Option<(&[u8], usize)> = None;
    while let Some((num, v)) = m.next_field()? {
        match (num, v) {
            (1, v) => field_id = Some(v.as_u64() as u32),
            (2, Value::Bytes(db, doff)) => desc = Some((db, doff)),
            _ => {}
        }
    }
    let (Some(id), Some((db, doff))) = (field_id, desc) else {
        return Ok(None);
    };
    let mut dm = Msg::new(db, doff);
    let mut name = String::new();
    let mut fields = Vec::new();
    while let Some((num, v)) = dm.next_field()? {
        match num {
            1 => name = string_of(&v),
            2 => {
                let Value::Bytes(fb, foff) = v else { continue };
                let mut fm = Msg::new(fb, foff);
                let (mut fname, mut number, mut label, mut ftype) = (String::new(), 0u32, 1u64, 9u64);
                while let Some((n2, v2)) = fm.next_field()? {
                    match n2 {
                        1 => fname = string_of(&v2),
                        3 => number = v2.as_u64() as u32,
                        4 => label = v2.as_u64(),
                        5 => ftype = v2.as_u64(),
                        _ => {}
                    }
                }
                if number > 0 {
                    fields.push(FieldSpec::from_proto(number, &fname, proto_type_name(ftype), label == 3));
                }
            }
            _ => {}
        }
    }
    if name.is_empty() {
        name = format!("ftrace_event_{id}");
    }
    Ok(Some((id, EventSpec { name, fields })))
}

/// GenericFtraceEvent.Field {name 1, str_value 3, int_value 4, uint_value 5} -> named columns.
pub fn decode_generic_fields(t: &mut Table, row: usize, m: &mut Msg, strings: &mut Interner) -> DResult<()> {
    while let Some((num, v)) = m.next_field()? {
        if num != 2 {
            continue;
        }
        let Some(mut fm) = Msg::from_value(&v) else { continue };
        let mut name: &[u8] = b"";
        let mut val: Option<(u32, Value)> = None;
        while let Some((n2, v2)) = fm.next_field()? {
            match n2 {
                1 => name = bytes_of(&v2),
                3..=5 => val = Some((n2, v2)),
                _ => {}
            }
        }
        let Some((kind_field, v2)) = val else { continue };
        let name = String::from_utf8_lossy(name);
        match kind_field {
            3 => {
                let Some(ci) = t.column_named(&name, Kind::Str) else { continue };
                let id = strings.intern(bytes_of(&v2));
                t.cols[ci].put_str(row, id);
            }
            4 => {
                let Some(ci) = t.column_named(&name, Kind::I64) else { continue };
                t.cols[ci].put_i64(row, v2.as_u64() as i64);
            }
            _ => {
                let Some(ci) = t.column_named(&name, Kind::U64) else { continue };
                t.cols[ci].put_i64(row, v2.as_u64() as i64);
            }
        }
    }
    Ok(())
}

/// google.protobuf.FieldDescriptorProto.Type number -> type name.
fn proto_type_name(t: u64) -> &'static str {
    match t {
        1 => "double",
        2 => "float",
        3 => "int64",
        4 => "uint64",
        5 => "int32",
        6 => "fixed64",
        7 => "fixed32",
        8 => "bool",
        9 => "string",
        11 => "message",
        12 => "bytes",
        13 => "uint32",
        14 => "enum",
        15 => "sfixed32",
        16 => "sfixed64",
        17 => "sint32",
        18 => "sint64",
        _ => "bytes",
    }
}
