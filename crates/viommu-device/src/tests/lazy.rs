//! The lazy-unmap contract and the pool hint (docs/lazy-unmap-contract.md):
//! unit tests through a real queue, and property tests on random streams
//! with deferrable UNMAPs and FLUSH requests.

use std::collections::BTreeSet;

use proptest::prelude::*;
use viommu_wire as wire;
use viommu_wire::status::*;
use vm_memory::{ByteValued, Bytes, GuestAddress};

use crate::testing::{proptest_cases, req, FakeCall, Harness, DATA_BASE};
use crate::*;

const PAGE: u64 = 0x1000;
const OK: Option<u8> = Some(VIRTIO_IOMMU_S_OK);
const LAZY: u64 = 1 << VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH;
const HINT: u64 = 1 << VIRTIO_IOMMU_F_POOL_HINT;

fn s(x: u8) -> Option<u8> {
    Some(x)
}

fn map(d: u32, page: u64, pages: u64) -> Vec<u8> {
    req::map(
        d,
        page * PAGE,
        (page + pages) * PAGE - 1,
        DATA_BASE + page * PAGE,
        req::RW,
    )
}

/// UNMAP of pages (deferred by the device when the domain is lazy).
fn unmap_d(d: u32, page: u64, pages: u64) -> Vec<u8> {
    req::unmap(d, page * PAGE, (page + pages) * PAGE - 1)
}

fn host(h: &Harness, ep: usize) -> Vec<(u64, u64)> {
    h.mappers[ep]
        .mappings()
        .iter()
        .map(|&(i, s, _, _)| (i / PAGE, s / PAGE))
        .collect()
}

fn unmap_calls(h: &Harness, ep: usize) -> Vec<(u64, u64)> {
    h.mappers[ep]
        .log()
        .iter()
        .filter_map(|c| match *c {
            FakeCall::Unmap { iova, size } => Some((iova / PAGE, size / PAGE)),
            _ => None,
        })
        .collect()
}

/// One endpoint attached to lazy domain 1, every feature acked.
fn lazy_harness() -> Harness {
    let mut h = Harness::new(DeviceConfig::default(), &[1, 2], 64);
    assert_eq!(h.statuses(&[req::attach(1, 1, req::LAZY)]), vec![OK]);
    h
}

#[test]
fn features_are_ours_and_can_be_turned_off() {
    let h = lazy_harness();
    let f = h.dev.device_features();
    assert_ne!(f & LAZY, 0);
    assert_ne!(f & HINT, 0);
    // Bits 60 and 61: device-specific, not transport (24-49).
    assert_eq!(LAZY | HINT, 0x3000_0000_0000_0000);
    let h = Harness::new(
        DeviceConfig {
            lazy_unmap: false,
            pool_hint: None,
            ..Default::default()
        },
        &[1],
        16,
    );
    assert_eq!(h.dev.device_features() & (LAZY | HINT), 0);
}

#[test]
fn deferred_unmaps_stay_on_the_host_until_the_flush() {
    let mut h = lazy_harness();
    let maps: Vec<Vec<u8>> = (0..8).map(|p| map(1, p, 1)).collect();
    assert_eq!(h.statuses(&maps), vec![OK; 8]);
    h.mappers[0].clear_log();
    // One deferred UNMAP per notification, in an order with no two
    // neighbours adjacent in time.
    for p in [5, 0, 3, 6, 1, 7, 2, 4] {
        assert_eq!(h.statuses(&[unmap_d(1, p, 1)]), vec![OK]);
    }
    assert!(h.dev.domain_mappings(1).unwrap().is_empty(), "guest view");
    assert_eq!(h.dev.pending_unmaps(1).unwrap().len(), 8);
    assert_eq!(host(&h, 0).len(), 8, "host keeps them");
    assert!(h.mappers[0].log().is_empty(), "no host call yet");
    h.check_consistency().unwrap();

    assert_eq!(h.statuses(&[req::iotlb_flush(1)]), vec![OK]);
    assert_eq!(unmap_calls(&h, 0), vec![(0, 8)], "one merged call");
    assert!(host(&h, 0).is_empty());
    assert!(h.dev.pending_unmaps(1).unwrap().is_empty());
    let c = h.dev.counters();
    assert_eq!(c.deferred_unmaps, 8);
    assert_eq!(c.flushes, 1);
    assert_eq!(c.flush_backend_calls, 1);
    assert_eq!(c.merged_ranges, 8);
    assert_eq!(c.average_merged_run(), 8.0);
    assert_eq!(c.requests.flush, 1);
    // A flush with nothing pending is fine.
    assert_eq!(h.statuses(&[req::iotlb_flush(1)]), vec![OK]);
    assert_eq!(h.dev.counters().flush_backend_calls, 1);
    assert_eq!(h.dev.counters().flushes, 2);
}

