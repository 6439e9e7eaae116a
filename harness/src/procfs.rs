//! CPU time and memory of processes, from Linux `/proc`.
//!
//! CPU time is `utime + stime` of `/proc/PID/stat`: every thread of the
//! process, user and kernel, in clock ticks (`getconf CLK_TCK`, 100 on every
//! usual Linux). Memory is `VmRSS` (resident now) and `VmHWM` (peak
//! resident) of `/proc/PID/status`.

use std::io;
use std::ops::Add;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The fields of `/proc/PID/stat` the benchmark needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Parent process.
    pub ppid: u32,
    /// `utime + stime`, in clock ticks.
    pub cpu_ticks: u64,
}

/// Resident memory of a process (or the sum over several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// `VmRSS`: resident now, KiB.
    pub rss_kib: u64,
    /// `VmHWM`: peak resident, KiB.
    pub hwm_kib: u64,
}

impl Add for Memory {
    type Output = Memory;

    fn add(self, other: Memory) -> Memory {
        Memory {
            rss_kib: self.rss_kib + other.rss_kib,
            hwm_kib: self.hwm_kib + other.hwm_kib,
        }
    }
}

/// Parses the content of `/proc/PID/stat`. The command name, in
/// parentheses, may hold spaces and parentheses itself, so fields are
/// counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) … utime(14) stime(15), 1-based over the whole line.
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        cpu_ticks: utime + stime,
    })
}

/// Parses `VmRSS` and `VmHWM` from the content of `/proc/PID/status`.
pub fn parse_status_memory(status: &str) -> Option<Memory> {
    let kib = |key: &str| {
        status.lines().find_map(|line| {
            let value = line.strip_prefix(key)?.strip_prefix(':')?;
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(Memory {
        rss_kib: kib("VmRSS")?,
        hwm_kib: kib("VmHWM")?,
    })
}

fn invalid(pid: u32, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("cannot read {what} of process {pid}"),
    )
}

/// `/proc/PID/stat` of a running process.
pub fn read_stat(pid: u32) -> io::Result<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat).ok_or_else(|| invalid(pid, "/proc/PID/stat"))
}

/// Memory of a running process.
pub fn read_memory(pid: u32) -> io::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status_memory(&status).ok_or_else(|| invalid(pid, "VmRSS/VmHWM"))
}

/// The direct children of `pid` (e.g. nginx's workers), by scanning the
/// parent of every process in `/proc`.
pub fn children(pid: u32) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(child) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go while we scan; skip the ones that went.
        if let Ok(stat) = read_stat(child)
            && stat.ppid == pid
        {
            found.push(child);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// `pid` and its direct children.
pub fn process_group(pid: u32) -> io::Result<Vec<u32>> {
    let mut pids = vec![pid];
    pids.extend(children(pid)?);
    Ok(pids)
}

/// CPU ticks summed over `pids`; processes that exited are skipped.
pub fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|&pid| read_stat(pid).ok())
        .map(|stat| stat.cpu_ticks)
        .sum()
}

/// Memory summed over `pids`; processes that exited are skipped.
pub fn memory(pids: &[u32]) -> Memory {
    pids.iter()
        .filter_map(|&pid| read_memory(pid).ok())
        .fold(Memory::default(), Add::add)
}

/// Clock ticks per second for `/proc/PID/stat` CPU times: `getconf CLK_TCK`,
/// else 100 (the value on every mainstream Linux architecture).
pub fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .filter(|&ticks: &u64| ticks > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_an_awkward_name() {
        let stat = "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 1071 0 0 0 250 31 0 0 20 0 5 0 \
                    123456 12345678 900 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(stat),
            Some(ProcStat {
                ppid: 17,
                cpu_ticks: 281
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn status_memory() {
        let status = "Name:\tnginx\nVmPeak:\t  20000 kB\nVmHWM:\t    9876 kB\nVmRSS:\t    5432 kB\nThreads:\t1\n";
        assert_eq!(
            parse_status_memory(status),
            Some(Memory {
                rss_kib: 5432,
                hwm_kib: 9876
            })
        );
        // Kernel threads have no VmRSS.
        assert_eq!(parse_status_memory("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn this_process_is_readable() {
        let pid = std::process::id();
        let stat = read_stat(pid).expect("own stat");
        assert!(stat.ppid > 0);
        let memory = read_memory(pid).expect("own status");
        assert!(memory.rss_kib > 0 && memory.hwm_kib >= memory.rss_kib);
        assert!(clock_ticks_per_second() > 0);
        assert!(process_group(pid).expect("scan /proc").contains(&pid));
    }
}
