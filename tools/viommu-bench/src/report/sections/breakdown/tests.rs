use super::*;
use crate::run::breakdown::tests::{names, one_request};
use crate::run::breakdown::{analyze, Breakdown, Serving};

#[test]
fn rows_per_request_from_a_cell() {
    use crate::run::guest::FioRecord;
    use crate::run::results::{CellResult, PhaseResult};
    let text = format!("{}{}", one_request(100_000_000), one_request(100_001_000));
    let analysis = analyze(text.lines(), &names(), None);
    let b = |device| Breakdown {
        server_tid: Some(1234),
        serving: Some(Serving::Named("viommu".into())),
        traced_ns: analysis.window_ns(),
        analysis: analysis.clone(),
        device,
        ..Default::default()
    };
    let fio = |phase: &str, iops: u64, kib: u64| FioRecord {
        phase: phase.into(),
        numjobs: 1,
        read_iops: iops,
        read_kib: kib,
        read_ms: 3000,
        ..Default::default()
    };
    let cell = |col: &str, phases: Vec<(&str, PhaseResult)>| CellResult {
        phases: phases
            .into_iter()
            .map(|(n, p)| (n.to_string(), p))
            .collect(),
        ..CellResult::test_ok(col, 0)
    };
    // 1000 IOPS over a 1.046 ms window: 1.046 I/Os; ours counted 2
    // requests; stock QEMU 1 request per I/O in its counting pass.
    let ours = cell(
        "ours+stock",
        vec![(
            "breakdown-randread-4k",
            PhaseResult {
                fio: Some(fio("breakdown-randread-4k", 1000, 12000)),
                breakdown: Some(b(Some(crate::run::metrics::DeviceCounters {
                    map_requests: 1,
                    unmap_requests: 1,
                    ..Default::default()
                }))),
                ..Default::default()
            },
        )],
    );
    let qemu = cell(
        "qemu+stock",
        vec![
            (
                "breakdown-randread-4k",
                PhaseResult {
                    fio: Some(fio("breakdown-randread-4k", 1000, 12000)),
                    breakdown: Some(b(None)),
                    ..Default::default()
                },
            ),
            (
                "count-randread-4k",
                PhaseResult {
                    fio: Some(fio("count-randread-4k", 1000, 400)),
                    device: Some(crate::run::metrics::DeviceCounters {
                        map_requests: 100,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
        ],
    );
    let cols: Vec<_> = ["qemu+stock", "ours+stock", "no-viommu"]
        .iter()
        .map(|n| crate::columns::builtin(n).unwrap())
        .collect();
    let ph = crate::plan::Phase {
        name: "randread-4k".into(),
        bs: "4k".into(),
        bs_bytes: 4096,
        numjobs: 1,
    };
    let r = rows(&cols, &[ph], &[ours, qemu]);
    assert_eq!(r.len(), 2, "{r:#?}");
    let q = &r[0];
    assert_eq!(
        (q.column.as_str(), q.requests_lower_bound),
        ("qemu+stock", true)
    );
    assert!((q.requests_per_io.unwrap() - 1.0).abs() < 1e-9, "{q:?}");
    let o = &r[1];
    assert!(!o.requests_lower_bound);
    assert!(
        (o.requests_per_io.unwrap() - 2.0 / 1.046).abs() < 1e-9,
        "{o:?}"
    );
    assert!((o.wakeups_per_request.unwrap() - 1.0).abs() < 1e-9);
    assert!((o.wake_latency_us.unwrap() - 5.0).abs() < 1e-9);
    assert!((o.run_us_per_request.unwrap() - 40.0).abs() < 1e-9);
    assert!((o.ioctl_us.unwrap() - 20.0).abs() < 1e-9);
    assert!((o.pin_us_per_request.unwrap() - 8.0).abs() < 1e-9);
    assert!((o.rest_us_per_request.unwrap() - 20.0).abs() < 1e-9);
    assert!((o.write_exits_per_request.unwrap() - 1.0).abs() < 1e-9);
    assert!((o.run_share.unwrap() - 80.0 / 1046.0).abs() < 1e-9);
    let c = cells(q);
    assert_eq!(c.len(), HEADER.len());
    assert!(c[2].starts_with(">=") && c[6].starts_with("<="), "{c:?}");
    assert!(!cells(o)[6].starts_with("<="));
}
