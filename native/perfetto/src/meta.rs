//! The metadata of a perfetto trace: kernel, device, platform (CPU OPPs / capacities), clocks, lost
//! events and what was not decoded, from the packets the decoder met (packets.rs).

use std::collections::BTreeMap;

use crate::packets::Meta as Found;
use crate::schema::Schema;

/// A metadata value that is text or an integer (SystemInfo fields).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub enum Scalar {
    Str(String),
    Int(i64),
}

#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct PlatformCpu {
    pub cpu: u64,
    pub processor: Option<String>,
    pub capacity: Option<u32>,
    pub opps_khz: Vec<u32>,
}

/// CpuInfo as a platform description: CPUs with their OPPs and capacities.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Platform {
    pub source: String,
    pub cpus: Vec<PlatformCpu>,
    /// every CPU's capacity (None: some CPU has none)
    pub cpu_capacities: Option<BTreeMap<String, u32>>,
}

/// Perfetto-specific accounting.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Perfetto {
    pub packets: u64,
    pub compressed_blocks: u64,
    pub packet_clock_ids: Vec<String>,
    pub clock_snapshots: Vec<BTreeMap<String, u64>>,
    pub bundles_with_lost_events_per_cpu: BTreeMap<String, u64>,
    pub trace_buffer_loss: BTreeMap<String, u64>,
    pub packets_not_decoded: BTreeMap<String, u64>,
    /// the packets from byte `offset` to the end were not read: the damage found at `damage_offset`
    pub damaged_from: Option<Damage>,
}

/// Where a trace's packets stop being decodable (see `crate::decode`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Damage {
    /// offset of the first TracePacket not kept
    pub offset: u64,
    /// offset where the damage was found (inside that packet, or after it)
    pub damage_offset: u64,
    /// bytes from `offset` to the end of the file
    pub bytes_not_read: u64,
    pub message: String,
}

/// The trace's metadata (keys of abtest's `meta` dict, see abtest/trace/model.py).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Meta {
    pub format_version: Option<String>,
    pub clock: Option<String>,
    /// None: the trace does not say
    pub cpus: Option<u64>,
    pub lost_events: u64,
    pub lost_events_per_cpu: BTreeMap<String, u64>,
    pub kernel: BTreeMap<String, Scalar>,
    pub device: BTreeMap<String, Scalar>,
    pub platform: Option<Platform>,
    pub warnings: Vec<String>,
    pub perfetto: Perfetto,
}

/// perfetto.protos.FtraceClock: UNSPECIFIED means traced left the kernel on its default for traced, the
/// "boot" trace_clock (CLOCK_BOOTTIME).
fn ftrace_clock(c: i32) -> String {
    match c {
        0 => "boot".into(),
        1 => "unknown".into(),
        2 => "global".into(),
        3 => "local".into(),
        4 => "mono_raw".into(),
        _ => format!("ftrace_clock_{c}"),
    }
}

/// perfetto.protos.BuiltinClock.
fn builtin_clock(c: u32) -> String {
    match c {
        1 => "realtime".into(),
        2 => "realtime_coarse".into(),
        3 => "monotonic".into(),
        4 => "monotonic_coarse".into(),
        5 => "monotonic_raw".into(),
        6 => "boottime".into(),
        _ => c.to_string(),
    }
}

const FTRACE_STATS_START: u32 = 1;
const FTRACE_STATS_END: u32 = 2;

