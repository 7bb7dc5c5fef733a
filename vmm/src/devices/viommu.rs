//! The virtio-iommu device model (`viommu-device`) as a [`VirtioDevice`],
//! served by a thread of its own (`viommu`), or by the vCPU whose notify
//! write found that thread idle ([`KickServing::Vcpu`]).
//!
//! The design (threads and locks, commands, polling, the hand-over from a
//! vCPU to the thread's polling, the liveness gauges) is in
//! `docs/architecture.md`, "The virtio-iommu device thread". The pieces:
//! - `virtio_device`: the transport's face of the device
//!   ([`ViommuDevice`]), which turns register accesses into commands for
//!   the thread, and serves a request-queue kick on the vCPU when it may;
//! - `device_thread`: the thread's `poll(2)` loop, the commands and the
//!   state it shares with the transport, and [`DeviceThread`] to stop it;
//! - `model_server`: the model and what serving its queues needs (apply
//!   a command, drain, adapt the poll window, hand over);
//! - `poll_session`: a session of polling the request queue;
//! - [`poll_window`]: how long to poll, adapted to the gaps between
//!   requests; [`spare_cpu`]: whether the host has a CPU to poll on;
//! - [`status`]: the liveness gauges ([`ThreadStatus`]), and [`pending`]:
//!   the requests a driver published and the device has not taken.

use std::sync::Arc;
use std::time::Duration;

use viommu_device::{DrainShare, VirtioIommu};
use vm_memory::GuestMemoryMmap;

#[cfg(doc)]
use super::virtio::VirtioDevice;

/// Request queue size.
pub const REQUEST_QUEUE_SIZE: u16 = 256;
/// Event queue size.
pub const EVENT_QUEUE_SIZE: u16 = 64;
/// Commands the channel to the device thread holds. The transport has at
/// most one config write, one feature ack, one reset and one activation
/// in flight (see the module doc), and the thread handle one stop.
pub const COMMAND_QUEUE: usize = 8;
/// Default bound of the request queue's poll window (`--viommu-poll-us`):
/// 1 ms, polled only on a CPU no other task waits for ([`spare_cpu`]) and,
/// with the default `--viommu-kicks vcpu`, started by a vCPU's hand-over
/// (why this bound: `docs/architecture.md`, "Polling the request queue").
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(1);
/// A short window, for tests of a window that adapts within a burst.
pub const SUGGESTED_POLL_MAX: Duration = Duration::from_micros(50);
/// Largest bound `--viommu-poll-us` accepts.
pub const POLL_MAX_LIMIT: Duration = Duration::from_millis(1);
/// Longest a polling session that keeps finding requests runs before the
/// thread goes back through its `poll(2)` (a self-kick; commands end a
/// session at once).
pub const SESSION_MAX: Duration = Duration::from_millis(1);

/// The most a vCPU serves of one notification with [`KickServing::Vcpu`]
/// (holding the transport, and the VMM's stop waiting for it); the rest,
/// and every ATTACH (it may replay a whole domain onto a new mapper),
/// DETACH and IOTLB_FLUSH, go to the device thread. A stock guest's
/// request (one MAP or UNMAP of an I/O buffer) fits well within it.
pub const VCPU_SHARE: DrainShare = DrainShare {
    requests: 64,
    bytes: 16 << 20,
    request_bytes: 2 << 20,
    time: Duration::from_millis(1),
};

/// The model as the VMM runs it.
pub type ViommuModel = VirtioIommu<Arc<GuestMemoryMmap>>;

/// Who serves a notification of the request queue. The default is the
/// CLI's (`vcpu`, `Cli::validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KickServing {
    /// The device thread, woken by the queue's ioeventfd (KVM signals it
    /// without leaving the kernel); with `--viommu-poll-us` it polls after
    /// each notification it served.
    Thread,
    /// The vCPU that wrote the notify register, when the device thread is
    /// idle and no command waits for it; otherwise the device thread, as
    /// With a poll window it then hands over to the thread's polling when
    /// a host CPU is free for it (`ModelServer::hand_over`).
    /// The default: ahead of `thread` in the lab, never behind.
    Vcpu,
}

mod device_thread;
mod model_server;
pub mod pending;
mod poll_session;
pub mod poll_window;
pub mod spare_cpu;
pub mod status;
mod virtio_device;

pub use device_thread::DeviceThread;
pub use status::{StatusReading, ThreadStatus};
pub use virtio_device::ViommuDevice;

#[cfg(test)]
mod tests;
