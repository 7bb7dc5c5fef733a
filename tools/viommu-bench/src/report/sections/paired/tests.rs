use super::*;
use crate::report::summarize::summarize;
use crate::report::tests::{cell, cols, phase_4k};

#[test]
fn one_round_has_no_row() {
    let one = RatioTest::of(&[0.9]);
    assert_eq!(row("p", "c", one, one), None);
    assert_eq!(row("p", "c", None, None), None);
    let two = RatioTest::of(&[0.9, 0.8]);
    let r = row("p", "c", one, two).unwrap();
    assert_eq!((r.vs_ceiling, r.vs_baseline), (None, two));
}

#[test]
fn more_rounds_of_the_same_spread_narrow_the_interval() {
    let few = [0.8, 1.2, 0.9, 1.1];
    let many: Vec<f64> = few.iter().cycle().take(32).copied().collect();
    let (a, b) = (RatioTest::of(&few).unwrap(), RatioTest::of(&many).unwrap());
    let (wa, wb) = (
        a.high.unwrap() / a.low.unwrap(),
        b.high.unwrap() / b.low.unwrap(),
    );
    assert!(wb < wa, "{a:?} {b:?}");
}

#[test]
fn p_values_read_plainly() {
    assert_eq!(p_text(0.0004), "<0.001");
    assert_eq!(p_text(0.0123), "0.012");
    assert_eq!(p_text(1.0), "1.000");
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
    let rows = summarize(&cols, &[phase_4k()], &all, 0, 2).paired;
    let ours = rows
        .iter()
        .find(|r| r.column == "ours+patched-lazy")
        .unwrap();
    let c = ours.vs_ceiling.unwrap();
    assert!((c.ratio - (0.9f64 * 0.8).sqrt()).abs() < 1e-9);
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
    assert!(text.contains("2/2, p "), "{text}");
    // The p shown is the corrected one.
    let p = c.p_holm.unwrap();
    assert!(
        p >= c.p.unwrap() && text.contains(&format!("p {}", p_text(p))),
        "{text}"
    );
}
