//! The `process_*` series every Prometheus client exports, read from
//! `/proc/self` at scrape time.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second and the page size: fixed for Linux on the
/// architectures we ship (x86_64, aarch64), and `libc` is not a dependency.
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_SIZE: u64 = 4096;

/// `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_virtual_memory_bytes`, `process_threads`, `process_open_fds`,
/// `process_max_fds` and `process_start_time_seconds` of this process. On
/// a system without `/proc` it writes nothing.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// The fields of `/proc/self/stat` the collector uses.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ProcStat {
    cpu_ticks: u64,
    threads: u64,
    start_ticks: u64,
    virtual_bytes: u64,
    rss_pages: u64,
}

/// Parses `/proc/self/stat`; the command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its closing parenthesis.
fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state): field N is at index N - 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        cpu_ticks: field(14)? + field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The boot time in seconds since the epoch, from `/proc/stat`'s `btime`.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit on open files, from `/proc/self/limits` (`None` when
/// unlimited or unreadable).
fn max_open_files(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: f64,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let Some(stat) = read("/proc/self/stat").as_deref().and_then(parse_proc_stat) else {
            // Not Linux, or /proc is not mounted: no process metrics.
            return Ok(());
        };
        let metric = encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        ConstCounter::new(stat.cpu_ticks as f64 / TICKS_PER_SECOND).encode(metric)?;
        let e = &mut encoder;
        gauge(
            e,
            "process_resident_memory",
            "Resident memory size",
            Some(&Unit::Bytes),
            (stat.rss_pages * PAGE_SIZE) as f64,
        )?;
        gauge(
            e,
            "process_virtual_memory",
            "Virtual memory size",
            Some(&Unit::Bytes),
            stat.virtual_bytes as f64,
        )?;
        gauge(
            e,
            "process_threads",
            "Number of OS threads",
            None,
            stat.threads as f64,
        )?;
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle being read is itself one of the entries.
            let open = entries.count().saturating_sub(1);
            gauge(
                e,
                "process_open_fds",
                "Number of open file descriptors",
                None,
                open as f64,
            )?;
        }
        if let Some(max) = read("/proc/self/limits")
            .as_deref()
            .and_then(max_open_files)
        {
            let help = "Maximum number of open file descriptors";
            gauge(e, "process_max_fds", help, None, max as f64)?;
        }
        if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
            gauge(
                e,
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(&Unit::Seconds),
                boot as f64 + stat.start_ticks as f64 / TICKS_PER_SECOND,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_are_counted_from_the_command_name() {
        // A command name with a space and a parenthesis, as a process may set.
        let line = "4242 (gate way) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    150 50 0 0 20 0 3 0 123456 104857600 2560 18446744073709551615";
        assert_eq!(
            parse_proc_stat(line),
            Some(ProcStat {
                cpu_ticks: 200,
                threads: 3,
                start_ticks: 123456,
                virtual_bytes: 104857600,
                rss_pages: 2560,
            })
        );
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(boot_time("cpu 1 2 3\nbtime 1700000000\n"), Some(1700000000));
        let limits = "Limit  Soft Limit  Hard Limit  Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files("Max open files  unlimited  unlimited  files\n"),
            None
        );
    }

    #[test]
    fn the_own_process_is_measured() {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        let stat = parse_proc_stat(&stat).expect("parsable");
        assert!(stat.rss_pages > 0 && stat.threads >= 1);
        assert!(stat.virtual_bytes >= stat.rss_pages * PAGE_SIZE);
        let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
        assert!(max_open_files(&limits).is_some_and(|max| max > 0));
    }
}
