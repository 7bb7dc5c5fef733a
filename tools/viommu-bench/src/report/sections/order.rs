//! Whether the order of the guests in a host moved the result: each
//! column's IOPS against the baseline's of the same round, split by which
//! of the two ran first on their host.
//!
//! In our lab the earlier guest of a lab host ran up to 15% faster (in a
//! plain rotation that put one guest first in most rounds, that alone made
//! the other look 8-26% slower than it was).
//! The plan's balanced order ([`crate::plan::rotation_from`]) puts each
//! column first as often as second, so an effect cancels out of the
//! medians over an even number of rounds; this table shows whether there
//! was one, so that a reader can tell a difference between two columns
//! from a difference between two places.

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::plan::Phase;
use crate::report::stats::Spread;
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
            });
        }
    }
    out
}

/// Column heads of the table.
pub const HEADER: [&str; 4] = [
    "phase",
    "column",
    "ran before the baseline: x baseline (rounds)",
    "ran after it: x baseline (rounds)",
];

/// The table's cells of one row.
pub fn cells(r: &OrderRow) -> Vec<String> {
    let half = |s: Option<Spread>| {
        s.map_or("-".into(), |s| {
            format!("{:.2} [{:.2}-{:.2}] ({})", s.median, s.min, s.max, s.n)
        })
    };
    vec![
        r.phase.clone(),
        r.column.clone(),
        half(r.before),
        half(r.after),
    ]
}

/// What the table is.
pub fn note(baseline: &str) -> String {
    format!(
        "By order on the host (each column's IOPS / {baseline}'s of the same round, medians [min-max], split by which of the two guests ran first on their host; a gap between the halves is the order's effect, which the balanced order cancels out of the medians over an even number of rounds)"
    )
}

#[cfg(test)]
mod tests;
