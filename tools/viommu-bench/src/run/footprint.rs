//! What the VMM process itself cost while a cell ran: the lines it logged
//! and its resident memory apart from guest RAM. A guest must not be able
//! to grow either without bound (the lab's `hostile` scenario compares a
//! guest that attacks the VMM with one that does not).
//!
//! Memory is sampled from `/proc/PID/smaps` about once a second while the
//! VMM runs: every mapping's `Rss:` counts except those of
//! [`GUEST_RAM_MIN_BYTES`] or more that are not the brk heap, which are
//! guest RAM (one anonymous mapping per RAM region; the VMM's own
//! allocations are the heap, glibc's per-thread arenas of at most 64 MiB,
//! thread stacks and small mappings). `VmHWM` of `/proc/PID/status`, the
//! whole process's peak, is kept too, and its `HugetlbPages`: guest RAM
//! from hugetlbfs (`--hugepages`), which neither of the others counts.

use serde::{Deserialize, Serialize};

/// Mappings this large (or larger), other than `[heap]`, are guest RAM.
/// The bench tool's guests have at least that (`--guest-memory`, 256M at
/// least); glibc's arenas and thread stacks stay below 64 MiB each.
pub const GUEST_RAM_MIN_BYTES: u64 = 256 << 20;

/// The rate limiter's line when it dropped guest-triggered warnings
/// (`viommu_device::ratelimit`).
pub const RATE_LIMITED: &str = "guest-triggered warnings dropped";

/// The VMM's log and memory over one cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Lines the VMM wrote to stderr.
    pub log_lines: u64,
    /// Of those, the rate limiter's reports of dropped guest-triggered
    /// warnings: a guest did flood, and was cut.
    pub rate_limited_lines: u64,
    /// Lines with `ERROR` the VMM wrote after the guest said it was done
    /// (the release: device reset, unmaps, group release).
    pub errors_after_done: u64,
    /// Peak resident set of the whole process (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
    /// Peak resident set apart from guest RAM (see the module), KiB.
    pub peak_own_rss_kib: u64,
    /// Peak of the process's hugetlbfs pages in use (`HugetlbPages` of
    /// `/proc/PID/status`), KiB: with `--hugepages`, the guest RAM the
    /// VMM really took from huge pages. Older results lack it.
    #[serde(default)]
    pub peak_hugetlb_kib: u64,
    /// Memory samples taken (0: the process was never seen, e.g. it
    /// exited at once, or /proc/PID/smaps is missing).
    pub samples: u32,
}

impl Footprint {
    /// Counts one line the VMM wrote to stderr; `done` once the guest
    /// reported its end.
    pub fn log_line(&mut self, line: &str, done: bool) {
        self.log_lines += 1;
        if line.contains(RATE_LIMITED) {
            self.rate_limited_lines += 1;
        }
        if done && line.contains("ERROR") {
            self.errors_after_done += 1;
        }
    }

    /// Takes one memory sample of process `pid`; false when it cannot be
    /// read (gone, or no smaps).
    pub fn sample(&mut self, pid: u32) -> bool {
        let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
            return false;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        self.add_sample(own_rss_kib(&smaps), status_kib(&status, "VmHWM:"));
        let huge = status_kib(&status, "HugetlbPages:").unwrap_or(0);
        self.peak_hugetlb_kib = self.peak_hugetlb_kib.max(huge);
        true
    }

    fn add_sample(&mut self, own_kib: u64, hwm_kib: Option<u64>) {
        self.samples += 1;
        self.peak_own_rss_kib = self.peak_own_rss_kib.max(own_kib);
        if let Some(h) = hwm_kib {
            self.peak_rss_kib = self.peak_rss_kib.max(h);
        }
    }
}

/// The value in KiB of `key` (e.g. `VmHWM:`) in a `/proc/PID/status` text.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The `Rss:` of every mapping of a `/proc/PID/smaps` text, in KiB, but
/// those of [`GUEST_RAM_MIN_BYTES`] or more that are not `[heap]`.
pub fn own_rss_kib(smaps: &str) -> u64 {
    let mut total = 0u64;
    let mut counted = false;
    for line in smaps.lines() {
        if let Some(size) = mapping_size(line) {
            counted = size < GUEST_RAM_MIN_BYTES || line.trim_end().ends_with("[heap]");
        } else if let Some(v) = line.strip_prefix("Rss:") {
            if counted {
                total += v
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// The size of the mapping a smaps header line (`START-END perms ...`)
/// names; None for other lines.
fn mapping_size(line: &str) -> Option<u64> {
    let range = line.split_whitespace().next()?;
    let (a, b) = range.split_once('-')?;
    let a = u64::from_str_radix(a, 16).ok()?;
    let b = u64::from_str_radix(b, 16).ok()?;
    b.checked_sub(a)
}

#[cfg(test)]
mod tests;
