//! The spread of a quantity over rounds, and when a difference between
//! two columns counts: a paired t-test on the per-round log ratios of
//! their IOPS, Holm-corrected over every comparison of the table.
//!
//! Rounds are the pairing unit: a round runs every column on the same
//! host boot and drive, so host-to-host drift cancels out of a ratio
//! within a round. IOPS noise is multiplicative, so the test works on
//! log ratios: H0 is "ratio = 1", i.e. mean log ratio = 0, two-sided,
//! with n-1 degrees of freedom over the n rounds both columns measured.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The significance level of every test in the table (family-wise, after
/// Holm's correction).
pub const ALPHA: f64 = 0.05;

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
}

/// One column's IOPS over a reference column's, paired by round, and the
/// paired t-test of "ratio = 1" on the log ratios. Every field defaults,
/// so results.json files written before the test still parse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RatioTest {
    /// Rounds both columns measured (the pairs).
    pub n: usize,
    /// The geometric mean of the per-round ratios.
    pub ratio: f64,
    /// Their median.
    pub median: f64,
    /// Rounds whose ratio was below 1.
    pub below_one: usize,
    /// Lower end of the ratio's 95% interval, `exp(mean - t*sd/sqrt(n))`
    /// of the log ratios (t: the t distribution's 0.975 quantile, n-1
    /// degrees of freedom); None with one round.
    pub low: Option<f64>,
    /// Upper end of it.
    pub high: Option<f64>,
    /// The t statistic of the log ratios; None with one round.
    pub t: Option<f64>,
    /// The two-sided p-value of "ratio = 1", uncorrected.
    pub p: Option<f64>,
    /// The p-value after Holm's correction over the table's comparisons.
    pub p_holm: Option<f64>,
    /// Whether the Holm-corrected p-value is below [`ALPHA`].
    pub significant: bool,
}

impl RatioTest {
    /// The test of per-round `ratios`; `None` without a ratio or with one
    /// that is not a positive number. One round gives the ratio with no
    /// interval and no test. Not yet corrected: see [`holm`].
    pub fn of(ratios: &[f64]) -> Option<RatioTest> {
        if ratios.is_empty() || ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            return None;
        }
        let n = ratios.len();
        let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
        let mean = logs.iter().sum::<f64>() / n as f64;
        let mut test = RatioTest {
            n,
            ratio: mean.exp(),
            median: Spread::of(ratios)?.median,
            below_one: ratios.iter().filter(|r| **r < 1.0).count(),
            ..RatioTest::default()
        };
        if n < 2 {
            return Some(test);
        }
        let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let se = (var / n as f64).sqrt();
        let df = (n - 1) as f64;
        let half = t_quantile(0.975, df) * se;
        test.low = Some((mean - half).exp());
        test.high = Some((mean + half).exp());
        let (t, p) = if se > 0.0 {
            let t = mean / se;
            (t, 2.0 * t_upper_tail(t.abs(), df))
        } else if mean == 0.0 {
            // Every round the same ratio of exactly 1: nothing to reject.
            (0.0, 1.0)
        } else {
            // Every round the same ratio, not 1: no noise at all.
            (mean.signum() * f64::INFINITY, 0.0)
        };
        test.t = Some(t);
        test.p = Some(p);
        Some(test)
    }
}

/// The t distribution with `df` degrees of freedom (df >= 1).
fn students_t(df: f64) -> StudentsT {
    StudentsT::new(0.0, 1.0, df).expect("df >= 1 is a valid t distribution")
}

/// P(T > t) for T with `df` degrees of freedom.
pub fn t_upper_tail(t: f64, df: f64) -> f64 {
    students_t(df).sf(t)
}

/// The `q` quantile of the t distribution with `df` degrees of freedom.
pub fn t_quantile(q: f64, df: f64) -> f64 {
    students_t(df).inverse_cdf(q)
}

/// Holm's step-down adjustment of `p` (each a family member's raw
/// p-value), in the same order: the i-th smallest p times (K - i + 1),
/// never below the adjusted p before it, at most 1. Rejecting where the
/// adjusted p is below alpha keeps the chance of any false rejection in
/// the family at most alpha, whatever the tests' dependence.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let k = p.len();
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; k];
    let mut running: f64 = 0.0;
    for (i, &at) in order.iter().enumerate() {
        running = running.max(((k - i) as f64 * p[at]).min(1.0));
        adjusted[at] = running;
    }
    adjusted
}

/// What the marks of a table mean: the test, its level and the family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Family {
    /// The test of each comparison.
    pub test: String,
    /// The family-wise significance level.
    pub alpha: f64,
    /// The multiple-comparison correction.
    pub correction: String,
    /// Comparisons tested together (each pair of columns in a phase once;
    /// comparisons with one round have no test and are not counted).
    pub comparisons: usize,
}

#[cfg(test)]
mod tests;
