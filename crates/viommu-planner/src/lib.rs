//! The batch planner of the virtio-iommu device.
//!
//! Given the MAP/UNMAP requests of one domain from one drained batch (in
//! queue order, with no ATTACH/DETACH/PROBE between them: those are barriers
//! the device handles itself) and the domain's [`MappingTable`], it decides
//! every request's outcome exactly as a one-by-one device would, and makes
//! as few host calls as it can without breaking the batching invariants
//! (`docs/architecture.md`; the fifth, barriers, is the device's):
//!
//! 1. *Completion order.* The device publishes the whole batch with one
//!    used-ring index update after [`run_batch`] returns, so when any status
//!    becomes visible the host state is the state after every request of the
//!    batch; [`run_batch`] guarantees that state equals the one-by-one result.
//! 2. *No gap.* MAPs are **never merged** into one host mapping. VFIO type1
//!    v2 cannot split a mapping, and the spec lets a guest unmap any single
//!    MAP later (Linux does exactly that), so a merged host mapping would have
//!    to be torn down and rebuilt around a partial UNMAP, leaving the rest of
//!    it absent for an instant. Host mappings stay 1:1 with guest mappings.
//! 3. *No stale access.* Every host unmap of a strict UNMAP has returned
//!    before [`run_batch`] returns. Deferred UNMAPs (the lazy-unmap
//!    contract, below) keep their host mappings in the table's deferred set
//!    until [`flush_deferred`].
//! 4. *Errors stay per request.* When a host call fails, the requests before
//!    the failing one keep their effect, the failing request gets the error
//!    (with the table matching what the host really holds), and the rest of
//!    the batch is planned again from that state, as a one-by-one device
//!    would have seen it.
//!
//! What it saves:
//! - consecutive UNMAPs (no effective MAP between them) are gathered and
//!   their host mappings unmapped in as few calls as possible: each call
//!   covers a run of *adjacent whole* host mappings, which type1 unmaps in
//!   one ioctl and reports the exact size asked (no `InvalidDmaUnmapSize`);
//!   if a gathered call fails, the group is replayed one request at a time
//!   to find the request that fails;
//! - a MAP whose mapping is removed, alone, by a later UNMAP of the same
//!   batch with no host-unmapping request between them never reaches the
//!   host (neither does that UNMAP). No completion of the pair is visible
//!   before the batch ends, so the mapping never needed to exist. The
//!   "no unmap between" rule makes this safe under failures: only a failed
//!   UNMAP can make the cancelling UNMAP stop covering the mapping.
//!
//! # The lazy unmap (docs/lazy-unmap-contract.md)
//!
//! A [`Request::UnmapDeferred`] removes its mappings from the table at once
//! (the guest's view, and its outcome) but moves their host mappings to the
//! table's deferred set instead of unmapping them: invariant 3 is relaxed
//! for them until [`flush_deferred`], which removes the whole set with one
//! call per run of adjacent whole mappings. Invariants 1, 2 and 4 hold as
//! before, with "host state" read as "table plus deferred set". A MAP that
//! overlaps deferred mappings first unmaps them on the host (in the same
//! call sequence, before its own map call; the host would refuse the
//! overlap). A deferrable UNMAP that would grow the deferred set past the
//! table's limit is executed strictly instead (the host's mapping budget
//! is bounded by twice the limit).

#![deny(missing_docs)]

mod table;
mod whole;

use std::collections::HashMap;

use dma_mapper::interval::join_either_end;
use dma_mapper::DmaError;
use tracing::{debug, error, trace};

pub use dma_mapper::{adjacent_runs, HostBackend, MapperSet, Mapping, Run};
use table::Entry;
pub use table::{MappingTable, Reject};
pub use whole::{flush_deferred, replay_all, unmap_all, FlushReport};

