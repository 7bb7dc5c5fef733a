use super::*;
use crate::report::tests::{cell, cols, phase_4k};

#[test]
fn one_round_or_a_bad_ratio_has_no_summary() {
    assert_eq!(RoundRatio::of(&[0.9]), None);
    assert_eq!(RoundRatio::of(&[]), None);
    assert_eq!(RoundRatio::of(&[0.9, 0.0]), None);
    assert_eq!(RoundRatio::of(&[0.9, f64::NAN]), None);
    assert_eq!(RoundRatio::of(&[0.9, f64::INFINITY]), None);
}

#[test]
fn equal_rounds_give_a_point_interval() {
    let r = RoundRatio::of(&[0.8, 0.8, 0.8]).unwrap();
    assert!((r.geomean - 0.8).abs() < 1e-12);
    assert!((r.low - 0.8).abs() < 1e-12 && (r.high - 0.8).abs() < 1e-12);
    assert_eq!((r.n, r.below_one), (3, 3));
}

#[test]
fn interval_holds_the_geomean_within_the_rounds_range() {
    let v = [0.7, 1.3, 0.9, 1.1, 0.95, 1.02, 0.88, 1.2];
    let r = RoundRatio::of(&v).unwrap();
    // Geometric mean of the values, computed the long way.
    let gm = v.iter().product::<f64>().powf(1.0 / v.len() as f64);
    assert!((r.geomean - gm).abs() < 1e-12);
    assert!(r.low < r.geomean && r.geomean < r.high, "{r:?}");
    assert!(r.low >= 0.7 && r.high <= 1.3, "{r:?}");
    assert_eq!(r.below_one, 4);
    assert!((r.median - 0.985).abs() < 1e-12);
    // Deterministic: the same rounds, the same interval.
    assert_eq!(RoundRatio::of(&v), Some(r));
}

#[test]
fn more_rounds_of_the_same_spread_narrow_the_interval() {
    let few = [0.8, 1.2, 0.9, 1.1];
    let many: Vec<f64> = few.iter().cycle().take(32).copied().collect();
    let (a, b) = (
        RoundRatio::of(&few).unwrap(),
        RoundRatio::of(&many).unwrap(),
    );
    assert!(b.high / b.low < a.high / a.low, "{a:?} {b:?}");
}

#[test]
fn generator_spreads_over_the_range() {
    let mut g = SplitMix64(SEED);
    let mut seen = [0u32; 4];
    for _ in 0..4000 {
        seen[g.below(4)] += 1;
    }
    assert!(seen.iter().all(|&k| (800..1200).contains(&k)), "{seen:?}");
}

#[test]
fn rows_pair_each_round_with_the_ceiling_and_the_baseline() {
    let cols = cols(&["qemu+stock", "ours+patched-lazy", "no-viommu"]);
    let mut all = Vec::new();
    // Rounds: ours 0.9 and 0.8 of the ceiling, 3 and 2 times the baseline.
    for (round, base, ours, ceil) in [(0, 300, 900, 1000), (1, 200, 400, 500)] {
        all.push(cell("qemu+stock", round, base, None, false));
        all.push(cell("ours+patched-lazy", round, ours, None, false));
        all.push(cell("no-viommu", round, ceil, None, false));
    }
    let rows = rows(&cols, &[phase_4k()], &all, 0);
    let ours = rows
        .iter()
        .find(|r| r.column == "ours+patched-lazy")
        .unwrap();
    let c = ours.vs_ceiling.unwrap();
    assert!((c.geomean - (0.9f64 * 0.8).sqrt()).abs() < 1e-9);
    assert_eq!((c.n, c.below_one), (2, 2));
    let b = ours.vs_baseline.unwrap();
    assert!((b.median - 2.5).abs() < 1e-9 && b.below_one == 0);
    // The baseline has no ratio against itself, the ceiling none
    // against itself.
    let base = rows.iter().find(|r| r.column == "qemu+stock").unwrap();
    assert!(base.vs_baseline.is_none() && base.vs_ceiling.is_some());
    let ceil = rows.iter().find(|r| r.column == "no-viommu").unwrap();
    assert!(ceil.vs_ceiling.is_none() && ceil.vs_baseline.is_some());
    let text = cells(ours).join(" | ");
    assert!(text.contains("0.85, 0.85 ["), "{text}");
    assert!(text.contains("2/2"), "{text}");
}
