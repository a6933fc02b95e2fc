//! What /proc says about a process: its resident set size and the CPU it has used. The one
//! reader of both, shared by the server's `/metrics`, the load-test harness (which samples a
//! server by pid) and the memory tests. The only I/O in this crate; `None` where /proc is
//! unavailable or the process is gone.

/// Linux reports `utime` / `stime` in clock ticks of 1/100 s (`USER_HZ`, fixed by its ABI).
const TICKS_PER_SECOND: f64 = 100.0;

/// Resident set size of process `pid` (`"self"` for this one) in KiB (`VmRSS`).
pub fn rss_kib(pid: impl std::fmt::Display) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU seconds process `pid` (`"self"` for this one) has used so far, user + system
/// (`utime` + `stime` of `/proc/<pid>/stat`, 10 ms resolution).
pub fn cpu_seconds(pid: impl std::fmt::Display) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_from_stat(&stat)
}

/// `utime` + `stime` of one /proc/<pid>/stat line, in seconds.
fn cpu_from_stat(stat: &str) -> Option<f64> {
    // The command name is in parentheses and may hold spaces: count fields after the last
    // ')'. There, state is the first field and utime, stime the 12th and 13th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_resident_set_and_used_cpu() {
        assert!(rss_kib("self").is_some_and(|k| k > 0));
        assert!(cpu_seconds(std::process::id()).is_some());
        assert_eq!(rss_kib(u32::MAX), None);
    }

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis must not shift the fields.
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 9 1 1";
        assert_eq!(cpu_from_stat(stat), Some(3.25));
        assert_eq!(cpu_from_stat("42 (x) S 1"), None);
    }
}
