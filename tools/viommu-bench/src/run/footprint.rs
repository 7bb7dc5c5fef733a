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
//! Of guest RAM, its resident part and the part in transparent huge pages
//! (`AnonHugePages:`) are kept as well: how much of a guest's RAM the
//! host backed with 2 MiB pages depends on what the host's memory looked
//! like when the guest booted, and it changes what the guest's DMA and
//! (under nested emulation) its every memory access cost.

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
    /// Peak resident guest RAM (the mappings the module calls guest
    /// RAM), KiB. Older results lack it.
    #[serde(default)]
    pub peak_guest_rss_kib: u64,
    /// Peak of that guest RAM in transparent huge pages (their
    /// `AnonHugePages:`), KiB. Older results lack it.
    #[serde(default)]
    pub peak_guest_thp_kib: u64,
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
        self.add_sample(&smaps_kib(&smaps), status_kib(&status, "VmHWM:"));
        let huge = status_kib(&status, "HugetlbPages:").unwrap_or(0);
        self.peak_hugetlb_kib = self.peak_hugetlb_kib.max(huge);
        true
    }

    fn add_sample(&mut self, m: &SmapsKib, hwm_kib: Option<u64>) {
        self.samples += 1;
        self.peak_own_rss_kib = self.peak_own_rss_kib.max(m.own_rss);
        self.peak_guest_rss_kib = self.peak_guest_rss_kib.max(m.guest_rss);
        self.peak_guest_thp_kib = self.peak_guest_thp_kib.max(m.guest_thp);
        if let Some(h) = hwm_kib {
            self.peak_rss_kib = self.peak_rss_kib.max(h);
        }
    }
}

/// One `/proc/PID/smaps` read, summed, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmapsKib {
    /// `Rss:` of the VMM's own mappings (not guest RAM).
    pub own_rss: u64,
    /// `Rss:` of guest RAM.
    pub guest_rss: u64,
    /// `AnonHugePages:` of guest RAM.
    pub guest_thp: u64,
}

/// The value in KiB of `key` (e.g. `VmHWM:`) in a `/proc/PID/status` text.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(value_kib)
}

/// The number that opens a `/proc` value such as `   1331200 kB`.
fn value_kib(v: &str) -> Option<u64> {
    v.split_whitespace().next()?.parse().ok()
}

/// A `/proc/PID/smaps` text summed: the VMM's own `Rss:`, and guest RAM's
/// (mappings of [`GUEST_RAM_MIN_BYTES`] or more that are not `[heap]`)
/// `Rss:` and `AnonHugePages:`.
pub fn smaps_kib(smaps: &str) -> SmapsKib {
    let mut m = SmapsKib::default();
    let mut guest = false;
    let kib = |v: &str| value_kib(v).unwrap_or(0);
    for line in smaps.lines() {
        if let Some(size) = mapping_size(line) {
            guest = size >= GUEST_RAM_MIN_BYTES && !line.trim_end().ends_with("[heap]");
        } else if let Some(v) = line.strip_prefix("Rss:") {
            if guest {
                m.guest_rss += kib(v);
            } else {
                m.own_rss += kib(v);
            }
        } else if let Some(v) = line.strip_prefix("AnonHugePages:") {
            if guest {
                m.guest_thp += kib(v);
            }
        }
    }
    m
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