/// Per-CPU lost events from FtraceStats (end minus start of overrun + commit_overrun + dropped_events) and
/// per-CPU bundles whose kernel page reported lost events (count unknown, >= 1 each): a CPU's count is
/// the larger of the two. Returns (lost per CPU, flagged bundles per CPU, warnings).
fn lost_events(m: &Found) -> (BTreeMap<u64, u64>, BTreeMap<i64, u64>, Vec<String>) {
    let mut by_phase: BTreeMap<u32, BTreeMap<u64, u64>> = BTreeMap::new();
    for s in &m.ftrace_cpu_stats {
        by_phase.entry(s.phase).or_default().insert(s.cpu, s.overrun + s.commit_overrun + s.dropped_events);
    }
    let nonempty = |p: u32| by_phase.get(&p).filter(|m| !m.is_empty());
    let end = nonempty(FTRACE_STATS_END).or_else(|| nonempty(0)).cloned().unwrap_or_default();
    let start = by_phase.get(&FTRACE_STATS_START).cloned().unwrap_or_default();
    let mut per_cpu: BTreeMap<u64, u64> =
        end.iter().map(|(c, n)| (*c, n.saturating_sub(start.get(c).copied().unwrap_or(0)))).collect();
    let pages: BTreeMap<i64, u64> = m.bundles_lost_per_cpu.iter().map(|(c, n)| (*c as i64, *n)).collect();
    for (c, n) in &pages {
        let e = per_cpu.entry(*c as u64).or_insert(0);
        *e = (*e).max(*n);
    }
    let mut warnings = Vec::new();
    if !pages.is_empty() {
        let items: Vec<String> = pages.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        warnings.push(format!(
            "ftrace reported lost events in {} bundles (per CPU: {{{}}}); the exact number lost is unknown",
            pages.values().sum::<u64>(),
            items.join(", ")
        ));
    }
    if !end.is_empty() && start.is_empty() {
        warnings.push("ftrace_stats has no START_OF_TRACE phase: lost events counted from end-of-trace totals".into());
    }
    per_cpu.retain(|_, n| *n > 0);
    (per_cpu, pages, warnings)
}

