use super::*;

/// What the VMM serves at `GET /metrics`: the real rendering
/// (vmm/src/machine.rs: `prometheus_text("viommu", &counters)`).
pub(crate) fn real_text() -> String {
    let mut c = viommu_device::Counters::default();
    c.requests.map = 30240;
    c.requests.unmap = 26877;
    c.requests.flush = 1245;
    c.requests.attach = 1;
    c.batch_sizes[3] = 9;
    c.backend.map_calls = 30240;
    c.backend.unmap_calls = 9751;
    c.deferred_unmaps = 26877;
    c.flushes = 1245;
    c.flush_backend_calls = 9751;
    c.merged_ranges = 20000;
    c.busy_ns = 900_000_000;
    c.backend.map_ns = 300_000_000;
    c.backend.unmap_ns = 200_000_000;
    c.backend.bytes_mapped = 1 << 30;
    c.backend.bytes_unmapped = 3 << 28;
    viommu_counters::prometheus_text("viommu", &c)
}

#[test]
fn parses_the_vmms_prometheus_text() {
    let text = real_text();
    assert!(
        text.contains("viommu_requests_total{type=\"map\"} 30240"),
        "{text}"
    );
    let c = parse_prometheus(&text).unwrap();
    assert_eq!(c.map_requests, 30240);
    assert_eq!(c.unmap_requests, 26877);
    assert_eq!(c.flush_requests, 1245);
    assert_eq!(c.vfio_calls, 39991);
    assert_eq!(c.deferred_unmaps, 26877);
    assert_eq!(c.flush_vfio_calls, 9751);
    assert_eq!(c.merged_ranges, 20000);
    assert_eq!(c.busy_ns, 900_000_000);
    assert_eq!(c.vfio_ns, 500_000_000);
    assert_eq!((c.bytes_mapped, c.bytes_unmapped), (1 << 30, 3 << 28));
    assert_eq!(c.requests(), 30240 + 26877 + 1245);
    assert_eq!((c.poll_ns, c.polls_found), (0, 0));
    // The device thread's polling (the request queue's gauges, served
    // beside the device's counters).
    let polled = parse_prometheus(&format!(
        "{text}viommu_requestq_poll_ns_total 7000\nviommu_requestq_polls_found_total 12\nviommu_requestq_vcpu_kicks_total 5\nviommu_requestq_vcpu_handovers_total 3\n"
    ))
    .unwrap();
    assert_eq!((polled.poll_ns, polled.polls_found), (7000, 12));
    assert_eq!(polled.since(&c).polls_found, 12);
    assert_eq!((c.vcpu_kicks, polled.since(&c).vcpu_kicks), (0, 5));
    assert_eq!((c.vcpu_handovers, polled.since(&c).vcpu_handovers), (0, 3));
    // No virtio-iommu: the VMM serves an empty text.
    assert_eq!(parse_prometheus("").unwrap(), DeviceCounters::default());
    assert!(parse_prometheus("garbage").is_err());
    assert!(parse_prometheus("viommu_merged_ranges_total -1").is_err());
}

#[test]
fn parses_http_answers() {
    let ok = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 9\r\n\r\n{}",
        real_text()
    );
    assert_eq!(parse_http_metrics(&ok).unwrap().map_requests, 30240);
    let e = parse_http_metrics("HTTP/1.1 404 Not Found\r\n\r\n{\"error\":\"x\"}\n").unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    assert!(parse_http_metrics("{\"ok\":true}").is_err());
}

#[test]
fn differences_never_underflow() {
    let a = DeviceCounters {
        map_requests: 10,
        vfio_calls: 3,
        ..Default::default()
    };
    let b = DeviceCounters {
        map_requests: 4,
        vfio_calls: 5,
        ..Default::default()
    };
    let d = a.since(&b);
    assert_eq!((d.map_requests, d.vfio_calls), (6, 0));
}
