//! What reaches the host: UNMAP bursts coalesced only when batching, a
//! cancelling MAP/UNMAP pair, backend failures kept per request, attach
//! replay rolled back, faults to the event queue, reset, bad
//! configurations, and dma-mapper's software address space.

use super::*;

#[test]
fn unmap_bursts_coalesce_only_when_batching() {
    for (batching, calls) in [(true, 1usize), (false, 16)] {
        let mut h = batching_harness(batching);
        let mut reqs = vec![req::attach(1, 1, 0)];
        reqs.extend((0..16).map(|i| map(1, 0x100000 - (i + 1) * PAGE, 1)));
        h.send(&reqs);
        h.mappers[0].clear_log();
        // A burst of deferred unmaps, in allocation (descending) order.
        let reqs: Vec<Vec<u8>> = (0..16)
            .map(|i| unmap(1, 0x100000 - (i + 1) * PAGE, 0x100000 - i * PAGE))
            .collect();
        assert!(h.send(&reqs).iter().all(|u| u.status == OK));
        assert_eq!(h.mappers[0].log().len(), calls, "batching {batching}");
        assert!(h.mappers[0].mappings().is_empty());
    }
}

#[test]
fn cancelling_map_unmap_pair_skips_the_host() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0)]);
    h.mappers[0].clear_log();
    let st = h.statuses(&[
        map(1, 0x1000, 1),
        map(1, 0x8000, 1),
        unmap(1, 0x1000, 0x2000),
    ]);
    assert_eq!(st, vec![OK; 3]);
    assert_eq!(h.mappers[0].log().len(), 1);
    assert_eq!(h.dev.counters().elided_maps, 1);
}

#[test]
fn backend_failures_stay_per_request() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0)]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Map { iova: 0x2000, .. }));
    let st = h.statuses(&[map(1, 0x1000, 1), map(1, 0x2000, 1), map(1, 0x3000, 1)]);
    assert_eq!(st, vec![OK, s(VIRTIO_IOMMU_S_DEVERR), OK]);
    // Nothing there any more: OK, and no host call.
    assert_eq!(h.statuses(&[unmap(1, 0x2000, 0x3000)]), vec![OK]);
    // In one batch, a MAP cancelled by an UNMAP never reaches the host, so
    // the failure the host would have returned never happens.
    let st = h.statuses(&[map(1, 0x2000, 1), unmap(1, 0x2000, 0x3000)]);
    assert_eq!(st, vec![OK, OK]);
    assert_eq!(host(&h, 0), vec![(0x1000, PAGE), (0x3000, PAGE)]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Unmap { .. }));
    let st = h.statuses(&[unmap(1, 0x1000, 0x2000), unmap(1, 0x3000, 0x4000)]);
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_DEVERR); 2]);
    // Failed unmaps leave the mappings in the table and on the host.
    assert_eq!(h.dev.domain_mappings(1).unwrap().len(), 2);
    assert_eq!(host(&h, 0).len(), 2);
    // Detach fails too (when even unmap-all fails) and keeps the endpoint
    // attached.
    h.mappers[0].fail_unmap_all();
    assert_eq!(
        h.statuses(&[req::detach(1, 1)]),
        vec![s(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.dev.counters().backend.failures() >= 4);
    assert!(h.mappers[0].violations().is_empty());
}

#[test]
fn attach_replay_failure_is_rolled_back() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0), map(1, 0x1000, 1), map(1, 0x5000, 1)]);
    h.mappers[1].fail_when(|c| matches!(c, FakeCall::Map { iova: 0x5000, .. }));
    assert_eq!(
        h.statuses(&[req::attach(1, 2, 0)]),
        vec![s(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert!(h.mappers[1].mappings().is_empty());
    assert_eq!(
        h.dev.endpoint_state(2),
        Some(EndpointState::Unattached { bypass: false })
    );
}

#[test]
fn faults_go_to_the_event_queue() {
    let mut h = Harness::new(
        DeviceConfig {
            max_pending_events: 2,
            ..Default::default()
        },
        &[1],
        64,
    );
    let f = FaultReport {
        reason: wire::VIRTIO_IOMMU_FAULT_R_MAPPING,
        flags: wire::VIRTIO_IOMMU_FAULT_F_WRITE | wire::VIRTIO_IOMMU_FAULT_F_ADDRESS,
        endpoint: 1,
        address: 0xdead_0000,
    };
    // No buffer yet: kept.
    h.dev.report_fault(f).unwrap();
    h.dev.report_fault(f).unwrap();
    h.dev.report_fault(f).unwrap(); // over the backlog: dropped
    assert_eq!(h.dev.counters().events_dropped, 1);
    let mem = h.mem.clone();
    let b0 = h.evq.slot_addr(0);
    h.evq
        .push_raw(&*mem, &[(b0, 24, VRING_DESC_F_WRITE as u16)])
        .unwrap();
    h.evq
        .push_raw(&*mem, &[(b0 + 0x100, 8, VRING_DESC_F_WRITE as u16)])
        .unwrap(); // too small
    h.dev.process_event_queue().unwrap();
    let used = h.evq.poll(&*mem);
    assert_eq!(used.iter().map(|u| u.len).collect::<Vec<_>>(), vec![24, 0]);
    let ev: wire::Fault = mem.read_obj(GuestAddress(b0)).unwrap();
    assert_eq!(ev.reason, wire::VIRTIO_IOMMU_FAULT_R_MAPPING);
    assert_eq!(ev.endpoint.to_native(), 1);
    assert_eq!(ev.address.to_native(), 0xdead_0000);
    assert_eq!(h.irq.get(1), 1);
    assert_eq!(h.dev.counters().events_reported, 1);
    // The second fault is still pending; the next buffer gets it.
    h.evq
        .push_raw(&*mem, &[(b0 + 0x200, 64, VRING_DESC_F_WRITE as u16)])
        .unwrap();
    h.dev.process_event_queue().unwrap();
    assert_eq!(h.evq.poll(&*mem)[0].len, 24);
}

#[test]
fn reset_destroys_domains() {
    let mut h = harness();
    h.send(&[
        req::attach(1, 1, 0),
        map(1, 0x1000, 2),
        req::attach(2, 2, 0),
        map(2, 0x1000, 1),
    ]);
    h.dev.reset();
    assert!(!h.dev.is_activated());
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.mappers[1].mappings().is_empty());
    assert!(h.dev.domain_mappings(1).is_none());
    assert_eq!(h.dev.acked_features(), 0);
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: false })
    );
}

