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
            "0.85 [0.80-0.90] (2)"
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
