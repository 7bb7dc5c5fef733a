//! Two endpoints behind one virtio-iommu, each with its own host mapper
//! (the VMM's two `--vfio` devices, one VFIO container or IOAS each):
//! ATTACH and DETACH of both, in two domains and in one; a MAP in one
//! endpoint's domain never reaches the other's address space; a host
//! failure on one endpoint's mapper stays that endpoint's.

use dma_mapper::DmaPerm;
use viommu_wire::status::*;

use crate::testing::{req, FakeCall, Harness, DATA_BASE};
use crate::{DeviceConfig, EndpointState};

const PAGE: u64 = 0x1000;
const OK: Option<u8> = Some(VIRTIO_IOMMU_S_OK);
/// Endpoint ids as the VMM gives them (guest BDFs 00:03.0 and 00:04.0).
const A: u32 = 3 << 3;
const B: u32 = 4 << 3;

fn harness() -> Harness {
    Harness::new(DeviceConfig::default(), &[A, B], 64)
}

fn map(d: u32, iova: u64, gpa: u64) -> Vec<u8> {
    req::map(d, iova, iova + PAGE - 1, gpa, req::RW)
}

fn unmap(d: u32, iova: u64) -> Vec<u8> {
    req::unmap(d, iova, iova + PAGE - 1)
}

fn iovas(h: &Harness, ep: usize) -> Vec<u64> {
    h.mappers[ep].mappings().iter().map(|m| m.0).collect()
}

