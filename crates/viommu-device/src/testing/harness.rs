//! The test harness: a device in guest memory with a guest driver on both
//! queues, fake mappers behind its endpoints and an interrupt counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dma_mapper::DmaPerm;
use viommu_wire as wire;
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::{FakeMapper, GuestDriver, Used};
use crate::{DeviceConfig, IommuInterrupt, VirtioIommu};

/// Counts interrupts per queue.
#[derive(Debug, Default)]
pub struct CountingInterrupt {
    /// Interrupts of queue 0 and 1.
    pub count: [AtomicU64; 2],
}

impl CountingInterrupt {
    /// Interrupts raised for `queue` so far.
    pub fn get(&self, queue: u16) -> u64 {
        self.count
            .get(usize::from(queue))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

impl IommuInterrupt for CountingInterrupt {
    fn trigger(&self, queue: u16) -> std::io::Result<()> {
        if let Some(c) = self.count.get(usize::from(queue)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Guest memory of the harness.
pub type TestMem = Arc<GuestMemoryMmap<()>>;

/// Size of the harness's guest memory (256 MiB).
pub const MEM_SIZE: u64 = 0x1000_0000;
/// Guest-physical base of ordinary "RAM" for MAP requests in tests.
pub const DATA_BASE: u64 = 0x100_0000;

const REQQ_BASE: u64 = 0x0;
const EVQ_BASE: u64 = 0x1_0000;
const REQQ_BUFFERS: u64 = 0x10_0000;
const EVQ_BUFFERS: u64 = 0x80_0000;

/// A device in guest memory with a guest driver on both queues, fake
/// mappers behind its endpoints and an interrupt counter.
pub struct Harness {
    /// Guest memory.
    pub mem: TestMem,
    /// The device.
    pub dev: VirtioIommu<TestMem>,
    /// Driver side of the request queue.
    pub reqq: GuestDriver,
    /// Driver side of the event queue.
    pub evq: GuestDriver,
    /// Interrupts raised.
    pub irq: Arc<CountingInterrupt>,
    /// The mapper of each endpoint, in the order given to [`Harness::new`].
    pub mappers: Vec<Arc<FakeMapper>>,
    /// The endpoint ids, in the same order.
    pub endpoints: Vec<u32>,
}

impl Harness {
    /// Endpoints `endpoints` each with its own recording [`FakeMapper`],
    /// queues of `qsize` entries, every offered feature acked.
    pub fn new(cfg: DeviceConfig, endpoints: &[u32], qsize: u16) -> Self {
        Self::with_mappers(cfg, endpoints, qsize, FakeMapper::new)
    }

    /// Like [`Harness::new`] with mappers made by `make`.
    pub fn with_mappers(
        cfg: DeviceConfig,
        endpoints: &[u32],
        qsize: u16,
        make: impl Fn() -> FakeMapper,
    ) -> Self {
        let mem: TestMem = Arc::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)])
                .expect("test guest memory"),
        );
        let mut dev = VirtioIommu::new(cfg).expect("device config");
        let mut mappers = Vec::new();
        for &ep in endpoints {
            let m = Arc::new(make());
            dev.add_endpoint(ep, m.clone()).expect("endpoint");
            mappers.push(m);
        }
        let f = dev.device_features();
        dev.set_acked_features(f);
        let reqq = GuestDriver::new(&*mem, REQQ_BASE, qsize, REQQ_BUFFERS);
        let evq = GuestDriver::new(&*mem, EVQ_BASE, 64, EVQ_BUFFERS);
        let irq = Arc::new(CountingInterrupt::default());
        dev.activate(mem.clone(), vec![reqq.queue(), evq.queue()], irq.clone())
            .expect("activate");
        Harness {
            mem,
            dev,
            reqq,
            evq,
            irq,
            mappers,
            endpoints: endpoints.to_vec(),
        }
    }

    /// Device reset, fresh rings, negotiation of `features`, activation.
    pub fn restart(&mut self, features: u64) {
        self.dev.reset();
        self.dev.set_acked_features(features);
        self.reqq = GuestDriver::new(&*self.mem, REQQ_BASE, self.reqq.size(), REQQ_BUFFERS);
        self.evq = GuestDriver::new(&*self.mem, EVQ_BASE, 64, EVQ_BUFFERS);
        self.dev
            .activate(
                self.mem.clone(),
                vec![self.reqq.queue(), self.evq.queue()],
                self.irq.clone(),
            )
            .expect("activate");
    }

    /// Checks that every endpoint's mapper holds exactly the mappings of the
    /// endpoint's domain plus its pending deferred unmaps (nothing when
    /// unattached or in bypass), besides the leftovers it reports (a failed
    /// rollback's, removed when the domain ends), and that no mapper saw a
    /// protocol violation.
    pub fn check_consistency(&self) -> Result<(), String> {
        for (ep, m) in self.endpoints.iter().zip(&self.mappers) {
            if self.dev.mapper_is_dirty(*ep) {
                // Leftovers of a failed reset: unknown until removed.
                continue;
            }
            let mut want: Vec<(u64, u64, u64, DmaPerm)> = match self.dev.endpoint_state(*ep) {
                Some(crate::EndpointState::Translated(d)) => self
                    .dev
                    .domain_mappings(d)
                    .unwrap_or_default()
                    .iter()
                    .chain(self.dev.pending_unmaps(d).unwrap_or_default().iter())
                    .map(|x| (x.iova, x.size, x.gpa, x.perm))
                    .collect(),
                _ => Vec::new(),
            };
            want.sort_by_key(|x| x.0);
            let leftovers = m.leftovers();
            let mut have = m.mappings();
            have.retain(|x| !leftovers.contains(&(x.0, x.1)));
            if have != want {
                return Err(format!("endpoint {ep}: host {have:x?} != device {want:x?}"));
            }
            let v = m.violations();
            if !v.is_empty() {
                return Err(format!("endpoint {ep}: {v:?}"));
            }
        }
        Ok(())
    }

    /// Queues requests without notifying the device; returns their heads.
    pub fn queue(&mut self, reqs: &[Vec<u8>]) -> Vec<u16> {
        reqs.iter()
            .map(|r| {
                let wlen = if r.first() == Some(&wire::req_type::VIRTIO_IOMMU_T_PROBE) {
                    self.dev.config().probe_size.to_native() + 4
                } else {
                    4
                };
                self.reqq.push(&*self.mem, r, wlen).expect("queue has room")
            })
            .collect()
    }

    /// Queues requests, notifies the device once, returns the replies in
    /// used-ring order.
    pub fn send(&mut self, reqs: &[Vec<u8>]) -> Vec<Used> {
        self.queue(reqs);
        self.kick()
    }

    /// Notifies the device and collects the replies (calling the device
    /// again while it says [`Drained::More`](crate::Drained::More), as the
    /// VMM's device thread does).
    pub fn kick(&mut self) -> Vec<Used> {
        while self.dev.process_request_queue().expect("request queue") == crate::Drained::More {}
        self.reqq.poll(&*self.mem)
    }

    /// Statuses of `send(reqs)`.
    pub fn statuses(&mut self, reqs: &[Vec<u8>]) -> Vec<Option<u8>> {
        self.send(reqs).iter().map(|u| u.status).collect()
    }
}
