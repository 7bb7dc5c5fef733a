use super::*;

#[test]
fn median_min_max() {
    let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
    let s = Spread::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
    assert_eq!(s.median, 3.0);
    assert_eq!(Spread::of(&[]), None);
    assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1e-300)
}

/// The t distribution's CDF in closed form for 1, 2 and 4 degrees of
/// freedom (Cauchy; t/(2 sqrt(2+t^2)); the ν = 4 polynomial), as
/// references that owe nothing to the library.
fn cdf_closed_form(t: f64, df: u32) -> f64 {
    match df {
        1 => 0.5 + t.atan() / std::f64::consts::PI,
        2 => 0.5 + t / (2.0 * (2.0 + t * t).sqrt()),
        4 => {
            let u = 1.0 + t * t / 4.0;
            0.5 + 0.375 * (t / u.sqrt()) * (1.0 - t * t / (12.0 * u))
        }
        _ => unreachable!(),
    }
}

#[test]
fn upper_tail_matches_the_closed_forms() {
    for df in [1, 2, 4] {
        for t in [0.0, 0.5, 1.0, 2.0, 3.5, 8.0] {
            let want = 1.0 - cdf_closed_form(t, df);
            let got = t_upper_tail(t, df as f64);
            assert!(close(got, want, 1e-6), "df {df} t {t}: {got} vs {want}");
        }
    }
}

#[test]
fn quantiles_match_the_tables() {
    // t(0.975, df) from the standard tables.
    for (df, want) in [
        (1.0, 12.706_204_7),
        (2.0, 4.302_652_7),
        (4.0, 2.776_445_1),
        (9.0, 2.262_157_2),
        (29.0, 2.045_229_6),
    ] {
        let got = t_quantile(0.975, df);
        assert!(close(got, want, 1e-6), "df {df}: {got} vs {want}");
    }
}

#[test]
fn the_paired_test_of_five_log_ratios() {
    // Log ratios 0.1, 0.12, 0.08, 0.11, 0.09: mean 0.1, sd sqrt(0.001/4),
    // se = sd/sqrt(5) = 0.00707107, t = 0.1/se = 10*sqrt(2), df 4.
    let logs = [0.1, 0.12, 0.08, 0.11, 0.09];
    let ratios: Vec<f64> = logs.iter().map(|l: &f64| l.exp()).collect();
    let r = RatioTest::of(&ratios).unwrap();
    let t = 10.0 * 2f64.sqrt();
    assert_eq!(r.n, 5);
    assert!(close(r.t.unwrap(), t, 1e-9), "{r:?}");
    // Two-sided p from the closed-form CDF with 4 degrees of freedom.
    let p = 2.0 * (1.0 - cdf_closed_form(t, 4));
    assert!(close(p, 1.451_281_7e-4, 1e-6), "reference {p}");
    assert!(close(r.p.unwrap(), p, 1e-6), "{r:?} vs {p}");
    // Ratio: exp(mean of the logs); interval exp(0.1 ± 2.7764451·se).
    assert!(close(r.ratio, 0.1f64.exp(), 1e-12));
    let se = 0.1 / t;
    assert!(close(r.low.unwrap(), (0.1 - 2.776_445_1 * se).exp(), 1e-7));
    assert!(close(r.high.unwrap(), (0.1 + 2.776_445_1 * se).exp(), 1e-7));
    assert!(close(r.low.unwrap(), 1.083_685_3, 1e-7), "{r:?}");
    assert!(close(r.high.unwrap(), 1.127_082_5, 1e-7), "{r:?}");
    assert!(close(r.median, 0.1f64.exp(), 1e-12));
    assert_eq!(r.below_one, 0);
    // Not yet corrected.
    assert_eq!((r.p_holm, r.significant), (None, false));
}