#[test]
fn flush_merges_adjacent_runs_only() {
    let mut h = lazy_harness();
    let maps: Vec<Vec<u8>> = [0, 1, 2, 10, 11, 20]
        .iter()
        .map(|&p| map(1, p, 1))
        .collect();
    assert_eq!(h.statuses(&maps), vec![OK; 6]);
    h.mappers[0].clear_log();
    let unmaps: Vec<Vec<u8>> = [11, 0, 20, 2, 10, 1]
        .iter()
        .map(|&p| unmap_d(1, p, 1))
        .collect();
    let mut batch = unmaps;
    batch.push(req::iotlb_flush(1));
    assert_eq!(h.statuses(&batch), vec![OK; 7]);
    assert_eq!(unmap_calls(&h, 0), vec![(0, 3), (10, 2), (20, 1)]);
}

#[test]
fn attach_modes_and_flush_errors() {
    let mut h = lazy_harness();
    assert_eq!(h.statuses(&[map(1, 0, 1)]), vec![OK]);
    // The domain's mode is fixed by the ATTACH that created it.
    assert_eq!(
        h.statuses(&[req::attach(1, 2, 0)]),
        vec![s(VIRTIO_IOMMU_S_INVAL)]
    );
    let both = wire::VIRTIO_IOMMU_ATTACH_F_BYPASS | req::LAZY;
    assert_eq!(
        h.statuses(&[req::attach(5, 2, both)]),
        vec![s(VIRTIO_IOMMU_S_INVAL)],
        "a bypass domain cannot be lazy"
    );
    assert_eq!(
        h.statuses(&[req::attach(5, 2, 0)]),
        vec![OK],
        "strict next to lazy"
    );
    assert_eq!(h.statuses(&[map(5, 0, 1), unmap_d(5, 0, 1)]), vec![OK, OK]);
    assert!(
        host(&h, 1).is_empty(),
        "a strict domain's UNMAP leaves at once"
    );
    // UNMAP's reserved bytes are ignored.
    let mut junk = unmap_d(1, 0, 1);
    junk[24..28].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(h.statuses(&[junk]), vec![OK]);
    assert_eq!(host(&h, 0), vec![(0, 1)], "deferred");
    assert_eq!(h.statuses(&[map(1, 0, 1)]), vec![OK]);
    // The UNMAP errors of a lazy domain are the strict ones.
    assert_eq!(
        h.statuses(&[req::unmap(7, 0, PAGE - 1)]),
        vec![s(VIRTIO_IOMMU_S_NOENT)]
    );
    assert_eq!(h.statuses(&[map(1, 4, 2)]), vec![OK]);
    assert_eq!(
        h.statuses(&[unmap_d(1, 5, 1)]),
        vec![s(VIRTIO_IOMMU_S_RANGE)]
    );
    // IOTLB_FLUSH: unknown domain, out of range, reserved bytes, wrong size.
    assert_eq!(
        h.statuses(&[req::iotlb_flush(9)]),
        vec![s(VIRTIO_IOMMU_S_NOENT)]
    );
    assert_eq!(
        h.statuses(&[req::iotlb_flush(u32::MAX)]),
        vec![s(VIRTIO_IOMMU_S_RANGE)]
    );
    let mut f = req::iotlb_flush(1);
    f[8] = 1;
    assert_eq!(h.statuses(&[f]), vec![s(VIRTIO_IOMMU_S_INVAL)]);
    let mut f = req::iotlb_flush(1);
    f.push(0);
    assert_eq!(h.statuses(&[f]), vec![s(VIRTIO_IOMMU_S_IOERR)]);
}

#[test]
fn without_the_feature_everything_is_strict() {
    let mut h = lazy_harness();
    let f = h.dev.device_features() & !(LAZY | HINT);
    h.restart(f);
    assert_eq!(h.statuses(&[req::attach(1, 1, 0)]), vec![OK]);
    assert_eq!(h.statuses(&[map(1, 0, 1), map(1, 1, 1)]), vec![OK, OK]);
    // The lazy flag is unknown: refused; every UNMAP is strict.
    assert_eq!(
        h.statuses(&[req::attach(2, 2, req::LAZY)]),
        vec![s(VIRTIO_IOMMU_S_INVAL)]
    );
    assert_eq!(
        h.statuses(&[unmap_d(1, 0, 1), unmap_d(1, 1, 1)]),
        vec![OK, OK]
    );
    assert!(host(&h, 0).is_empty());
    assert_eq!(h.dev.counters().deferred_unmaps, 0);
    // IOTLB_FLUSH is unsupported, whatever its shape.
    assert_eq!(
        h.statuses(&[req::iotlb_flush(1)]),
        vec![s(VIRTIO_IOMMU_S_UNSUPP)]
    );
    let mut long = req::iotlb_flush(1);
    long.extend_from_slice(&[0; 8]);
    assert_eq!(h.statuses(&[long]), vec![s(VIRTIO_IOMMU_S_UNSUPP)]);
}

