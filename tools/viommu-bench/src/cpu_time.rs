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

use crate::columns::Column;
use crate::guest::FioRecord;
use crate::plan::Phase;
use crate::results::CellResult;

/// Microseconds per /proc/stat tick: USER_HZ is 100 on every Linux
/// architecture we run on (x86-64, arm64), whatever CONFIG_HZ is.
const US_PER_TICK: f64 = 10_000.0;

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

    fn total(&self) -> u64 {
        self.user + self.system + self.irq + self.idle + self.guest
    }

    /// The guest's CPU times from its counters (`cpu/user`, `cpu/system`,
    /// `cpu/irq`, `cpu/idle`: deltas, a counter that did not move left
    /// out), or None if the guest reported none.
    fn of_guest(f: &FioRecord) -> Option<Self> {
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

/// One column in one phase: CPU microseconds per I/O and idle shares,
/// medians over rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// The guest's busy time (user + kernel + interrupts) per I/O, if the
    /// guest reported it.
    pub guest_busy_us: Option<f64>,
    /// Share of the guest's CPU time it was idle.
    pub guest_idle: Option<f64>,
    /// The host's time in guests (the VM's vCPUs in guest mode) per I/O.
    pub host_guest_us: Option<f64>,
    /// The host kernel's time (system + interrupts: KVM's exits, VFIO,
    /// the VMM's system calls) per I/O.
    pub host_kernel_us: Option<f64>,
    /// The host's user space per I/O (the VMM's own code, and anything
    /// else running).
    pub host_user_us: Option<f64>,
    /// Share of the host's CPU time it was idle.
    pub host_idle: Option<f64>,
}

/// One row per column and phase that reported CPU times, in phase order.
pub fn rows(columns: &[Column], phases: &[Phase], cells: &[CellResult]) -> Vec<CpuRow> {
    crate::report::phase_medians(columns, phases, cells, |p, f, ios| {
        let us = |ticks: u64| Some(ticks as f64 * US_PER_TICK / ios);
        let share = |part: u64, t: &CpuTimes| Some(part as f64 / t.total().max(1) as f64);
        let g = CpuTimes::of_guest(f);
        let h = p.host_cpu.filter(|h| h.total() > 0);
        [
            g.and_then(|g| us(g.user + g.system + g.irq)),
            g.and_then(|g| share(g.idle, &g)),
            h.and_then(|h| us(h.guest)),
            h.and_then(|h| us(h.system + h.irq)),
            h.and_then(|h| us(h.user)),
            h.and_then(|h| share(h.idle, &h)),
        ]
    })
    .into_iter()
    .map(|(phase, column, m)| CpuRow {
        phase,
        column,
        guest_busy_us: m[0],
        guest_idle: m[1],
        host_guest_us: m[2],
        host_kernel_us: m[3],
        host_user_us: m[4],
        host_idle: m[5],
    })
    .collect()
}

/// The table's header.
pub const HEADER: [&str; 8] = [
    "phase",
    "column",
    "guest busy us/IO",
    "guest idle",
    "host: in guests us/IO",
    "host kernel us/IO",
    "host user us/IO",
    "host idle",
];

/// The table's cells of one row ("-": not reported).
pub fn cells(r: &CpuRow) -> Vec<String> {
    let us = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.0}"));
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
    vec![
        r.phase.clone(),
        r.column.clone(),
        us(r.guest_busy_us),
        pct(r.guest_idle),
        us(r.host_guest_us),
        us(r.host_kernel_us),
        us(r.host_user_us),
        pct(r.host_idle),
    ]
}

/// What the table shows, for the Markdown report.
pub const NOTE: &str = "Where the CPU time goes (the guest's /proc/stat over the phase, and the host's from the phase's begin to its end marker, host-wide; CPU microseconds summed over CPUs per I/O, medians over rounds; 10 ms ticks; when the host has no idle time left, the CPU time per I/O sets the IOPS)";

#[cfg(test)]
mod tests;