#[test]
fn bad_configurations_are_refused() {
    use crate::testing::TestMem;
    let bad = |cfg: DeviceConfig| VirtioIommu::<TestMem>::new(cfg).is_err();
    assert!(bad(DeviceConfig {
        page_size_mask: 0,
        ..Default::default()
    }));
    assert!(bad(DeviceConfig {
        input_range: (0, u64::MAX),
        ..Default::default()
    }));
    assert!(bad(DeviceConfig {
        domain_range: (5, 4),
        ..Default::default()
    }));
    let mut dev = VirtioIommu::<TestMem>::new(DeviceConfig {
        page_size_mask: 1 << 9,
        ..Default::default()
    })
    .unwrap();
    // A 4 KiB mapper cannot serve a 512-byte granule.
    assert!(matches!(
        dev.add_endpoint(1, Arc::new(FakeMapper::new())),
        Err(Error::Granule { .. })
    ));
}

/// The device against dma-mapper's own software address space (type1-like
/// rules) behind its recording wrapper with fault injection.
#[test]
fn with_dma_mapper_software_space_and_recorder() {
    use dma_mapper::{FaultPlan, RecordingMapper, SoftAddressSpace, PAGE_SIZE_4K_MASK};

    use crate::testing::workload::{kicks, Pattern};

    let mut h = Harness::new(DeviceConfig::default(), &[], 256);
    let soft = SoftAddressSpace::for_memory(&*h.mem, PAGE_SIZE_4K_MASK);
    let rec = Arc::new(RecordingMapper::new(soft));
    h.dev.add_endpoint(1, rec.clone()).unwrap();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0)]), vec![OK]);

    // Invariant 3 through a real translation: reachable after MAP, not after UNMAP.
    let iova = 0x40_0000;
    assert_eq!(h.statuses(&[map(1, iova, 4)]), vec![OK]);
    assert_eq!(
        rec.inner().translate(iova + 8, 8, DmaPerm::RW),
        Ok(DATA_BASE + iova + 8)
    );
    assert_eq!(h.statuses(&[unmap(1, iova, iova + 4 * PAGE)]), vec![OK]);
    assert!(rec.inner().translate(iova + 8, 8, DmaPerm::RO).is_err());

    let before = rec.stats();
    for kick in kicks(Pattern::DeferredBursts, 64 * 1024, 32, 200, 1) {
        assert!(h.send(&kick).iter().all(|u| u.status == OK));
    }
    let after = rec.stats();
    assert_eq!(after.map_calls - before.map_calls, 200);
    assert_eq!(after.unmap_calls - before.unmap_calls, 7);
    assert_eq!(after.map_failures + after.unmap_failures, 0);
    assert_eq!(rec.inner().mapping_count(), 0);

    // An injected failure on the next call: that MAP alone fails.
    rec.set_faults(FaultPlan::fail_calls([rec.next_seq()]));
    let st = h.statuses(&[map(1, 0x1000, 1), map(1, 0x2000, 1)]);
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_DEVERR), OK]);
    assert_eq!(rec.inner().mappings().len(), 1);
    assert_eq!(h.dev.domain_mappings(1).unwrap().len(), 1);
}
