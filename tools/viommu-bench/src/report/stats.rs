//! Median and min-max over rounds, and when a difference counts.

use serde::{Deserialize, Serialize};

/// The spread of one quantity over the rounds that measured it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (or a NaN).
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// Whether the min-max ranges of `self` and `other` share a point.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }

    /// A difference is significant only when both were measured at least
    /// twice and their min-max ranges do not overlap.
    pub fn significantly_differs(&self, other: &Spread) -> bool {
        self.n >= 2 && other.n >= 2 && !self.overlaps(other)
    }
}

#[cfg(test)]
mod tests;
