//! What a run will do: the cells (column x round, in a balanced order), the
//! guest command line, the measured phases, and how long it should take.

use std::time::Duration;

use crate::cli::{Config, Mode, Precondition};

/// `b` as `N GiB` or `N MiB`.
fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else {
        format!("{} MiB", b >> 20)
    }
}

/// The sequential write speed the estimates assume for preconditioning.
const PRECONDITION_BYTES_PER_S: u64 = 1 << 30;

/// How many bytes each guest writes before measuring, if known: --span
/// (capped at the drive's size when known), the drive's size, or nothing.
pub fn precondition_bytes(cfg: &Config) -> Option<u64> {
    match cfg.args.precondition {
        Precondition::None => None,
        Precondition::Span => Some(
            cfg.drive_bytes
                .map_or(cfg.span_bytes, |d| d.min(cfg.span_bytes)),
        ),
        Precondition::Full => cfg.drive_bytes,
    }
}

/// What preconditioning does, for the plan the tool prints.
pub fn precondition_note(cfg: &Config) -> String {
    let per_vm = |b: u64| {
        format!(
            "about {} s per VM at 1 GiB/s",
            b.div_ceil(PRECONDITION_BYTES_PER_S)
        )
    };
    match (cfg.args.precondition, precondition_bytes(cfg)) {
        (Precondition::None, _) => "no preconditioning (--precondition none): the measured reads may meet never-written blocks, which a drive can answer without touching flash".into(),
        (Precondition::Span, Some(b)) => format!(
            "each VM first writes the drive's first {} sequentially and the measured runs read only those ({})",
            human_bytes(b),
            per_vm(b)
        ),
        (Precondition::Full, Some(b)) => format!(
            "each VM first writes the whole drive, {}, sequentially ({})",
            human_bytes(b),
            per_vm(b)
        ),
        (_, None) => "each VM first writes the whole drive sequentially (its size is unknown here: 1 s per GiB at 1 GiB/s, not in the estimate)".into(),
    }
}

/// Guest debugfs counters reported per phase (the patched guest has them).
pub const GUEST_COUNTERS: &str =
    "/sys/kernel/debug/virtio-iommu,/sys/kernel/debug/iommu-dma-pool,/sys/kernel/debug/iommu-dma-reuse,/sys/kernel/debug/iommu-dma-time";

/// One VM boot: a column in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Round, from 0.
    pub round: u32,
    /// Column index.
    pub column: usize,
}

/// Every cell, round by round, in a balanced order: rounds go in pairs,
/// the pair `k` (rounds `2k` and `2k + 1`) runs the columns from column
/// `k mod n` on, first forwards, then backwards. So every column runs
/// before every other as often as after it (in every pair of rounds) and
/// takes every place in the order alike (over `2n` rounds): a VM that runs
/// faster or slower for running earlier in a host (seen in the lab: the
/// first of two columns up to 15% ahead, whichever it was) and slow drift
/// of the host (heat, background work) hit every column alike. A plain
/// rotation (round `r` starts at column `r mod n`) put each column before
/// the next one in `n - 1` of every `n` rounds.
pub fn rotation(columns: usize, rounds: u32) -> Vec<Cell> {
    rotation_from(columns, 0, rounds)
}

/// [`rotation`] of the rounds `first..first + rounds` (from 0).
pub fn rotation_from(columns: usize, first: u32, rounds: u32) -> Vec<Cell> {
    let n = columns.max(1);
    let mut v = Vec::with_capacity(columns * rounds as usize);
    for round in first..first + rounds {
        let start = (round / 2) as usize % n;
        for i in 0..columns {
            let place = if round % 2 == 0 { i } else { columns - 1 - i };
            v.push(Cell {
                round,
                column: (start + place) % n,
            });
        }
    }
    v
}

/// One measured phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// The guest's name for it.
    pub name: String,
    /// Block size label.
    pub bs: String,
    /// Bytes per I/O.
    pub bs_bytes: u64,
    /// fio jobs.
    pub numjobs: u32,
}