/// A MAP or UNMAP request, already validated against the wire rules
/// (alignment, flags, ranges, domain) by the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Map this range.
    Map(Mapping),
    /// Unmap every mapping inside the inclusive range `[first, last]`.
    Unmap {
        /// First IOVA.
        first: u64,
        /// Last IOVA (inclusive).
        last: u64,
    },
    /// Like [`Request::Unmap`] for the guest's view, but the host mappings
    /// stay (deferred) until [`flush_deferred`] or a MAP over them.
    UnmapDeferred {
        /// First IOVA.
        first: u64,
        /// Last IOVA (inclusive).
        last: u64,
    },
}

/// What kind of host failure a request met (a copyable summary of [`DmaError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostFailure {
    /// The backend saw an overlap the table did not (host and table disagree).
    Overlap,
    /// The guest-physical range is not guest memory.
    InvalidGpa,
    /// The backend refused to split a mapping.
    Split,
    /// The backend refused the alignment.
    Unaligned,
    /// Any other host error.
    Host,
}

impl From<&DmaError> for HostFailure {
    fn from(e: &DmaError) -> Self {
        match e {
            DmaError::Overlap { .. } => HostFailure::Overlap,
            DmaError::InvalidGpa { .. } => HostFailure::InvalidGpa,
            DmaError::SplitMapping { .. } => HostFailure::Split,
            DmaError::Unaligned { .. } => HostFailure::Unaligned,
            _ => HostFailure::Host,
        }
    }
}

/// The outcome of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Ok,
    /// Refused by the table; nothing changed.
    Rejected(Reject),
    /// A host call failed. For a MAP nothing is mapped; for an UNMAP the
    /// mappings of the failing run and the runs after it stay mapped (in
    /// the table and on the host), the ones before are gone.
    HostFailed(HostFailure),
}

/// How much the planner may optimise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Gather consecutive UNMAPs and unmap runs of adjacent host mappings
    /// together.
    pub coalesce_unmaps: bool,
    /// Drop MAP+UNMAP pairs that cancel inside the batch.
    pub cancel_pairs: bool,
}

impl PlanOptions {
    /// Every optimisation on.
    pub const BATCHED: PlanOptions = PlanOptions {
        coalesce_unmaps: true,
        cancel_pairs: true,
    };
    /// One request at a time: one host call per MAP, one per run of
    /// adjacent mappings of an UNMAP.
    pub const ONE_BY_ONE: PlanOptions = PlanOptions {
        coalesce_unmaps: false,
        cancel_pairs: false,
    };
}

/// What [`run_batch`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// One outcome per request, in order.
    pub outcomes: Vec<Outcome>,
    /// Indices of successful MAPs that never reached the host (cancelled by
    /// a later UNMAP of the same batch).
    pub elided_maps: Vec<usize>,
    /// Planning attempts (1 + number of host failures that forced a replan).
    pub attempts: usize,
    /// Indices of the [`Request::UnmapDeferred`] whose host unmaps were
    /// deferred (the others ran strictly).
    pub deferred: Vec<usize>,
    /// Deferred mappings that MAPs of this batch forced off the host early.
    pub forced_unmaps: usize,
}

enum Undo {
    Inserted(u64),
    Removed(Entry),
    /// The mapping at this IOVA joined the deferred set.
    Deferred(u64),
    /// This mapping left the deferred set (forced by a MAP).
    Undeferred(Mapping),
}

enum Call {
    Map {
        op: usize,
        mapping: Mapping,
        /// The UNMAP that cancelled this map, which then never reaches the host.
        cancelled_by: Option<usize>,
    },
    /// Host unmaps of consecutive UNMAP requests: (request, its host mappings).
    Unmaps(Vec<(usize, Vec<Mapping>)>),
}

/// One attempt at the rest of a batch: the simulated table changes (with
/// how to undo them) and the host calls planned; a host failure ends it and
/// the next attempt starts after the failing request.
struct Attempt {
    journal: Vec<(usize, Undo)>,
    calls: Vec<Call>,
    /// Host unmaps decided but not yet issued, per request: issued before
    /// the next effective MAP and at the end of the attempt (together, when
    /// coalescing). Deferred UNMAPs never get here: their host mappings go
    /// to the table's deferred set.
    pending: Vec<(usize, Vec<Mapping>)>,
    /// Maps of this attempt that a later lone UNMAP may still cancel: iova -> call index.
    cancellable: HashMap<u64, usize>,
    outcomes: Vec<Outcome>,
    /// Requests whose host unmaps were deferred.
    deferred: Vec<usize>,
    /// (MAP request, deferred mappings it forced off the host).
    forced: Vec<(usize, usize)>,
}

