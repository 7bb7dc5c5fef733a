//! A guest that keeps the request queue busy: a mapper whose host maps
//! make the guest post more requests, without a notification, while the
//! device is still draining (as a driver with EVENT_IDX does while the
//! device's `avail_event` is behind: it does not kick again).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dma_mapper::{DmaError, DmaMapper, DmaPerm};
use vm_memory::GuestAddressSpace;

use super::{req, FakeMapper, GuestDriver, DATA_BASE};

/// The two IOVAs the busy guest maps in turn.
const IOVAS: [u64; 2] = [0x10_0000, 0x20_0000];
/// Bytes of each of its mappings.
const SIZE: u64 = 0x1000;

/// A [`FakeMapper`] behind which a guest keeps the request queue busy:
/// every host map of one of two IOVAs makes the guest ([`GuestDriver`] on
/// memory `M`) reclaim its finished requests and post an UNMAP of the
/// range just mapped and a MAP of the other one, in domain `domain`,
/// without notifying the device. So each batch the device completes
/// finds the next one waiting, for as many rounds as asked (or until
/// [`BusyGuest::stop`]).
pub struct BusyGuest<M> {
    /// The host side.
    pub inner: FakeMapper,
    mem: M,
    driver: Mutex<GuestDriver>,
    domain: u32,
    /// Rounds (UNMAP + MAP pairs) still to post.
    left: AtomicU64,
    posted: AtomicU64,
}

impl<M: GuestAddressSpace + Send + Sync> BusyGuest<M> {
    /// A busy guest on `driver` that will post `rounds` UNMAP + MAP pairs
    /// (`u64::MAX`: until stopped).
    pub fn new(mem: M, driver: GuestDriver, domain: u32, rounds: u64) -> Self {
        BusyGuest {
            inner: FakeMapper::new(),
            mem,
            driver: Mutex::new(driver),
            domain,
            left: AtomicU64::new(rounds),
            posted: AtomicU64::new(0),
        }
    }

    /// Posts the requests that start the stream (ATTACH of `endpoint`,
    /// then the first MAP), without notifying the device.
    pub fn start(&self, endpoint: u32) {
        let mut d = self.lock();
        for r in [
            req::attach(self.domain, endpoint, 0),
            req::map(
                self.domain,
                IOVAS[0],
                IOVAS[0] + SIZE - 1,
                DATA_BASE,
                req::RW,
            ),
        ] {
            d.push(&*self.mem.memory(), &r, 4)
                .expect("the queue has room");
        }
        self.posted.fetch_add(2, Ordering::Relaxed);
    }

    /// Stops posting.
    pub fn stop(&self) {
        self.left.store(0, Ordering::Relaxed);
    }

    /// Requests posted so far.
    pub fn posted(&self) -> u64 {
        self.posted.load(Ordering::Relaxed)
    }

    /// Runs `f` on the guest's driver.
    pub fn with_driver<T>(&self, f: impl FnOnce(&mut GuestDriver, &M::M) -> T) -> T {
        f(&mut self.lock(), &*self.mem.memory())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuestDriver> {
        self.driver.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn post_after(&self, iova: u64) {
        let Some(other) = IOVAS.iter().copied().find(|&i| i != iova) else {
            return;
        };
        if !IOVAS.contains(&iova) {
            return;
        }
        let mem = self.mem.memory();
        let mut d = self.lock();
        d.poll(&*mem);
        if d.free_descriptors() < 4
            || self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                .is_err()
        {
            return;
        }
        let unmap = req::unmap(self.domain, iova, iova + SIZE - 1);
        let map = req::map(self.domain, other, other + SIZE - 1, DATA_BASE, req::RW);
        for r in [unmap, map] {
            if d.push(&*mem, &r, 4).is_some() {
                self.posted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<M: GuestAddressSpace + Send + Sync> DmaMapper for BusyGuest<M> {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        self.inner.map(iova, gpa, size, perm)?;
        self.post_after(iova);
        Ok(())
    }
    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        self.inner.unmap(iova, size)
    }
    fn page_size_mask(&self) -> u64 {
        self.inner.page_size_mask()
    }
    fn unmap_all(&self) -> Result<(), DmaError> {
        self.inner.unmap_all()
    }
    fn has_leftovers(&self) -> bool {
        self.inner.has_leftovers()
    }
    fn disown(&self, iova: u64, size: u64) {
        self.inner.disown(iova, size)
    }
}

/// `dev` with `guest` as endpoint 1's mapper, the features it offers
/// acked (without `VIRTIO_RING_F_EVENT_IDX` unless `event_idx`), and
/// activated with the guest's request queue and an event queue of 64
/// entries at 0x1_0000 (descriptors' buffers at 0x80_0000).
pub fn activate_busy(
    dev: &mut crate::VirtioIommu<super::TestMem>,
    mem: super::TestMem,
    guest: &std::sync::Arc<BusyGuest<super::TestMem>>,
    event_idx: bool,
) {
    dev.add_endpoint(1, guest.clone()).unwrap();
    let mut f = dev.device_features();
    if !event_idx {
        f &= !(1 << virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX);
    }
    dev.set_acked_features(f);
    let evq = GuestDriver::new(&*mem, 0x1_0000, 64, 0x80_0000);
    let reqq = guest.with_driver(|d, _| d.queue());
    dev.activate(
        mem,
        vec![reqq, evq.queue()],
        std::sync::Arc::new(super::CountingInterrupt::default()),
    )
    .unwrap();
}
