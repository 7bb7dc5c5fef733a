//! The breakdown section (`--breakdown`): where a request's time goes in
//! the VMM, per phase and column, medians over rounds.

use serde::{Deserialize, Serialize};

/// Where one column's virtio-iommu request time goes in one measured
/// phase, from its untimed breakdown pass (medians over rounds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BreakdownRow {
    /// The measured phase.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// Requests per I/O over the window.
    pub requests_per_io: Option<f64>,
    /// The requests are stock QEMU's lower bounds (from its counting
    /// pass), so every per-request value is an upper bound.
    pub requests_lower_bound: bool,
    /// MMIO and port write exits (the guest's notifications) per request.
    #[serde(alias = "mmio_exits_per_request")]
    pub write_exits_per_request: Option<f64>,
    /// Wake-ups of the serving thread per request.
    pub wakeups_per_request: Option<f64>,
    /// Mean wake-up latency (waking to on a CPU), us.
    pub wake_latency_us: Option<f64>,
    /// The serving thread's run time per request, us.
    pub run_us_per_request: Option<f64>,
    /// Its run time per I/O, us.
    pub run_us_per_io: Option<f64>,
    /// Its ioctls per request.
    pub ioctls_per_request: Option<f64>,
    /// Mean time of one ioctl, entry to return, us.
    pub ioctl_us: Option<f64>,
    /// Page pinning inside them per request, us (kprobes; None: not traced).
    pub pin_us_per_request: Option<f64>,
    /// Run time outside ioctls per request, us: drain, planning,
    /// completion (used ring, the interrupt's eventfd write), and the
    /// wake-up's and the sleep's own kernel time.
    pub rest_us_per_request: Option<f64>,
    /// Run time over the window's wall time (0-1).
    pub run_share: Option<f64>,
    /// Window analysed, ms.
    pub window_ms: Option<f64>,
    /// Events missing from the record in the worst round (lost, dropped).
    pub missing_events: u64,
    /// Rounds that gave a breakdown.
    pub rounds: u32,
}

/// The breakdown rows of every vIOMMU column and measured phase that had a
/// breakdown pass, in phase order.
pub fn rows(
    columns: &[crate::columns::Column],
    phases: &[crate::plan::Phase],
    cells: &[crate::run::results::CellResult],
) -> Vec<BreakdownRow> {
    let mut out = Vec::new();
    for ph in phases {
        let bname = crate::plan::breakdown_phase_name(&ph.name);
        for col in columns
            .iter()
            .filter(|c| c.iommu == crate::columns::Iommu::Viommu)
        {
            let mut v: [Vec<f64>; 12] = Default::default();
            let (mut lower, mut missing, mut rounds) = (false, 0u64, 0u32);
            for c in cells.iter().filter(|c| c.column == col.tag) {
                let Some(p) = crate::report::cells::usable(c, &bname) else {
                    continue;
                };
                let (Some(b), Some(f)) = (p.breakdown.as_ref(), p.fio.as_ref()) else {
                    continue;
                };
                let Some(s) = b.server() else { continue };
                let win = b.analysis.window_ns();
                if win == 0 {
                    continue;
                }
                rounds += 1;
                missing = missing.max(b.missing_events());
                let ios = f.iops() as f64 * win as f64 / 1e9;
                let req = match &b.device {
                    Some(d) => {
                        let share = if b.traced_ns > 0 {
                            (win as f64 / b.traced_ns as f64).min(1.0)
                        } else {
                            1.0
                        };
                        Some(d.requests() as f64 * share)
                    }
                    None => {
                        // Stock QEMU: requests per I/O of its counting pass.
                        let cp = c.phases.get(&crate::plan::count_phase_name(&ph.name));
                        cp.and_then(|r| {
                            let cf = r.fio.as_ref().filter(|f| f.error == 0)?;
                            let n = crate::report::cells::ios_of(cf, ph);
                            (n > 0.0).then(|| r.device.map(|d| d.requests() as f64 / n * ios))?
                        })
                        .inspect(|_| lower = true)
                    }
                }
                .filter(|r| *r > 0.0);
                let per_req = |x: f64| req.map(|r| x / r);
                let io = s.all_ioctls();
                let us = |ns: u64| ns as f64 / 1e3;
                let vals = [
                    req.filter(|_| ios > 0.0).map(|r| r / ios),
                    b.analysis.write_exits.and_then(|m| per_req(m as f64)),
                    per_req(s.wakeups as f64),
                    (s.wakeups_timed > 0).then(|| us(s.wake_latency_ns) / s.wakeups_timed as f64),
                    per_req(us(s.run_ns)),
                    (ios > 0.0).then(|| us(s.run_ns) / ios),
                    per_req(io.count as f64),
                    (io.count > 0).then(|| us(io.ns) / io.count as f64),
                    if b.pins_missing.is_none() {
                        per_req(us(s.pins.ns))
                    } else {
                        None
                    },
                    per_req(us(s.run_ns.saturating_sub(io.on_cpu_ns))),
                    Some(s.run_ns as f64 / win as f64),
                    Some(win as f64 / 1e6),
                ];
                for (x, y) in v.iter_mut().zip(vals) {
                    x.extend(y);
                }
            }
            if rounds == 0 {
                continue;
            }
            let m = |x: &[f64]| crate::report::stats::Spread::of(x).map(|s| s.median);
            out.push(BreakdownRow {
                phase: ph.name.clone(),
                column: col.tag.clone(),
                requests_per_io: m(&v[0]),
                requests_lower_bound: lower,
                write_exits_per_request: m(&v[1]),
                wakeups_per_request: m(&v[2]),
                wake_latency_us: m(&v[3]),
                run_us_per_request: m(&v[4]),
                run_us_per_io: m(&v[5]),
                ioctls_per_request: m(&v[6]),
                ioctl_us: m(&v[7]),
                pin_us_per_request: m(&v[8]),
                rest_us_per_request: m(&v[9]),
                run_share: m(&v[10]),
                window_ms: m(&v[11]),
                missing_events: missing,
                rounds,
            });
        }
    }
    out
}

