//! The Linux 6.1 driver's request patterns, played through guest memory
//! against the device with batching on and off, and random streams
//! (property tests) comparing the two.

use std::collections::BTreeSet;

use proptest::prelude::*;
use viommu_wire::status::*;

use crate::testing::workload::{kicks, Pattern};
use crate::testing::{proptest_cases, req, FakeCall, Harness, DATA_BASE};
use crate::DeviceConfig;

const KIB: u64 = 1024;

fn play(pattern: Pattern, io_size: u64, batching: bool) -> (Harness, usize) {
    let mut h = Harness::new(
        DeviceConfig {
            batching,
            ..Default::default()
        },
        &[1],
        256,
    );
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 0)]),
        vec![Some(VIRTIO_IOMMU_S_OK)]
    );
    h.mappers[0].clear_log();
    let mut n = 0;
    for kick in kicks(pattern, io_size, 32, 200, 1) {
        n += kick.len();
        let used = h.send(&kick);
        assert_eq!(used.len(), kick.len());
        assert!(
            used.iter().all(|u| u.status == Some(VIRTIO_IOMMU_S_OK)),
            "{pattern:?} {io_size}: {used:?}"
        );
    }
    assert!(h.mappers[0].mappings().is_empty(), "every I/O unmapped");
    assert!(h.dev.domain_mappings(1).unwrap().is_empty());
    assert!(h.mappers[0].violations().is_empty());
    (h, n)
}

#[test]
fn strict_sync_is_two_calls_per_io_either_way() {
    for batching in [true, false] {
        let (h, n) = play(Pattern::StrictSync, 4 * KIB, batching);
        assert_eq!(n, 400);
        assert_eq!(h.mappers[0].log().len(), 400);
        assert_eq!(h.dev.counters().batches, 400 + 1);
    }
}

#[test]
fn flush_queue_pattern_has_nothing_to_merge() {
    // [UNMAP old, MAP new] per notification: the UNMAP is of an IOVA the
    // MAP does not touch, no pair cancels, no two UNMAPs are adjacent.
    let (on, _) = play(Pattern::FlushQueue, 16 * KIB, true);
    let (off, _) = play(Pattern::FlushQueue, 16 * KIB, false);
    let calls_on = on.mappers[0].log().len();
    let calls_off = off.mappers[0].log().len();
    assert_eq!(calls_off, 400);
    // Only the final drain (32 deferred unmaps in one notification) merges.
    assert!(calls_on < calls_off, "{calls_on} vs {calls_off}");
    assert!(calls_on >= 400 - 32, "{calls_on}");
    // Batching still saves interrupts: one per notification.
    assert_eq!(on.dev.counters().batches, 1 + 200 + 1);
    assert_eq!(off.dev.counters().batches, 1 + 400);
}

#[test]
fn deferred_unmap_bursts_coalesce() {
    for size in [4 * KIB, 64 * KIB, 128 * KIB] {
        let (on, n) = play(Pattern::DeferredBursts, size, true);
        let (off, _) = play(Pattern::DeferredBursts, size, false);
        assert_eq!(n, 400);
        let unmaps_on = on.mappers[0]
            .log()
            .iter()
            .filter(|c| matches!(c, FakeCall::Unmap { .. }))
            .count();
        let unmaps_off = off.mappers[0]
            .log()
            .iter()
            .filter(|c| matches!(c, FakeCall::Unmap { .. }))
            .count();
        assert_eq!(unmaps_off, 200);
        // 200 I/Os in bursts of 32 adjacent IOVAs (in LIFO-reuse order):
        // one unmap call per burst.
        assert_eq!(unmaps_on, 7, "size {size}");
        // MAPs are never merged (invariant 2).
        assert_eq!(on.dev.counters().backend.map_calls, 200);
    }
}

/// A random request, including malformed ones.
#[derive(Clone, Debug)]
enum R {
    Attach(u32, u32),
    Detach(u32, u32),
    Map(u32, u64, u64),
    Unmap(u32, u64, u64),
    Probe(u32),
    Garbage(Vec<u8>),
}

