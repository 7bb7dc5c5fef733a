//! Property tests: batching invariants 1-4 (docs/architecture.md) against a one-by-one reference
//! model, on random MAP/UNMAP streams cut into random batches, with failures
//! injected into the host.
//!
//! The streams include deferrable UNMAPs and FLUSH points (the lazy-unmap
//! contract): the reference applies deferred host unmaps only at a flush or
//! when a MAP overlaps them, and the checks add: the host holds exactly the
//! table plus the deferred set; after a flush no deferred mapping survives
//! on the host unless its unmap failed (and the flush reported it); a MAP
//! never fails or is refused because of a pending deferred unmap.
//!
//! Case count: `PROPTEST_CASES` (default 512 here).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use dma_mapper::{DmaError, DmaMapper, DmaPerm};
use proptest::prelude::*;
use viommu_planner::{
    flush_deferred, run_batch, HostFailure, MapperSet, Mapping, MappingTable, Outcome, PlanOptions,
    Reject, Request,
};

/// The one-by-one device: each request alone, each host call immediately.
struct Reference {
    /// Mapping -> whether it is on the host (false for elided maps).
    maps: BTreeMap<u64, (Mapping, bool)>,
    /// Deferred unmaps still on the host.
    deferred: BTreeMap<u64, Mapping>,
    map_poison: BTreeSet<u64>,
    unmap_poison: BTreeSet<u64>,
}

/// Runs of adjacent mappings (given in IOVA order).
fn runs_of<'a>(ms: impl IntoIterator<Item = &'a Mapping>) -> Vec<Vec<Mapping>> {
    let mut runs: Vec<Vec<Mapping>> = Vec::new();
    for x in ms {
        match runs.last_mut() {
            Some(r) if r.last().unwrap().end() == x.iova => r.push(*x),
            _ => runs.push(vec![*x]),
        }
    }
    runs
}

impl Reference {
    /// Applies one request; `elided` says the device elided this MAP (it is
    /// then assumed to succeed on the host). Returns the outcome and the
    /// mappings this request removed.
    fn apply(&mut self, req: &Request, elided: bool) -> (Outcome, Vec<Mapping>) {
        match *req {
            Request::Map(m) => {
                let overlap = self
                    .maps
                    .values()
                    .any(|(x, _)| x.iova <= m.last() && m.iova <= x.last());
                if overlap {
                    return (Outcome::Rejected(Reject::Overlap), vec![]);
                }
                if self.maps.len() >= LIMIT {
                    return (Outcome::Rejected(Reject::Limit), vec![]);
                }
                // Deferred unmaps in the range leave the host first.
                let forced: Vec<Mapping> = self
                    .deferred
                    .values()
                    .filter(|x| x.iova <= m.last() && m.iova <= x.last())
                    .copied()
                    .collect();
                for run in runs_of(&forced) {
                    let (s, e) = (run[0].iova, run.last().unwrap().end());
                    if touches(&self.unmap_poison, s, e - s) {
                        return (Outcome::HostFailed(HostFailure::Host), vec![]);
                    }
                    for x in run {
                        self.deferred.remove(&x.iova);
                    }
                }
                if !elided && touches(&self.map_poison, m.iova, m.size) {
                    return (Outcome::HostFailed(HostFailure::Host), vec![]);
                }
                self.maps.insert(m.iova, (m, !elided));
                (Outcome::Ok, vec![])
            }
            Request::Unmap { first, last } | Request::UnmapDeferred { first, last } => {
                let hit: Vec<(Mapping, bool)> = self
                    .maps
                    .values()
                    .filter(|(x, _)| x.iova <= last && first <= x.last())
                    .copied()
                    .collect();
                if hit.iter().any(|(x, _)| x.iova < first || x.last() > last) {
                    return (Outcome::Rejected(Reject::Split), vec![]);
                }
                let on_host: Vec<Mapping> =
                    hit.iter().filter(|(_, on)| *on).map(|(x, _)| *x).collect();
                let defer = matches!(req, Request::UnmapDeferred { .. })
                    && !on_host.is_empty()
                    && self.deferred.len() + on_host.len() <= LIMIT;
                if defer {
                    for (x, _) in &hit {
                        self.maps.remove(&x.iova);
                    }
                    for x in &on_host {
                        self.deferred.insert(x.iova, *x);
                    }
                    return (Outcome::Ok, hit.iter().map(|(x, _)| *x).collect());
                }
                // Runs of adjacent host mappings, in IOVA order.
                let mut runs: Vec<Vec<Mapping>> = Vec::new();
                for (x, _) in hit.iter().filter(|(_, on)| *on) {
                    match runs.last_mut() {
                        Some(r) if r.last().unwrap().end() == x.iova => r.push(*x),
                        _ => runs.push(vec![*x]),
                    }
                }
                let mut removed = Vec::new();
                for (x, on) in &hit {
                    if !on {
                        self.maps.remove(&x.iova);
                        removed.push(*x);
                    }
                }
                for run in runs {
                    let (s, e) = (run[0].iova, run.last().unwrap().end());
                    if touches(&self.unmap_poison, s, e - s) {
                        return (Outcome::HostFailed(HostFailure::Host), removed);
                    }
                    for x in run {
                        self.maps.remove(&x.iova);
                        removed.push(x);
                    }
                }
                (Outcome::Ok, removed)
            }
        }
    }

