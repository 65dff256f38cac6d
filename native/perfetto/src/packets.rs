//! Perfetto packets other than ftrace: power rails, battery counters, system and CPU info, ftrace and
//! trace statistics, clock snapshots (field numbers of perfetto.protos.*, see docs/perfetto.md).

use std::collections::HashMap;

use crate::schema::{EventSpec, FieldSpec};
use crate::wire::{err, packed_varints, string_of, DResult, Msg};

pub struct RailDesc {
    pub index: u32,
    pub name: String,
    pub subsys: String,
}

#[derive(Default)]
pub struct Rails {
    pub desc: Vec<RailDesc>,
    pub ts: Vec<i64>,
    pub index: Vec<u32>,
    /// TracePacket timestamp, ns (-1 = absent)
    pub packet_ts: Vec<i64>,
    pub energy_uws: Vec<u64>,
}

#[derive(Default, Clone)]
pub struct CpuRec {
    pub processor: String,
    pub frequencies_khz: Vec<u32>,
    pub capacity: Option<u32>,
}

#[derive(Default, Clone)]
pub struct FtraceCpuStat {
    pub phase: u32,
    pub cpu: u64,
    pub entries: u64,
    pub overrun: u64,
    pub commit_overrun: u64,
    pub dropped_events: u64,
}

/// Metadata found while walking the trace (meta.rs turns it into the trace's metadata).
#[derive(Default)]
pub struct Meta {
    pub system_info: Vec<(String, String)>,
    pub system_info_int: Vec<(String, i64)>,
    pub utsname: Vec<(String, String)>,
    pub cpus: Vec<CpuRec>,
    pub ftrace_cpu_stats: Vec<FtraceCpuStat>,
    /// (name, value) of TraceStats counters that mean data was lost, summed over buffers
    pub trace_loss: Vec<(String, u64)>,
    pub bundles_lost_per_cpu: HashMap<i32, u64>,
    pub bundles_without_cpu: u64,
    pub ftrace_errors: u64,
    pub ftrace_clocks: Vec<i32>,
    pub packet_clock_ids: Vec<u32>,
    pub packets_not_decoded: HashMap<u32, u64>,
    pub packets: u64,
    pub compressed_blocks: u64,
    pub previous_packet_dropped: u64,
    pub events_without_timestamp: u64,
    pub events_without_payload: u64,
    /// BOOTTIME (clock id 6) reading of the first clock snapshot, ns
    pub clock_snapshots: Vec<Vec<(u32, u64)>>,
    /// the packets from this byte offset to the end could not be decoded: (offset of the first packet not
    /// kept, offset of the damage, bytes not read, what was wrong); the packets before it were decoded
    /// (lib.rs `decode`)
    pub damaged_from: Option<(usize, usize, usize, String)>,
}

/// PowerRails (packet field 40): descriptors and energy samples.
pub fn power_rails(
    b: &[u8],
    off: usize,
    ts: Option<u64>,
    clock: Option<u32>,
    rails: &mut Rails,
    warnings: &mut Vec<String>,
) -> DResult<()> {
    let mut m = Msg::new(b, off);
    if clock.is_some_and(|c| c != 6) {
        warnings.push(format!(
            "power_rails packet at offset {} uses clock id {:?}, not BOOTTIME: its ts is not converted",
            off, clock
        ));
    }
    while let Some((num, v)) = m.next_field()? {
        let Some(mut sm) = Msg::from_value(&v) else { continue };
        match num {
            1 => {
                let mut d = RailDesc { index: 0, name: String::new(), subsys: String::new() };
                while let Some((n2, v2)) = sm.next_field()? {
                    match n2 {
                        1 => d.index = v2.as_u64() as u32,
                        2 => d.name = string_of(&v2),
                        3 => d.subsys = string_of(&v2),
                        _ => {}
                    }
                }
                rails.desc.push(d);
            }
            2 => {
                let (mut index, mut tms, mut energy) = (0u32, None, 0u64);
                while let Some((n2, v2)) = sm.next_field()? {
                    match n2 {
                        1 => index = v2.as_u64() as u32,
                        2 => tms = Some(v2.as_u64()),
                        3 => energy = v2.as_u64(),
                        _ => {}
                    }
                }
                // ts: the sample's own time, timestamp_ms (CLOCK_BOOTTIME, the trace clock) in ns;
                // the packet timestamp (when traced polled the HAL) only when it is missing
                let t = match (tms, ts) {
                    (Some(ms), _) => (ms as i64).saturating_mul(1_000_000),
                    (None, Some(t)) => t as i64,
                    (None, None) => return err(sm.offset(), "PowerRails.EnergyData without any timestamp"),
                };
                rails.ts.push(t);
                rails.index.push(index);
                rails.packet_ts.push(ts.map(|x| x as i64).unwrap_or(-1));
                rails.energy_uws.push(energy);
            }
            _ => {}
        }
    }
    Ok(())
}

