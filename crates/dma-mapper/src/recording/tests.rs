use std::sync::Arc;

use super::*;
use crate::SoftAddressSpace;

const PAGE: u64 = 0x1000;

#[test]
fn counts_calls_bytes_and_failures() {
    let r = RecordingMapper::new(SoftAddressSpace::default());
    r.map(0, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    r.map(0x10_000, 0, PAGE, DmaPerm::RO).unwrap();
    assert!(r.map(PAGE, 0, PAGE, DmaPerm::RW).is_err()); // overlap
    assert!(r.unmap(0, PAGE).is_err()); // split
    r.unmap(0, 0x20_000).unwrap();
    assert_eq!(
        r.stats(),
        DmaStats {
            map_calls: 3,
            unmap_calls: 2,
            bytes_mapped: 3 * PAGE,
            bytes_unmapped: 0x20_000,
            map_failures: 1,
            unmap_failures: 1,
            injected_failures: 0,
            ..Default::default()
        }
    );
    assert_eq!(r.stats().calls(), 5);
    assert!(r.calls().is_empty(), "no log unless asked");
    assert_eq!(r.page_size_mask(), crate::PAGE_SIZE_4K_MASK);
}

#[test]
fn injected_faults_do_not_reach_the_backend() {
    let r = RecordingMapper::with_log(SoftAddressSpace::default());
    r.set_faults(FaultPlan::fail_calls([1, 3]));
    r.map(0, 0, PAGE, DmaPerm::RW).unwrap(); // seq 0
    let e = r.map(PAGE, 0, PAGE, DmaPerm::RW).unwrap_err(); // seq 1
    assert!(
        matches!(&e, DmaError::Host { op: "map", iova: 0x1000, source, .. } if source.to_string() == "injected fault")
    );
    assert_eq!(r.inner().mapping_count(), 1);
    r.map(PAGE, 0, PAGE, DmaPerm::RW).unwrap(); // seq 2: retried fine
    assert!(r.unmap(0, 2 * PAGE).is_err()); // seq 3
    assert_eq!(
        r.inner().mapping_count(),
        2,
        "injected unmap changed nothing"
    );
    r.unmap(0, 2 * PAGE).unwrap(); // seq 4
    let log = r.take_calls();
    assert_eq!(
        log.iter()
            .map(|l| (l.call.seq, l.call.op, l.ok, l.injected))
            .collect::<Vec<_>>(),
        vec![
            (0, DmaOp::Map, true, false),
            (1, DmaOp::Map, false, true),
            (2, DmaOp::Map, true, false),
            (3, DmaOp::Unmap, false, true),
            (4, DmaOp::Unmap, true, false),
        ]
    );
    assert_eq!(log[2].call.gpa, Some(0));
    assert_eq!(log[2].call.perm, Some(DmaPerm::RW));
    assert!(r.calls().is_empty());
    let s = r.stats();
    assert_eq!((s.map_failures, s.unmap_failures), (1, 1));
    assert_eq!(s.injected_failures, 2);
    assert_eq!(s.bytes_mapped, 2 * PAGE);
}

#[test]
fn predicate_and_custom_error_faults() {
    let r = RecordingMapper::new(SoftAddressSpace::default());
    r.set_faults(FaultPlan::when(|c| {
        c.op == DmaOp::Unmap && c.iova >= 0x10_000
    }));
    r.map(0x10_000, 0, PAGE, DmaPerm::RW).unwrap();
    assert!(r.unmap(0x10_000, PAGE).is_err());
    r.set_faults(FaultPlan::with(|c| {
        (c.op == DmaOp::Map).then_some(DmaError::Overlap {
            iova: c.iova,
            size: c.size,
        })
    }));
    assert!(matches!(
        r.map(0, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { iova: 0, .. })
    ));
    r.unmap(0x10_000, PAGE).unwrap();
    r.set_faults(FaultPlan::none());
    r.map(0, 0, PAGE, DmaPerm::RW).unwrap();
}

#[test]
fn counters_are_consistent_across_threads() {
    let r = Arc::new(RecordingMapper::new(SoftAddressSpace::default()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let iova = (t * 1000 + i) * PAGE;
                    r.map(iova, 0, PAGE, DmaPerm::RW).unwrap();
                    r.unmap(iova, PAGE).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = r.stats();
    assert_eq!((s.map_calls, s.unmap_calls), (400, 400));
    assert_eq!(s.bytes_mapped, 400 * PAGE);
    assert_eq!(s.bytes_unmapped, 400 * PAGE);
    assert_eq!(r.next_seq(), 800);
    assert_eq!(r.inner().mapping_count(), 0);
}
