//! Each phase's verdict: the best column and which others it beats
//! beyond the noise.

use crate::report::stats::Spread;
use crate::report::summary::Row;

/// The best column (by median IOPS, the ceiling aside) and which others
/// it beats beyond the noise.
pub(crate) fn verdict(rows: &[Row], ceiling: Option<&str>, rounds: u32) -> String {
    let cands: Vec<(&Row, Spread)> = rows
        .iter()
        .filter(|r| Some(r.column.as_str()) != ceiling)
        .filter_map(|r| r.iops.map(|s| (r, s)))
        .collect();
    let Some((best, bs)) = cands
        .iter()
        .max_by(|a, b| a.1.median.total_cmp(&b.1.median))
    else {
        return "no column measured this phase".into();
    };
    if rounds < 2 {
        return format!(
            "highest median: {} (one round: no noise estimate, run --rounds 3 or more)",
            best.column
        );
    }
    let (mut ahead, mut noise) = (vec![], vec![]);
    for (r, s) in &cands {
        if r.column == best.column {
            continue;
        }
        if bs.significantly_differs(s) {
            ahead.push(r.column.as_str());
        } else {
            noise.push(r.column.as_str());
        }
    }
    let mut v = format!("highest median: {}", best.column);
    if !ahead.is_empty() {
        v += &format!("; ahead beyond the noise of {}", ahead.join(", "));
    }
    if !noise.is_empty() {
        v += &format!("; within the noise of {}", noise.join(", "));
    }
    v
}
