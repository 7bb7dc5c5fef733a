//! The CPU time section: where the CPU time of a measured phase goes, per
//! I/O, the guest's and the host's.

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::plan::Phase;
use crate::run::cpu_time::{CpuTimes, US_PER_TICK};
use crate::run::results::CellResult;

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
    crate::report::cells::phase_medians(columns, phases, cells, |p, f, ios| {
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
