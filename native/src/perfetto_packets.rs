//! Perfetto packets other than ftrace: power rails, battery counters, system and CPU info, ftrace
//! and trace statistics, clock snapshots (field numbers of perfetto.protos.*, see docs/perfetto.md).
use crate::perfetto_decode::{CpuRec, Decoder, FtraceCpuStat, RailDesc};
use crate::perfetto_tables::{EventSpec, FieldSpec};
use crate::perfetto_wire::{err, packed_varints, string_of, DResult, Msg};

impl<'s> Decoder<'s> {
    pub(crate) fn decode_power_rails(
        &mut self,
        b: &[u8],
        off: usize,
        ts: Option<u64>,
        clock: Option<u32>,
    ) -> DResult<()> {
        let mut m = Msg::new(b, off);
        if clock.is_some_and(|c| c != 6) {
            self.warnings.push(format!(
                "power_rails packet at offset {} uses clock id {:?}, not BOOTTIME: its ts is not converted",
                off, clock
            ));
        }
        while let Some((num, v)) = m.next_field()? {
            let Some(mut sm) = Msg::from_value(&v) else { continue };
            match num {
                1 => {
                    let mut d = RailDesc {
                        index: 0,
                        name: String::new(),
                        subsys: String::new(),
                        sampling_rate: 0,
                    };
                    while let Some((n2, v2)) = sm.next_field()? {
                        match n2 {
                            1 => d.index = v2.as_u64() as u32,
                            2 => d.name = string_of(&v2),
                            3 => d.subsys = string_of(&v2),
                            4 => d.sampling_rate = v2.as_u64() as u32,
                            _ => {}
                        }
                    }
                    self.rails.desc.push(d);
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
                    self.rails.ts.push(t);
                    self.rails.index.push(index);
                    self.rails.packet_ts.push(ts.map(|x| x as i64).unwrap_or(-1));
                    self.rails.energy_uws.push(energy);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// BatteryCounters (packet field 38) -> table battery_counters (ts = packet timestamp, cpu = -1).
    pub(crate) fn decode_battery(&mut self, b: &[u8], off: usize, ts: Option<u64>) -> DResult<()> {
        let Some(ts) = ts else {
            return err(off, "BatteryCounters packet without a timestamp");
        };
        let spec = EventSpec {
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
        };
        let ti = self.table_by_name(b"battery_counters", Some(&spec));
        let t = &mut self.tables[ti];
        let row = t.rows();
        t.decode_fields(row, &mut Msg::new(b, off), &mut self.strings, &mut self.scratch)?;
        t.push_row(ts as i64, -1);
        Ok(())
    }

    /// SysStats (packet field 7): `cpufreq_khz` (field 11, one value per CPU, read by traced from
    /// /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq) -> table cpu_frequency_polled, one row per
    /// CPU: ts = packet timestamp (as trace_processor times it), cpu = position in the list,
    /// frequency_khz. The other SysStats counters are not read.
    pub(crate) fn decode_sys_stats(&mut self, b: &[u8], off: usize, ts: Option<u64>) -> DResult<()> {
        let mut m = Msg::new(b, off);
        let mut khz = std::mem::take(&mut self.packed);
        khz.clear();
        while let Some((num, v)) = m.next_field()? {
            if num == 11 {
                packed_varints(&v, &mut khz)?;
            }
        }
        if !khz.is_empty() {
            match ts {
                None => {
                    let w = "sys_stats packets without a timestamp: their cpufreq_khz samples were skipped".to_string();
                    if !self.warnings.contains(&w) {
                        self.warnings.push(w);
                    }
                }
                Some(ts) => {
                    let spec = EventSpec {
                        name: "cpu_frequency_polled".to_string(),
                        fields: vec![FieldSpec::from_proto(1, "frequency_khz", "uint32", false)],
                    };
                    let ti = self.table_by_name(b"cpu_frequency_polled", Some(&spec));
                    let t = &mut self.tables[ti];
                    let col = t.cols.iter().position(|c| c.spec.name == "frequency_khz").unwrap_or(0);
                    for (cpu, &f) in khz.iter().enumerate() {
                        let row = t.rows();
                        t.cols[col].put_i64(row, f as i64);
                        t.push_row(ts as i64, cpu as i32);
                    }
                }
            }
        }
        self.packed = khz;
        Ok(())
    }

    pub(crate) fn decode_system_info(&mut self, b: &[u8], off: usize) -> DResult<()> {
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
                        self.meta.utsname.push((k.to_string(), string_of(&v2)));
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
                    self.meta.system_info_int.push((k.to_string(), x));
                    continue;
                }
            };
            self.meta.system_info.push((key.to_string(), string_of(&v)));
        }
        Ok(())
    }

    pub(crate) fn decode_cpu_info(&mut self, b: &[u8], off: usize) -> DResult<()> {
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
                        self.packed.clear();
                        packed_varints(&v2, &mut self.packed)?;
                        c.frequencies_khz.extend(self.packed.iter().map(|&x| x as u32));
                    }
                    3 => c.capacity = Some(v2.as_u64() as u32),
                    _ => {}
                }
            }
            cpus.push(c);
        }
        self.meta.cpus = cpus;
        Ok(())
    }

    pub(crate) fn decode_ftrace_stats(&mut self, b: &[u8], off: usize) -> DResult<()> {
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
            self.meta.ftrace_cpu_stats.push(s);
        }
        Ok(())
    }

    pub(crate) fn decode_trace_stats(&mut self, b: &[u8], off: usize) -> DResult<()> {
        let mut m = Msg::new(b, off);
        let mut found: Vec<(String, u64)> = Vec::new();
        let mut add = |k: &str, x: u64| {
            if let Some(e) = found.iter_mut().find(|(n, _)| n == k) {
                e.1 += x;
            } else {
                found.push((k.to_string(), x));
            }
        };
        while let Some((num, v)) = m.next_field()? {
            match num {
                1 => {
                    let Some(mut bm) = Msg::from_value(&v) else { continue };
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
                // chunks_discarded (8) / patches_discarded (9) / invalid_packets (10) count over every
                // session the tracing service ever ran, not this trace: not reported
                _ => {}
            }
        }
        // several TraceStats packets may exist (periodic + final): keep the last one's values
        self.meta.trace_loss = found;
        Ok(())
    }

    pub(crate) fn decode_clock_snapshot(&mut self, b: &[u8], off: usize) -> DResult<()> {
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
        self.meta.clock_snapshots.push(clocks);
        Ok(())
    }
}
