//! Virtio devices and their PCI transport.
//!
//! A device model implements [`VirtioDevice`]; [`pci::VirtioPciDevice`]
//! puts it on the PCI bus (virtio 1.x "modern" transport, section 4.1 of
//! the spec) with MSI-X interrupts.

pub mod pci;

use std::sync::Arc;

use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

/// Raises a device's interrupts.
pub trait VirtioInterrupt: Send + Sync {
    /// The device put buffers in the used ring of `queue`.
    fn trigger_queue(&self, queue: u16) -> std::io::Result<()>;
    /// The device configuration changed.
    fn trigger_config(&self) -> std::io::Result<()>;
}

/// Why a device refused to start.
#[derive(Debug, thiserror::Error)]
#[error("device activation failed: {0}")]
pub struct ActivateError(pub String);

/// A virtio device model, as the transport drives it.
///
/// Lifecycle: features are negotiated, the driver sets DRIVER_OK and the
/// transport calls [`activate`](Self::activate) with the queues it
/// configured; notifications arrive through
/// [`queue_notify`](Self::queue_notify) (or, bypassing the transport,
/// through an ioeventfd the device owns); a status write of 0 calls
/// [`reset`](Self::reset), after which the cycle starts again.
///
/// A device served by a thread of its own may finish a reset later: while
/// [`reset_pending`](Self::reset_pending) is true the transport keeps
/// reporting the old device status (the driver waits for a read of 0,
/// spec 2.4.2) and ignores the driver's other writes to the common
/// configuration.
pub trait VirtioDevice: Send {
    /// Virtio device id (23 for the IOMMU).
    fn device_type(&self) -> u32;
    /// Maximum size of each queue; the length is the queue count.
    fn queue_max_sizes(&self) -> Vec<u16>;
    /// Features the device offers (VIRTIO_F_VERSION_1 included).
    fn features(&self) -> u64;
    /// The driver accepted these features (a subset of [`features`](Self::features)).
    fn ack_features(&mut self, features: u64);
    /// Read device configuration space.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Write device configuration space.
    fn write_config(&mut self, offset: u64, data: &[u8]);
    /// Start with guest memory, the configured queues and an interrupt.
    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
    ) -> Result<(), ActivateError>;
    /// The driver notified `queue`.
    fn queue_notify(&mut self, queue: u16);
    /// Return to the initial state (queues and memory dropped), now or,
    /// see [`reset_pending`](Self::reset_pending), soon.
    fn reset(&mut self);
    /// Whether the last [`reset`](Self::reset) is still in progress.
    fn reset_pending(&self) -> bool {
        false
    }
}