impl Attempt {
    fn issue_pending(&mut self) {
        if !self.pending.is_empty() {
            self.calls
                .push(Call::Unmaps(std::mem::take(&mut self.pending)));
        }
    }
}

struct Failure {
    op: usize,
    /// For an UNMAP: its host mappings that are still mapped.
    kept: Vec<Mapping>,
    error: DmaError,
}

/// Executes the MAP/UNMAP requests of one domain from one batch.
///
/// On return, the host (through `backend`) holds exactly the mappings of
/// `table`, and `table` equals the result of applying the requests one by
/// one with the returned outcomes.
pub fn run_batch(
    table: &mut MappingTable,
    reqs: &[Request],
    opts: PlanOptions,
    backend: &mut dyn HostBackend,
) -> BatchReport {
    let mut report = BatchReport {
        outcomes: Vec::with_capacity(reqs.len()),
        ..Default::default()
    };
    let mut start = 0;
    while start < reqs.len() {
        report.attempts += 1;
        let attempt = simulate(table, &reqs[start..], start, opts);
        match execute(&attempt, opts, backend) {
            None => {
                report.outcomes.extend(attempt.outcomes);
                report.deferred.extend(attempt.deferred);
                report.forced_unmaps += attempt.forced.iter().map(|&(_, n)| n).sum::<usize>();
                report
                    .elided_maps
                    .extend(elided_before(&attempt.calls, usize::MAX).map(|(op, _)| op));
                start = reqs.len();
            }
            Some(fail) => {
                let r = fail.op;
                debug!(request = r, error = %fail.error, "host call failed, replanning the rest of the batch");
                let Attempt {
                    journal,
                    outcomes,
                    calls,
                    deferred,
                    forced,
                    ..
                } = attempt;
                rollback(table, journal, r);
                report
                    .deferred
                    .extend(deferred.into_iter().filter(|&op| op < r));
                report.forced_unmaps += forced
                    .iter()
                    .filter(|&&(op, _)| op < r)
                    .map(|&(_, n)| n)
                    .sum::<usize>();
                match reqs[r] {
                    // A deferrable UNMAP only reaches the host when it ran
                    // strictly, so it failed like a strict one.
                    Request::Unmap { first, last } | Request::UnmapDeferred { first, last } => {
                        // The table is back to the state before `r`: remove
                        // what the host really unmapped.
                        if let Ok(removed) = table.check_unmap(first, last) {
                            for m in removed {
                                if !fail.kept.contains(&m) {
                                    table.remove(m.iova);
                                }
                            }
                        }
                    }
                    Request::Map(m) => {
                        // The deferred mappings this MAP forced off the host
                        // are back in the deferred set: drop the ones the
                        // host really unmapped (all of them if the map call
                        // itself failed).
                        for f in table.deferred_overlapping(m.iova, m.last()) {
                            if !fail.kept.contains(&f) {
                                table.undefer(f.iova);
                            }
                        }
                    }
                }
                // Maps elided before `r` whose cancelling UNMAP was undone are
                // in the table but not on the host.
                for (op, by) in elided_before(&calls, r) {
                    if by >= r {
                        if let Request::Map(m) = reqs[op] {
                            if let Some(e) = table.entry_mut(m.iova) {
                                e.off_host = Some(op);
                            }
                        }
                    }
                    report.elided_maps.push(op);
                }
                report.outcomes.extend(outcomes.into_iter().take(r - start));
                report
                    .outcomes
                    .push(Outcome::HostFailed(HostFailure::from(&fail.error)));
                start = r + 1;
            }
        }
    }
    // Defensive: by the cancellation rule no elided map outlives its batch.
    for (m, op) in table.off_host_entries() {
        error!(
            request = op,
            iova = m.iova,
            "elided map still in the table at batch end; mapping it now"
        );
        match backend.map(&m) {
            Ok(()) => {
                if let Some(e) = table.entry_mut(m.iova) {
                    e.off_host = None;
                }
            }
            Err(e) => {
                table.remove(m.iova);
                report.outcomes[op] = Outcome::HostFailed(HostFailure::from(&e));
            }
        }
        report.elided_maps.retain(|&x| x != op);
    }
    report
}