    fn mappings(&self) -> BTreeSet<K> {
        self.maps.values().map(|(m, _)| key(m)).collect()
    }

    fn deferred(&self) -> BTreeSet<K> {
        self.deferred.values().map(key).collect()
    }

    /// FLUSH: every run of deferred mappings, a failing run retried one
    /// mapping at a time. Returns whether some unmap failed.
    fn flush(&mut self) -> bool {
        let mut failed = false;
        let all: Vec<Mapping> = self.deferred.values().copied().collect();
        for run in runs_of(&all) {
            let (s, e) = (run[0].iova, run.last().unwrap().end());
            let whole = !touches(&self.unmap_poison, s, e - s);
            for x in run {
                if whole || !touches(&self.unmap_poison, x.iova, x.size) {
                    self.deferred.remove(&x.iova);
                } else {
                    failed = true;
                }
            }
        }
        failed
    }
}

/// A request or a flush point.
#[derive(Clone, Copy, Debug)]
enum Op {
    Req(Request),
    Flush,
}

#[derive(Clone, Debug)]
enum Gen {
    Map {
        page: u64,
        pages: u64,
        gpa_page: u64,
        perm: u8,
    },
    /// Unmap exactly the range of the n-th earlier MAP (mod count).
    UnmapPrev {
        back: usize,
    },
    UnmapRange {
        page: u64,
        pages: u64,
    },
    /// Like `UnmapPrev`, deferrable.
    UnmapPrevDeferred {
        back: usize,
    },
    /// Like `UnmapRange`, deferrable.
    UnmapRangeDeferred {
        page: u64,
        pages: u64,
    },
    Flush,
}

fn gen_op() -> impl Strategy<Value = Gen> {
    prop_oneof![
        4 => (0..PAGES, 1..4u64, 0..1024u64, 1..4u8).prop_map(|(page, pages, gpa_page, perm)| Gen::Map { page, pages, gpa_page, perm }),
        3 => (0..16usize).prop_map(|back| Gen::UnmapPrev { back }),
        1 => (0..PAGES, 1..12u64).prop_map(|(page, pages)| Gen::UnmapRange { page, pages }),
        3 => (0..16usize).prop_map(|back| Gen::UnmapPrevDeferred { back }),
        1 => (0..PAGES, 1..12u64).prop_map(|(page, pages)| Gen::UnmapRangeDeferred { page, pages }),
        1 => Just(Gen::Flush),
    ]
}