/// The measured phases, in the order the guest runs them.
pub fn phases(cfg: &Config) -> Vec<Phase> {
    if cfg.args.mode == Mode::Smoke {
        return vec![Phase {
            name: run_phase_name("randread", "4k", 1),
            bs: "4k".into(),
            bs_bytes: 4096,
            numjobs: 1,
        }];
    }
    let rw = cfg.args.rw.as_str();
    cfg.numjobs
        .iter()
        .flat_map(|&n| {
            cfg.bs.iter().map(move |b| Phase {
                name: run_phase_name(rw, &b.label, n),
                bs: b.label.clone(),
                bs_bytes: b.bytes,
                numjobs: n,
            })
        })
        .collect()
}

/// The guest kernel command line (before a column's own parameters).
/// `lbs`: the namespace's logical block size as the host saw it, the
/// smallest I/O the guest's mixed-size verify may use (`lab.lbs`; the
/// guest reads its own sysfs first and falls back to this, then 512).
pub fn guest_cmdline(cfg: &Config, lbs: Option<u64>) -> String {
    let a = &cfg.args;
    let bs: Vec<&str> = cfg.bs.iter().map(|b| b.label.as_str()).collect();
    let nj: Vec<String> = cfg.numjobs.iter().map(|n| n.to_string()).collect();
    let idle = if a.idle_ms > 0 {
        format!(" lab.idle_ms={}", a.idle_ms)
    } else {
        String::new()
    };
    let ramp = if a.ramp > 0 {
        format!(" lab.ramp={}", a.ramp)
    } else {
        String::new()
    };
    let lbs = lbs.map(|l| format!(" lab.lbs={l}")).unwrap_or_default();
    let huge = cfg
        .guest_huge_buffers()
        .map(|n| format!(" lab.hugebuf={n}"))
        .unwrap_or_default();
    let pre = match a.precondition {
        Precondition::None => String::new(),
        Precondition::Span => format!(" lab.precondition=span lab.span={}", cfg.span_bytes),
        Precondition::Full => " lab.precondition=full".into(),
    };
    format!(
        "console=ttyS0 quiet panic=-1 lab.mode={} lab.rw={} lab.bs={} lab.runtime={} lab.iodepth={} lab.verify={}M lab.numjobs={} lab.heartbeat=5 lab.counters={GUEST_COUNTERS}{idle}{ramp}{lbs}{pre}{huge}",
        a.mode.as_str(),
        a.rw.as_str(),
        bs.join(","),
        a.runtime,
        a.iodepth,
        cfg.verify_bytes >> 20,
        nj.join(","),
    )
}

/// A rough duration of one cell: boot, the verify passes, the measured runs.
pub fn estimate_cell(cfg: &Config) -> Duration {
    let verifies = match cfg.args.mode {
        Mode::Mixed => 1,
        _ => cfg.bs.len() as u64 + 1,
    };
    let runs = phases(cfg).len() as u64;
    let runtime = match cfg.args.mode {
        Mode::Smoke => 2,
        _ => (cfg.args.runtime + cfg.args.ramp) as u64,
    };
    let pre = precondition_bytes(cfg).map_or(0, |b| b.div_ceil(PRECONDITION_BYTES_PER_S));
    Duration::from_secs(15 + verifies * 3 + pre + runs * (runtime + 2))
}

/// How much longer a cell of a column with untimed counting runs (stock
/// QEMU behind a virtio-iommu) takes: one run per measured run,
/// `--count-runtime` seconds and 2 s more each; nothing with 0, or with
/// a QEMU that writes no trace (the runs are skipped).
pub fn count_pass(cfg: &Config) -> Duration {
    if !cfg.qemu_counts() {
        return Duration::ZERO;
    }
    Duration::from_secs(phases(cfg).len() as u64 * (cfg.args.count_runtime as u64 + 2))
}

/// How much longer a cell of a column behind a virtio-iommu takes with
/// `--breakdown`: one untimed run per measured run, `--count-runtime`
/// seconds and 3 s more each (the guest's gaps, the tracefs instance made,
/// read and removed); nothing without it.
pub fn breakdown_pass(cfg: &Config) -> Duration {
    if !cfg.args.breakdown || cfg.args.count_runtime == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs(phases(cfg).len() as u64 * (cfg.args.count_runtime as u64 + 3))
}

/// A rough duration of `cells`: each one's estimate, and the counting and
/// breakdown runs of those whose column has them.
pub fn estimate_cells(cfg: &Config, cells: &[Cell]) -> Duration {
    let counting = cells
        .iter()
        .filter(|c| cfg.columns[c.column].counts_in_pass())
        .count() as u32;
    let viommu = cells
        .iter()
        .filter(|c| cfg.columns[c.column].iommu == crate::columns::Iommu::Viommu)
        .count() as u32;
    estimate_cell(cfg) * cells.len() as u32
        + count_pass(cfg) * counting
        + breakdown_pass(cfg) * viommu
}