#[test]
fn each_endpoint_in_its_own_domain() {
    let mut h = harness();
    assert_eq!(
        h.statuses(&[req::attach(1, A, 0), req::attach(2, B, 0)]),
        vec![OK; 2]
    );
    assert_eq!(h.dev.endpoint_state(A), Some(EndpointState::Translated(1)));
    assert_eq!(h.dev.endpoint_state(B), Some(EndpointState::Translated(2)));
    // The same IOVA in both domains, to different pages.
    let st = h.statuses(&[
        map(1, 0x10_0000, DATA_BASE),
        map(2, 0x10_0000, DATA_BASE + 0x10_0000),
        map(1, 0x20_0000, DATA_BASE + PAGE),
    ]);
    assert_eq!(st, vec![OK; 3]);
    assert_eq!(iovas(&h, 0), vec![0x10_0000, 0x20_0000]);
    assert_eq!(iovas(&h, 1), vec![0x10_0000]);
    assert_eq!(
        h.mappers[0].translate(0x10_0010, DmaPerm::RW),
        Some(DATA_BASE + 0x10)
    );
    assert_eq!(
        h.mappers[1].translate(0x10_0010, DmaPerm::RW),
        Some(DATA_BASE + 0x10_0010)
    );
    h.check_consistency().unwrap();
    // DETACH of both, one at a time.
    assert_eq!(h.statuses(&[req::detach(1, A)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert_eq!(iovas(&h, 1), vec![0x10_0000]);
    assert_eq!(h.statuses(&[req::detach(2, B)]), vec![OK]);
    assert!(h.mappers[1].mappings().is_empty());
    for ep in [A, B] {
        assert_eq!(
            h.dev.endpoint_state(ep),
            Some(EndpointState::Unattached { bypass: false })
        );
    }
    // Both domains went with their last endpoint.
    assert!(h.dev.domain_mappings(1).is_none());
    assert!(h.dev.domain_mappings(2).is_none());
}

#[test]
fn a_map_in_one_domain_is_not_visible_in_the_other() {
    let mut h = harness();
    h.send(&[req::attach(1, A, 0), req::attach(2, B, 0)]);
    h.mappers[1].clear_log();
    assert_eq!(h.statuses(&[map(1, 0x40_0000, DATA_BASE)]), vec![OK]);
    // B's address space never saw a call, and B's device faults there.
    assert!(h.mappers[1].log().is_empty());
    assert_eq!(h.mappers[1].translate(0x40_0000, DmaPerm::RO), None);
    assert_eq!(
        h.mappers[0].translate(0x40_0000, DmaPerm::RO),
        Some(DATA_BASE)
    );
    // A's domain is not B's: an UNMAP in B's domain of A's IOVA removes nothing.
    assert_eq!(h.statuses(&[unmap(2, 0x40_0000)]), vec![OK]);
    assert_eq!(iovas(&h, 0), vec![0x40_0000]);
    // A domain number B is not in is of no use to B: a MAP there only
    // programs A's mapper.
    assert_eq!(h.statuses(&[map(1, 0x50_0000, DATA_BASE)]), vec![OK]);
    assert!(h.mappers[1].mappings().is_empty());
    h.check_consistency().unwrap();
}

#[test]
fn both_endpoints_in_one_domain_share_its_mappings() {
    let mut h = harness();
    let st = h.statuses(&[
        req::attach(7, A, 0),
        map(7, 0x10_0000, DATA_BASE),
        // B joins a domain that has a mapping: replayed onto B's mapper.
        req::attach(7, B, 0),
        map(7, 0x20_0000, DATA_BASE + PAGE),
    ]);
    assert_eq!(st, vec![OK; 4]);
    for ep in 0..2 {
        assert_eq!(iovas(&h, ep), vec![0x10_0000, 0x20_0000]);
        assert_eq!(
            h.mappers[ep].translate(0x20_0000, DmaPerm::RW),
            Some(DATA_BASE + PAGE)
        );
    }
    // One guest MAP, one host call per mapper, counted once per mapper.
    let c = h.dev.counters();
    assert_eq!(c.requests.map, 2);
    assert_eq!(
        c.backend.map_calls, 4,
        "a map on A, its replay on B, a map on both"
    );
    assert_eq!(h.statuses(&[unmap(7, 0x10_0000)]), vec![OK]);
    assert_eq!(iovas(&h, 0), vec![0x20_0000]);
    assert_eq!(iovas(&h, 1), vec![0x20_0000]);
    // DETACH of A empties A's address space and keeps B's.
    assert_eq!(h.statuses(&[req::detach(7, A)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert_eq!(iovas(&h, 1), vec![0x20_0000]);
    assert_eq!(h.dev.endpoint_state(B), Some(EndpointState::Translated(7)));
    // The domain lives on with B: new MAPs reach B only.
    assert_eq!(h.statuses(&[map(7, 0x30_0000, DATA_BASE)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert_eq!(iovas(&h, 1), vec![0x20_0000, 0x30_0000]);
    h.check_consistency().unwrap();
}

#[test]
fn detach_of_one_leaves_the_others_mappings() {
    let mut h = harness();
    h.send(&[
        req::attach(1, A, 0),
        req::attach(2, B, 0),
        map(1, 0x1000, DATA_BASE),
        map(2, 0x1000, DATA_BASE),
        map(2, 0x2000, DATA_BASE),
    ]);
    h.mappers[1].clear_log();
    assert_eq!(h.statuses(&[req::detach(1, A)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.mappers[1].log().is_empty(), "B's mapper untouched");
    assert_eq!(iovas(&h, 1), vec![0x1000, 0x2000]);
    assert_eq!(h.dev.domain_mappings(2).unwrap().len(), 2);
    // A detached from B's domain number is refused and changes nothing.
    assert_eq!(
        h.statuses(&[req::detach(2, A)]),
        vec![Some(VIRTIO_IOMMU_S_INVAL)]
    );
    assert_eq!(iovas(&h, 1), vec![0x1000, 0x2000]);
    h.check_consistency().unwrap();
}

#[test]
fn a_host_failure_on_one_endpoint_stays_its_own() {
    let mut h = harness();
    h.send(&[
        req::attach(1, A, 0),
        req::attach(2, B, 0),
        map(2, 0x1000, DATA_BASE),
    ]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Map { .. }));
    // In one batch: A's MAP fails with DEVERR, B's around it succeed.
    let st = h.statuses(&[
        map(2, 0x2000, DATA_BASE),
        map(1, 0x2000, DATA_BASE),
        map(2, 0x3000, DATA_BASE),
    ]);
    assert_eq!(st, vec![OK, Some(VIRTIO_IOMMU_S_DEVERR), OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.dev.domain_mappings(1).unwrap().is_empty());
    assert_eq!(iovas(&h, 1), vec![0x1000, 0x2000, 0x3000]);
    // A failing unmap on A: DEVERR for A, B's UNMAP in the same batch works.
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[map(1, 0x2000, DATA_BASE)]), vec![OK]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Unmap { .. }));
    let st = h.statuses(&[unmap(1, 0x2000), unmap(2, 0x1000)]);
    assert_eq!(st, vec![Some(VIRTIO_IOMMU_S_DEVERR), OK]);
    assert_eq!(iovas(&h, 0), vec![0x2000]);
    assert_eq!(iovas(&h, 1), vec![0x2000, 0x3000]);
    // A DETACH of A whose unmap-all fails too: DEVERR, A stays attached,
    // B's requests keep working.
    h.mappers[0].fail_unmap_all();
    let st = h.statuses(&[req::detach(1, A), map(2, 0x4000, DATA_BASE)]);
    assert_eq!(st, vec![Some(VIRTIO_IOMMU_S_DEVERR), OK]);
    assert_eq!(h.dev.endpoint_state(A), Some(EndpointState::Translated(1)));
    assert_eq!(iovas(&h, 1), vec![0x2000, 0x3000, 0x4000]);
    assert!(h.mappers[1].violations().is_empty());
    h.mappers[0].fail_never();
    h.check_consistency().unwrap();
}

#[test]
fn a_failure_on_one_mapper_of_a_shared_domain_is_rolled_back_on_the_other() {
    let mut h = harness();
    h.send(&[req::attach(1, A, 0), req::attach(1, B, 0)]);
    h.mappers[1].fail_when(|c| matches!(c, FakeCall::Map { iova: 0x2000, .. }));
    let st = h.statuses(&[
        map(1, 0x1000, DATA_BASE),
        map(1, 0x2000, DATA_BASE),
        map(1, 0x3000, DATA_BASE),
    ]);
    assert_eq!(st, vec![OK, Some(VIRTIO_IOMMU_S_DEVERR), OK]);
    // The failed MAP is on neither host: both match the domain.
    assert_eq!(iovas(&h, 0), vec![0x1000, 0x3000]);
    assert_eq!(iovas(&h, 1), vec![0x1000, 0x3000]);
    h.check_consistency().unwrap();
}

#[test]
fn a_reset_empties_both_and_the_next_boot_starts_from_zero() {
    let mut h = harness();
    h.send(&[
        req::attach(1, A, 0),
        req::attach(2, B, req::LAZY),
        map(1, 0x1000, DATA_BASE),
        map(2, 0x1000, DATA_BASE),
        map(2, 0x2000, DATA_BASE),
    ]);
    assert_eq!(h.statuses(&[unmap(2, 0x2000)]), vec![OK]);
    // B's UNMAP is deferred: still on B's host.
    assert_eq!(iovas(&h, 1), vec![0x1000, 0x2000]);
    h.dev.system_reset();
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.mappers[1].mappings().is_empty());
    for ep in [A, B] {
        assert_eq!(
            h.dev.endpoint_state(ep),
            Some(EndpointState::Unattached { bypass: false })
        );
    }
    let f = h.dev.device_features();
    h.restart(f);
    assert_eq!(
        h.statuses(&[
            req::attach(1, A, 0),
            req::attach(2, B, 0),
            map(1, 0x1000, DATA_BASE),
            map(2, 0x1000, DATA_BASE),
        ]),
        vec![OK; 4]
    );
    assert_eq!(iovas(&h, 0), vec![0x1000]);
    assert_eq!(iovas(&h, 1), vec![0x1000]);
    h.check_consistency().unwrap();
}
