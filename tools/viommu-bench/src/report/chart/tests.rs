use super::*;
use crate::report::summarize::summarize;

fn is_png(p: &Path) -> bool {
    let b = std::fs::read(p).unwrap();
    b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n")
}

#[test]
fn writes_a_png_with_and_without_text() {
    let (cols, phases, cells) = crate::report::tests::fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let d = tempfile::tempdir().unwrap();
    let bare = d.path().join("bare.png");
    write_chart(&s, &bare, false).unwrap();
    assert!(is_png(&bare));
    if load_font(&FONT_CANDIDATES) {
        let labelled = d.path().join("labels.png");
        write_chart(&s, &labelled, true).unwrap();
        assert!(is_png(&labelled));
    }
    // No ceiling column: ratios to the baseline instead.
    let cols2: Vec<_> = cols
        .iter()
        .filter(|c| c.tag != "no-viommu")
        .cloned()
        .collect();
    let s2 = summarize(&cols2, &phases, &cells, 0, 3);
    let p2 = d.path().join("noceil.png");
    write_chart(&s2, &p2, false).unwrap();
    assert!(is_png(&p2));
    assert!(!load_font(&["/nonexistent/font.ttf"]));
}

#[test]
fn the_legend_sits_above_every_bar_and_the_caption_counts_finished_rounds() {
    let (cols, phases, cells) = crate::report::tests::fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert!(!s.rounds_text().contains(" of "), "{}", s.rounds_text());
    // Asked for more rounds than the cells hold: the text says so.
    let more = summarize(&cols, &phases, &cells, 0, 9);
    assert!(
        more.rounds_text().contains(" of 9 rounds"),
        "{}",
        more.rounds_text()
    );
    // The legend box (a line per column) takes the top share of the
    // plot; the tallest bar stays below it.
    let (_, groups) = bars(&s);
    let ncols = groups[0].1.len();
    let share = legend_share(ncols, true);
    let legend_px = 16.0 * ncols as f64 + 25.0;
    assert!(share * 440.0 >= legend_px, "{share}");
    assert_eq!(legend_share(ncols, false), 0.0);
}

#[test]
fn latencies_add_a_p99_panel_below() {
    let (cols, phases, mut cells) = crate::report::tests::fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert!(latency_bars(&s).is_none());
    for c in cells.iter_mut() {
        let p99 = if c.column == "no-viommu" {
            100_000
        } else {
            150_000
        };
        let f = crate::report::tests::fio_4k(c);
        f.read_lat = Some(crate::run::guest::Latency {
            p50_ns: Some(p99 / 10),
            p99_ns: Some(p99),
            p999_ns: Some(p99 * 2),
            jobs: 1,
            ..Default::default()
        });
    }
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let (what, groups) = latency_bars(&s).unwrap();
    assert_eq!(what, "p99 latency / no-viommu p99");
    // The ceiling has no bar of its own, as in the IOPS panel.
    assert_eq!(groups[0].1.len(), 2);
    assert!(groups[0].1.iter().all(|(_, v)| v.unwrap().median == 1.5));
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("lat.png");
    write_chart(&s, &p, false).unwrap();
    assert!(is_png(&p));
    let b = std::fs::read(&p).unwrap();
    // PNG IHDR: width then height, big-endian, at bytes 16..24.
    assert_eq!(u32::from_be_bytes(b[20..24].try_into().unwrap()), 1040);
    // Without a ceiling: over the baseline's median p99.
    let cols2: Vec<_> = cols
        .iter()
        .filter(|c| c.tag != "no-viommu")
        .cloned()
        .collect();
    let s2 = summarize(&cols2, &phases, &cells, 0, 3);
    let (what, groups) = latency_bars(&s2).unwrap();
    assert_eq!(what, "p99 latency / qemu+stock median p99");
    assert_eq!(groups[0].1[1].1.unwrap().median, 1.0);
}
