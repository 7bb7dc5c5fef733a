use super::*;
use crate::report::tests::{cell, cols, phase_4k};

fn placed(col: &str, round: u32, iops: u64, boot: &str, index: u32) -> CellResult {
    let mut c = cell(col, round, iops, None, false);
    c.place = Some(Place {
        boot: boot.into(),
        index,
    });
    c
}

#[test]
fn ratios_split_by_who_ran_first_on_the_same_host() {
    let cols = cols(&["qemu+patched", "ours+patched-lazy"]);
    let all = vec![
        // Round 0: ours second, 0.8 of QEMU's IOPS.
        placed("qemu+patched", 0, 100, "h0", 0),
        placed("ours+patched-lazy", 0, 80, "h0", 1),
        // Round 1: ours first, 1.1.
        placed("ours+patched-lazy", 1, 110, "h1", 0),
        placed("qemu+patched", 1, 100, "h1", 1),
        // Round 2: ours second again, 0.9.
        placed("qemu+patched", 2, 200, "h2", 0),
        placed("ours+patched-lazy", 2, 180, "h2", 1),
        // Round 3: the two on different hosts (a rerun): no order.
        placed("qemu+patched", 3, 100, "h3", 0),
        placed("ours+patched-lazy", 3, 50, "h3b", 0),
        // Round 4: no place recorded (an old result).
        cell("qemu+patched", 4, 100, None, false),
        cell("ours+patched-lazy", 4, 10, None, false),
    ];
    let rows = rows(&cols, &[phase_4k()], &all, 0);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.column, "ours+patched-lazy");
    let b = r.before.unwrap();
    assert_eq!((b.n, b.median), (1, 1.1));
    let a = r.after.unwrap();
    assert_eq!(a.n, 2);
    assert!((a.median - 0.85).abs() < 1e-9, "{a:?}");
    assert_eq!(
        cells(r),
        vec![
            "randread-4k",
            "ours+patched-lazy",
            "1.10 [1.10-1.10] (1)",
            "0.85 [0.80-0.90] (2)",
            "-"
        ]
    );
}

#[test]
fn nothing_without_places() {
    let cols = cols(&["qemu+patched", "ours+patched-lazy"]);
    let all = vec![
        cell("qemu+patched", 0, 100, None, false),
        cell("ours+patched-lazy", 0, 90, None, false),
    ];
    assert!(rows(&cols, &[phase_4k()], &all, 0).is_empty());
    assert!(rows(&cols, &[phase_4k()], &all, 7).is_empty());
}

#[test]
fn a_gap_is_an_order_effect_only_beyond_the_noise() {
    // Three rounds each side, after running 1.5x before with little noise.
    let g = OrderGap::of(&[1.0, 1.02, 0.98], &[1.5, 1.52, 1.48]).unwrap();
    assert!((g.ratio - 1.5).abs() < 0.01, "{g:?}");
    assert!(g.low > 1.4 && g.high < 1.6, "{g:?}");
    assert!(g.p < 0.001, "{g:?}");
    // The same gap with the spread the lab's guests have: not shown.
    let g = OrderGap::of(&[0.7, 1.0, 1.4], &[1.0, 1.5, 2.1]).unwrap();
    assert!((g.ratio - 1.48).abs() < 0.01, "{g:?}");
    assert!(g.low < 1.0 && g.p > 0.05, "{g:?}");
    // One round in a half: no test.
    assert!(OrderGap::of(&[1.0], &[1.5, 1.6]).is_none());
}

#[test]
fn the_table_marks_gaps_after_holm() {
    let cols = cols(&["qemu+patched", "ours+patched-lazy"]);
    let mut all = Vec::new();
    for r in 0..6u32 {
        let ours_first = r % 2 == 0;
        // Ours runs 2.0x QEMU second, 1.0x first, +-1%.
        let ours = if ours_first {
            100 + r as u64
        } else {
            200 + r as u64
        };
        let (q, o) = if ours_first { (1, 0) } else { (0, 1) };
        all.push(placed("qemu+patched", r, 100, &format!("h{r}"), q));
        all.push(placed("ours+patched-lazy", r, ours, &format!("h{r}"), o));
    }
    let rows = rows(&cols, &[phase_4k()], &all, 0);
    let g = rows[0].gap.unwrap();
    assert!(g.shown && g.p_holm == g.p, "{g:?}");
    let text = &cells(&rows[0])[4];
    assert!(text.starts_with("1.9") && text.ends_with(" *"), "{text}");
}
