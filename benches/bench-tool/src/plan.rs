//! What a run will do: the cells (column x round, in a balanced order), the
//! guest command line, the measured phases, and how long it should take.

use std::time::Duration;

use crate::cli::{Config, Mode};
use crate::guest::run_phase_name;

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
    format!(
        "console=ttyS0 quiet panic=-1 lab.mode={} lab.rw={} lab.bs={} lab.runtime={} lab.iodepth={} lab.verify={}M lab.numjobs={} lab.heartbeat=5 lab.counters={GUEST_COUNTERS}{idle}{ramp}{lbs}",
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
    Duration::from_secs(15 + verifies * 3 + runs * (runtime + 2))
}

/// The bound on one cell, whatever the progress: four times the estimate
/// plus the stall window.
pub fn cell_bound(cfg: &Config) -> Duration {
    if let Some(s) = cfg.args.cell_timeout {
        return Duration::from_secs(s);
    }
    estimate_cell(cfg) * 4 + Duration::from_secs(cfg.args.stall_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Args;
    use clap::Parser;

    #[test]
    fn rounds_go_forwards_then_backwards() {
        let order: Vec<(u32, usize)> = rotation(3, 4).iter().map(|c| (c.round, c.column)).collect();
        assert_eq!(
            order,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 2),
                (1, 1),
                (1, 0),
                (2, 1),
                (2, 2),
                (2, 0),
                (3, 0),
                (3, 2),
                (3, 1)
            ]
        );
        for n in 1..=6usize {
            let cells = rotation(n, 2 * n as u32);
            let mut before = vec![vec![0u32; n]; n];
            let mut at = vec![vec![0u32; n]; n];
            for r in 0..2 * n as u32 {
                let cols: Vec<usize> = cells
                    .iter()
                    .filter(|c| c.round == r)
                    .map(|c| c.column)
                    .collect();
                // Every column runs once per round.
                let mut sorted = cols.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n} round {r}");
                for (i, &a) in cols.iter().enumerate() {
                    at[a][i] += 1;
                    for &b in &cols[i + 1..] {
                        before[a][b] += 1;
                    }
                }
                // Every pair of rounds: each column before each other once.
                if r % 2 == 1 {
                    for (a, row) in before.iter().enumerate() {
                        for (b, &k) in row.iter().enumerate() {
                            assert_eq!(k, before[b][a], "n={n} after round {r}: {a} before {b}");
                        }
                    }
                }
            }
            // Over 2n rounds: each column twice at each place.
            assert!(at.iter().flatten().all(|&k| k == 2), "n={n}: {at:?}");
        }
        assert_eq!(rotation(4, 7).len(), 28);
        // Round 3 alone (as the lab runs it, one host boot per round).
        assert_eq!(
            rotation_from(3, 2, 1)
                .iter()
                .map(|c| (c.round, c.column))
                .collect::<Vec<_>>(),
            [(2, 1), (2, 2), (2, 0)]
        );
        assert_eq!(
            rotation(1, 2).iter().map(|c| c.column).collect::<Vec<_>>(),
            [0, 0]
        );
    }

    #[test]
    fn cmdline_and_phases() {
        let cfg = Args::try_parse_from([
            "viommu-bench",
            "--device",
            "01:00.0",
            "--dry-run",
            "--bs",
            "4k,128k",
            "--numjobs",
            "1,2",
            "--rw",
            "randrw",
        ])
        .unwrap()
        .validate()
        .unwrap();
        let names: Vec<String> = phases(&cfg).into_iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["randrw-4k", "randrw-128k", "randrw-4k-j2", "randrw-128k-j2"]
        );
        let c = guest_cmdline(&cfg, None);
        assert!(!c.contains("lab.lbs"), "{c}");
        assert!(guest_cmdline(&cfg, Some(4096)).ends_with(" lab.lbs=4096"));
        assert!(c.contains("lab.rw=randrw lab.bs=4k,128k lab.runtime=10 lab.iodepth=64 lab.verify=8M lab.numjobs=1,2"), "{c}");
        assert!(!c.contains("lab.ramp"), "no ramp unless asked: {c}");
        assert!(
            !c.contains("lab.idle_ms"),
            "no idle phase unless asked: {c}"
        );
        assert_eq!(estimate_cell(&cfg), Duration::from_secs(15 + 9 + 4 * 12));
        let idle = Args::try_parse_from([
            "viommu-bench",
            "--device",
            "01:00.0",
            "--dry-run",
            "--idle-ms",
            "3000",
        ])
        .unwrap()
        .validate()
        .unwrap();
        assert!(guest_cmdline(&idle, None).ends_with(" lab.idle_ms=3000"));
        let ramp = Args::try_parse_from([
            "viommu-bench",
            "--device",
            "01:00.0",
            "--dry-run",
            "--ramp",
            "2",
            "--runtime",
            "3",
            "--bs",
            "4k",
        ])
        .unwrap()
        .validate()
        .unwrap();
        assert!(guest_cmdline(&ramp, None).ends_with(" lab.ramp=2"));
        // one verify size + mixed, one measured run of ramp + runtime
        assert_eq!(
            estimate_cell(&ramp),
            Duration::from_secs(15 + 2 * 3 + (5 + 2))
        );
    }
}