#[test]
fn map_over_a_pending_unmap_forces_it() {
    let mut h = lazy_harness();
    assert_eq!(h.statuses(&[map(1, 0, 4), map(1, 4, 1)]), vec![OK, OK]);
    assert_eq!(h.statuses(&[unmap_d(1, 0, 5)]), vec![OK]);
    h.mappers[0].clear_log();
    // Reuse part of the first range: the whole host mapping goes first.
    assert_eq!(h.statuses(&[map(1, 2, 1)]), vec![OK]);
    assert_eq!(unmap_calls(&h, 0), vec![(0, 4)]);
    assert_eq!(host(&h, 0), vec![(2, 1), (4, 1)]);
    assert_eq!(h.dev.pending_unmaps(1).unwrap().len(), 1);
    assert_eq!(h.dev.counters().forced_unmaps, 1);
    assert!(h.mappers[0].violations().is_empty());
    h.check_consistency().unwrap();
    // Deferred unmap and reuse in one notification.
    assert_eq!(
        h.statuses(&[unmap_d(1, 2, 1), map(1, 2, 2), req::iotlb_flush(1)]),
        vec![OK; 3]
    );
    assert_eq!(host(&h, 0), vec![(2, 2)]);
    h.check_consistency().unwrap();
}

#[test]
fn failed_flush_is_deverr_and_keeps_the_failing_mapping_pending() {
    let mut h = lazy_harness();
    let maps: Vec<Vec<u8>> = (0..4).map(|p| map(1, p, 1)).collect();
    assert_eq!(h.statuses(&maps), vec![OK; 4]);
    assert_eq!(h.statuses(&[unmap_d(1, 0, 4)]), vec![OK]);
    h.mappers[0].fail_when(|c| matches!(*c, FakeCall::Unmap { iova, size } if iova <= 2 * PAGE && 2 * PAGE < iova + size));
    assert_eq!(
        h.statuses(&[req::iotlb_flush(1)]),
        vec![s(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(host(&h, 0), vec![(2, 1)]);
    let left: Vec<u64> = h
        .dev
        .pending_unmaps(1)
        .unwrap()
        .iter()
        .map(|m| m.iova / PAGE)
        .collect();
    assert_eq!(left, vec![2]);
    h.check_consistency().unwrap();
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::iotlb_flush(1)]), vec![OK]);
    assert!(host(&h, 0).is_empty());
}

#[test]
fn detach_attach_and_reset_flush_pending_unmaps() {
    let mut h = lazy_harness();
    assert_eq!(h.statuses(&[map(1, 0, 1), map(1, 1, 1)]), vec![OK, OK]);
    assert_eq!(h.statuses(&[unmap_d(1, 0, 1)]), vec![OK]);
    // A second endpoint (own mapper) joins: pending unmaps go first, so the
    // new mapper only gets the table.
    assert_eq!(h.statuses(&[req::attach(1, 2, req::LAZY)]), vec![OK]);
    assert_eq!(host(&h, 0), vec![(1, 1)]);
    assert_eq!(host(&h, 1), vec![(1, 1)]);
    h.check_consistency().unwrap();
    // DETACH of one endpoint: flushed on every mapper.
    assert_eq!(h.statuses(&[unmap_d(1, 1, 1)]), vec![OK]);
    assert_eq!(host(&h, 0), vec![(1, 1)]);
    assert_eq!(h.statuses(&[req::detach(1, 2)]), vec![OK]);
    assert!(host(&h, 0).is_empty());
    assert!(host(&h, 1).is_empty());
    // Last endpoint: domain gone, nothing left.
    assert_eq!(h.statuses(&[map(1, 5, 1)]), vec![OK]);
    assert_eq!(h.statuses(&[unmap_d(1, 5, 1)]), vec![OK]);
    assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
    assert!(host(&h, 0).is_empty());
    // Reset.
    assert_eq!(
        h.statuses(&[req::attach(3, 1, req::LAZY), map(3, 7, 1)]),
        vec![OK, OK]
    );
    assert_eq!(h.statuses(&[unmap_d(3, 7, 1)]), vec![OK]);
    assert_eq!(host(&h, 0), vec![(7, 1)]);
    let f = h.dev.acked_features();
    h.restart(f);
    assert!(host(&h, 0).is_empty());
}

