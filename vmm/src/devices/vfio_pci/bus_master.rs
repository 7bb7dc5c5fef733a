//! Bus mastering turned on by a guest that does not use the virtio-iommu:
//! one line in the log, before the guest hangs waiting for the device.
//!
//! Behind the virtio-iommu a passed-through function's DMA reaches only
//! what the guest mapped for it, after it ATTACHed the function to a
//! domain. Linux attaches a device to its default domain before a driver
//! binds it, and defers the probe of a device the VIOT table puts behind
//! a virtio-iommu until the virtio-iommu driver is there; the driver then
//! turns bus mastering on in its probe. A kernel without the virtio-iommu
//! driver (`CONFIG_VIRTIO_IOMMU` and `CONFIG_ACPI_VIOT` unset: Debian 12's
//! kernels) probes the device at once, turns bus mastering on and starts
//! DMA the host's IOMMU refuses: an NVMe holding the root filesystem times
//! out and the initramfs waits for a root that never comes. That moment
//! shows here: Bus Master Enable set while the virtio-iommu has not seen
//! a single ATTACH.

use std::sync::{Arc, Mutex, OnceLock};

/// The command register's offset in config space.
const COMMAND: usize = 0x04;
/// Bus Master Enable, bit 2 of the command register's low byte.
const BUS_MASTER: u8 = 1 << 2;

/// Whether the guest has attached any endpoint to the virtio-iommu.
pub trait Attachments: Send + Sync {
    /// True once the guest has sent an ATTACH request.
    fn any_attached(&self) -> bool;
}

/// The virtio-iommu's counters, once it exists: the passed-through
/// functions are created before it, and share this with it.
#[derive(Default)]
pub struct ViommuAttachments(OnceLock<Arc<Mutex<viommu_device::Counters>>>);

impl ViommuAttachments {
    /// The virtio-iommu's counters (a second call is ignored).
    pub fn set(&self, counters: Arc<Mutex<viommu_device::Counters>>) {
        let _ = self.0.set(counters);
    }
}

impl Attachments for ViommuAttachments {
    fn any_attached(&self) -> bool {
        self.0
            .get()
            .is_some_and(|c| c.lock().unwrap_or_else(|e| e.into_inner()).requests.attach > 0)
    }
}

/// Watches one function's Bus Master Enable against the attachments.
#[derive(Default)]
pub struct BusMasterWatch {
    /// Set only when the function is behind the virtio-iommu.
    attachments: Option<Arc<dyn Attachments>>,
    /// The host function, for the message.
    host: String,
    /// Said once per function.
    warned: bool,
}

impl BusMasterWatch {
    /// Watch the function `host` (its host address) behind a virtio-iommu
    /// whose attachments are `attachments`.
    pub fn new(host: String, attachments: Arc<dyn Attachments>) -> Self {
        BusMasterWatch {
            attachments: Some(attachments),
            host,
            warned: false,
        }
    }

    /// A guest config write of `data` at byte `at` went to the device:
    /// warn once if it turned bus mastering on before any ATTACH. Returns
    /// whether it warned.
    pub fn after_write(&mut self, at: usize, data: &[u8]) -> bool {
        let Some(i) = COMMAND.checked_sub(at) else {
            return false;
        };
        let Some(&low) = data.get(i) else {
            return false;
        };
        if low & BUS_MASTER == 0 || self.warned {
            return false;
        }
        let Some(a) = &self.attachments else {
            return false;
        };
        if a.any_attached() {
            return false;
        }
        self.warned = true;
        tracing::warn!(
            "the guest turned on DMA (bus mastering) of the passed-through {} before attaching any device to the virtio-iommu: its kernel has no virtio-iommu driver (CONFIG_VIRTIO_IOMMU and CONFIG_ACPI_VIOT; Debian 12's kernels lack both) and the device's DMA will fail; a root filesystem on it is never found (vmm/README.md, \"Launch a VM\")",
            self.host
        );
        true
    }
}

#[cfg(test)]
mod tests;
