//! The devices' part of a reboot in place (`crate::reboot`'s steps), run
//! on the main thread with every vCPU parked.

use std::time::Duration;

use super::DeviceManager;
use crate::reboot::RebootError;

/// How long the virtio-iommu's device thread gets to answer.
const DEVICE_THREAD_ANSWER: Duration = Duration::from_secs(5);

impl DeviceManager<'_> {
    /// Wait until the virtio-iommu's device thread served what it had
    /// (nothing new comes with the vCPUs parked).
    pub fn reboot_quiesce(&self) -> Result<(), RebootError> {
        match &self.viommu_thread {
            Some(t) => t
                .quiesce(DEVICE_THREAD_ANSWER)
                .map_err(|why| RebootError::Device {
                    what: "the virtio-iommu",
                    why,
                }),
            None => Ok(()),
        }
    }

    /// Reset each passed-through device: its DMA stops.
    pub fn reboot_reset_vfio(&self) {
        for d in &self.vfio {
            d.reset();
        }
    }

    /// With a virtio-iommu: reset its model on its thread (every domain
    /// and host mapping gone, in the planner's order) and unmap all on
    /// each endpoint's mapper. Without one the 1:1 map of guest RAM stays.
    pub fn reboot_drop_dma(&self) -> Result<(), RebootError> {
        let Some(t) = &self.viommu_thread else {
            return Ok(());
        };
        t.system_reset(DEVICE_THREAD_ANSWER)
            .map_err(|why| RebootError::Device {
                what: "the virtio-iommu",
                why,
            })?;
        for e in &self.endpoints {
            e.mapper.unmap_all().map_err(|err| RebootError::Device {
                what: "a VFIO device's DMA mappings",
                why: format!("slot {}: {err}", e.bdf.device),
            })?;
        }
        Ok(())
    }

    /// Reset the virtio-pci transports and the emulated state of the
    /// passed-through functions (the serial port keeps its output).
    pub fn reboot_reset_devices(&self) {
        for t in &self.transports {
            t.lock().unwrap_or_else(|e| e.into_inner()).system_reset();
        }
        for d in &self.vfio_pci {
            d.lock().unwrap_or_else(|e| e.into_inner()).system_reset();
        }
    }
}