fn probe_props(h: &mut Harness) -> Vec<u8> {
    let heads = h.queue(&[req::probe(1)]);
    let used = h.kick();
    assert_eq!(used[0].status, OK);
    let n = h.dev.config().probe_size.to_native() as usize;
    let mut props = vec![0u8; n];
    h.mem
        .read_slice(&mut props, GuestAddress(h.reqq.slot_addr(heads[0]) + 0x100))
        .unwrap();
    props
}

#[test]
fn pool_hint_is_probed_only_when_negotiated() {
    let mut h = lazy_harness();
    let props = probe_props(&mut h);
    // RESV_MEM MSI first, then the hint.
    let hint = wire::ProbePoolHint::from_slice(&props[24..56])
        .copied()
        .unwrap();
    let d = PoolHint::default();
    assert_eq!(
        hint,
        wire::ProbePoolHint::new(d.threshold, d.window_start, d.window_size, d.pool_max)
    );
    assert_eq!(hint.head.type_.to_native(), 0x800);
    assert_eq!(hint.threshold.to_native(), 64 * 1024);
    assert!(props[56..].iter().all(|&b| b == 0));
    let f = h.dev.acked_features() & !HINT;
    h.restart(f);
    let props = probe_props(&mut h);
    assert!(
        props[24..].iter().all(|&b| b == 0),
        "no hint without the bit"
    );
}

#[test]
fn pool_hint_window_is_validated() {
    type Dev = VirtioIommu<crate::testing::TestMem>;
    let with = |h: PoolHint| {
        Dev::new(DeviceConfig {
            pool_hint: Some(h),
            ..Default::default()
        })
        .is_ok()
    };
    let d = PoolHint::default();
    assert!(with(d));
    assert!(
        !with(PoolHint {
            window_start: 0xfe00_0000,
            window_size: 0x200_0000,
            ..d
        }),
        "overlaps the MSI window"
    );
    assert!(
        !with(PoolHint {
            window_start: 1 << 48,
            ..d
        }),
        "outside input_range"
    );
    assert!(
        !with(PoolHint {
            window_start: 0x1_0000_0800,
            ..d
        }),
        "unaligned"
    );
    assert!(!with(PoolHint {
        window_size: 0,
        ..d
    }));
    assert!(!with(PoolHint {
        window_start: u64::MAX - 0xfff,
        ..d
    }));
    let reserved = Dev::new(DeviceConfig {
        reserved: vec![(0x1_2000_0000, 0x1_2000_ffff)],
        ..Default::default()
    });
    assert!(reserved.is_err(), "overlaps a reserved region");
}

// ---------------------------------------------------------------------------
// Property tests.

/// A request of the random streams. `Attach(d, e, lazy)`: `lazy` asks for
/// a lazy domain where the stream allows it (see [`bytes`]).
#[derive(Clone, Debug)]
enum R {
    Attach(u32, u32, bool),
    Detach(u32, u32),
    Map(u32, u64, u64),
    Unmap(u32, u64, u64),
    Flush(u32),
}

fn gen() -> impl Strategy<Value = R> {
    prop_oneof![
        1 => (0..3u32, 1..4u32, any::<bool>()).prop_map(|(d, e, l)| R::Attach(d, e, l)),
        1 => (0..3u32, 1..4u32).prop_map(|(d, e)| R::Detach(d, e)),
        8 => (0..3u32, 0..32u64, 1..4u64).prop_map(|(d, p, n)| R::Map(d, p, n)),
        7 => (0..3u32, 0..32u64, 1..6u64).prop_map(|(d, p, n)| R::Unmap(d, p, n)),
        2 => (0..4u32).prop_map(R::Flush),
    ]
}

/// How ATTACH picks the domain mode in a stream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Modes {
    /// Every domain strict (flag 0).
    Strict,
    /// Every domain lazy.
    Lazy,
    /// As each request says (domains of both modes; a mismatch is INVAL).
    Mixed,
}

fn bytes(r: &R, modes: Modes) -> Vec<u8> {
    match *r {
        R::Attach(d, e, l) => {
            let lazy = modes == Modes::Lazy || (modes == Modes::Mixed && l);
            req::attach(d, e, if lazy { req::LAZY } else { 0 })
        }
        R::Detach(d, e) => req::detach(d, e),
        R::Map(d, p, n) => map(d, p, n),
        R::Unmap(d, p, n) => unmap_d(d, p, n),
        R::Flush(d) => req::iotlb_flush(d),
    }
}

