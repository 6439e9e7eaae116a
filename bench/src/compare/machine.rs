//! The machine a run measured on, from Linux `/proc`: the CPU model, the
//! cores, the kernel and the load average, recorded with the results so a
//! figure is never read without the machine it came from.

use serde::{Deserialize, Serialize};

/// The 1, 5 and 15 minute load averages of `/proc/loadavg`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadAverage(pub f64, pub f64, pub f64);

/// The `model name` of the first processor in `/proc/cpuinfo`.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// The first three fields of `/proc/loadavg`
/// (`0.52 0.58 0.59 1/467 12345`).
pub fn parse_load_average(loadavg: &str) -> Option<LoadAverage> {
    let mut fields = loadavg.split_whitespace().map(str::parse::<f64>);
    Some(LoadAverage(
        fields.next()?.ok()?,
        fields.next()?.ok()?,
        fields.next()?.ok()?,
    ))
}

/// The CPU model, when `/proc/cpuinfo` names one.
pub fn cpu_model() -> Option<String> {
    parse_cpu_model(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// The load average now.
pub fn load_average() -> Option<LoadAverage> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The kernel release (`/proc/sys/kernel/osrelease`, as `uname -r`).
pub fn kernel() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|release| release.trim().to_owned())
        .filter(|release| !release.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_of_the_first_processor() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\
                       \nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(
            parse_cpu_model(cpuinfo).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        // Some architectures have no model name.
        assert_eq!(parse_cpu_model("processor : 0\nBogoMIPS : 50.00\n"), None);
    }

    #[test]
    fn load_averages() {
        assert_eq!(
            parse_load_average("0.52 1.58 2.59 1/467 12345\n"),
            Some(LoadAverage(0.52, 1.58, 2.59))
        );
        assert_eq!(parse_load_average("0.52 x"), None);
        assert_eq!(parse_load_average(""), None);
    }

    #[test]
    fn this_machine_is_readable() {
        assert!(load_average().is_some());
        assert!(kernel().is_some());
    }
}
