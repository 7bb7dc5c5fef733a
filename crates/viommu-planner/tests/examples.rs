//! Worked examples of the planner's batching and the lazy-unmap flush:
//! exact host call sequences for small hand-written batches.

mod common;

use std::sync::Arc;

use common::*;
use dma_mapper::{DmaMapper, DmaPerm};
use viommu_planner::{
    flush_deferred, run_batch, HostFailure, MapperSet, Mapping, MappingTable, Outcome, PlanOptions,
    Reject, Request,
};

fn map(page: u64, pages: u64) -> Request {
    Request::Map(Mapping::new(page * PAGE, pages * PAGE, page * PAGE, DmaPerm::RW).unwrap())
}

fn unmap(page: u64, pages: u64) -> Request {
    Request::Unmap {
        first: page * PAGE,
        last: (page + pages) * PAGE - 1,
    }
}

fn run(reqs: &[Request], opts: PlanOptions) -> (Vec<Outcome>, Vec<Event>) {
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    let setup: Vec<Request> = (0..8).map(|p| map(p, 1)).collect();
    run_batch(&mut table, &setup, opts, &mut backend);
    fake.with(|h| h.log.clear());
    let report = run_batch(&mut table, reqs, opts, &mut backend);
    (report.outcomes, fake.with(|h| h.log.clone()))
}

#[test]
fn descending_unmap_burst_is_one_call() {
    let reqs: Vec<Request> = (0..8).rev().map(|p| unmap(p, 1)).collect();
    let (o, log) = run(&reqs, PlanOptions::BATCHED);
    assert!(o.iter().all(|&x| x == Outcome::Ok));
    assert_eq!(log, vec![Event::Unmap(0, 8 * PAGE)]);
    let (_, log) = run(&reqs, PlanOptions::ONE_BY_ONE);
    assert_eq!(log.len(), 8);
}

#[test]
fn map_between_unmaps_splits_the_group() {
    let reqs = vec![
        unmap(0, 1),
        unmap(1, 1),
        map(20, 1),
        unmap(2, 1),
        unmap(3, 1),
    ];
    let (_, log) = run(&reqs, PlanOptions::BATCHED);
    assert_eq!(
        log,
        vec![
            Event::Unmap(0, 2 * PAGE),
            Event::Map(20 * PAGE, PAGE),
            Event::Unmap(2 * PAGE, 2 * PAGE)
        ]
    );
}

#[test]
fn cancelling_pair_makes_no_call() {
    let reqs = vec![map(30, 2), map(40, 1), unmap(30, 2)];
    let (o, log) = run(&reqs, PlanOptions::BATCHED);
    assert_eq!(o, vec![Outcome::Ok; 3]);
    assert_eq!(log, vec![Event::Map(40 * PAGE, PAGE)]);
}

