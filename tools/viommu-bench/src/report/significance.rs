//! The table's family of tests: every column against the baseline and
//! against the ceiling in every phase, each a paired t-test on the log
//! ratios ([`RatioTest`]), Holm-corrected together so that the chance of
//! any false mark in the whole table stays at most [`ALPHA`].

use crate::report::stats::{holm, Family, RatioTest, ALPHA};
use crate::report::summary::Group;

/// Corrects every test in `groups` (each row's `vs_baseline` against
/// `baseline`, `vs_ceiling` against `ceiling`) over the whole table with
/// Holm's method, and marks those below [`ALPHA`]. The baseline's test
/// against the ceiling and the ceiling's against the baseline are one
/// comparison (reciprocal ratios, the same p), counted once.
pub fn correct(groups: &mut [Group], baseline: &str, ceiling: Option<&str>) -> Family {
    // One entry per distinct comparison: (phase, the two tags sorted), p.
    let mut keys: Vec<(String, [String; 2])> = Vec::new();
    let mut raw: Vec<f64> = Vec::new();
    for_each_test(groups, baseline, ceiling, |key, t| {
        if let Some(p) = t.p {
            if !keys.contains(&key) {
                keys.push(key);
                raw.push(p);
            }
        }
    });
    let adjusted = holm(&raw);
    for_each_test(groups, baseline, ceiling, |key, t| {
        let at = keys.iter().position(|k| *k == key);
        t.p_holm = at.map(|i| adjusted[i]);
        t.significant = t.p_holm.is_some_and(|p| p < ALPHA);
    });
    Family {
        test: "two-sided paired t-test of ratio = 1 on the per-round log ratios (df = rounds - 1)"
            .into(),
        alpha: ALPHA,
        correction: "Holm-Bonferroni over every comparison in the table".into(),
        comparisons: raw.len(),
    }
}

/// Calls `f` with each test in `groups` and its comparison's key.
fn for_each_test(
    groups: &mut [Group],
    baseline: &str,
    ceiling: Option<&str>,
    mut f: impl FnMut((String, [String; 2]), &mut RatioTest),
) {
    let key = |phase: &str, a: &str, b: &str| {
        let mut pair = [a.to_string(), b.to_string()];
        pair.sort();
        (phase.to_string(), pair)
    };
    for g in groups.iter_mut() {
        for r in g.rows.iter_mut() {
            if let Some(t) = r.vs_baseline.as_mut() {
                f(key(&g.phase, &r.column, baseline), t);
            }
            if let (Some(t), Some(c)) = (r.vs_ceiling.as_mut(), ceiling) {
                f(key(&g.phase, &r.column, c), t);
            }
        }
    }
}

#[cfg(test)]
mod tests;
