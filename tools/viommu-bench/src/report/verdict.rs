//! Each phase's verdict: the best column, and which columns differ from
//! the baseline beyond the noise by the table's corrected tests.

use crate::report::summary::Row;

/// The best column (by median IOPS, the ceiling aside), then the other
/// columns (the ceiling aside) by their test against `baseline`: beyond
/// the noise (Holm-corrected paired t-test, with the difference), within
/// it, or not tested (fewer than two rounds paired).
pub(crate) fn verdict(rows: &[Row], ceiling: Option<&str>, baseline: &str) -> String {
    let cands: Vec<&Row> = rows
        .iter()
        .filter(|r| Some(r.column.as_str()) != ceiling)
        .filter(|r| r.iops.is_some())
        .collect();
    let Some(best) = cands.iter().max_by(|a, b| median(a).total_cmp(&median(b))) else {
        return "no column measured this phase".into();
    };
    let (mut beyond, mut within, mut untested) = (vec![], vec![], vec![]);
    for r in cands.iter().filter(|r| r.column != baseline) {
        match r.vs_baseline {
            Some(t) if t.p.is_some() && t.significant => {
                beyond.push(format!("{} {:+.0}%", r.column, (t.ratio - 1.0) * 100.0));
            }
            Some(t) if t.p.is_some() => within.push(r.column.clone()),
            _ => untested.push(r.column.clone()),
        }
    }
    let mut v = format!("highest median: {}", best.column);
    if !beyond.is_empty() {
        v += &format!(
            "; beyond the noise against {baseline}: {}",
            beyond.join(", ")
        );
    }
    if !within.is_empty() {
        v += &format!("; within the noise of {baseline}: {}", within.join(", "));
    }
    if !untested.is_empty() {
        v += &format!(
            "; n/a (fewer than 2 rounds paired with {baseline}, run --rounds 5 or more): {}",
            untested.join(", ")
        );
    }
    v
}

fn median(r: &Row) -> f64 {
    r.iops.map_or(f64::NEG_INFINITY, |s| s.median)
}
