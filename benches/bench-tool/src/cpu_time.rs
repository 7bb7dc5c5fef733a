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
mod tests {
    use super::*;
    use crate::report::tests::cell;

    #[test]
    fn proc_stat_lines() {
        let t = CpuTimes::parse(
            "cpu  100 5 30 400 10 2 3 0 60 0\ncpu0 50 2 15 200 5 1 1 0 30 0\nintr 1\n",
        )
        .unwrap();
        assert_eq!(
            t,
            CpuTimes {
                user: 45,
                system: 30,
                irq: 5,
                idle: 410,
                guest: 60
            }
        );
        // An old kernel's shorter line, and nonsense.
        assert_eq!(CpuTimes::parse("cpu 1 2 3 4").unwrap().idle, 4);
        assert_eq!(CpuTimes::parse("intr 1 2\n"), None);
        let later = CpuTimes { idle: 500, ..t };
        assert_eq!(later.since(&t).idle, 90);
        assert_eq!(
            t.since(&later).idle,
            0,
            "a counter going back is 0, not a wrap"
        );
    }

    #[test]
    fn per_io_medians_of_guest_and_host() {
        let cols = crate::report::tests::cols(&["ours+patched-lazy", "no-viommu"]);
        let ph = crate::report::tests::phase_4k();
        // The fixture's phase did 1000 I/Os (4000 KiB at 4k).
        let mk = |col: &str, round: u32, guest_busy: i64, host_guest: u64| {
            let mut c = cell(col, round, 100, None, false);
            let p = c.phases.get_mut("randread-4k").unwrap();
            let f = p.fio.as_mut().unwrap();
            assert_eq!(f.read_kib, 4000, "the fixture's I/O count changed");
            f.counters.insert("cpu/user".into(), guest_busy / 2);
            f.counters.insert("cpu/system".into(), guest_busy / 2);
            f.counters.insert("cpu/idle".into(), 100 - guest_busy);
            p.host_cpu = Some(CpuTimes {
                user: 10,
                system: 20,
                irq: 0,
                idle: 0,
                guest: host_guest,
            });
            c
        };
        let all = vec![
            mk("ours+patched-lazy", 0, 40, 160),
            mk("ours+patched-lazy", 1, 60, 170),
            mk("ours+patched-lazy", 2, 80, 180),
            // The ceiling's guest without the cpu/* counters (an old init).
            {
                let mut c = mk("no-viommu", 0, 0, 100);
                let f = c
                    .phases
                    .get_mut("randread-4k")
                    .unwrap()
                    .fio
                    .as_mut()
                    .unwrap();
                f.counters.retain(|k, _| !k.starts_with("cpu/"));
                c
            },
        ];
        let rows = rows(&cols, &[ph], &all);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let r = &rows[0];
        assert_eq!(r.column, "ours+patched-lazy");
        // 60 ticks of 10 ms over 1000 I/Os: 600 us per I/O.
        assert!((r.guest_busy_us.unwrap() - 600.0).abs() < 1e-6, "{r:?}");
        assert!((r.guest_idle.unwrap() - 0.4).abs() < 1e-9, "{r:?}");
        assert!((r.host_guest_us.unwrap() - 1700.0).abs() < 1e-6, "{r:?}");
        assert!((r.host_kernel_us.unwrap() - 200.0).abs() < 1e-6, "{r:?}");
        assert_eq!(r.host_idle, Some(0.0));
        let c = &rows[1];
        assert_eq!(c.guest_busy_us, None, "{c:?}");
        assert_eq!(cells(c)[2], "-");
        assert_eq!(cells(c)[4], "1000");
    }
}
