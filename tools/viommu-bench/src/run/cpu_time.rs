//! Where the CPU time of a measured phase goes, per I/O: the guest's own
//! (its /proc/stat, which the guest's init reports with its counters as
//! `cpu/*`) and the host's (the bench host's /proc/stat read when the
//! phase's begin and end markers arrive).
//!
//! When the host's CPUs have no idle time left (always, under the lab's
//! emulation), the CPU time one I/O takes sets the IOPS: two columns whose
//! guests do the same I/O differ by what this table shows. On a real host
//! with idle CPUs, the table says how much CPU each column spends per I/O.

use serde::{Deserialize, Serialize};

use crate::run::guest::FioRecord;

/// Microseconds per /proc/stat tick: USER_HZ is 100 on every Linux
/// architecture we run on (x86-64, arm64), whatever CONFIG_HZ is.
pub const US_PER_TICK: f64 = 10_000.0;

/// CPU time summed over all CPUs, in /proc/stat ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// User space (user + nice), guests' time excluded.
    pub user: u64,
    /// The kernel, outside interrupts.
    pub system: u64,
    /// Hard and soft interrupts.
    pub irq: u64,
    /// Idle (idle + iowait).
    pub idle: u64,
    /// Running guests (KVM's guest + guest_nice).
    pub guest: u64,
}

impl CpuTimes {
    /// The `cpu` line of a /proc/stat text, or None if it has none.
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        let guest = at(8) + at(9);
        Some(Self {
            // The kernel counts guest time in user time too.
            user: (at(0) + at(1)).saturating_sub(guest),
            system: at(2),
            irq: at(5) + at(6),
            idle: at(3) + at(4),
            guest,
        })
    }

    /// This host's CPU times now (None where /proc/stat cannot be read).
    pub fn read_host() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The time spent between `begin` and `self`.
    pub fn since(&self, begin: &Self) -> Self {
        Self {
            user: self.user.saturating_sub(begin.user),
            system: self.system.saturating_sub(begin.system),
            irq: self.irq.saturating_sub(begin.irq),
            idle: self.idle.saturating_sub(begin.idle),
            guest: self.guest.saturating_sub(begin.guest),
        }
    }

    /// All the CPU time, idle included.
    pub fn total(&self) -> u64 {
        self.user + self.system + self.irq + self.idle + self.guest
    }

    /// The guest's CPU times from its counters (`cpu/user`, `cpu/system`,
    /// `cpu/irq`, `cpu/idle`: deltas, a counter that did not move left
    /// out), or None if the guest reported none.
    pub fn of_guest(f: &FioRecord) -> Option<Self> {
        let get = |k: &str| f.counters.get(&format!("cpu/{k}")).copied();
        let any = ["user", "system", "irq", "idle"]
            .iter()
            .any(|k| get(k).is_some());
        let t = |k: &str| get(k).unwrap_or(0).max(0) as u64;
        any.then(|| Self {
            user: t("user"),
            system: t("system"),
            irq: t("irq"),
            idle: t("idle"),
            guest: 0,
        })
    }
}

#[cfg(test)]
mod tests;