fn gen() -> impl Strategy<Value = R> {
    prop_oneof![
        1 => (0..3u32, 1..4u32).prop_map(|(d, e)| R::Attach(d, e)),
        1 => (0..3u32, 1..4u32).prop_map(|(d, e)| R::Detach(d, e)),
        8 => (0..3u32, 0..32u64, 1..4u64).prop_map(|(d, p, n)| R::Map(d, p, n)),
        6 => (0..3u32, 0..32u64, 1..6u64).prop_map(|(d, p, n)| R::Unmap(d, p, n)),
        1 => (0..4u32).prop_map(R::Probe),
        1 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(R::Garbage),
    ]
}

fn bytes(r: &R) -> Vec<u8> {
    const P: u64 = 0x1000;
    match *r {
        R::Attach(d, e) => req::attach(d, e, 0),
        R::Detach(d, e) => req::detach(d, e),
        R::Map(d, p, n) => req::map(d, p * P, (p + n) * P - 1, DATA_BASE + p * P, req::RW),
        R::Unmap(d, p, n) => req::unmap(d, p * P, (p + n) * P - 1),
        R::Probe(e) => req::probe(e),
        R::Garbage(ref g) => g.clone(),
    }
}

fn run(
    reqs: &[R],
    cuts: &[usize],
    batching: bool,
    fail_page: Option<u64>,
) -> (Vec<(u32, Option<u8>)>, Harness) {
    let mut h = Harness::new(
        DeviceConfig {
            batching,
            max_mappings_per_domain: 12,
            ..Default::default()
        },
        &[1, 2, 3],
        64,
    );
    if let Some(p) = fail_page {
        for m in &h.mappers {
            m.fail_when(move |c| match *c {
                FakeCall::Map { iova, size, .. } | FakeCall::Unmap { iova, size } => {
                    iova <= p * 0x1000 && p * 0x1000 < iova + size
                }
            });
        }
    }
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < reqs.len() {
        let len = cuts[k % cuts.len()].clamp(1, reqs.len() - pos);
        k += 1;
        let batch: Vec<Vec<u8>> = reqs[pos..pos + len].iter().map(bytes).collect();
        out.extend(h.send(&batch).iter().map(|u| (u.len, u.status)));
        pos += len;
    }
    (out, h)
}

fn host_state(h: &Harness) -> Vec<BTreeSet<(u64, u64, u64)>> {
    h.mappers
        .iter()
        .map(|m| m.mappings().iter().map(|&(i, s, g, _)| (i, s, g)).collect())
        .collect()
}

fn device_state(h: &Harness) -> Vec<BTreeSet<(u64, u64, u64)>> {
    (1..4u32)
        .map(|ep| match h.dev.endpoint_state(ep) {
            Some(crate::EndpointState::Translated(d)) => h
                .dev
                .domain_mappings(d)
                .unwrap_or_default()
                .iter()
                .map(|m| (m.iova, m.size, m.gpa))
                .collect(),
            _ => BTreeSet::new(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    /// Without host failures, batching changes nothing the guest can see:
    /// same used lengths, same statuses, same host state.
    #[test]
    fn batching_is_invisible(
        reqs in proptest::collection::vec(gen(), 1..60),
        cuts in proptest::collection::vec(1..20usize, 1..6),
    ) {
        let (a, ha) = run(&reqs, &cuts, true, None);
        let (b, hb) = run(&reqs, &[1], false, None);
        prop_assert_eq!(a, b);
        prop_assert_eq!(host_state(&ha), host_state(&hb));
        prop_assert_eq!(host_state(&ha), device_state(&ha));
        prop_assert!(ha.mappers.iter().all(|m| m.violations().is_empty()));
    }

    /// With a failing host page, the device's view and every host mapper
    /// agree after every batch, and the host never sees a protocol violation.
    #[test]
    fn failures_keep_device_and_host_in_step(
        reqs in proptest::collection::vec(gen(), 1..60),
        cuts in proptest::collection::vec(1..20usize, 1..6),
        page in 0..32u64,
        batching in any::<bool>(),
    ) {
        let (_, h) = run(&reqs, &cuts, batching, Some(page));
        prop_assert_eq!(host_state(&h), device_state(&h));
        prop_assert!(h.mappers.iter().all(|m| m.violations().is_empty()));
    }
}