/// The table's header.
pub const HEADER: [&str; 16] = [
    "phase",
    "column",
    "requests/IO",
    "write exits/req",
    "wake-ups/req",
    "wake-up us",
    "run us/req",
    "run us/IO",
    "ioctls/req",
    "us/ioctl",
    "pinning us/req",
    "rest us/req",
    "run (of wall)",
    "window ms",
    "missing events",
    "rounds",
];

/// The table's cells of one row: `-` not measured; per-request values of
/// stock QEMU `<=` (its requests are lower bounds), its requests `>=`.
pub fn cells(r: &BreakdownRow) -> Vec<String> {
    let (ge, le) = if r.requests_lower_bound {
        (">=", "<=")
    } else {
        ("", "")
    };
    let f =
        |x: Option<f64>, p: usize, mark: &str| x.map_or("-".into(), |v| format!("{mark}{v:.p$}"));
    vec![
        r.phase.clone(),
        r.column.clone(),
        f(r.requests_per_io, 2, ge),
        f(r.write_exits_per_request, 2, le),
        f(r.wakeups_per_request, 2, le),
        f(r.wake_latency_us, 1, ""),
        f(r.run_us_per_request, 1, le),
        f(r.run_us_per_io, 1, ""),
        f(r.ioctls_per_request, 2, le),
        f(r.ioctl_us, 1, ""),
        f(r.pin_us_per_request, 1, le),
        f(r.rest_us_per_request, 1, le),
        r.run_share
            .map_or("-".into(), |v| format!("{:.0}%", v * 100.0)),
        f(r.window_ms, 0, ""),
        if r.missing_events > 0 {
            format!("{} (lower bounds)", r.missing_events)
        } else {
            "0".into()
        },
        r.rounds.to_string(),
    ]
}

/// What the table shows, for the Markdown report.
pub const NOTE: &str = "Where a request's time goes in the VMM (--breakdown: the host's tracefs over an untimed pass of each fio job after the timed ones, recording only the VMM's threads; medians over rounds). The request-serving thread is ours' `viommu` and, for stock QEMU, the thread that made the VFIO/iommufd map and unmap ioctls. requests/IO: ours' device counters over the traced window (exact), stock QEMU's from its counting pass (`>=`, lower bounds, so its per-request values are upper bounds, `<=`); I/Os = the pass's fio IOPS x the window. write exits: the guest's MMIO and port writes that exit to KVM (kvm_fast_mmio and kvm_mmio writes, kvm_pio writes at port 0x1000 and above where PCI I/O BARs are: the notifications, by MMIO or port, and any other MMIO or BAR write; not the console or other fixed PC ports). wake-up us: sched_waking to the thread's switch-in. run: the thread on a CPU. us/ioctl: entry to return (raw_syscalls); pinning: time in pin_user_pages_remote/_fast inside them (kprobes; `-` where the host has no kprobe events); rest: run time outside ioctls (drain, planning, completion and interrupt, the wake-up's and the sleep's own kernel time). missing events: lost or dropped by the trace buffer in a round: counts and times of that round are lower bounds";

#[cfg(test)]
mod tests;
