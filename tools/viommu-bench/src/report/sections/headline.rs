//! The table's first lines: the column a reader came for (`--lead`)
//! against the baseline and against the ceiling, phase by phase, round by
//! round. Everything else in the report follows it.

use crate::report::sections::paired::{p_text, PairedRow};
use crate::report::stats::RatioTest;

/// One phase of the lead column.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Phase name.
    pub phase: String,
    /// The lead's IOPS over the ceiling's of the same round.
    pub vs_ceiling: Option<RatioTest>,
    /// The lead's IOPS over the baseline's of the same round.
    pub vs_baseline: Option<RatioTest>,
}

/// The lead column's lines from the round-by-round rows, in phase order;
/// empty without a lead or with fewer than two rounds (a ratio without a
/// spread is not a headline).
pub fn lines(lead: Option<&str>, paired: &[PairedRow]) -> Vec<Line> {
    let Some(lead) = lead else {
        return Vec::new();
    };
    paired
        .iter()
        .filter(|r: &&PairedRow| r.column == lead)
        .map(|r| Line {
            phase: r.phase.clone(),
            vs_ceiling: r.vs_ceiling,
            vs_baseline: r.vs_baseline,
        })
        .collect()
}

/// The section's title: LEAD against BASELINE and CEILING over ROUNDS
/// (e.g. "3 rounds").
pub fn title(lead: &str, baseline: &str, ceiling: Option<&str>, rounds: &str) -> String {
    format!(
        "headline: {lead} against {baseline} and against {}, {rounds}",
        ceiling.unwrap_or("no ceiling")
    )
}

/// Column heads.
pub fn header(baseline: &str, ceiling: Option<&str>) -> Vec<String> {
    vec![
        "phase".into(),
        format!(
            "x {} (ceiling): geomean [95%], p Holm",
            ceiling.unwrap_or("-")
        ),
        format!("x {baseline} (baseline): geomean [95%], p Holm"),
    ]
}

/// One line's cells.
pub fn cells(l: &Line) -> Vec<String> {
    let show = |x: Option<RatioTest>| {
        x.map_or("-".into(), |x| {
            format!(
                "{:.2} [{:.2}, {:.2}], p {}{}",
                x.ratio,
                x.low.unwrap_or(f64::NAN),
                x.high.unwrap_or(f64::NAN),
                x.p_holm.map_or("n/a".into(), p_text),
                if x.significant { " *" } else { "" }
            )
        })
    };
    vec![l.phase.clone(), show(l.vs_ceiling), show(l.vs_baseline)]
}

#[cfg(test)]
mod tests;
