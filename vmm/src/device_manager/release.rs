//! The ordered release of the devices.
//!
//! Dropping the [`DeviceManager`] releases the devices of a stopped guest
//! in the one order that leaves nothing behind (no VFIO error, no mapping,
//! no pinned page), on every way out of [`crate::machine::run`] (and of a
//! [`DeviceManager::build`] that failed half-way):
//! 1. reset each passed-through device (`VFIO_DEVICE_RESET`), so it stops
//!    DMA;
//! 2. remove every DMA mapping while each device's group is still in its
//!    container (after the last group leaves, the container has no IOMMU
//!    and the unmap calls would fail);
//! 3. take the BAR mmaps out of KVM and unmap them: an mmap holds the
//!    device file open, and `VFIO_GROUP_UNSET_CONTAINER` fails with EBUSY
//!    while it is;
//! 4. close the devices (dropping the buses that own them): the group
//!    leaves its container.
//!
//! Disarmed ([`DeviceManager::disarm`], a vCPU did not stop), it releases
//! nothing.

use super::DeviceManager;

impl Drop for DeviceManager<'_> {
    fn drop(&mut self) {
        if !self.armed {
            // Leak our references: dropping the last one of a device under
            // a running vCPU would close it in the middle of an access.
            std::mem::forget(std::mem::take(&mut self.vfio));
            std::mem::forget(std::mem::take(&mut self.pio));
            std::mem::forget(std::mem::take(&mut self.mmio));
            std::mem::forget(std::mem::take(&mut self.endpoints));
            return;
        }
        for d in &self.vfio {
            d.reset();
        }
        for e in &self.endpoints {
            if let Err(err) = e.mapper.unmap_all() {
                tracing::warn!(
                    device = e.bdf.device,
                    "removing the DMA mappings at exit failed: {err}"
                );
            }
        }
        self.vm.release_device_memory();
        self.vfio.clear();
        drop(std::mem::take(&mut self.pio));
        drop(std::mem::take(&mut self.mmio));
        self.endpoints.clear();
        tracing::debug!("devices released");
    }
}