/// The bound on one cell, whatever the progress: four times the estimate
/// (with counting runs) plus the stall window.
pub fn cell_bound(cfg: &Config) -> Duration {
    if let Some(s) = cfg.args.cell_timeout {
        return Duration::from_secs(s);
    }
    (estimate_cell(cfg) + count_pass(cfg) + breakdown_pass(cfg)) * 4
        + Duration::from_secs(cfg.args.stall_seconds)
}

/// What a phase measured, from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhaseKind {
    /// `verify-BS` or `verify-mixed`: write+verify.
    Verify,
    /// `RW-BS[-jN]`: a measured run.
    Run {
        /// fio --rw.
        rw: String,
        /// Block size label, e.g. `4k`.
        bs: String,
        /// fio jobs.
        numjobs: u32,
    },
    /// `count-RUN`: the untimed counting run of the measured run `RUN`
    /// (the same fio job, shorter, with stock QEMU's trace on).
    Count {
        /// The measured run's name.
        run: String,
    },
    /// `breakdown-RUN`: the untimed breakdown run of the measured run
    /// `RUN` (the same fio job, with the host's tracefs recording the
    /// VMM's threads: `--breakdown`).
    Breakdown {
        /// The measured run's name.
        run: String,
    },
}

/// The prefix of the counting phases' names.
const COUNT_PREFIX: &str = "count-";

/// The prefix of the breakdown phases' names (`--breakdown`).
const BREAKDOWN_PREFIX: &str = "breakdown-";

/// Whether `name` is an untimed breakdown phase (`breakdown-RUN`): the
/// same fio job again, with the host's tracefs recording the VMM's threads.
pub fn is_breakdown_phase(name: &str) -> bool {
    name.starts_with(BREAKDOWN_PREFIX)
}

/// The breakdown phase of the measured run `run`.
pub fn breakdown_phase_name(run: &str) -> String {
    format!("{BREAKDOWN_PREFIX}{run}")
}

/// Whether `name` is an untimed phase (counting or breakdown), which runs
/// after the timed ones and only on the host's `go`.
pub fn is_untimed_phase(name: &str) -> bool {
    is_count_phase(name) || is_breakdown_phase(name)
}

/// Whether `name` is an untimed counting phase (`count-RUN`).
pub fn is_count_phase(name: &str) -> bool {
    name.starts_with(COUNT_PREFIX)
}

/// The counting phase of the measured run `run`.
pub fn count_phase_name(run: &str) -> String {
    format!("{COUNT_PREFIX}{run}")
}

/// The kind of phase `name` is; `None` for a name this protocol never uses.
pub fn phase_kind(name: &str) -> Option<PhaseKind> {
    if name.starts_with("verify-") {
        return Some(PhaseKind::Verify);
    }
    if let Some(run) = name.strip_prefix(COUNT_PREFIX) {
        return match phase_kind(run)? {
            PhaseKind::Run { .. } => Some(PhaseKind::Count { run: run.into() }),
            _ => None,
        };
    }
    if let Some(run) = name.strip_prefix(BREAKDOWN_PREFIX) {
        return match phase_kind(run)? {
            PhaseKind::Run { .. } => Some(PhaseKind::Breakdown { run: run.into() }),
            _ => None,
        };
    }
    // RW itself may hold a dash (randread-buffered): read from the end.
    let (rest, numjobs) = match name.rsplit_once('-') {
        Some((rest, j)) if j.starts_with('j') => (rest, j[1..].parse().ok()?),
        _ => (name, 1),
    };
    let (rw, bs) = rest.rsplit_once('-')?;
    if rw.is_empty() || bs.is_empty() || !bs.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(PhaseKind::Run {
        rw: rw.to_string(),
        bs: bs.to_string(),
        numjobs,
    })
}

/// The name of the measured run of `rw` at `bs` with `numjobs` jobs.
pub fn run_phase_name(rw: &str, bs: &str, numjobs: u32) -> String {
    if numjobs == 1 {
        format!("{rw}-{bs}")
    } else {
        format!("{rw}-{bs}-j{numjobs}")
    }
}

#[cfg(test)]
mod tests;