fn to_ops(gens: &[Gen]) -> Vec<Op> {
    let mut maps: Vec<Mapping> = Vec::new();
    let mut out = Vec::new();
    for g in gens {
        match *g {
            Gen::Map {
                page,
                pages,
                gpa_page,
                perm,
            } => {
                let perm = DmaPerm {
                    read: perm & 1 != 0,
                    write: perm & 2 != 0,
                };
                let m = Mapping::new(page * PAGE, pages * PAGE, gpa_page * PAGE, perm).unwrap();
                maps.push(m);
                out.push(Op::Req(Request::Map(m)));
            }
            Gen::UnmapPrev { back } | Gen::UnmapPrevDeferred { back } => {
                if let Some(m) = maps.iter().rev().nth(back % maps.len().max(1)) {
                    let (first, last) = (m.iova, m.last());
                    out.push(Op::Req(if matches!(g, Gen::UnmapPrev { .. }) {
                        Request::Unmap { first, last }
                    } else {
                        Request::UnmapDeferred { first, last }
                    }));
                }
            }
            Gen::UnmapRange { page, pages } | Gen::UnmapRangeDeferred { page, pages } => {
                let (first, last) = (page * PAGE, (page + pages) * PAGE - 1);
                out.push(Op::Req(if matches!(g, Gen::UnmapRange { .. }) {
                    Request::Unmap { first, last }
                } else {
                    Request::UnmapDeferred { first, last }
                }));
            }
            Gen::Flush => out.push(Op::Flush),
        }
    }
    out
}

/// The streams without flush points and deferrable UNMAPs (strict).
fn to_requests(gens: &[Gen]) -> Vec<Request> {
    to_ops(gens)
        .into_iter()
        .filter_map(|op| match op {
            Op::Req(Request::UnmapDeferred { first, last }) => Some(Request::Unmap { first, last }),
            Op::Req(r) => Some(r),
            Op::Flush => None,
        })
        .collect()
}