/// BatteryCounters (packet field 38): the spec of table battery_counters (ts = packet timestamp,
/// cpu = -1), whose row decode_fields fills from the message.
pub fn battery_spec() -> EventSpec {
    EventSpec {
        name: "battery_counters".to_string(),
        fields: [
            (1, "charge_counter_uah", "int64"),
            (2, "capacity_percent", "float"),
            (3, "current_ua", "int64"),
            (4, "current_avg_ua", "int64"),
            (5, "name", "string"),
            (6, "energy_counter_uwh", "int64"),
            (7, "voltage_uv", "int64"),
        ]
        .iter()
        .map(|&(n, name, ty)| FieldSpec::from_proto(n, name, ty, false))
        .collect(),
    }
}

/// SysStats (packet field 7): `cpufreq_khz` (field 11, one value per CPU, read by traced from
/// /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq) into `khz` (cleared first); the other
/// counters are not read.
pub fn cpufreq_khz(b: &[u8], off: usize, khz: &mut Vec<u64>) -> DResult<()> {
    let mut m = Msg::new(b, off);
    khz.clear();
    while let Some((num, v)) = m.next_field()? {
        if num == 11 {
            packed_varints(&v, khz)?;
        }
    }
    Ok(())
}

pub fn system_info(b: &[u8], off: usize, meta: &mut Meta) -> DResult<()> {
    let mut m = Msg::new(b, off);
    while let Some((num, v)) = m.next_field()? {
        let key = match num {
            1 => {
                let Some(mut um) = Msg::from_value(&v) else { continue };
                while let Some((n2, v2)) = um.next_field()? {
                    let k = match n2 {
                        1 => "sysname",
                        2 => "version",
                        3 => "release",
                        4 => "machine",
                        _ => continue,
                    };
                    meta.utsname.push((k.to_string(), string_of(&v2)));
                }
                continue;
            }
            2 => "android_build_fingerprint",
            4 => "tracing_service_version",
            9 => "android_soc_model",
            10 => "android_hardware_revision",
            11 => "android_storage_model",
            12 => "android_ram_model",
            13 => "android_guest_soc_model",
            14 => "android_device_manufacturer",
            17 => "machine_name",
            _ => {
                let k = match num {
                    3 => "hz",
                    5 => "android_sdk_version",
                    6 => "page_size",
                    7 => "timezone_off_mins",
                    8 => "num_cpus",
                    16 => "system_ram_bytes",
                    _ => continue,
                };
                let mut x = v.as_u64() as i64;
                if num == 7 {
                    x = x as i32 as i64;
                }
                meta.system_info_int.push((k.to_string(), x));
                continue;
            }
        };
        meta.system_info.push((key.to_string(), string_of(&v)));
    }
    Ok(())
}

pub fn cpu_info(b: &[u8], off: usize, meta: &mut Meta, packed: &mut Vec<u64>) -> DResult<()> {
    let mut m = Msg::new(b, off);
    let mut cpus = Vec::new();
    while let Some((num, v)) = m.next_field()? {
        if num != 1 {
            continue;
        }
        let Some(mut cm) = Msg::from_value(&v) else { continue };
        let mut c = CpuRec::default();
        while let Some((n2, v2)) = cm.next_field()? {
            match n2 {
                1 => c.processor = string_of(&v2),
                2 => {
                    packed.clear();
                    packed_varints(&v2, packed)?;
                    c.frequencies_khz.extend(packed.iter().map(|&x| x as u32));
                }
                3 => c.capacity = Some(v2.as_u64() as u32),
                _ => {}
            }
        }
        cpus.push(c);
    }
    meta.cpus = cpus;
    Ok(())
}

pub fn ftrace_stats(b: &[u8], off: usize, meta: &mut Meta) -> DResult<()> {
    let mut m = Msg::new(b, off);
    let mut phase = 0u32;
    let mut stats = Vec::new();
    while let Some((num, v)) = m.next_field()? {
        match num {
            1 => phase = v.as_u64() as u32,
            2 => {
                let Some(mut cm) = Msg::from_value(&v) else { continue };
                let mut s = FtraceCpuStat::default();
                while let Some((n2, v2)) = cm.next_field()? {
                    match n2 {
                        1 => s.cpu = v2.as_u64(),
                        2 => s.entries = v2.as_u64(),
                        3 => s.overrun = v2.as_u64(),
                        4 => s.commit_overrun = v2.as_u64(),
                        8 => s.dropped_events = v2.as_u64(),
                        _ => {}
                    }
                }
                stats.push(s);
            }
            _ => {}
        }
    }
    for mut s in stats {
        s.phase = phase;
        meta.ftrace_cpu_stats.push(s);
    }
    Ok(())
}