fn keyed<K: ToString>(m: &BTreeMap<K, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The metadata of a decoded trace; `warnings`: the decoder's and the table step's, in order.
pub fn build(m: &Found, mut warnings: Vec<String>, schema: &Schema) -> Meta {
    let mut si: BTreeMap<String, Scalar> = BTreeMap::new();
    for (k, v) in &m.system_info {
        si.insert(k.clone(), Scalar::Str(v.clone()));
    }
    for (k, v) in &m.system_info_int {
        si.insert(k.clone(), Scalar::Int(*v));
    }
    let un: BTreeMap<&str, &str> = m.utsname.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut kernel = BTreeMap::new();
    for (key, from) in [("sysname", "sysname"), ("release", "release"), ("version", "version"), ("arch", "machine")] {
        if let Some(v) = un.get(from) {
            kernel.insert(key.to_string(), Scalar::Str(v.to_string()));
        }
    }
    for key in ["hz", "page_size"] {
        if let Some(v) = si.get(key) {
            kernel.insert(key.to_string(), v.clone());
        }
    }
    let device = si
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "hz" | "page_size" | "num_cpus"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let platform = (!m.cpus.is_empty()).then(|| {
        let cpus: Vec<PlatformCpu> = m
            .cpus
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut opps = c.frequencies_khz.clone();
                opps.sort_unstable();
                PlatformCpu {
                    cpu: i as u64,
                    processor: (!c.processor.is_empty()).then(|| c.processor.clone()),
                    capacity: c.capacity,
                    opps_khz: opps,
                }
            })
            .collect();
        let caps = cpus.iter().map(|c| c.capacity.map(|k| (c.cpu.to_string(), k))).collect::<Option<BTreeMap<_, _>>>();
        Platform { source: "perfetto cpu_info".into(), cpus, cpu_capacities: caps }
    });
    let (per_cpu, pages, lost_warnings) = lost_events(m);
    warnings.extend(lost_warnings);
    let loss: BTreeMap<String, u64> =
        m.trace_loss.iter().filter(|(_, v)| *v > 0).map(|(k, v)| (k.clone(), *v)).collect();
    if !loss.is_empty() {
        let items: Vec<String> =
            m.trace_loss.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("'{k}': {v}")).collect();
        warnings.push(format!(
            "perfetto's trace buffer lost data ({{{}}}); events may be missing from the trace",
            items.join(", ")
        ));
    }
    let counts = [
        (m.previous_packet_dropped, "packets say the packet before them was dropped"),
        (m.ftrace_errors, "ftrace read errors recorded in FtraceEventBundle.error"),
        (m.bundles_without_cpu, "ftrace bundles carry no cpu field: taken as CPU 0 (the protobuf default)"),
        (m.events_without_timestamp, "FtraceEvents without a timestamp were skipped"),
        (m.events_without_payload, "FtraceEvents without an event payload were skipped"),
    ];
    warnings.extend(counts.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")));
    if let Some((start, at, rest, msg)) = &m.damaged_from {
        warnings.push(format!(
            "the trace is damaged from byte {start} on ({msg}, at byte {at}): the {} packets before it were read, \
             the last {rest} bytes were not (a capture cut short, or a stale tail of an earlier trace)",
            m.packets
        ));
    }
    let mut clocks: Vec<String> = m.ftrace_clocks.iter().map(|&c| ftrace_clock(c)).collect();
    clocks.sort();
    clocks.dedup();
    if clocks.len() > 1 {
        let items: Vec<String> = clocks.iter().map(|c| format!("'{c}'")).collect();
        warnings.push(format!("ftrace bundles use several clocks: [{}]", items.join(", ")));
    }
    let clock = clocks
        .first()
        .cloned()
        .or_else(|| (m.packet_clock_ids.is_empty() || m.packet_clock_ids.contains(&6)).then(|| "boot".to_string()));
    let num_cpus = match si.get("num_cpus") {
        Some(Scalar::Int(n)) if *n != 0 => Some(*n as u64),
        _ => None,
    };
    let cpus = num_cpus.or((!m.cpus.is_empty()).then_some(m.cpus.len() as u64));
    let mut packet_clock_ids: Vec<String> = m.packet_clock_ids.iter().map(|&c| builtin_clock(c)).collect();
    packet_clock_ids.sort();
    let not_decoded = m
        .packets_not_decoded
        .iter()
        .map(|(f, n)| (schema.packet_fields.get(f).cloned().unwrap_or_else(|| format!("field_{f}")), *n))
        .collect();
    Meta {
        format_version: match si.get("tracing_service_version") {
            Some(Scalar::Str(s)) => Some(s.clone()),
            _ => None,
        },
        clock,
        cpus,
        lost_events: per_cpu.values().sum(),
        lost_events_per_cpu: keyed(&per_cpu),
        kernel,
        device,
        platform,
        warnings,
        perfetto: Perfetto {
            packets: m.packets,
            compressed_blocks: m.compressed_blocks,
            packet_clock_ids,
            clock_snapshots: m
                .clock_snapshots
                .iter()
                .take(2)
                .map(|snap| snap.iter().map(|(c, ts)| (builtin_clock(*c), *ts)).collect())
                .collect(),
            bundles_with_lost_events_per_cpu: keyed(&pages),
            trace_buffer_loss: loss,
            packets_not_decoded: not_decoded,
            damaged_from: m.damaged_from.as_ref().map(|(start, at, rest, msg)| Damage {
                offset: *start as u64,
                damage_offset: *at as u64,
                bytes_not_read: *rest as u64,
                message: msg.clone(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packets::FtraceCpuStat;

    #[test]
    fn lost_events_from_stats_phases_and_flagged_bundles() {
        let stat = |phase, cpu, overrun| FtraceCpuStat { phase, cpu, overrun, ..FtraceCpuStat::default() };
        let mut m = Found { ftrace_cpu_stats: vec![stat(1, 0, 5), stat(2, 0, 12), stat(2, 1, 3)], ..Found::default() };
        m.bundles_lost_per_cpu.insert(1, 4);
        let (per_cpu, pages, warnings) = lost_events(&m);
        assert_eq!(per_cpu, BTreeMap::from([(0, 7), (1, 4)]));
        assert_eq!(pages, BTreeMap::from([(1, 4)]));
        assert_eq!(warnings.len(), 1);
        let meta = build(&m, Vec::new(), Schema::builtin());
        assert_eq!((meta.lost_events, meta.clock.as_deref(), meta.cpus), (11, Some("boot"), None));
    }
}
