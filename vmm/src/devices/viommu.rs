//! The virtio-iommu device model (`viommu-device`) as a [`VirtioDevice`].
//!
//! Notifications are handled on the vCPU thread that wrote the notify
//! register: the device drains the request queue as one batch there.

use std::sync::{Arc, Mutex};

use viommu_device::{Counters, DeviceConfig, IommuInterrupt, VirtioIommu};
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

use super::virtio::{ActivateError, VirtioDevice, VirtioInterrupt};

/// Virtio device id of the IOMMU.
pub const VIRTIO_ID_IOMMU: u32 = 23;
/// Request queue size.
pub const REQUEST_QUEUE_SIZE: u16 = 256;
/// Event queue size.
pub const EVENT_QUEUE_SIZE: u16 = 64;

/// An input range and the reserved regions inside it, inclusive.
pub type IovaSpace = ((u64, u64), Vec<(u64, u64)>);

/// Intersection of sorted, disjoint inclusive range lists.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].0.max(b[j].0);
        let end = a[i].1.min(b[j].1);
        if start <= end {
            out.push((start, end));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The virtio-iommu's input range and extra reserved regions when its
/// endpoints' host IOMMUs can map the inclusive ranges of `lists`: the
/// span of their intersection, with the holes inside it reserved (except
/// holes within `msi_window`, which the device reports as MSI already).
/// `None` if nothing can be mapped by all of them.
pub fn iova_space(lists: &[Vec<(u64, u64)>], msi_window: Option<(u64, u64)>) -> Option<IovaSpace> {
    let mut common = lists.first()?.clone();
    common.sort_unstable();
    for l in &lists[1..] {
        let mut l = l.clone();
        l.sort_unstable();
        common = intersect(&common, &l);
    }
    let first = common.first()?.0;
    let last = common.last()?.1;
    let holes = common
        .windows(2)
        .map(|w| (w[0].1 + 1, w[1].0 - 1))
        .filter(|&(s, e)| !msi_window.is_some_and(|(ms, me)| ms <= s && e <= me))
        .collect();
    Some(((first, last), holes))
}

/// Where a bounce-pool window of `size` bytes fits in `input` (inclusive)
/// clear of the inclusive `reserved` ranges: at `preferred` if it fits
/// there, else the first `align`-aligned place above `preferred`, else the
/// first below it. `None` if no free stretch holds `size` bytes. `align` is
/// a power of two.
pub fn place_pool_window(
    input: (u64, u64),
    reserved: &[(u64, u64)],
    size: u64,
    preferred: u64,
    align: u64,
) -> Option<u64> {
    if size == 0 || !align.is_power_of_two() {
        return None;
    }
    // The free stretches of `input`, ascending.
    let mut holes: Vec<_> = reserved.to_vec();
    holes.sort_unstable();
    let mut free = Vec::new();
    let mut next = Some(input.0);
    for &(s, e) in &holes {
        let Some(n) = next else { break };
        if e < n || s > input.1 {
            continue;
        }
        if s > n {
            free.push((n, s - 1));
        }
        next = e.checked_add(1);
    }
    if let Some(n) = next.filter(|&n| n <= input.1) {
        free.push((n, input.1));
    }
    // The lowest aligned start at or above `from` in a stretch that holds
    // the window.
    let fit = |from: u64| {
        free.iter().find_map(|&(s, e)| {
            let start = s.max(from).checked_add(align - 1)? & !(align - 1);
            let last = start.checked_add(size - 1)?;
            (last <= e).then_some(start)
        })
    };
    fit(preferred).or_else(|| fit(input.0))
}

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

    fn publish(&self) {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner()) = self.inner.counters();
    }

    /// The device model (endpoints are added here, counters read here).
    pub fn model(&mut self) -> &mut VirtioIommu<Arc<GuestMemoryMmap>> {
        &mut self.inner
    }
}

impl VirtioDevice for ViommuDevice {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_IOMMU
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
        self.publish();
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_window_placement() {
        const G: u64 = 1 << 30;
        let msi = (0xfee0_0000, 0xfeef_ffff);
        // The preferred place is free.
        assert_eq!(
            place_pool_window((0, (1 << 39) - 1), &[msi], G, 4 * G, 4096),
            Some(4 * G)
        );
        // It is reserved: the next aligned place above it.
        let hole = (4 * G, 5 * G + 0x1fff);
        assert_eq!(
            place_pool_window((0, (1 << 39) - 1), &[hole, msi], G, 4 * G, 1 << 21),
            Some(5 * G + (1 << 21))
        );
        // Nothing above it: the first place below (the MSI window is skipped).
        assert_eq!(
            place_pool_window((0, 4 * G - 1), &[msi], G, 4 * G, 4096),
            Some(0)
        );
        assert_eq!(
            place_pool_window((0xfe00_0000, 0xffff_ffff), &[msi], 0x100_0000, 4 * G, 4096),
            Some(0xfef0_0000)
        );
        // Nothing fits, or nonsense.
        assert_eq!(place_pool_window((0, G - 1), &[], 2 * G, 0, 4096), None);
        assert_eq!(place_pool_window((0, u64::MAX), &[], 0, 0, 4096), None);
        assert_eq!(place_pool_window((0, u64::MAX), &[], G, 0, 3), None);
        // Up to the very top of the address space, no overflow.
        assert_eq!(
            place_pool_window((0, u64::MAX), &[(0, u64::MAX - G)], G, 4 * G, 4096),
            Some(u64::MAX - G + 1)
        );
    }

    #[test]
    fn iova_space_from_host_ranges() {
        let msi = Some((0xfee0_0000, 0xfeef_ffff));
        // VT-d with 39-bit addresses: the MSI hole is reported by the device.
        let vtd = vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
        assert_eq!(
            iova_space(std::slice::from_ref(&vtd), msi),
            Some(((0, (1 << 39) - 1), vec![]))
        );
        // Another endpoint with a hole elsewhere and a narrower width: its
        // hole is reserved, the MSI hole stays the device's MSI region.
        let other = vec![(0x1000, 0x7fff_ffff), (0x9000_0000, (1 << 36) - 1)];
        assert_eq!(
            iova_space(&[vtd.clone(), other.clone()], msi),
            Some(((0x1000, (1 << 36) - 1), vec![(0x8000_0000, 0x8fff_ffff)]))
        );
        // Without an MSI window every hole is reserved.
        assert_eq!(
            iova_space(&[vtd, other], None).unwrap().1,
            vec![(0x8000_0000, 0x8fff_ffff), (0xfee0_0000, 0xfeef_ffff)]
        );
        assert_eq!(iova_space(&[], msi), None);
        assert_eq!(iova_space(&[vec![(0, 10)], vec![(20, 30)]], None), None);
    }

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