fn check_stream(
    gens: Vec<Gen>,
    cuts: Vec<usize>,
    map_poison: BTreeSet<u64>,
    unmap_poison: BTreeSet<u64>,
    two_mappers: bool,
    opts: PlanOptions,
) -> Result<(), TestCaseError> {
    let ops = to_ops(&gens);
    let clean = Fake::default();
    let poisoned = Fake::default();
    poisoned.with(|h| {
        h.map_poison = map_poison.clone();
        h.unmap_poison = unmap_poison.clone();
    });
    let mappers: Vec<Arc<dyn DmaMapper>> = if two_mappers {
        vec![Arc::new(clean.clone()), Arc::new(poisoned.clone())]
    } else {
        vec![Arc::new(poisoned.clone())]
    };
    let mut table = MappingTable::new(LIMIT);
    let mut reference = Reference {
        maps: BTreeMap::new(),
        deferred: BTreeMap::new(),
        map_poison,
        unmap_poison,
    };

    // A FLUSH is a barrier: the batches are the runs of requests between
    // flush points, cut further by `cuts`.
    let mut segments: Vec<Vec<Request>> = Vec::new();
    let mut flush_after: Vec<bool> = Vec::new();
    let mut cur = Vec::new();
    let mut cut_iter = cuts.into_iter().cycle();
    let mut want = cut_iter.next().unwrap_or(1).max(1);
    for op in &ops {
        match *op {
            Op::Req(r) => {
                cur.push(r);
                if cur.len() >= want {
                    segments.push(std::mem::take(&mut cur));
                    flush_after.push(false);
                    want = cut_iter.next().unwrap_or(1).max(1);
                }
            }
            Op::Flush => {
                segments.push(std::mem::take(&mut cur));
                flush_after.push(true);
            }
        }
    }
    segments.push(cur);
    flush_after.push(false);

    for (batch, flush) in segments.iter().zip(flush_after) {
        let batch = batch.as_slice();
        let before = poisoned.mappings();
        let table_before: BTreeSet<K> = table.iter().map(key).collect();
        let log_start = poisoned.with(|h| h.log.len());

        let mut stats = dma_mapper::DmaStats::default();

        let mut backend = MapperSet::new(&mappers, &mut stats);
        let report = run_batch(&mut table, batch, opts, &mut backend);

        // Reference, one by one, told which maps the device elided.
        let mut removed_in_batch: Vec<(usize, Mapping)> = Vec::new();
        let mut expected = Vec::new();
        for (i, r) in batch.iter().enumerate() {
            let (o, removed) = reference.apply(r, report.elided_maps.contains(&i));
            removed_in_batch.extend(removed.into_iter().map(|m| (i, m)));
            expected.push(o);
        }
        // Invariant 4: per-request statuses of a one-by-one device.
        prop_assert_eq!(&report.outcomes, &expected, "batch {:?}", batch);
        // Elision is only allowed for a MAP removed later in the same batch.
        for &i in &report.elided_maps {
            let Request::Map(m) = batch[i] else {
                return Err(TestCaseError::fail("elided a non-MAP"));
            };
            prop_assert_eq!(expected[i], Outcome::Ok);
            prop_assert!(
                removed_in_batch.iter().any(|&(j, x)| j > i && x == m),
                "elided map {} not removed in its batch",
                i
            );
        }
        // Lazy: deferral only for deferrable UNMAPs that the reference
        // deferred too (same outcome, same deferred set below).
        for &i in &report.deferred {
            let lazy = matches!(batch[i], Request::UnmapDeferred { .. });
            prop_assert!(lazy, "deferred a strict request {}", i);
        }
        // Invariants 1 and 3 (and 4's "state matches"): at publication, host
        // == table + deferred set == one-by-one state.
        let table_set: BTreeSet<K> = table.iter().map(key).collect();
        let deferred_set: BTreeSet<K> = table.deferred().map(key).collect();
        prop_assert_eq!(&table_set, &reference.mappings());
        prop_assert_eq!(&deferred_set, &reference.deferred());
        let host_want: BTreeSet<K> = table_set.union(&deferred_set).copied().collect();
        prop_assert_eq!(&poisoned.mappings(), &host_want);
        if two_mappers {
            prop_assert_eq!(&clean.mappings(), &host_want);
        }
        // Invariant 2: a guest mapping present before the batch that no
        // request of the batch removed is on the host after every single
        // host call.
        let stable: Vec<K> = table_before
            .iter()
            .filter(|m| !removed_in_batch.iter().any(|(_, x)| key(x) == **m))
            .copied()
            .collect();
        let log: Vec<Event> = poisoned.with(|h| h.log[log_start..].to_vec());
        let mut state: BTreeSet<K> = before.clone();
        for ev in &log {
            match *ev {
                Event::Map(..) => {} // a map never removes anything
                Event::Unmap(iova, size) => {
                    let hit: Vec<K> = state
                        .iter()
                        .filter(|m| m.0 >= iova && m.0 + m.1 <= iova + size)
                        .copied()
                        .collect();
                    if touches(&poisoned.with(|h| h.unmap_poison.clone()), iova, size) {
                        continue; // failed call: nothing changed
                    }
                    for m in hit {
                        prop_assert!(!stable.contains(&m), "gap: {:?} unmapped by {:?}", m, ev);
                        state.remove(&m);
                    }
                }
            }
        }
        prop_assert!(
            poisoned.with(|h| h.violations.is_empty()),
            "{:?}",
            poisoned.with(|h| h.violations.clone())
        );
        prop_assert!(clean.with(|h| h.violations.is_empty()));

        if flush {
            let pending: BTreeSet<K> = table.deferred().map(key).collect();
            let mut stats = dma_mapper::DmaStats::default();
            let mut backend = MapperSet::new(&mappers, &mut stats);
            let fr = flush_deferred(&mut table, &mut backend);
            let ref_failed = reference.flush();
            prop_assert_eq!(fr.error.is_some(), ref_failed);
            prop_assert_eq!(fr.failed, reference.deferred.len());
            // No host mapping of a deferred range survives the flush,
            // except the ones whose unmap failed (still deferred, reported).
            let host = poisoned.mappings();
            let left: BTreeSet<K> = table.deferred().map(key).collect();
            prop_assert_eq!(&left, &reference.deferred());
            for k in &pending {
                prop_assert_eq!(host.contains(k), left.contains(k), "{:?}", k);
            }
            let table_set: BTreeSet<K> = table.iter().map(key).collect();
            let host_want: BTreeSet<K> = table_set.union(&left).copied().collect();
            prop_assert_eq!(&host, &host_want);
            if two_mappers {
                prop_assert_eq!(&clean.mappings(), &host_want);
            }
            // Fewest calls without failures: one per run of adjacent
            // deferred mappings.
            if !ref_failed {
                let all: Vec<Mapping> = pending
                    .iter()
                    .map(|k| {
                        Mapping::new(
                            k.0,
                            k.1,
                            k.2,
                            DmaPerm {
                                read: k.3,
                                write: k.4,
                            },
                        )
                        .unwrap()
                    })
                    .collect();
                prop_assert_eq!(fr.calls, runs_of(&all).len());
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

fn pages() -> impl Strategy<Value = BTreeSet<u64>> {
    proptest::collection::btree_set(0..PAGES, 0..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn batched_matches_one_by_one(
        gens in proptest::collection::vec(gen_op(), 1..80),
        cuts in proptest::collection::vec(1..24usize, 1..8),
        map_poison in pages(),
        unmap_poison in pages(),
        two in any::<bool>(),
    ) {
        check_stream(gens, cuts, map_poison, unmap_poison, two, PlanOptions::BATCHED)?;
    }

    /// Without failures, batching gives the same outcomes and state as one
    /// request at a time, with never more host calls.
    #[test]
    fn batching_never_costs_more_calls(
        gens in proptest::collection::vec(gen_op(), 1..80),
        cuts in proptest::collection::vec(1..24usize, 1..8),
    ) {
        let reqs = to_requests(&gens);
        let mut results = Vec::new();
        for (opts, cuts) in [(PlanOptions::BATCHED, cuts.clone()), (PlanOptions::ONE_BY_ONE, vec![1])] {
            let fake = Fake::default();
            let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
            let mut table = MappingTable::new(LIMIT);
            let mut outcomes = Vec::new();
            let mut pos = 0;
            let mut k = 0;
            while pos < reqs.len() {
                let len = cuts[k % cuts.len()].clamp(1, reqs.len() - pos);
                k += 1;
                let mut stats = dma_mapper::DmaStats::default();
                let mut backend = MapperSet::new(&mappers, &mut stats);
                outcomes.extend(run_batch(&mut table, &reqs[pos..pos + len], opts, &mut backend).outcomes);
                pos += len;
            }
            let calls = fake.with(|h| h.log.len());
            results.push((outcomes, fake.mappings(), calls));
        }
        prop_assert_eq!(&results[0].0, &results[1].0);
        prop_assert_eq!(&results[0].1, &results[1].1);
        prop_assert!(results[0].2 <= results[1].2, "{} > {}", results[0].2, results[1].2);
    }

    #[test]
    fn unbatched_matches_one_by_one(
        gens in proptest::collection::vec(gen_op(), 1..60),
        map_poison in pages(),
        unmap_poison in pages(),
    ) {
        check_stream(gens, vec![1], map_poison, unmap_poison, false, PlanOptions::ONE_BY_ONE)?;
    }
}

/// IOVAs a fake holds that `tracked` does not.
fn untracked(fake: &Fake, tracked: &BTreeSet<u64>) -> BTreeSet<u64> {
    fake.with(|h| {
        h.maps
            .keys()
            .filter(|i| !tracked.contains(i))
            .copied()
            .collect()
    })
}

/// Two mappers of one domain failing different pages, so a call one of
/// them refuses is rolled back on the other, whose rollback may fail; at
/// `joins`, a third mapper joins (a replay) and leaves again. After every
/// batch and flush, whatever a host holds beyond the table and its
/// deferred set is a leftover that host reports; a failed replay leaves
/// only reported leftovers on the joining host.
fn check_rollbacks(
    gens: Vec<Gen>,
    cuts: Vec<usize>,
    poison: Vec<BTreeSet<u64>>,
    joins: BTreeSet<usize>,
) -> Result<(), TestCaseError> {
    let ops = to_ops(&gens);
    let fakes: Vec<Fake> = (0..3).map(|_| Fake::default()).collect();
    for (i, f) in fakes.iter().enumerate() {
        f.with(|h| {
            h.map_poison = poison[2 * i].clone();
            h.unmap_poison = poison[2 * i + 1].clone();
        });
    }
    let domain: Vec<Arc<dyn DmaMapper>> =
        vec![Arc::new(fakes[0].clone()), Arc::new(fakes[1].clone())];
    let joining: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fakes[2].clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut batch: Vec<Request> = Vec::new();
    let mut cut = cuts.iter().cycle();
    let mut want = *cut.next().unwrap_or(&1);
    let mut n = 0;
    let last = ops.len().saturating_sub(1);
    for (k, op) in ops.iter().enumerate() {
        let flush = matches!(op, Op::Flush);
        if let Op::Req(r) = op {
            batch.push(*r);
        }
        if !(flush || batch.len() >= want || k == last) {
            continue;
        }
        want = *cut.next().unwrap_or(&1);
        run_batch(
            &mut table,
            &batch,
            PlanOptions::BATCHED,
            &mut MapperSet::new(&domain, &mut stats),
        );
        batch.clear();
        if flush {
            flush_deferred(&mut table, &mut MapperSet::new(&domain, &mut stats));
        }
        let tracked: BTreeSet<u64> = table
            .iter()
            .chain(table.deferred())
            .map(|m| m.iova)
            .collect();
        for (i, f) in fakes[..2].iter().enumerate() {
            let extra = untracked(f, &tracked);
            let reported = f.with(|h| h.leftovers.clone());
            prop_assert!(
                extra.is_subset(&reported),
                "host {}: {:x?} untracked, {:x?} reported",
                i,
                extra,
                reported
            );
            prop_assert_eq!(f.has_leftovers(), f.with(|h| !h.leftovers.is_empty()));
        }
        if joins.contains(&n) {
            let r = viommu_planner::replay_all(&table, &mut MapperSet::new(&joining, &mut stats));
            let held = fakes[2].with(|h| h.maps.keys().copied().collect::<BTreeSet<u64>>());
            match r {
                Ok(()) => {
                    let mapped: BTreeSet<u64> = table.iter().map(|m| m.iova).collect();
                    prop_assert_eq!(held, mapped);
                }
                Err(e) => {
                    let reported = fakes[2].with(|h| h.leftovers.clone());
                    prop_assert!(
                        held.is_subset(&reported),
                        "joining host: {:x?} held, {:x?} reported",
                        held,
                        reported
                    );
                    prop_assert_eq!(
                        !held.is_empty(),
                        matches!(e, DmaError::Leftover { .. }),
                        "{:?}",
                        e
                    );
                }
            }
            // It leaves again (the device's unmap-all fallback).
            joining[0].unmap_all().unwrap();
        }
        n += 1;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Failed rollbacks (fan-out over two mappers, replay onto a third)
    /// leave nothing on a host that it does not report as a leftover.
    #[test]
    fn failed_rollbacks_leave_only_reported_leftovers(
        gens in proptest::collection::vec(gen_op(), 1..80),
        cuts in proptest::collection::vec(1..24usize, 1..8),
        poison in proptest::collection::vec(proptest::collection::btree_set(0..PAGES, 0..6), 6),
        joins in proptest::collection::btree_set(0..16usize, 0..6),
    ) {
        check_rollbacks(gens, cuts, poison, joins)?;
    }
}
