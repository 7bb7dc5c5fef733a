use super::*;

#[test]
fn classifies_qemu_log_lines() {
    assert_eq!(
        classify("virtio_iommu_map domain=1 virt_start=0xfffff000 virt_end=0xffffffff phys_start=0x1000 flags=3"),
        Some(TraceEvent::Map)
    );
    assert_eq!(
        classify(
            "4242@1700000000.123456:virtio_iommu_unmap domain=1 virt_start=0x0 virt_end=0xfff"
        ),
        Some(TraceEvent::Unmap)
    );
    assert_eq!(
        classify("vfio_iommu_map_notify iommu map @ iova 0xfffff000 - 0xffffffff"),
        Some(TraceEvent::VfioCall)
    );
    assert_eq!(
        classify("4242@1700000000.000001:handle_qmp_command mon 0x55d0 req: {\"execute\": \"trace-event-set-state\"}"),
        Some(TraceEvent::Canary)
    );
    assert_eq!(classify("virtio_iommu_unmap_done domain=1"), None);
    assert_eq!(classify("qemu-system-x86_64: warning: something"), None);
    assert_eq!(classify(""), None);
}

#[test]
fn counts_across_partial_writes() {
    let mut t = TraceCounter::default();
    t.feed(b"virtio_iommu_map d=1\nvirtio_iommu_un");
    assert_eq!(t.counts().map_requests, 1);
    assert_eq!(t.counts().unmap_requests, 0);
    t.feed(b"map d=1\nvfio_iommu_map_notify iommu unmap\n");
    let c = t.counts();
    assert_eq!((c.map_requests, c.unmap_requests, c.vfio_calls), (1, 1, 1));
    assert_eq!(t.lines(), 3);
    // The canary's lines are lines, not events.
    t.feed(b"handle_qmp_command mon 0x1 req: {}\nhandle_qmp");
    assert_eq!((t.lines(), t.counts()), (4, c));
}

#[tokio::test]
async fn a_qemu_that_cannot_be_asked_is_not_counted_and_not_asked_again() {
    let d = tempfile::tempdir().unwrap();
    let mut q = QemuTrace::new(&d.path().join("t.trace"), &d.path().join("none.qmp"));
    assert!(
        matches!(q.counting(), Counting::NotCounted { why } if why.contains("ran no counting phase"))
    );
    assert!(q.end("count-randread-4k").await.is_err(), "never on");
    let e = q.begin().await.unwrap_err();
    assert!(e.contains("none.qmp"), "{e}");
    // Asked again: the same reason, at once.
    assert_eq!(q.begin().await.unwrap_err(), e);
    assert!(
        matches!(q.counting(), Counting::NotCounted { why } if why == format!("QEMU's counting pass failed: {e}"))
    );
}

#[test]
fn polls_a_growing_file() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.log");
    let mut t = TraceCounter::default();
    assert_eq!(t.poll(&p).unwrap(), DeviceCounters::default());
    std::fs::write(&p, "virtio_iommu_map a\nvirtio_iommu_map b\n").unwrap();
    assert_eq!(t.poll(&p).unwrap().map_requests, 2);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    std::io::Write::write_all(&mut f, b"virtio_iommu_unmap c\n").unwrap();
    let c = t.poll(&p).unwrap();
    assert_eq!((c.map_requests, c.unmap_requests), (2, 1));
}
