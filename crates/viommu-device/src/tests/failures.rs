//! Failure paths that must leave nothing behind: a reset or a
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

/// The leftovers of a failed map whose undo failed (`DmaError::Leftover`)
/// are no mapping of the domain: the domain's end removes them with
/// unmap-all, so nothing the guest was told is unmapped stays reachable.
#[test]
fn leftovers_of_a_failed_map_are_removed_when_the_domain_ends() {
    // DETACH.
    let mut h = harness();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK; 2]);
    h.mappers[0].add_leftover(0x40 * PAGE, PAGE);
    assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty(), "the leftover is gone");
    h.check_consistency().unwrap();
    // Reset.
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK; 2]);
    h.mappers[0].add_leftover(0x40 * PAGE, PAGE);
    let f = h.dev.acked_features();
    h.restart(f);
    assert!(h.mappers[0].mappings().is_empty(), "the leftover is gone");
    // A leftover that unmap-all cannot remove either: DETACH fails and the
    // endpoint stays attached, as reported.
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), map(1, 0)]), vec![OK; 2]);
    h.mappers[0].add_leftover(0x40 * PAGE, PAGE);
    h.mappers[0].fail_when(|c| matches!(*c, FakeCall::Unmap { iova, .. } if iova == 0x40 * PAGE));
    h.mappers[0].fail_unmap_all();
    assert_eq!(
        h.statuses(&[req::detach(1, 1)]),
        vec![Some(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
}

/// Two endpoints of one domain (two mappers, one fan-out): a MAP the second
/// host refuses is undone on the first, whose undo fails. The first host
/// keeps a mapping the domain does not have: a leftover it reports, which
/// a later MAP over it cannot hit unseen, and which the domain's end
/// (DETACH of that endpoint, or a reset) removes with unmap-all.
#[test]
fn a_failed_rollback_across_mappers_is_removed_when_the_domain_ends() {
    for reset in [false, true] {
        let mut h = harness();
        let setup = [req::attach(1, 1, 0), req::attach(1, 2, 0), map(1, 0)];
        assert_eq!(h.statuses(&setup), vec![OK; 3]);
        h.mappers[1].fail_when(|c| matches!(*c, FakeCall::Map { iova, .. } if iova == 3 * PAGE));
        h.mappers[0].fail_when(|c| matches!(*c, FakeCall::Unmap { iova, .. } if iova == 3 * PAGE));
        let deverr = Some(VIRTIO_IOMMU_S_DEVERR);
        assert_eq!(h.statuses(&[map(1, 3)]), vec![deverr]);
        assert_eq!(h.mappers[0].leftovers(), vec![(3 * PAGE, PAGE)]);
        assert_eq!(h.statuses(&[map(1, 3)]), vec![deverr], "refused, not hit");
        h.check_consistency().unwrap();
        if reset {
            let f = h.dev.acked_features();
            h.restart(f);
        } else {
            assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
        }
        assert!(
            h.mappers[0].mappings().is_empty(),
            "reset {reset}: the leftover is gone: {:x?}",
            h.mappers[0].mappings()
        );
        h.check_consistency().unwrap();
    }
}

/// An endpoint joining a domain gets its mappings replayed on its mapper;
/// the replay fails and so does its undo. The mapper serves no domain and
/// holds what the replay left: everything is removed from it at once (or,
/// when even that fails, it is dirty: no ATTACH until it is empty). A move
/// that fails that way still puts the endpoint back.
#[test]
fn a_failed_replay_rollback_leaves_nothing_on_the_joining_mapper() {
    let mut h = harness();
    let setup = [req::attach(1, 1, 0), map(1, 0), map(1, 2)];
    assert_eq!(h.statuses(&setup), vec![OK; 3]);
    let stuck = |h: &Harness| {
        h.mappers[1].fail_when(|c| match *c {
            FakeCall::Map { iova, .. } => iova == 2 * PAGE,
            FakeCall::Unmap { iova, .. } => iova == 0,
        })
    };
    stuck(&h);
    let deverr = Some(VIRTIO_IOMMU_S_DEVERR);
    assert_eq!(h.statuses(&[req::attach(1, 2, 0)]), vec![deverr]);
    assert!(
        h.mappers[1].mappings().is_empty(),
        "unmap-all removed page 0"
    );
    assert_eq!(
        h.dev.endpoint_state(2),
        Some(EndpointState::Unattached { bypass: false })
    );
    h.check_consistency().unwrap();
    // Unmap-all fails too: dirty until the host lets go.
    h.mappers[1].fail_unmap_all();
    assert_eq!(h.statuses(&[req::attach(1, 2, 0)]), vec![deverr]);
    assert!(h.dev.mapper_is_dirty(2));
    h.mappers[1].fail_never();
    assert_eq!(h.statuses(&[req::attach(1, 2, 0)]), vec![OK]);
    h.check_consistency().unwrap();
    // A move from domain 2 to domain 1 failing that way: endpoint 2 goes
    // back to domain 2 with nothing of domain 1 left on its host.
    let setup = [req::detach(1, 2), req::attach(2, 2, 0), map(2, 7)];
    assert_eq!(h.statuses(&setup), vec![OK; 3]);
    stuck(&h);
    assert_eq!(h.statuses(&[req::attach(1, 2, 0)]), vec![deverr]);
    assert_eq!(h.dev.endpoint_state(2), Some(EndpointState::Translated(2)));
    let got: Vec<u64> = h.mappers[1].mappings().iter().map(|m| m.0 / PAGE).collect();
    assert_eq!(got, vec![7], "only domain 2's mapping");
    h.check_consistency().unwrap();
}

mod rollbacks {
    //! Random streams over two endpoints whose hosts fail different pages,
    //! so fan-out and replay rollbacks fail.

    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::testing::proptest_cases;

    #[derive(Clone, Debug)]
    enum R {
        Attach(u32, u32),
        Detach(u32, u32),
        Map(u32, u64, u64),
        Unmap(u32, u64, u64),
    }

    fn gen() -> impl Strategy<Value = R> {
        prop_oneof![
            1 => (1..3u32, 1..3u32).prop_map(|(d, e)| R::Attach(d, e)),
            1 => (1..3u32, 1..3u32).prop_map(|(d, e)| R::Detach(d, e)),
            4 => (1..3u32, 0..12u64, 1..3u64).prop_map(|(d, p, n)| R::Map(d, p, n)),
            2 => (1..3u32, 0..12u64, 1..4u64).prop_map(|(d, p, n)| R::Unmap(d, p, n)),
        ]
    }

    fn bytes(r: &R) -> Vec<u8> {
        match *r {
            R::Attach(d, e) => req::attach(d, e, 0),
            R::Detach(d, e) => req::detach(d, e),
            R::Map(d, p, n) => req::map(
                d,
                p * PAGE,
                (p + n) * PAGE - 1,
                DATA_BASE + p * PAGE,
                req::RW,
            ),
            R::Unmap(d, p, n) => req::unmap(d, p * PAGE, (p + n) * PAGE - 1),
        }
    }

    /// What each endpoint's host holds beyond its domain (mappings and
    /// pending unmaps) is a leftover it reports.
    fn untracked_are_leftovers(h: &Harness) -> Result<(), String> {
        for (ep, m) in h.endpoints.iter().zip(&h.mappers) {
            if h.dev.mapper_is_dirty(*ep) {
                continue;
            }
            let tracked: BTreeSet<u64> = match h.dev.endpoint_state(*ep) {
                Some(EndpointState::Translated(d)) => h
                    .dev
                    .domain_mappings(d)
                    .unwrap_or_default()
                    .iter()
                    .chain(h.dev.pending_unmaps(d).unwrap_or_default().iter())
                    .map(|x| x.iova)
                    .collect(),
                _ => BTreeSet::new(),
            };
            let reported: BTreeSet<u64> = m.leftovers().iter().map(|l| l.0).collect();
            let extra: BTreeSet<u64> = m
                .mappings()
                .iter()
                .map(|x| x.0)
                .filter(|i| !tracked.contains(i))
                .collect();
            if !extra.is_subset(&reported) {
                return Err(format!(
                    "endpoint {ep}: {extra:x?} untracked, {reported:x?} reported"
                ));
            }
            if !m.violations().is_empty() {
                return Err(format!("endpoint {ep}: {:?}", m.violations()));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

        /// After every batch nothing untracked is on a host unless that
        /// host reports it; after a reset every host is empty.
        #[test]
        fn failed_rollbacks_never_leave_untracked_host_mappings(
            reqs in proptest::collection::vec(gen(), 1..60),
            cuts in proptest::collection::vec(1..12usize, 1..6),
            map_poison in proptest::collection::vec(proptest::collection::btree_set(0..14u64, 0..4), 2),
            unmap_poison in proptest::collection::vec(proptest::collection::btree_set(0..14u64, 0..4), 2),
        ) {
            let mut h = harness();
            for (i, m) in h.mappers.iter().enumerate() {
                let (mp, up) = (map_poison[i].clone(), unmap_poison[i].clone());
                let touches = |p: &BTreeSet<u64>, iova: u64, size: u64| {
                    p.iter().any(|&x| iova <= x * PAGE && x * PAGE < iova + size)
                };
                m.fail_when(move |c| match *c {
                    FakeCall::Map { iova, size, .. } => touches(&mp, iova, size),
                    FakeCall::Unmap { iova, size } => touches(&up, iova, size),
                });
            }
            let mut pos = 0;
            let mut k = 0;
            while pos < reqs.len() {
                let len = cuts[k % cuts.len()].clamp(1, reqs.len() - pos);
                k += 1;
                let batch: Vec<Vec<u8>> = reqs[pos..pos + len].iter().map(bytes).collect();
                prop_assert_eq!(h.send(&batch).len(), len);
                if let Err(e) = untracked_are_leftovers(&h) {
                    return Err(TestCaseError::fail(format!("after request {}: {e}", pos + len - 1)));
                }
                pos += len;
            }
            let f = h.dev.acked_features();
            h.restart(f);
            for (i, m) in h.mappers.iter().enumerate() {
                prop_assert!(m.mappings().is_empty(), "host {} after a reset: {:x?}", i, m.mappings());
            }
        }
    }
}