#[test]
fn the_reciprocal_ratios_give_the_same_p_and_the_reciprocal_interval() {
    let v = [1.3, 1.1, 1.25, 0.95];
    let inv: Vec<f64> = v.iter().map(|x| 1.0 / x).collect();
    let (a, b) = (RatioTest::of(&v).unwrap(), RatioTest::of(&inv).unwrap());
    assert!(close(a.p.unwrap(), b.p.unwrap(), 1e-9));
    assert!(close(a.t.unwrap(), -b.t.unwrap(), 1e-9));
    assert!(close(a.low.unwrap(), 1.0 / b.high.unwrap(), 1e-9));
    assert!(close(a.ratio, 1.0 / b.ratio, 1e-12));
    assert_eq!((a.below_one, b.below_one), (1, 3));
}

#[test]
fn a_wide_spread_is_not_significant_and_its_interval_holds_one() {
    // Log ratios ±0.2 around 0.05: t = 0.05/(0.2309/2) = 0.433, df 3.
    let r = RatioTest::of(&[
        0.25f64.exp(),
        (-0.15f64).exp(),
        0.25f64.exp(),
        (-0.15f64).exp(),
    ])
    .unwrap();
    assert!(r.p.unwrap() > 0.5, "{r:?}");
    assert!(r.low.unwrap() < 1.0 && r.high.unwrap() > 1.0, "{r:?}");
}

#[test]
fn one_round_has_a_ratio_but_no_interval_or_test() {
    let r = RatioTest::of(&[0.9]).unwrap();
    assert_eq!((r.n, r.ratio, r.median, r.below_one), (1, 0.9, 0.9, 1));
    assert_eq!((r.low, r.high, r.t, r.p), (None, None, None, None));
    assert_eq!(RatioTest::of(&[]), None);
    assert_eq!(RatioTest::of(&[0.9, 0.0]), None);
    assert_eq!(RatioTest::of(&[0.9, f64::NAN]), None);
    assert_eq!(RatioTest::of(&[0.9, f64::INFINITY]), None);
}

#[test]
fn rounds_without_noise() {
    let one = RatioTest::of(&[1.0, 1.0, 1.0]).unwrap();
    assert_eq!(one.p, Some(1.0));
    let r = RatioTest::of(&[0.8, 0.8, 0.8]).unwrap();
    assert_eq!(r.p, Some(0.0));
    assert!(close(r.low.unwrap(), 0.8, 1e-12) && close(r.high.unwrap(), 0.8, 1e-12));
}

#[test]
fn holm_on_the_textbook_example() {
    // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02:
    // sorted 0.005*4, 0.01*3, 0.03*2, then 0.04*1 raised to 0.06.
    let got = holm(&[0.01, 0.04, 0.03, 0.005]);
    for (g, w) in got.iter().zip([0.03, 0.06, 0.06, 0.02]) {
        assert!(close(*g, w, 1e-12), "{got:?}");
    }
    // Capped at 1; one test is left as it is; none is none.
    assert_eq!(holm(&[0.5, 0.6]), vec![1.0, 1.0]);
    assert_eq!(holm(&[0.02]), vec![0.02]);
    assert!(holm(&[]).is_empty());
    // Ties keep their order and share the value.
    assert_eq!(holm(&[0.01, 0.01]), vec![0.02, 0.02]);
}

#[test]
fn an_old_comparison_in_results_json_still_parses() {
    let old = r#"{"pct": 12.0, "significant": true, "paired": {"median": 1.0, "min": 1.0, "max": 2.0, "n": 3}}"#;
    let t: RatioTest = serde_json::from_str(old).unwrap();
    assert!(t.significant && t.p.is_none());
    let old_round =
        r#"{"median": 0.9, "geomean": 0.9, "low": 0.8, "high": 1.0, "n": 3, "below_one": 3}"#;
    let t: RatioTest = serde_json::from_str(old_round).unwrap();
    assert_eq!((t.n, t.low, t.high), (3, Some(0.8), Some(1.0)));
}