/// Elided maps of requests before `limit`, with their cancelling UNMAP.
fn elided_before(calls: &[Call], limit: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    calls.iter().filter_map(move |c| match c {
        Call::Map {
            op,
            cancelled_by: Some(by),
            ..
        } if *op < limit => Some((*op, *by)),
        _ => None,
    })
}

fn rollback(table: &mut MappingTable, journal: Vec<(usize, Undo)>, from_op: usize) {
    for (op, undo) in journal.into_iter().rev() {
        if op < from_op {
            break;
        }
        match undo {
            Undo::Inserted(iova) => {
                table.remove(iova);
            }
            Undo::Removed(entry) => table.insert(entry),
            Undo::Deferred(iova) => {
                table.undefer(iova);
            }
            Undo::Undeferred(m) => table.defer(m),
        }
    }
}

/// Applies `reqs` (request indices start at `base`) to the table, recording
/// how to undo each change, and plans the host calls.
fn simulate(table: &mut MappingTable, reqs: &[Request], base: usize, opts: PlanOptions) -> Attempt {
    let mut attempt = Attempt {
        journal: Vec::new(),
        calls: Vec::new(),
        pending: Vec::new(),
        cancellable: HashMap::new(),
        outcomes: Vec::with_capacity(reqs.len()),
        deferred: Vec::new(),
        forced: Vec::new(),
    };
    for (i, req) in reqs.iter().enumerate() {
        let op = base + i;
        let outcome = match *req {
            Request::Map(m) => match table.check_map(&m) {
                Err(r) => Outcome::Rejected(r),
                Ok(()) => {
                    // The host still holds deferred unmaps in this range:
                    // unmap them first, as part of this MAP.
                    let forced = table.deferred_overlapping(m.iova, m.last());
                    if !forced.is_empty() {
                        for f in &forced {
                            table.undefer(f.iova);
                            attempt.journal.push((op, Undo::Undeferred(*f)));
                        }
                        trace!(request = op, n = forced.len(), "map forces deferred unmaps");
                        attempt.forced.push((op, forced.len()));
                        attempt.pending.push((op, forced));
                        attempt.cancellable.clear();
                    }
                    attempt.issue_pending();
                    table.insert(Entry {
                        mapping: m,
                        off_host: None,
                    });
                    attempt.journal.push((op, Undo::Inserted(m.iova)));
                    attempt.calls.push(Call::Map {
                        op,
                        mapping: m,
                        cancelled_by: None,
                    });
                    if opts.cancel_pairs {
                        attempt.cancellable.insert(m.iova, attempt.calls.len() - 1);
                    }
                    Outcome::Ok
                }
            },
            Request::Unmap { first, last } | Request::UnmapDeferred { first, last } => {
                match table.check_unmap(first, last) {
                    Err(r) => Outcome::Rejected(r),
                    Ok(removed) => {
                        let mut cancelled = false;
                        if let [only] = removed.as_slice() {
                            if let Some(&ci) = attempt.cancellable.get(&only.iova) {
                                if let Call::Map {
                                    mapping,
                                    cancelled_by,
                                    ..
                                } = &mut attempt.calls[ci]
                                {
                                    if mapping == only && cancelled_by.is_none() {
                                        *cancelled_by = Some(op);
                                        cancelled = true;
                                    }
                                }
                            }
                        }
                        let mut host = Vec::new();
                        for m in &removed {
                            if let Some(entry) = table.remove(m.iova) {
                                if entry.off_host.is_none() && !cancelled {
                                    host.push(entry.mapping);
                                }
                                attempt.journal.push((op, Undo::Removed(entry)));
                            }
                        }
                        if cancelled {
                            trace!(request = op, "map+unmap pair cancelled");
                        }
                        let defer = matches!(req, Request::UnmapDeferred { .. })
                            && !host.is_empty()
                            && table.deferred_len().saturating_add(host.len()) <= table.limit();
                        if defer {
                            for m in host.drain(..) {
                                table.defer(m);
                                attempt.journal.push((op, Undo::Deferred(m.iova)));
                            }
                            attempt.deferred.push(op);
                        }
                        if !host.is_empty() {
                            attempt.cancellable.clear();
                            attempt.pending.push((op, host));
                            if !opts.coalesce_unmaps {
                                attempt.issue_pending();
                            }
                        }
                        Outcome::Ok
                    }
                }
            }
        };
        attempt.outcomes.push(outcome);
    }
    attempt.issue_pending();
    attempt
}

