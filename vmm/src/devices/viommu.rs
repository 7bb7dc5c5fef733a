//! The virtio-iommu device model (`viommu-device`) as a [`VirtioDevice`].
//!
//! Notifications are handled on the vCPU thread that wrote the notify
//! register: the device drains the request queue as one batch there.

use std::sync::{Arc, Mutex};

use viommu_device::{Counters, DeviceConfig, IommuInterrupt, VirtioIommu};
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

use super::virtio::{ActivateError, VirtioDevice, VirtioInterrupt};

/// Request queue size.
pub const REQUEST_QUEUE_SIZE: u16 = 256;
/// Event queue size.
pub const EVENT_QUEUE_SIZE: u16 = 64;

struct Irq(Arc<dyn VirtioInterrupt>);

impl IommuInterrupt for Irq {
    fn trigger(&self, queue: u16) -> std::io::Result<()> {
        self.0.trigger_queue(queue)
    }
}

/// The virtio-iommu on a virtio transport.
pub struct ViommuDevice {
    inner: VirtioIommu<Arc<GuestMemoryMmap>>,
    /// A snapshot of the model's counters, refreshed after every
    /// notification, for the metrics endpoint.
    counters: Arc<Mutex<Counters>>,
}

impl ViommuDevice {
    /// A device with `cfg`.
    pub fn new(cfg: DeviceConfig) -> Result<Self, viommu_device::Error> {
        Ok(ViommuDevice {
            inner: VirtioIommu::new(cfg)?,
            counters: Arc::new(Mutex::new(Counters::default())),
        })
    }

    /// The counters snapshot, shared.
    pub fn counters(&self) -> Arc<Mutex<Counters>> {
        self.counters.clone()
    }

    fn snapshot_counters(&self) {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner()) = self.inner.counters();
    }

    /// The device model (endpoints are added here, counters read here).
    pub fn model(&mut self) -> &mut VirtioIommu<Arc<GuestMemoryMmap>> {
        &mut self.inner
    }
}

impl VirtioDevice for ViommuDevice {
    fn device_type(&self) -> u32 {
        virtio_bindings::virtio_ids::VIRTIO_ID_IOMMU
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![REQUEST_QUEUE_SIZE, EVENT_QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        self.inner.device_features()
    }

    fn ack_features(&mut self, features: u64) {
        self.inner.set_acked_features(features);
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        self.inner.read_config(offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        self.inner.write_config(offset, data);
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
    ) -> Result<(), ActivateError> {
        self.inner
            .activate(Arc::new(mem), queues, Arc::new(Irq(interrupt)))
            .map_err(|e| ActivateError(e.to_string()))
    }

    fn queue_notify(&mut self, queue: u16) {
        let r = match queue {
            0 => self.inner.process_request_queue(),
            _ => self.inner.process_event_queue(),
        };
        if let Err(e) = r {
            tracing::error!(queue, "virtio-iommu: {e}");
        }
        self.snapshot_counters();
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.snapshot_counters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_model_through_the_virtio_trait() {
        let mut d = ViommuDevice::new(DeviceConfig::default()).unwrap();
        assert_eq!(d.device_type(), 23);
        assert_eq!(d.queue_max_sizes().len(), 2);
        assert_ne!(d.features() & (1 << 32), 0, "VERSION_1");
        // page_size_mask is the first config field.
        let mut b = [0u8; 8];
        d.read_config(0, &mut b);
        assert_eq!(u64::from_le_bytes(b), !0xfff);
        d.ack_features(d.features());
        assert_eq!(d.model().acked_features(), d.features());
        d.reset();
        assert_eq!(d.model().acked_features(), 0);
    }
}
