use super::*;
use crate::report::tests::cell;

/// A cell of `col` whose randread-4k phase did 1000 I/Os with these counters.
fn with_counters(col: &str, round: u32, counters: &[(&str, i64)]) -> CellResult {
    let mut c = cell(col, round, 100, None, false);
    let f = crate::report::tests::fio_4k(&mut c);
    assert_eq!(f.read_kib, 4000, "the fixture's I/O count changed");
    f.counters = counters.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    c
}

#[test]
fn per_io_medians_of_guests_that_report_the_counters() {
    let cols = crate::report::tests::cols(&["ours+stock", "ours+patched-lazy"]);
    let ph = crate::report::tests::phase_4k();
    // 1000 I/Os; rounds with 2, 4 and 6 us of map per I/O.
    let cells: Vec<CellResult> = [2_000_000i64, 4_000_000, 6_000_000]
        .iter()
        .enumerate()
        .map(|(r, map)| {
            with_counters(
                "ours+patched-lazy",
                r as u32,
                &[
                    ("iommu-dma-time/map_ns", *map),
                    ("iommu-dma-time/iommu_map_ns", map / 2),
                    ("iommu-dma-time/copy_ns", 500_000),
                    ("iommu-dma-time/map_calls", 1000),
                    ("iommu-dma-time/unmap_calls", 1000),
                ],
            )
        })
        .chain([with_counters(
            "ours+stock",
            0,
            &[("virtio-iommu/map", 1000)],
        )])
        .collect();
    let rows = rows(&cols, &[ph], &cells);
    assert_eq!(
        rows.len(),
        1,
        "the stock guest has no time counters: {rows:?}"
    );
    let r = &rows[0];
    assert_eq!(r.column, "ours+patched-lazy");
    assert!((r.map_us - 4.0).abs() < 1e-9, "{r:?}");
    assert!((r.iommu_map_us - 2.0).abs() < 1e-9, "{r:?}");
    assert!((r.copy_us - 0.5).abs() < 1e-9, "{r:?}");
    assert_eq!(r.unmap_us, 0.0);
    assert!((r.calls_per_io - 2.0).abs() < 1e-9, "{r:?}");
    assert_eq!(super::cells(r)[2], "4.00");
}