#[test]
fn split_is_rejected_and_partial_failure_keeps_the_rest() {
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    run_batch(
        &mut table,
        &[map(0, 4), map(10, 1), map(12, 1)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    fake.with(|h| {
        h.unmap_poison.insert(12);
    });
    let r = run_batch(
        &mut table,
        &[unmap(1, 1), unmap(10, 3), unmap(0, 4)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    assert_eq!(
        r.outcomes,
        vec![
            Outcome::Rejected(Reject::Split),
            Outcome::HostFailed(HostFailure::Host),
            Outcome::Ok
        ]
    );
    // The run at page 10 went, the one at page 12 stayed, page 0-3 went.
    let left: Vec<u64> = table.iter().map(|m| m.iova / PAGE).collect();
    assert_eq!(left, vec![12]);
    assert_eq!(fake.mappings(), table.iter().map(key).collect());
}

fn unmap_deferred(page: u64, pages: u64) -> Request {
    Request::UnmapDeferred {
        first: page * PAGE,
        last: (page + pages) * PAGE - 1,
    }
}

#[test]
fn deferred_burst_is_flushed_in_one_call() {
    // Scattered order, all adjacent once collected: one merged unmap.
    let reqs: Vec<Request> = [3, 0, 7, 1, 2, 6, 5, 4]
        .iter()
        .map(|&p| unmap_deferred(p, 1))
        .collect();
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    let setup: Vec<Request> = (0..8).map(|p| map(p, 1)).collect();
    run_batch(&mut table, &setup, PlanOptions::BATCHED, &mut backend);
    fake.with(|h| h.log.clear());
    // One request per batch: nothing reaches the host before the flush.
    for r in &reqs {
        let rep = run_batch(&mut table, &[*r], PlanOptions::BATCHED, &mut backend);
        assert_eq!(rep.outcomes, vec![Outcome::Ok]);
        assert_eq!(rep.deferred, vec![0]);
    }
    assert!(table.is_empty());
    assert_eq!(table.deferred_len(), 8);
    assert_eq!(
        fake.mappings().len(),
        8,
        "host mappings stay until the flush"
    );
    assert!(fake.with(|h| h.log.is_empty()));
    let fr = flush_deferred(&mut table, &mut backend);
    assert_eq!((fr.calls, fr.removed, fr.failed), (1, 8, 0));
    assert_eq!(
        fake.with(|h| h.log.clone()),
        vec![Event::Unmap(0, 8 * PAGE)]
    );
    assert!(fake.mappings().is_empty());
}

#[test]
fn map_over_a_deferred_unmap_forces_it_first() {
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    run_batch(
        &mut table,
        &[map(0, 2), map(2, 1)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    fake.with(|h| h.log.clear());
    // Same batch: deferred unmap, then a MAP reusing part of the range.
    let r = run_batch(
        &mut table,
        &[unmap_deferred(0, 3), map(1, 1)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    assert_eq!(r.outcomes, vec![Outcome::Ok, Outcome::Ok]);
    assert_eq!(r.forced_unmaps, 1);
    // Only the deferred mapping under the MAP is forced (whole, never split).
    assert_eq!(
        fake.with(|h| h.log.clone()),
        vec![Event::Unmap(0, 2 * PAGE), Event::Map(PAGE, PAGE)]
    );
    assert_eq!(
        table.deferred().map(|m| m.iova).collect::<Vec<_>>(),
        vec![2 * PAGE]
    );
    assert!(fake.with(|h| h.violations.is_empty()));
}

#[test]
fn failed_flush_keeps_only_the_failing_mapping() {
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(LIMIT);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    let setup: Vec<Request> = (0..4).map(|p| map(p, 1)).collect();
    run_batch(&mut table, &setup, PlanOptions::BATCHED, &mut backend);
    run_batch(
        &mut table,
        &[unmap_deferred(0, 4)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    fake.with(|h| {
        h.unmap_poison.insert(2);
        h.log.clear();
    });
    let fr = flush_deferred(&mut table, &mut backend);
    assert_eq!((fr.calls, fr.removed, fr.failed), (5, 3, 1));
    assert!(fr.error.is_some());
    assert_eq!(
        table.deferred().map(|m| m.iova).collect::<Vec<_>>(),
        vec![2 * PAGE]
    );
    assert_eq!(
        fake.mappings().iter().map(|k| k.0).collect::<Vec<_>>(),
        vec![2 * PAGE]
    );
    // The next flush retries it.
    fake.with(|h| h.unmap_poison.clear());
    let fr = flush_deferred(&mut table, &mut backend);
    assert_eq!((fr.calls, fr.removed, fr.failed), (1, 1, 0));
    assert!(fake.mappings().is_empty());
}

#[test]
fn full_deferred_set_makes_unmaps_strict() {
    let fake = Fake::default();
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![Arc::new(fake.clone())];
    let mut table = MappingTable::new(4);
    let mut stats = dma_mapper::DmaStats::default();
    let mut backend = MapperSet::new(&mappers, &mut stats);
    let setup: Vec<Request> = (0..4).map(|p| map(p, 1)).collect();
    run_batch(&mut table, &setup, PlanOptions::BATCHED, &mut backend);
    let r = run_batch(
        &mut table,
        &[unmap_deferred(0, 4)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    assert_eq!(r.deferred, vec![0]);
    let setup: Vec<Request> = (10..12).map(|p| map(p, 1)).collect();
    run_batch(&mut table, &setup, PlanOptions::BATCHED, &mut backend);
    fake.with(|h| h.log.clear());
    // 4 deferred already (the limit): this one runs strictly.
    let r = run_batch(
        &mut table,
        &[unmap_deferred(10, 2)],
        PlanOptions::BATCHED,
        &mut backend,
    );
    assert_eq!(r.outcomes, vec![Outcome::Ok]);
    assert!(r.deferred.is_empty());
    assert_eq!(
        fake.with(|h| h.log.clone()),
        vec![Event::Unmap(10 * PAGE, 2 * PAGE)]
    );
    assert_eq!(table.deferred_len(), 4);
}