pub fn trace_stats(b: &[u8], off: usize, meta: &mut Meta) -> DResult<()> {
    let mut m = Msg::new(b, off);
    let mut found: Vec<(String, u64)> = Vec::new();
    let mut add = |k: &str, x: u64| {
        if let Some(e) = found.iter_mut().find(|(n, _)| n == k) {
            e.1 += x;
        } else {
            found.push((k.to_string(), x));
        }
    };
    // buffer_stats (1) only: chunks_discarded (8) / patches_discarded (9) / invalid_packets (10) count over
    // every session the tracing service ever ran, not this trace: not reported
    while let Some((num, v)) = m.next_field()? {
        let Some(mut bm) = Msg::from_value(&v).filter(|_| num == 1) else { continue };
        while let Some((n2, v2)) = bm.next_field()? {
            let k = match n2 {
                3 => "chunks_overwritten",
                13 => "bytes_overwritten",
                18 => "chunks_discarded",
                6 => "patches_failed",
                9 => "abi_violations",
                19 => "trace_writer_packet_loss",
                22 => "oversized_packets_dropped",
                _ => continue,
            };
            add(k, v2.as_u64());
        }
    }
    // several TraceStats packets may exist (periodic + final): keep the last one's values
    meta.trace_loss = found;
    Ok(())
}

pub fn clock_snapshot(b: &[u8], off: usize, meta: &mut Meta) -> DResult<()> {
    let mut m = Msg::new(b, off);
    let mut clocks = Vec::new();
    while let Some((num, v)) = m.next_field()? {
        if num != 1 {
            continue;
        }
        let Some(mut cm) = Msg::from_value(&v) else { continue };
        let (mut id, mut ts) = (0u32, 0u64);
        while let Some((n2, v2)) = cm.next_field()? {
            match n2 {
                1 => id = v2.as_u64() as u32,
                2 => ts = v2.as_u64(),
                _ => {}
            }
        }
        clocks.push((id, ts));
    }
    meta.clock_snapshots.push(clocks);
    Ok(())
}

/// What ProcessTree packets (packet field 2) said about one pid (a later record replaces an earlier one).
#[derive(Default, Clone)]
pub struct TaskRec {
    /// Process: its parent; Thread: its thread group (process)
    pub parent: Option<i32>,
    /// Process: cmdline[0] (none for kernel threads); Thread: the thread's name
    pub name: Option<String>,
}

/// ProcessTree (packet field 2) of the whole trace: processes (pid -> ppid, cmdline[0]) and threads
/// (tid -> tgid, name); for a pid a later record wins.
#[derive(Default)]
pub struct ProcessTree {
    pub processes: std::collections::BTreeMap<i32, TaskRec>,
    pub threads: std::collections::BTreeMap<i32, TaskRec>,
}

/// ProcessTree: Process{pid = 1, ppid = 2, repeated cmdline = 3}, Thread{tid = 1, name = 2, tgid = 3}.
pub fn process_tree(b: &[u8], off: usize, tree: &mut ProcessTree) -> DResult<()> {
    let mut m = Msg::new(b, off);
    while let Some((num, v)) = m.next_field()? {
        if num != 1 && num != 2 {
            continue;
        }
        let Some(mut pm) = Msg::from_value(&v) else { continue };
        let (mut id, mut rec, mut first_arg) = (None, TaskRec::default(), true);
        while let Some((n2, v2)) = pm.next_field()? {
            match (num, n2) {
                (_, 1) => id = Some(v2.as_u64() as i32),
                (1, 2) | (2, 3) => rec.parent = Some(v2.as_u64() as i32),
                (1, 3) if first_arg => {
                    first_arg = false;
                    rec.name = Some(string_of(&v2)).filter(|s| !s.is_empty());
                }
                (2, 2) => rec.name = Some(string_of(&v2)).filter(|s| !s.is_empty()),
                _ => {}
            }
        }
        let Some(id) = id else { continue };
        if num == 1 {
            tree.processes.insert(id, rec);
        } else {
            tree.threads.insert(id, rec);
        }
    }
    Ok(())
}
