//! A wrapper that counts what goes through a [`DmaMapper`], and can fail
//! chosen calls on purpose.
//!
//! [`RecordingMapper`] forwards to any backend and keeps atomic counters
//! (calls, bytes, failures) that the metrics endpoint and benchmarks read as
//! a [`DmaStats`] snapshot. For tests it can also keep a log of every call
//! ([`RecordingMapper::with_log`]) and fail chosen calls without forwarding
//! them ([`FaultPlan`]), so property tests can check the device's error
//! handling against a one-by-one model.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::{DmaError, DmaMapper, DmaPerm, DmaStats};

/// Which trait method a call was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DmaOp {
    /// [`DmaMapper::map`].
    Map,
    /// [`DmaMapper::unmap`].
    Unmap,
}

impl DmaOp {
    fn name(self) -> &'static str {
        match self {
            DmaOp::Map => "map",
            DmaOp::Unmap => "unmap",
        }
    }
}

/// One call through the wrapper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaCall {
    /// Sequence number: 0 for the first call (map or unmap), then 1, ...
    pub seq: u64,
    /// Which method.
    pub op: DmaOp,
    /// Start of the range.
    pub iova: u64,
    /// Length of the range.
    pub size: u64,
    /// Guest-physical target (maps only).
    pub gpa: Option<u64>,
    /// Permissions (maps only).
    pub perm: Option<DmaPerm>,
}

/// A logged call and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedCall {
    /// The call.
    pub call: DmaCall,
    /// Whether it succeeded.
    pub ok: bool,
    /// Whether the failure was injected (the backend never saw the call).
    pub injected: bool,
}

type Hook = Box<dyn FnMut(&DmaCall) -> Option<DmaError> + Send>;

/// Which calls a [`RecordingMapper`] fails on purpose.
#[derive(Default)]
pub struct FaultPlan {
    seqs: BTreeSet<u64>,
    hook: Option<Hook>,
}

impl std::fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultPlan")
            .field("seqs", &self.seqs)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

/// The error an injected fault returns for `call`: a host failure.
pub fn injected_error(call: &DmaCall) -> DmaError {
    DmaError::Host {
        op: call.op.name(),
        iova: call.iova,
        size: call.size,
        source: std::io::Error::other("injected fault"),
    }
}

impl FaultPlan {
    /// Fail nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// Fail the calls with these sequence numbers (see [`DmaCall::seq`])
    /// with [`injected_error`].
    pub fn fail_calls(seqs: impl IntoIterator<Item = u64>) -> Self {
        FaultPlan {
            seqs: seqs.into_iter().collect(),
            hook: None,
        }
    }

    /// Fail every call for which `pred` says true, with [`injected_error`].
    pub fn when(mut pred: impl FnMut(&DmaCall) -> bool + Send + 'static) -> Self {
        Self::with(move |c| pred(c).then(|| injected_error(c)))
    }

    /// Fail every call for which `f` returns an error, with that error.
    pub fn with(f: impl FnMut(&DmaCall) -> Option<DmaError> + Send + 'static) -> Self {
        FaultPlan {
            seqs: BTreeSet::new(),
            hook: Some(Box::new(f)),
        }
    }

    fn check(&mut self, call: &DmaCall) -> Option<DmaError> {
        if self.seqs.remove(&call.seq) {
            return Some(injected_error(call));
        }
        self.hook.as_mut().and_then(|h| h(call))
    }
}

/// Counts calls, bytes and failures of the wrapped mapper.
/// See the [module docs](self).
pub struct RecordingMapper<M: DmaMapper> {
    inner: M,
    seq: AtomicU64,
    map_calls: AtomicU64,
    unmap_calls: AtomicU64,
    bytes_mapped: AtomicU64,
    bytes_unmapped: AtomicU64,
    map_failures: AtomicU64,
    unmap_failures: AtomicU64,
    injected: AtomicU64,
    faults: Mutex<FaultPlan>,
    log: Option<Mutex<Vec<LoggedCall>>>,
}

