//! The ordered release of the devices.
//!
//! Dropping the [`DeviceManager`] releases the devices of a stopped guest
//! in the one order that leaves nothing behind (no VFIO error, no mapping,
//! no pinned page), on every way out of [`crate::machine::run`] (and of a
//! [`DeviceManager::build`] that failed half-way), always after the vCPUs
//! were stopped and joined (`machine::run` holds the manager in a guard
//! that does that first):
//! 0. stop and join the virtio-iommu's device thread: it makes VFIO map
//!    calls, and none may run once the mappings are being removed;
//! 1. reset each passed-through device (`VFIO_DEVICE_RESET`), so it stops
//!    DMA;
//! 2. remove every DMA mapping while each device's group is still in its
//!    container (after the last group leaves, the container has no IOMMU
//!    and the unmap calls would fail);
//! 3. take the BAR mmaps out of KVM and unmap them: an mmap holds the
//!    device file open, and `VFIO_GROUP_UNSET_CONTAINER` fails with EBUSY
//!    while it is;
//! 4. close the devices (dropping the buses that own them): the group
//!    leaves its container;
//! 5. write out the guest console output still buffered (at most 2 s).
//!
//! Disarmed ([`DeviceManager::disarm`], a vCPU did not stop), it releases
//! nothing.

use super::DeviceManager;

/// How long the release waits for buffered guest console output.
const CONSOLE_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for DeviceManager<'_> {
    fn drop(&mut self) {
        if !self.armed {
            // Leak our references: dropping the last one of a device under
            // a running vCPU would close it in the middle of an access.
            std::mem::forget(std::mem::take(&mut self.vfio));
            std::mem::forget(std::mem::take(&mut self.pio));
            std::mem::forget(std::mem::take(&mut self.mmio));
            std::mem::forget(std::mem::take(&mut self.endpoints));
            // A running vCPU may still wait for the device thread (a
            // reset); it keeps serving until the process exits.
            std::mem::forget(self.viommu_thread.take());
            self.console.finish(CONSOLE_FLUSH);
            return;
        }
        if let Some(t) = self.viommu_thread.take() {
            t.stop();
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
        if !self.console.finish(CONSOLE_FLUSH) {
            tracing::warn!("the guest console output could not be written out at exit");
        }
    }
}
