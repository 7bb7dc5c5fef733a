//! Each column against the ceiling and against the baseline, round by
//! round, with an interval.
//!
//! A round runs every column on the same host boot and drive, so the
//! ratio of two columns' IOPS within a round is free of the host-to-host
//! drift that moves a column's own IOPS by 20-30% between rounds in our
//! lab. Over the rounds this table gives the median of those ratios,
//! their geometric mean with a 95% percentile-bootstrap interval (the
//! rounds resampled with replacement) and how many rounds fell below 1,
//! which is what a claim like "0.9 of the ceiling" or "not behind QEMU
//! beyond the spread" needs. With few rounds the bootstrap interval is
//! narrower than the truth (it cannot see values the rounds did not
//! show); the table prints the round count beside it.

use serde::{Deserialize, Serialize};

use crate::columns::{Column, Iommu};
use crate::plan::Phase;
use crate::report::cells::{cell_iops, round_iops};
use crate::report::stats::Spread;
use crate::run::results::CellResult;

/// Bootstrap resamples per interval.
const RESAMPLES: usize = 20_000;

/// Seed of the resampling: the same cells give the same report.
const SEED: u64 = 0x7669_6f6d_6d75_2d62;

/// One column's IOPS over another's, round by round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RoundRatio {
    /// Median of the per-round ratios.
    pub median: f64,
    /// Their geometric mean.
    pub geomean: f64,
    /// Lower end of the geometric mean's 95% bootstrap interval.
    pub low: f64,
    /// Upper end of it.
    pub high: f64,
    /// Rounds with both columns measured.
    pub n: usize,
    /// Rounds whose ratio was below 1.
    pub below_one: usize,
}

impl RoundRatio {
    /// The summary of per-round `ratios`; `None` for fewer than two rounds
    /// (one round has no spread) or a ratio that is not a positive number.
    pub fn of(ratios: &[f64]) -> Option<RoundRatio> {
        if ratios.len() < 2 || ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            return None;
        }
        let n = ratios.len();
        let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
        let mean = |s: f64| s / n as f64;
        let mut rng = SplitMix64(SEED);
        let mut means: Vec<f64> = (0..RESAMPLES)
            .map(|_| mean((0..n).map(|_| logs[rng.below(n)]).sum()))
            .collect();
        means.sort_by(f64::total_cmp);
        Some(RoundRatio {
            median: Spread::of(ratios)?.median,
            geomean: mean(logs.iter().sum()).exp(),
            low: means[RESAMPLES * 25 / 1000].exp(),
            high: means[RESAMPLES * 975 / 1000 - 1].exp(),
            n,
            below_one: ratios.iter().filter(|r| **r < 1.0).count(),
        })
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014). Our own rather than the rand
/// crate's: a report must come out the same from the same cells on every
/// build, and rand documents that its seeded generators may change their
/// output between versions; eight lines do not warrant a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (multiply-shift: no modulo bias worth a note at
    /// the round counts here).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// One column in one phase against the ceiling and the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// IOPS / the ceiling's (the no-vIOMMU column) of the same round.
    pub vs_ceiling: Option<RoundRatio>,
    /// IOPS / the baseline's of the same round.
    pub vs_baseline: Option<RoundRatio>,
}

/// One row per phase and column with two or more rounds against the
/// ceiling or the baseline (neither against itself), in phase order.
pub fn rows(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    baseline: usize,
) -> Vec<PairedRow> {
    let ceiling = columns.iter().find(|c| c.iommu == Iommu::None);
    let base = columns.get(baseline);
    let mut out = Vec::new();
    for ph in phases {
        // This column's per-round ratios against `other` (none against itself).
        let against = |col: &Column, other: Option<&Column>| {
            let other = other.filter(|o| o.tag != col.tag)?;
            let r: Vec<f64> = cells
                .iter()
                .filter(|c| c.column == col.tag)
                .filter_map(|c| {
                    Some(
                        cell_iops(c, &ph.name)? / round_iops(cells, &other.tag, c.round, &ph.name)?,
                    )
                })
                .collect();
            RoundRatio::of(&r)
        };
        for col in columns {
            let (vs_ceiling, vs_baseline) = (against(col, ceiling), against(col, base));
            if vs_ceiling.is_some() || vs_baseline.is_some() {
                out.push(PairedRow {
                    phase: ph.name.clone(),
                    column: col.tag.clone(),
                    vs_ceiling,
                    vs_baseline,
                });
            }
        }
    }
    out
}

/// Column heads of the table.
pub const HEADER: [&str; 4] = [
    "phase",
    "column",
    "x ceiling: median, geomean [95%], rounds < 1",
    "x baseline: median, geomean [95%], rounds < 1",
];

/// The table's cells of one row.
pub fn cells(r: &PairedRow) -> Vec<String> {
    let show = |x: Option<RoundRatio>| {
        x.map_or("-".into(), |x| {
            format!(
                "{:.2}, {:.2} [{:.2}, {:.2}], {}/{}",
                x.median, x.geomean, x.low, x.high, x.below_one, x.n
            )
        })
    };
    vec![
        r.phase.clone(),
        r.column.clone(),
        show(r.vs_ceiling),
        show(r.vs_baseline),
    ]
}

/// What the table is.
pub fn note(ceiling: Option<&str>, baseline: &str) -> String {
    format!(
        "Round by round (each column's IOPS over {} and over {baseline}'s of the same round, i.e. the same host boot and drive: the median of those ratios, their geometric mean with a 95% bootstrap interval over the rounds, and the rounds below 1 of the rounds measured; host-to-host drift cancels out of a ratio within a round; few rounds make the interval too narrow)",
        ceiling.map_or("the ceiling's (none selected)".to_string(), |c| format!("{c}'s")),
    )
}

#[cfg(test)]
mod tests;
