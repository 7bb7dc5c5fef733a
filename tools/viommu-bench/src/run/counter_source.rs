//! Where one guest's device counters come from: our VMM's API or stock
//! QEMU's trace.

use std::path::Path;

use crate::run::metrics::{DeviceCounters, MetricsEndpoint, MetricsError, OursEndpoint};
use crate::run::trace::QemuTrace;

/// Where one guest's device counters come from.
#[derive(Debug)]
pub enum CounterSource {
    /// Our VMM's API: its always-on counters, read at every phase's begin
    /// and end marker.
    Ours(OursEndpoint),
    /// Stock QEMU's trace file and QMP socket: counts only in the untimed
    /// counting phases ([`crate::run::trace::QemuTrace`]), none in timed ones.
    Qemu(Box<QemuTrace>),
    /// Nothing to count (no vIOMMU).
    None,
}

impl CounterSource {
    /// The source for a VMM started with this trace file and QMP socket
    /// (stock QEMU) or API socket (ours).
    pub fn new(trace: Option<&Path>, qmp: Option<&Path>, api_socket: Option<&Path>) -> Self {
        match (trace, qmp, api_socket) {
            (_, _, Some(s)) => CounterSource::Ours(OursEndpoint::new(s)),
            (Some(t), Some(q), None) => CounterSource::Qemu(Box::new(QemuTrace::new(t, q))),
            _ => CounterSource::None,
        }
    }

    /// The cumulative counters now, at a timed phase's begin or end;
    /// `Ok(None)` when there is nothing to count. Stock QEMU's trace is off
    /// in timed phases: nothing (its counts come from the counting phases).
    pub async fn snapshot(&mut self) -> Result<Option<DeviceCounters>, MetricsError> {
        match self {
            CounterSource::Ours(e) => e.fetch().await.map(Some),
            CounterSource::Qemu(_) | CounterSource::None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
