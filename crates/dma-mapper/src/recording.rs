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

    fn fault_for(&mut self, call: &DmaCall) -> Option<DmaError> {
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
        let injected = relock(&self.faults).fault_for(&call);
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
mod tests;
