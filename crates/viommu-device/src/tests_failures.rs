//! Failure paths that must leave nothing behind (issue 16): a reset or a
//! DETACH whose host unmaps fail falls back to unmap-all; an ATTACH that
//! moves an endpoint and then fails on the target changes nothing.

use viommu_wire::status::*;

use crate::testing::{req, FakeCall, Harness, DATA_BASE};
use crate::{DeviceConfig, EndpointState};

const PAGE: u64 = 0x1000;
const OK: Option<u8> = Some(VIRTIO_IOMMU_S_OK);

fn map(d: u32, page: u64) -> Vec<u8> {
    req::map(
        d,
        page * PAGE,
        (page + 1) * PAGE - 1,
        DATA_BASE + page * PAGE,
        req::RW,
    )
}

fn harness() -> Harness {
    Harness::new(DeviceConfig::default(), &[1, 2], 64)
}

fn fail_unmaps(h: &Harness, ep: usize) {
    h.mappers[ep].fail_when(|c| matches!(c, FakeCall::Unmap { .. }));
}

#[test]
fn reset_with_failing_unmaps_leaves_the_host_empty() {
    let mut h = harness();
    let lazy = [
        req::attach(1, 1, req::LAZY),
        map(1, 0),
        map(1, 1),
        map(1, 2),
    ];
    assert_eq!(h.statuses(&lazy), vec![OK; 4]);
    // One mapping deferred (on the host, not in the table).
    assert_eq!(h.statuses(&[req::unmap(1, 0, PAGE - 1)]), vec![OK]);
    fail_unmaps(&h, 0);
    let f = h.dev.acked_features();
    h.restart(f);
    assert!(
        h.mappers[0].mappings().is_empty(),
        "unmap-all removed what unmap could not"
    );
    // The same IOVAs map again after the reset.
    h.mappers[0].fail_never();
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 0), map(1, 0), map(1, 1)]),
        vec![OK; 3]
    );
    h.check_consistency().unwrap();
}

#[test]
fn a_mapper_the_reset_could_not_empty_cannot_attach_until_it_is_empty() {
    let mut h = harness();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK, OK]);
    fail_unmaps(&h, 0);
    h.mappers[0].fail_unmap_all();
    let f = h.dev.acked_features();
    h.restart(f);
    assert_eq!(h.mappers[0].mappings().len(), 1, "still on the host");
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 0)]),
        vec![Some(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: false })
    );
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK, OK]);
    h.check_consistency().unwrap();
}

#[test]
fn detach_with_failing_unmaps_falls_back_to_unmap_all() {
    let mut h = harness();
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 0), map(1, 0), map(1, 5)]),
        vec![OK; 3]
    );
    fail_unmaps(&h, 0);
    assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: false })
    );
    // Without unmap-all either: DEVERR, still attached, nothing changed.
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK, OK]);
    fail_unmaps(&h, 0);
    h.mappers[0].fail_unmap_all();
    assert_eq!(
        h.statuses(&[req::detach(1, 1)]),
        vec![Some(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
    h.check_consistency().unwrap();
}

#[test]
fn a_failed_move_puts_the_endpoint_back() {
    let mut h = harness();
    // Endpoint 1 in domain 1 (last endpoint there), endpoint 2 in domain 2.
    let setup = [
        req::attach(1, 1, 0),
        map(1, 0),
        map(1, 1),
        req::attach(2, 2, 0),
        map(2, 7),
    ];
    assert_eq!(h.statuses(&setup), vec![OK; 5]);
    // Moving endpoint 1 to domain 2 replays page 7 on its mapper: make it fail.
    h.mappers[0].fail_when(|c| matches!(*c, FakeCall::Map { iova, .. } if iova == 7 * PAGE));
    assert_eq!(
        h.statuses(&[req::attach(2, 1, 0)]),
        vec![Some(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Translated(1)),
        "back in domain 1"
    );
    let got: Vec<u64> = h.mappers[0].mappings().iter().map(|m| m.0 / PAGE).collect();
    assert_eq!(got, vec![0, 1], "domain 1's mappings are on its host again");
    assert_eq!(h.dev.domain_mappings(1).map(|m| m.len()), Some(2));
    h.check_consistency().unwrap();
    // And the move works once the host does.
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::attach(2, 1, 0)]), vec![OK]);
    assert!(
        h.dev.domain_mappings(1).is_none(),
        "domain 1 ceased to exist"
    );
    h.check_consistency().unwrap();
}

#[test]
fn domains_are_bounded_by_the_hosts_dma_entries_and_a_byte_budget() {
    // What the builder takes from the host and the guest's size.
    let cfg = crate::ConfigBuilder::new()
        .host_dma_limit(Ok(10))
        .guest_memory(1 << 20)
        .build();
    assert_eq!(
        cfg.max_mappings_per_domain, 5,
        "mappings + deferred fit the host's 10"
    );
    assert_eq!(cfg.max_bytes_per_domain, 1 << 30, "at least 1 GiB");
    assert!(
        !cfg.offer_bypass,
        "nothing would map guest RAM for a bypassing endpoint"
    );
    let cfg = crate::ConfigBuilder::new()
        .host_dma_limit(Err(std::io::Error::other("old kernel")))
        .build();
    assert_eq!(
        cfg.max_mappings_per_domain,
        DeviceConfig::default().max_mappings_per_domain
    );

    // A guest aliasing one page at many IOVAs hits the byte budget: NOMEM,
    // nothing reaches the host.
    let mut h = Harness::new(
        DeviceConfig {
            max_bytes_per_domain: 4 * PAGE,
            ..Default::default()
        },
        &[1],
        64,
    );
    assert_eq!(h.statuses(&[req::attach(1, 1, req::LAZY)]), vec![OK]);
    let alias = |iova: u64| req::map(1, iova * PAGE, (iova + 1) * PAGE - 1, DATA_BASE, req::RW);
    let st = h.statuses(&(0..5).map(alias).collect::<Vec<_>>());
    assert_eq!(st[..4], vec![OK; 4]);
    assert_eq!(st[4], Some(VIRTIO_IOMMU_S_NOMEM));
    assert_eq!(h.mappers[0].mappings().len(), 4);
    // Deferred unmaps still hold host memory: still over budget until the flush.
    assert_eq!(h.statuses(&[req::unmap(1, 0, PAGE - 1)]), vec![OK]);
    assert_eq!(h.statuses(&[alias(9)]), vec![Some(VIRTIO_IOMMU_S_NOMEM)]);
    assert_eq!(h.statuses(&[req::iotlb_flush(1), alias(9)]), vec![OK, OK]);
    h.check_consistency().unwrap();
}