/// Issues the planned calls in order; stops at the first request whose
/// host work fails.
fn execute(attempt: &Attempt, opts: PlanOptions, backend: &mut dyn HostBackend) -> Option<Failure> {
    for call in &attempt.calls {
        match call {
            Call::Map {
                cancelled_by: Some(_),
                ..
            } => {}
            Call::Map { op, mapping, .. } => {
                if let Err(error) = backend.map(mapping) {
                    return Some(Failure {
                        op: *op,
                        kept: Vec::new(),
                        error,
                    });
                }
            }
            Call::Unmaps(groups) => {
                for call in unmap_calls(groups, opts.coalesce_unmaps) {
                    let Err(error) = backend.unmap(&call.run) else {
                        continue;
                    };
                    if let [(op, kept)] = call.parts.as_slice() {
                        return Some(Failure {
                            op: *op,
                            kept: kept.clone(),
                            error,
                        });
                    }
                    debug!(
                        requests = call.parts.len(),
                        error = %error,
                        "coalesced unmap failed, replaying its requests one at a time"
                    );
                    for (op, ms) in &call.parts {
                        for run in adjacent_runs(ms) {
                            if let Err(error) = backend.unmap(&run) {
                                return Some(Failure {
                                    op: *op,
                                    kept: ms.clone(),
                                    error,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    None
}

/// One host unmap call and the requests it serves.
struct UnmapCall {
    run: Run,
    /// Each request served and the mappings that stay mapped if the call
    /// fails and that request is found to be the failing one.
    parts: Vec<(usize, Vec<Mapping>)>,
}

/// Splits the host unmaps of consecutive UNMAP requests into calls.
///
/// A call serves either one run of one request (a request whose mappings
/// form several runs is issued run by run, in IOVA order) or a sequence of
/// requests, consecutive in queue order, each removing one run, where every
/// run extends the call's range at its end or at its start (ascending or
/// descending bursts). Calls are issued in queue order, so when one fails,
/// every request before it is complete and, with a backend whose failed
/// unmap changes nothing, every request after it is untouched: the failing
/// request is found by replaying the call one request at a time.
fn unmap_calls(groups: &[(usize, Vec<Mapping>)], coalesce: bool) -> Vec<UnmapCall> {
    let mut out: Vec<UnmapCall> = Vec::new();
    let mut open = false; // whether the last call may still grow
    for (op, ms) in groups {
        let mut runs = adjacent_runs(ms);
        if runs.len() != 1 {
            open = false;
            out.extend(runs.into_iter().map(|run| {
                let kept = ms.iter().filter(|m| m.iova >= run.iova).copied().collect();
                UnmapCall {
                    run,
                    parts: vec![(*op, kept)],
                }
            }));
            continue;
        }
        let Some(mut run) = runs.pop() else { continue };
        if coalesce && open {
            if let Some(last) = out.last_mut() {
                match join_either_end(&mut last.run, run) {
                    None => {
                        last.parts.push((*op, ms.clone()));
                        continue;
                    }
                    Some(back) => run = back,
                }
            }
        }
        open = true;
        out.push(UnmapCall {
            run,
            parts: vec![(*op, ms.clone())],
        });
    }
    out
}
