//! Each column against the ceiling and against the baseline, round by
//! round, with the paired test.
//!
//! A round runs every column on the same host boot and drive, so the
//! ratio of two columns' IOPS within a round is free of the host-to-host
//! drift that moves a column's own IOPS by 20-30% between rounds in our
//! lab. Over the rounds this table gives the median of those ratios,
//! their geometric mean with its 95% t interval (from the log ratios),
//! how many rounds fell below 1, and the paired t-test's p-value after
//! the table's Holm correction: what a claim like "0.9 of the ceiling" or
//! "not behind QEMU beyond the noise" needs. The tests are the main
//! table's ([`crate::report::significance`]); this table shows them in
//! full.

use serde::{Deserialize, Serialize};

use crate::report::stats::RatioTest;

/// One column in one phase against the ceiling and the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// IOPS / the ceiling's (the no-vIOMMU column) of the same round.
    pub vs_ceiling: Option<RatioTest>,
    /// IOPS / the baseline's of the same round.
    pub vs_baseline: Option<RatioTest>,
}

/// The row of `column` in `phase`, with the tests of two or more rounds
/// (one round has no spread); None when neither has two.
pub fn row(
    phase: &str,
    column: &str,
    vs_ceiling: Option<RatioTest>,
    vs_baseline: Option<RatioTest>,
) -> Option<PairedRow> {
    let two = |t: Option<RatioTest>| t.filter(|t| t.n >= 2);
    let (vs_ceiling, vs_baseline) = (two(vs_ceiling), two(vs_baseline));
    (vs_ceiling.is_some() || vs_baseline.is_some()).then(|| PairedRow {
        phase: phase.to_string(),
        column: column.to_string(),
        vs_ceiling,
        vs_baseline,
    })
}

/// Column heads of the table.
pub const HEADER: [&str; 4] = [
    "phase",
    "column",
    "x ceiling: median, geomean [95%], rounds < 1, p Holm",
    "x baseline: median, geomean [95%], rounds < 1, p Holm",
];

/// A p-value for the table: three significant figures, small ones as
/// `<0.001`.
pub fn p_text(p: f64) -> String {
    if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// The table's cells of one row.
pub fn cells(r: &PairedRow) -> Vec<String> {
    let show = |x: Option<RatioTest>| {
        x.map_or("-".into(), |x| {
            let (low, high) = (x.low.unwrap_or(f64::NAN), x.high.unwrap_or(f64::NAN));
            let p = x.p_holm.map_or("n/a".into(), p_text);
            format!(
                "{:.2}, {:.2} [{low:.2}, {high:.2}], {}/{}, p {p}{}",
                x.median,
                x.ratio,
                x.below_one,
                x.n,
                if x.significant { " *" } else { "" }
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
        "Round by round (each column's IOPS over {} and over {baseline}'s of the same round, i.e. the same host boot and drive: the median of those ratios, their geometric mean with its 95% t interval over the rounds, the rounds below 1 of the rounds paired, and the paired t-test's Holm-corrected p-value, * below 0.05, as in the main table; host-to-host drift cancels out of a ratio within a round)",
        ceiling.map_or("the ceiling's (none selected)".to_string(), |c| format!("{c}'s")),
    )
}

#[cfg(test)]
mod tests;
