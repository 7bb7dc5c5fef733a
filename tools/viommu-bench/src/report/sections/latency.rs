//! The completion latency section: per measured phase and column, fio's
//! completion latency percentiles (p50, p99, p99.9: the reads' where the
//! phase reads, else the writes'), medians over rounds, and the p99 over
//! the ceiling's (the no-vIOMMU column's) of the same round, as the IOPS
//! ratios are formed.

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::plan::Phase;
use crate::report::cells::{median, usable};
use crate::report::stats::Spread;
use crate::run::guest::Latency;
use crate::run::results::CellResult;

/// One column in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// Which direction's latency: `read` where the phase reads, else `write`.
    pub dir: String,
    /// Median over rounds of the median completion latency, µs.
    pub p50_us: Option<f64>,
    /// The 99th percentile over rounds (median, min-max), µs.
    pub p99_us: Option<Spread>,
    /// Median over rounds of the 99.9th percentile, µs.
    pub p999_us: Option<f64>,
    /// p99 / the ceiling's p99 of the same round (above 1: slower
    /// completions than without a vIOMMU).
    pub p99_ratio: Option<Spread>,
}

/// The latency `cell` measured in `phase`, if usable, with its direction.
fn latency_of<'a>(cell: &'a CellResult, phase: &str) -> Option<(&'static str, &'a Latency)> {
    usable(cell, phase)?.fio.as_ref()?.latency()
}

fn us(ns: Option<u64>) -> Option<f64> {
    ns.map(|n| n as f64 / 1e3)
}

/// One row per column and phase whose cells reported latencies, in phase
/// order; the p99 ratio against `ceiling`'s cells of the same round.
pub fn rows(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    ceiling: Option<&Column>,
) -> Vec<LatencyRow> {
    let mut out = Vec::new();
    for ph in phases {
        for col in columns {
            let (mut dir, mut p50, mut p99, mut p999, mut ratio) =
                ("", vec![], vec![], vec![], vec![]);
            for c in cells.iter().filter(|c| c.column == col.tag) {
                let Some((d, l)) = latency_of(c, &ph.name) else {
                    continue;
                };
                dir = d;
                p50.extend(us(l.p50_ns));
                p999.extend(us(l.p999_ns));
                let Some(mine) = us(l.p99_ns) else { continue };
                p99.push(mine);
                let ceil = ceiling.and_then(|t| {
                    let cc = cells
                        .iter()
                        .find(|x| x.column == t.tag && x.round == c.round)?;
                    latency_of(cc, &ph.name)
                        .filter(|(cd, _)| *cd == d)
                        .and_then(|(_, cl)| us(cl.p99_ns))
                });
                if let Some(base) = ceil.filter(|b| *b > 0.0) {
                    ratio.push(mine / base);
                }
            }
            if dir.is_empty() {
                continue;
            }
            out.push(LatencyRow {
                phase: ph.name.clone(),
                column: col.tag.clone(),
                dir: dir.into(),
                p50_us: median(&p50),
                p99_us: Spread::of(&p99),
                p999_us: median(&p999),
                p99_ratio: Spread::of(&ratio),
            });
        }
    }
    out
}

/// The table's header.
pub const HEADER: [&str; 7] = [
    "phase",
    "column",
    "dir",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "p99 x ceiling",
];

/// Microseconds as the table shows them: one decimal below 100.
fn us_text(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The table's cells of one row ("-": not reported).
pub fn cells(r: &LatencyRow) -> Vec<String> {
    let one = |x: Option<f64>| x.map_or("-".into(), us_text);
    let spread = |s: Option<Spread>, f: &dyn Fn(f64) -> String| match s {
        None => "-".into(),
        Some(s) if s.n == 1 => f(s.median),
        Some(s) => format!("{} [{}-{}]", f(s.median), f(s.min), f(s.max)),
    };
    vec![
        r.phase.clone(),
        r.column.clone(),
        r.dir.clone(),
        one(r.p50_us),
        spread(r.p99_us, &us_text),
        one(r.p999_us),
        spread(r.p99_ratio, &|v| format!("{v:.2}")),
    ]
}

/// What the table shows, for the Markdown report.
pub const NOTE: &str = "Completion latency (fio's clat percentiles from its JSON output, of the whole run with --group_reporting; reads where the phase reads, else writes; microseconds, medians over rounds, p99 with its min-max; p99 x ceiling: over the no-vIOMMU column's p99 of the same round, above 1 is slower)";

#[cfg(test)]
mod tests;
