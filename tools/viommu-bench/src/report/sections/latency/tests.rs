use super::*;
use crate::report::markdown::render_markdown;
use crate::report::summarize::summarize;
use crate::report::tests::fixture;
use crate::report::text::render_text;

/// `p99` µs (p50 a tenth of it, p99.9 twice it) on the reads of every
/// cell of `column`, round r getting `p99[r]`.
fn with_latency(cells: &mut [CellResult], column: &str, p99: &[f64]) {
    for c in cells.iter_mut().filter(|c| c.column == column) {
        let ns = (p99[c.round as usize] * 1e3) as u64;
        let f = crate::report::tests::fio_4k(c);
        f.read_lat = Some(Latency {
            p50_ns: Some(ns / 10),
            p99_ns: Some(ns),
            p999_ns: Some(ns * 2),
            clat_mean_ns: ns as f64 / 5.0,
            lat_mean_ns: ns as f64 / 4.0,
            samples: 1000,
            jobs: 1,
        });
    }
}

#[test]
fn p99_over_the_ceilings_of_the_same_round() {
    let (cols, phases, mut cells) = fixture();
    with_latency(&mut cells, "no-viommu", &[100.0, 200.0, 100.0]);
    with_latency(&mut cells, "ours+patched-lazy", &[150.0, 200.0, 130.0]);
    // qemu+stock reports none (a terse-era record): no row.
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.latency.len(), 2, "{:?}", s.latency);
    let ours = &s.latency[0];
    assert_eq!(
        (ours.column.as_str(), ours.dir.as_str()),
        ("ours+patched-lazy", "read")
    );
    let p99 = ours.p99_us.unwrap();
    assert_eq!((p99.median, p99.min, p99.max), (150.0, 130.0, 200.0));
    assert_eq!(ours.p50_us, Some(15.0));
    assert_eq!(ours.p999_us, Some(300.0));
    // Round by round: 1.5, 1.0, 1.3.
    let r = ours.p99_ratio.unwrap();
    assert_eq!((r.median, r.min, r.max, r.n), (1.3, 1.0, 1.5, 3));
    let ceil = &s.latency[1];
    assert_eq!(ceil.p99_ratio.unwrap().median, 1.0);
    assert_eq!(
        super::cells(ours),
        [
            "randread-4k",
            "ours+patched-lazy",
            "read",
            "15.0",
            "150 [130-200]",
            "300",
            "1.30 [1.00-1.50]"
        ]
    );
    // The summary in results.json keeps them.
    let back: crate::report::summary::Summary =
        serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back.latency, s.latency);
}

#[test]
fn without_a_ceiling_no_ratio_and_without_latency_no_table() {
    let (cols, phases, mut cells) = fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert!(s.latency.is_empty());
    assert!(!render_text(&s).contains("completion latency"));
    assert!(!render_markdown(&s, "t").contains("Completion latency"));
    with_latency(&mut cells, "qemu+stock", &[50.0, 60.0, 70.0]);
    let no_ceiling: Vec<_> = cols
        .iter()
        .filter(|c| c.tag != "no-viommu")
        .cloned()
        .collect();
    let s = summarize(&no_ceiling, &phases, &cells, 0, 3);
    assert_eq!(s.latency.len(), 1);
    assert!(s.latency[0].p99_ratio.is_none());
    assert_eq!(super::cells(&s.latency[0])[4], "60.0 [50.0-70.0]");
    assert_eq!(super::cells(&s.latency[0])[6], "-");
}

#[test]
fn real_fio_output_makes_the_rows_and_both_renderings() {
    // The ceiling measured with Debian 12's fio, the vIOMMU columns with
    // Debian 13's, each round the same file.
    let (cols, phases, mut cells) = fixture();
    for c in cells.iter_mut() {
        let name = if c.column == "no-viommu" {
            "fio-3.33-randread-j1"
        } else {
            "fio-3.39-randread-j1"
        };
        let out = crate::run::fio_json::parse(crate::run::fio_json::tests::fixture(name)).unwrap();
        let f = c.phases.get_mut("randread-4k").unwrap().fio.take().unwrap();
        c.phases.get_mut("randread-4k").unwrap().fio = Some(out.apply(f));
    }
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.latency.len(), 3);
    let q = &s.latency[0];
    // fio 3.39's p99 3620864 ns over fio 3.33's 2932736 ns, every round.
    let r = q.p99_ratio.unwrap();
    assert!((r.median - 3620864.0 / 2932736.0).abs() < 1e-9, "{r:?}");
    assert_eq!(r.min, r.max);
    let text = render_text(&s);
    let md = render_markdown(&s, "t");
    println!("{text}\n{md}");
    assert!(text.contains(
        "== completion latency (fio clat, medians over rounds; p99 x ceiling of the same round) =="
    ));
    assert!(text.contains("p99 x ceiling"));
    assert!(md.contains("| phase | column | dir | p50 us | p99 us | p99.9 us | p99 x ceiling |"));
    assert!(md.contains("| randread-4k | no-viommu | read |"));
    // The IOPS come from the JSON too.
    assert!(s.groups[0].rows.iter().all(|r| r.iops.is_some()));
}
