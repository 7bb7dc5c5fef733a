//! Where a virtio-iommu request's time goes in the VMM (`--breakdown`):
//! the host kernel's own record of the VMM's threads over an untimed pass
//! of each measured fio job, read from the text of a tracefs instance's
//! `trace` file and reduced to the request-serving thread's wake-ups,
//! wake-up latency, run time, ioctl time (by VFIO/iommufd command), page
//! pinning inside those ioctls, and the guest's MMIO write exits (its
//! notifications). Everything here is pure: lines in, numbers out; the
//! tracefs instance that records them is [`crate::run::host_trace`].
//!
//! [`parse`] reads the lines, [`threads`] keeps each thread's figures,
//! [`analyze`](mod@analyze) reduces a window of them; [`Breakdown`] is what one pass
//! recorded.

pub mod analyze;
pub mod parse;
pub mod threads;

use serde::{Deserialize, Serialize};

pub use analyze::{analyze, cutoff, MARK_BEGIN, MARK_END, PIN_EVENT_PREFIX};
pub use parse::{parse_line, Event, Line};
pub use threads::{ioctl_name, is_dma_ioctl, Analysis, Calls, Serving, ThreadStats, IOCTL_NR};

/// What one untimed breakdown pass recorded (results.json: the `breakdown`
/// of the phase `breakdown-RUN`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// The VMM's threads over the analysed window.
    pub analysis: Analysis,
    /// How the request-serving thread was found.
    pub serving: Option<Serving>,
    /// Its tid, if found.
    pub server_tid: Option<u32>,
    /// Why it was not found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_missing: Option<String>,
    /// Tracing on to off by the host's clock, ns.
    pub traced_ns: u64,
    /// A CPU's buffer filled before tracing went off: the window ends at
    /// that CPU's last event (see [`cutoff`]), before `traced_ns` was over.
    pub cut: bool,
    /// Events the full buffers dropped (tracefs `per_cpu/*/stats`).
    pub dropped_events: u64,
    /// Events overwritten (`overrun`; 0 with the instance's overwrite off).
    pub overrun: u64,
    /// Why page pinning was not traced (None: it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins_missing: Option<String>,
    /// Our VMM's device counters from tracing on to off (None: stock QEMU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::run::metrics::DeviceCounters>,
}

impl Breakdown {
    /// The request-serving thread's record.
    pub fn server(&self) -> Option<&ThreadStats> {
        self.analysis.thread(self.server_tid?)
    }

    /// Events missing from the record: lost, dropped or overwritten.
    pub fn missing_events(&self) -> u64 {
        self.analysis.lost_events + self.dropped_events + self.overrun
    }
}

#[cfg(test)]
pub(crate) mod tests;
