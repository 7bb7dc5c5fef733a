use super::*;
use crate::report::tests::{cell, phase_4k};
use crate::run::results::Place;

fn placed(col: &str, round: u32, iops: u64, index: u32) -> CellResult {
    let mut c = cell(col, round, iops, None, false);
    c.place = Some(Place {
        boot: format!("h{round}"),
        index,
    });
    c
}

#[test]
fn a_guest_that_runs_first_and_slow_shows_at_its_place() {
    // Two columns, four rounds; whichever guest ran first got 0.8 of what
    // the same column got when it ran second.
    let mut all = Vec::new();
    for r in 0..4u32 {
        let (a_first, fast, slow) = (r % 2 == 0, 100, 80);
        all.push(placed(
            "a",
            r,
            if a_first { slow } else { fast },
            u32::from(!a_first),
        ));
        all.push(placed(
            "b",
            r,
            10 * if a_first { fast } else { slow },
            u32::from(a_first),
        ));
    }
    let (rows, noise) = analyse(&[phase_4k()], &all);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].place, rows[0].guests), (0, 4));
    // Each column's geometric mean is sqrt(0.8) of its fast value.
    let first = 0.8f64.sqrt();
    assert!((rows[0].factor - first).abs() < 1e-9, "{rows:?}");
    assert!((rows[1].factor - 1.0 / first).abs() < 1e-9, "{rows:?}");
    // Every first guest alike: a zero-width interval at the factor.
    assert!((rows[0].high.unwrap() - first).abs() < 1e-9);
    assert_eq!(
        cells(&rows[0]),
        vec!["1".to_string(), "4".into(), "0.89 [0.89, 0.89]".into()]
    );
    // Each round's two guests average out: no host part; the place is a
    // guest's own part here (sd of +-ln(0.8)/2 over 8 guests, 4 rounds).
    let n = noise.unwrap();
    assert_eq!((n.guests, n.rounds), (8, 4));
    assert!(n.host.abs() < 1e-9, "{n:?}");
    let half = 0.8f64.ln().abs() / 2.0;
    assert!(
        (n.guest - (8.0 * half * half / 4.0).sqrt()).abs() < 1e-9,
        "{n:?}"
    );
    assert_eq!(n.phase, 0.0);
    assert!(
        noise_text(&n).contains("a guest's own 17%"),
        "{}",
        noise_text(&n)
    );
}

#[test]
fn a_slow_host_is_the_host_part_not_a_guest_s() {
    // Round 1's host is half as fast for both columns.
    let all = vec![
        placed("a", 0, 100, 0),
        placed("b", 0, 1000, 1),
        placed("a", 1, 50, 1),
        placed("b", 1, 500, 0),
    ];
    let (rows, noise) = analyse(&[phase_4k()], &all);
    let n = noise.unwrap();
    assert!(n.host > 0.4, "{n:?}");
    assert!(n.guest.abs() < 1e-9, "{n:?}");
    // Both places hold one guest of each host: level.
    assert!(
        rows.iter().all(|r| (r.factor - 1.0).abs() < 1e-9),
        "{rows:?}"
    );
}

#[test]
fn nothing_without_two_rounds_or_places() {
    let all = vec![
        cell("a", 0, 100, None, false),
        cell("b", 0, 90, None, false),
    ];
    let (rows, noise) = analyse(&[phase_4k()], &all);
    assert!(rows.is_empty() && noise.is_none());
    let all = vec![
        cell("a", 0, 100, None, false),
        cell("a", 1, 90, None, false),
    ];
    let (rows, noise) = analyse(&[phase_4k()], &all);
    assert!(rows.is_empty(), "no places recorded: {rows:?}");
    assert!(noise.is_none(), "one guest per round: {noise:?}");
}

fn with_thp(mut c: CellResult, rss_kib: u64, thp_kib: u64) -> CellResult {
    c.footprint = Some(crate::run::footprint::Footprint {
        peak_guest_rss_kib: rss_kib,
        peak_guest_thp_kib: thp_kib,
        ..Default::default()
    });
    c
}

#[test]
fn guests_slowed_by_their_huge_pages_show_a_negative_correlation() {
    // Two columns, three rounds; within each round the guest with more of
    // its RAM in huge pages is the slower one.
    let mut all = Vec::new();
    for r in 0..3u32 {
        let a_huge = r % 2 == 0;
        let (a_iops, b_iops) = if a_huge { (70, 1000) } else { (100, 700) };
        let (a_thp, b_thp) = if a_huge { (900, 100) } else { (100, 900) };
        all.push(with_thp(placed("a", r, a_iops, 0), 1000, a_thp));
        all.push(with_thp(placed("b", r, b_iops, 1), 1000, b_thp));
    }
    let (_, noise) = analyse(&[phase_4k()], &all);
    let t = noise.unwrap().thp.unwrap();
    assert_eq!(t.guests, 6);
    assert!(
        (t.min - 0.1).abs() < 1e-9 && (t.max - 0.9).abs() < 1e-9,
        "{t:?}"
    );
    assert!(t.r.unwrap() < -0.9, "{t:?}");
    let text = noise_text(&noise.unwrap());
    assert!(text.contains("Guest RAM in transparent huge pages (6 guests): median 90%, 10-90%; against a guest's own part: r = -"), "{text}");
}

#[test]
fn without_the_record_or_its_spread_there_is_no_correlation() {
    let plain = vec![
        placed("a", 0, 100, 0),
        placed("b", 0, 1000, 1),
        placed("a", 1, 50, 1),
        placed("b", 1, 700, 0),
    ];
    let (_, noise) = analyse(&[phase_4k()], &plain);
    assert_eq!(noise.unwrap().thp, None);
    assert!(!noise_text(&noise.unwrap()).contains("huge pages"));
    // Every guest at 0% (a host with THP off): recorded, no r.
    let never: Vec<CellResult> = plain.into_iter().map(|c| with_thp(c, 1000, 0)).collect();
    let t = analyse(&[phase_4k()], &never).1.unwrap().thp.unwrap();
    assert_eq!((t.guests, t.median, t.r), (4, 0.0, None));
    assert!(thp_text(&t).contains("r undefined: no spread"));
}