impl<M: DmaMapper + std::fmt::Debug> std::fmt::Debug for RecordingMapper<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingMapper")
            .field("inner", &self.inner)
            .field("stats", &self.stats())
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data is only replaced or appended to: never left torn.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<M: DmaMapper> RecordingMapper<M> {
    /// Wrap `inner`, counting only.
    pub fn new(inner: M) -> Self {
        RecordingMapper {
            inner,
            seq: AtomicU64::new(0),
            map_calls: AtomicU64::new(0),
            unmap_calls: AtomicU64::new(0),
            bytes_mapped: AtomicU64::new(0),
            bytes_unmapped: AtomicU64::new(0),
            map_failures: AtomicU64::new(0),
            unmap_failures: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            faults: Mutex::new(FaultPlan::none()),
            log: None,
        }
    }

    /// Wrap `inner`, counting and logging every call (for tests: the log
    /// grows without bound).
    pub fn with_log(inner: M) -> Self {
        RecordingMapper {
            log: Some(Mutex::new(Vec::new())),
            ..Self::new(inner)
        }
    }

    /// The wrapped mapper.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Replace the fault plan (sequence numbers continue from the calls
    /// made so far; see [`RecordingMapper::next_seq`]).
    pub fn set_faults(&self, plan: FaultPlan) {
        *relock(&self.faults) = plan;
    }

    /// The sequence number the next call will get.
    pub fn next_seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> DmaStats {
        DmaStats {
            map_calls: self.map_calls.load(Ordering::Relaxed),
            unmap_calls: self.unmap_calls.load(Ordering::Relaxed),
            bytes_mapped: self.bytes_mapped.load(Ordering::Relaxed),
            bytes_unmapped: self.bytes_unmapped.load(Ordering::Relaxed),
            map_failures: self.map_failures.load(Ordering::Relaxed),
            unmap_failures: self.unmap_failures.load(Ordering::Relaxed),
            injected_failures: self.injected.load(Ordering::Relaxed),
            // Not timed here: the device's fan-out times its calls.
            ..Default::default()
        }
    }

    /// The logged calls so far (empty unless built with [`Self::with_log`]).
    pub fn calls(&self) -> Vec<LoggedCall> {
        self.log
            .as_ref()
            .map(|l| relock(l).clone())
            .unwrap_or_default()
    }

    /// Take the logged calls, leaving the log empty.
    pub fn take_calls(&self) -> Vec<LoggedCall> {
        self.log
            .as_ref()
            .map(|l| std::mem::take(&mut *relock(l)))
            .unwrap_or_default()
    }

    fn run(
        &self,
        call: DmaCall,
        forward: impl FnOnce() -> Result<(), DmaError>,
    ) -> Result<(), DmaError> {
        let (calls, bytes, failures) = match call.op {
            DmaOp::Map => (&self.map_calls, &self.bytes_mapped, &self.map_failures),
            DmaOp::Unmap => (
                &self.unmap_calls,
                &self.bytes_unmapped,
                &self.unmap_failures,
            ),
        };
        calls.fetch_add(1, Ordering::Relaxed);
        let injected = relock(&self.faults).check(&call);
        let is_injected = injected.is_some();
        let res = match injected {
            Some(e) => {
                self.injected.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            None => forward(),
        };
        match &res {
            Ok(()) => {
                bytes.fetch_add(call.size, Ordering::Relaxed);
            }
            Err(e) => {
                failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    ?call,
                    injected = is_injected,
                    "dma {} failed: {e}",
                    call.op.name()
                );
            }
        }
        if let Some(log) = &self.log {
            relock(log).push(LoggedCall {
                call,
                ok: res.is_ok(),
                injected: is_injected,
            });
        }
        res
    }
}

impl<M: DmaMapper> DmaMapper for RecordingMapper<M> {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let call = DmaCall {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            op: DmaOp::Map,
            iova,
            size,
            gpa: Some(gpa),
            perm: Some(perm),
        };
        self.run(call, || self.inner.map(iova, gpa, size, perm))
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let call = DmaCall {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            op: DmaOp::Unmap,
            iova,
            size,
            gpa: None,
            perm: None,
        };
        self.run(call, || self.inner.unmap(iova, size))
    }

    fn page_size_mask(&self) -> u64 {
        self.inner.page_size_mask()
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        self.inner.unmap_all()
    }

    fn has_leftovers(&self) -> bool {
        self.inner.has_leftovers()
    }

    fn disown(&self, iova: u64, size: u64) {
        self.inner.disown(iova, size)
    }
}

#[cfg(test)]
mod tests {
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
}
