//! What the file says about the trace besides its events: kernel, clock, CPUs, lost events per CPU (from
//! the ring-buffer pages and the saved buffer statistics), named instances, and the warnings.

use std::collections::BTreeMap;

use crate::error::Skipped;
use crate::text::parse_cpustat;

#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Kernel {
    pub release: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    pub uname: Option<String>,
    /// `long` of the machine that wrote the file (bytes)
    pub long_size: u64,
    /// `long` of the kernel (the ring-buffer page commit field, bytes)
    pub kernel_long_size: u64,
    pub endian: String,
}

/// One named instance's own accounting.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct InstanceBuffer {
    pub clock: Option<String>,
    /// rows per table
    pub events: BTreeMap<String, u64>,
    pub lost_events: u64,
    pub lost_events_per_cpu: BTreeMap<String, u64>,
    pub lost_events_exact: bool,
}

/// The trace's metadata (keys of abtest's `meta` dict, see abtest/trace/model.py).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Meta {
    pub format_version: String,
    pub compression: Option<String>,
    pub clock: Option<String>,
    pub cpus: u64,
    pub page_size: u64,
    pub kernel: Kernel,
    pub tracer_version: Option<String>,
    pub ts_offset_ns: i64,
    pub tsc2nsec: Option<Vec<u64>>,
    pub lost_events: u64,
    pub lost_events_per_cpu: BTreeMap<String, u64>,
    pub lost_events_exact: bool,
    pub lost_pages_without_count_per_cpu: BTreeMap<String, u64>,
    pub saved_cmdlines: u64,
    pub ring_buffer_pages: u64,
    pub records: u64,
    /// named instances, sorted
    pub instances: Vec<String>,
    /// (name, accounting) of every named instance in file order (empty: none)
    pub instance_buffers: Vec<(String, InstanceBuffer)>,
    pub event_formats: u64,
    pub cpus_with_data: Vec<u64>,
    /// v7: declared ring-buffer bytes per CPU that no compressed chunk covers (not decoded)
    pub undecoded_bytes_per_cpu: BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    /// content not decoded, per kind
    pub import_errors: BTreeMap<String, Skipped>,
    /// the tables whose records kept only `ts` and `cpu` (Options::fields_of), sorted; None: every table decoded
    pub fields_not_decoded: Option<Vec<String>>,
}

/// Lost events of one buffer, per CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostEvents {
    pub per_cpu: BTreeMap<u32, u64>,
    pub exact: bool,
    pub warnings: Vec<String>,
}

impl LostEvents {
    pub fn total(&self) -> u64 {
        self.per_cpu.values().sum()
    }
}

/// Per-CPU lost events of a buffer from its pages and its saved statistics.
///
/// `page_counts`: CPU -> events the pages say were lost before them (every CPU with data, zeros
/// included); `uncounted`: CPU -> pages flagged as following lost events without a stored count;
/// `cpustats`: CPU -> the CPUSTAT text (tracefs per_cpu/cpuN/stats). The kernel's `overrun` counts
/// overwritten events (the page counts add up to it and it settles uncounted pages); `dropped events`
/// and `commit overrun` (events refused) appear in no page: only the statistics know them.
pub fn lost_events(
    page_counts: &BTreeMap<u32, u64>,
    uncounted: &BTreeMap<u32, u64>,
    cpustats: &BTreeMap<u32, String>,
) -> LostEvents {
    let mut out = LostEvents { exact: true, ..LostEvents::default() };
    let mut cpus: Vec<u32> = page_counts.keys().chain(uncounted.keys()).chain(cpustats.keys()).copied().collect();
    cpus.sort_unstable();
    cpus.dedup();
    for cpu in cpus {
        let (counted, unknown) =
            (page_counts.get(&cpu).copied().unwrap_or(0), uncounted.get(&cpu).copied().unwrap_or(0));
        let stat = cpustats.get(&cpu).map(|t| parse_cpustat(t)).filter(|s| !s.is_empty());
        let overrun = stat.as_ref().and_then(|s| s.get("overrun").copied());
        let mut overwritten = counted + unknown;
        match overrun {
            Some(o) if unknown > 0 && o >= counted + unknown => {
                overwritten = o;
                out.warnings
                    .push(format!(
                    "CPU {cpu}: {unknown} ring-buffer page(s) follow lost events without a stored count; the count, \
                     {o}, is the kernel's overrun counter saved in the file"));
            }
            _ if unknown > 0 => {
                out.exact = false;
                out.warnings
                    .push(format!(
                    "CPU {cpu}: {unknown} ring-buffer page(s) follow lost events without a stored count and the file \
                     has no usable ring-buffer statistics: each counts 1, so lost_events is a lower bound"));
            }
            Some(o) if o != counted => {
                out.warnings
                    .push(format!(
                "CPU {cpu}: the pages count {counted} overwritten events, the ring-buffer statistics saved in the \
                 file {o}: the pages' count is used"))
            }
            _ => {}
        }
        let refused = stat.as_ref().map_or(0, |s| {
            s.get("dropped events").copied().unwrap_or(0) + s.get("commit overrun").copied().unwrap_or(0)
        });
        if refused > 0 {
            out.warnings.push(format!(
                "CPU {cpu}: {refused} events dropped by the kernel (buffer full in non-overwrite mode, or commit \
                 overruns), known only from the ring-buffer statistics saved in the file: the data does not mark where"
            ));
        }
        if page_counts.contains_key(&cpu) || overwritten > 0 || refused > 0 {
            out.per_cpu.insert(cpu, overwritten + refused);
        }
    }
    out
}

