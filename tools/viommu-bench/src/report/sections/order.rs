//! Whether the order of the guests in a host moved the result: each
//! column's IOPS against the baseline's of the same round, split by which
//! of the two ran first on their host.
//!
//! In our lab the earlier guest of a lab host once ran up to 15% faster
//! (in a plain rotation that put one guest first in most rounds, that
//! alone made the other look 8-26% slower than it was).
//! The plan's balanced order ([`crate::plan::rotation_from`]) puts each
//! column first as often as second, so an effect cancels out of the
//! medians over an even number of rounds; this table shows whether there
//! was one, so that a reader can tell a difference between two columns
//! from a difference between two places.
//!
//! With three rounds a half, each guest's own noise alone moves the two
//! halves apart by 10-20% in our lab, so each row also tests its gap
//! (after over before, Welch's t-test on the log ratios, Holm-corrected
//! over the table): a gap is an order effect only where that test says so.

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::plan::Phase;
use crate::report::stats::{holm, t_quantile, t_upper_tail, Spread, ALPHA};
use crate::run::results::{CellResult, Place};

/// One column against the baseline in one phase, by order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// Its IOPS / the baseline's, over the rounds it ran before the
    /// baseline on the same host.
    pub before: Option<Spread>,
    /// The same over the rounds it ran after the baseline.
    pub after: Option<Spread>,
    /// After over before, tested (two or more rounds in each half).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<OrderGap>,
}

/// The gap between the halves of a row: the geometric mean of the ratios
/// that ran after the baseline over that of those that ran before it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OrderGap {
    /// After / before.
    pub ratio: f64,
    /// Lower end of its 95% Welch interval.
    pub low: f64,
    /// Upper end of it.
    pub high: f64,
    /// Welch's two-sided p-value of "gap = 1", uncorrected.
    pub p: f64,
    /// The p-value after Holm's correction over the table's rows.
    pub p_holm: f64,
    /// Whether the corrected p-value is below [`ALPHA`]: an order effect.
    pub shown: bool,
}

impl OrderGap {
    /// Welch's test on the logs of `after` against `before`; None with
    /// fewer than two values in either half or a value not above 0.
    pub fn of(before: &[f64], after: &[f64]) -> Option<OrderGap> {
        let logs = |v: &[f64]| -> Option<Vec<f64>> {
            (v.len() >= 2 && v.iter().all(|x| x.is_finite() && *x > 0.0))
                .then(|| v.iter().map(|x| x.ln()).collect())
        };
        let (b, a) = (logs(before)?, logs(after)?);
        let moments = |v: &[f64]| {
            let n = v.len() as f64;
            let m = v.iter().sum::<f64>() / n;
            let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
            (m, var / n, n)
        };
        let ((mb, sb, nb), (ma, sa, na)) = (moments(&b), moments(&a));
        let diff = ma - mb;
        let se2 = sa + sb;
        let (half, p) = if se2 > 0.0 {
            let df = se2.powi(2) / (sa.powi(2) / (na - 1.0) + sb.powi(2) / (nb - 1.0));
            let t = diff / se2.sqrt();
            (
                t_quantile(0.975, df) * se2.sqrt(),
                2.0 * t_upper_tail(t.abs(), df),
            )
        } else {
            (0.0, if diff == 0.0 { 1.0 } else { 0.0 })
        };
        Some(OrderGap {
            ratio: diff.exp(),
            low: (diff - half).exp(),
            high: (diff + half).exp(),
            p,
            p_holm: p,
            shown: false,
        })
    }
}

/// Holm-corrects the gaps of `rows` together and marks those below
/// [`ALPHA`].
fn correct(rows: &mut [OrderRow]) {
    let raw: Vec<f64> = rows.iter().filter_map(|r| r.gap.map(|g| g.p)).collect();
    let mut adjusted = holm(&raw).into_iter();
    for g in rows.iter_mut().filter_map(|r| r.gap.as_mut()) {
        g.p_holm = adjusted.next().unwrap_or(1.0);
        g.shown = g.p_holm < ALPHA;
    }
}

/// Whether `a` ran before `b` on the same host boot (None: different
/// hosts, or a place not recorded).
fn earlier(a: Option<&Place>, b: Option<&Place>) -> Option<bool> {
    let (a, b) = (a?, b?);
    (a.boot == b.boot && a.index != b.index).then_some(a.index < b.index)
}

/// One row per column other than the baseline and phase where both
/// columns measured at least one round with recorded places, in phase
/// order.
pub fn rows(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    baseline: usize,
) -> Vec<OrderRow> {
    let Some(base) = columns.get(baseline) else {
        return Vec::new();
    };
    let iops = crate::report::cells::cell_iops;
    let mut out = Vec::new();
    for ph in phases {
        for col in columns.iter().filter(|c| c.tag != base.tag) {
            let (mut before, mut after) = (vec![], vec![]);
            for c in cells.iter().filter(|c| c.column == col.tag) {
                let Some(b) = cells
                    .iter()
                    .find(|b| b.column == base.tag && b.round == c.round)
                else {
                    continue;
                };
                let (Some(first), Some(mine), Some(theirs)) = (
                    earlier(c.place.as_ref(), b.place.as_ref()),
                    iops(c, &ph.name),
                    iops(b, &ph.name),
                ) else {
                    continue;
                };
                let half = if first { &mut before } else { &mut after };
                half.push(mine / theirs);
            }
            if before.is_empty() && after.is_empty() {
                continue;
            }
            out.push(OrderRow {
                phase: ph.name.clone(),
                column: col.tag.clone(),
                before: Spread::of(&before),
                after: Spread::of(&after),
                gap: OrderGap::of(&before, &after),
            });
        }
    }
    correct(&mut out);
    out
}

/// Column heads of the table.
pub const HEADER: [&str; 5] = [
    "phase",
    "column",
    "ran before the baseline: x baseline (rounds)",
    "ran after it: x baseline (rounds)",
    "gap: after / before [95%], p (Holm)",
];

/// The table's cells of one row.
pub fn cells(r: &OrderRow) -> Vec<String> {
    let half = |s: Option<Spread>| {
        s.map_or("-".into(), |s| {
            format!("{:.2} [{:.2}-{:.2}] ({})", s.median, s.min, s.max, s.n)
        })
    };
    let gap = r.gap.map_or("-".into(), |g| {
        let mark = if g.shown { " *" } else { "" };
        format!(
            "{:.2} [{:.2}, {:.2}], p {}{mark}",
            g.ratio,
            g.low,
            g.high,
            super::paired::p_text(g.p_holm)
        )
    });
    vec![
        r.phase.clone(),
        r.column.clone(),
        half(r.before),
        half(r.after),
        gap,
    ]
}

/// What the table is.
pub fn note(baseline: &str) -> String {
    format!(
        "By order on the host (each column's IOPS / {baseline}'s of the same round, medians [min-max], split by which of the two guests ran first on their host; a gap between the halves is the order's effect, which the balanced order cancels out of the medians over an even number of rounds; gap: the halves' geometric means, after over before, with Welch's 95% interval on the log ratios and its two-sided p Holm-corrected over this table's rows; * = an order effect beyond the noise at alpha 0.05; no * = the gap is within what each guest's own noise makes)"
    )
}

#[cfg(test)]
mod tests;