type Host = Vec<BTreeSet<(u64, u64, u64)>>;

fn host_state(h: &Harness) -> Host {
    h.mappers
        .iter()
        .map(|m| m.mappings().iter().map(|&(i, s, g, _)| (i, s, g)).collect())
        .collect()
}

/// Plays `reqs` cut into batches by `cuts`; a FLUSH always ends its batch.
/// After each batch: host == table + pending on every endpoint, and a FLUSH
/// that completed OK left no pending unmap of its domain on the host.
fn run(
    reqs: &[R],
    cuts: &[usize],
    features: u64,
    modes: Modes,
    fail_page: Option<u64>,
) -> Result<(Vec<Option<u8>>, Harness), TestCaseError> {
    let mut h = Harness::new(
        DeviceConfig {
            max_mappings_per_domain: 12,
            ..Default::default()
        },
        &[1, 2, 3],
        64,
    );
    h.restart(features);
    if let Some(p) = fail_page {
        for m in &h.mappers {
            m.fail_when(move |c| match *c {
                FakeCall::Map { iova, size, .. } | FakeCall::Unmap { iova, size } => {
                    iova <= p * PAGE && p * PAGE < iova + size
                }
            });
        }
    }
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < reqs.len() {
        let mut len = cuts[k % cuts.len()].clamp(1, reqs.len() - pos);
        k += 1;
        if let Some(f) = reqs[pos..pos + len]
            .iter()
            .position(|r| matches!(r, R::Flush(_)))
        {
            len = f + 1;
        }
        let batch: Vec<Vec<u8>> = reqs[pos..pos + len]
            .iter()
            .map(|r| bytes(r, modes))
            .collect();
        let used = h.send(&batch);
        prop_assert_eq!(used.len(), len);
        if let R::Flush(d) = reqs[pos + len - 1] {
            if used[len - 1].status == OK {
                let left = h.dev.pending_unmaps(d).unwrap_or_default();
                prop_assert!(left.is_empty(), "pending after an OK FLUSH: {:?}", left);
            }
        }
        if let Err(e) = h.check_consistency() {
            return Err(TestCaseError::fail(e));
        }
        out.extend(used.iter().map(|u| u.status));
        pos += len;
    }
    Ok((out, h))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    /// Without host failures the lazy contract is invisible to the guest:
    /// every request gets the status it gets from a strict device (no MAP
    /// ever fails because of a pending deferred unmap), and once every
    /// domain is flushed the host holds what the strict device holds.
    #[test]
    fn lazy_is_invisible_except_for_timing(
        reqs in proptest::collection::vec(gen(), 1..60),
        cuts in proptest::collection::vec(1..20usize, 1..6),
    ) {
        let all = Harness::new(DeviceConfig::default(), &[1], 4).dev.device_features();
        let (lazy, mut hl) = run(&reqs, &cuts, all, Modes::Lazy, None)?;
        // The strict device answers IOTLB_FLUSH with UNSUPP: compare the others.
        let (strict, hs) = run(&reqs, &[1], all & !LAZY, Modes::Strict, None)?;
        for (i, r) in reqs.iter().enumerate() {
            match r {
                R::Flush(_) => {}
                _ => prop_assert_eq!(lazy[i], strict[i], "request {} {:?}", i, r),
            }
        }
        let flushes: Vec<Vec<u8>> = (0..3).map(req::iotlb_flush).collect();
        hl.send(&flushes);
        prop_assert_eq!(host_state(&hl), host_state(&hs));
        prop_assert_eq!(hs.dev.counters().deferred_unmaps, 0);
    }

    /// With a failing host page: host == table + pending after every batch
    /// (checked in `run`), no protocol violation (a MAP over a pending
    /// unmap never reaches the host as an overlap), and an OK FLUSH leaves
    /// nothing pending.
    #[test]
    fn lazy_failures_keep_device_and_host_in_step(
        reqs in proptest::collection::vec(gen(), 1..60),
        cuts in proptest::collection::vec(1..20usize, 1..6),
        page in 0..32u64,
    ) {
        let all = Harness::new(DeviceConfig::default(), &[1], 4).dev.device_features();
        let (_, h) = run(&reqs, &cuts, all, Modes::Mixed, Some(page))?;
        prop_assert!(h.mappers.iter().all(|m| m.violations().is_empty()));
    }
}