/// `{'0': 12, '1': 3}`: a per-CPU count as Python prints a dict with string keys.
pub fn per_cpu_text(m: &BTreeMap<u32, u64>) -> String {
    let items: Vec<String> = m.iter().map(|(c, n)| format!("'{c}': {n}")).collect();
    format!("{{{}}}", items.join(", "))
}

pub fn str_keys(m: &BTreeMap<u32, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tracefs per_cpu/cpuN/stats text (older kernels print no "dropped events" line).
    fn stat(overrun: u64, dropped: Option<u64>, commit: u64) -> String {
        let mut t = format!(
            "CPU: 0\nentries: 0\noverrun: {overrun}\ncommit overrun: {commit}\nbytes: 0\n\
                             oldest event ts: 55061.649037\nnow ts: 55062.067842\n"
        );
        if let Some(d) = dropped {
            t += &format!("dropped events: {d}\nread events: 58156\n");
        }
        t
    }

    fn lost(pages: &[(u32, u64)], unknown: &[(u32, u64)], stats: &[(u32, String)]) -> LostEvents {
        lost_events(
            &pages.iter().copied().collect(),
            &unknown.iter().copied().collect(),
            &stats.iter().cloned().collect(),
        )
    }

    #[test]
    fn counted_pages_are_exact_and_agree_with_the_statistics() {
        let r = lost(&[(0, 420468), (1, 0)], &[], &[(0, stat(420468, Some(0), 0)), (1, stat(0, Some(0), 0))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 420468), (1, 0)]));
        assert!(r.exact && r.warnings.is_empty() && r.total() == 420468);
    }

    #[test]
    fn an_uncounted_page_is_settled_by_the_overrun_counter() {
        let r =
            lost(&[(0, 990426), (1, 0)], &[(1, 1)], &[(0, stat(990426, Some(0), 0)), (1, stat(1411942, Some(0), 0))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 990426), (1, 1411942)]));
        assert!(r.exact && r.warnings.iter().any(|w| w.contains("1411942") && w.contains("overrun")));
    }

    #[test]
    fn without_statistics_an_uncounted_page_is_a_lower_bound() {
        let r = lost(&[(0, 5)], &[(0, 2)], &[]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 7)]));
        assert!(!r.exact && r.warnings.iter().any(|w| w.contains("lower bound")));
    }

    #[test]
    fn statistics_below_the_pages_count_are_not_trusted() {
        // statistics of another session (a file cut from a longer one) cannot settle the pages
        let r = lost(&[(0, 50)], &[(0, 1)], &[(0, stat(10, Some(0), 0))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 51)]));
        assert!(!r.exact);
    }

    #[test]
    fn disagreeing_statistics_are_reported_and_the_pages_kept() {
        let r = lost(&[(0, 50)], &[], &[(0, stat(60, Some(0), 0))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 50)]));
        assert!(r.exact && r.warnings.iter().any(|w| w.contains("60") && w.contains("50")));
    }

    #[test]
    fn refused_events_come_only_from_the_statistics() {
        let r = lost(&[(0, 0), (1, 0)], &[], &[(0, stat(0, Some(977104), 0)), (1, stat(0, Some(99414), 3))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 977104), (1, 99417)]));
        assert!(r.exact && r.total() == 1076521);
        assert_eq!(r.warnings.iter().filter(|w| w.contains("non-overwrite")).count(), 2);
    }

    #[test]
    fn old_kernel_statistics_without_dropped_events() {
        let r = lost(&[(0, 3)], &[], &[(0, stat(3, None, 0))]);
        assert_eq!(r.per_cpu, BTreeMap::from([(0, 3)]));
        assert!(r.exact && r.warnings.is_empty());
    }

    #[test]
    fn stats_settle_uncounted_pages_and_add_refused_events() {
        let pages = BTreeMap::from([(0, 5), (1, 0)]);
        let unknown = BTreeMap::from([(0, 1), (2, 1)]);
        let stats = BTreeMap::from([(0, "overrun: 9\n".to_string()), (1, "overrun: 0\ndropped events: 4\n".into())]);
        let l = lost_events(&pages, &unknown, &stats);
        assert_eq!(l.per_cpu, BTreeMap::from([(0, 9), (1, 4), (2, 1)]));
        assert!(!l.exact); // CPU 2 has no statistics
        assert_eq!(l.warnings.len(), 3);
        assert_eq!(per_cpu_text(&l.per_cpu), "{'0': 9, '1': 4, '2': 1}");
    }
}
