//! Test helpers shared by the unit tests, the benches and the fuzz target
//! (feature `test-utils`): a guest-side split-virtqueue driver that sends
//! virtio-iommu requests through guest memory, a fake host mapper with
//! failure injection, and an interrupt counter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dma_mapper::{DmaError, DmaMapper, DmaPerm};
use viommu_wire as wire;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::{Queue, QueueT};
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemory, GuestMemoryMmap};

use crate::{DeviceConfig, IommuInterrupt, VirtioIommu};

/// Property-test case count: `PROPTEST_CASES` from the environment, else
/// `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

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

/// One call seen by [`FakeMapper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeCall {
    /// `map(iova, gpa, size, perm)`.
    Map {
        /// IOVA.
        iova: u64,
        /// Guest-physical address.
        gpa: u64,
        /// Size.
        size: u64,
        /// Rights.
        perm: DmaPerm,
    },
    /// `unmap(iova, size)`.
    Unmap {
        /// IOVA.
        iova: u64,
        /// Size.
        size: u64,
    },
}

type FailFn = Box<dyn Fn(&FakeCall) -> bool + Send>;

#[derive(Default)]
struct FakeState {
    maps: BTreeMap<u64, (u64, u64, DmaPerm)>,
    log: Vec<FakeCall>,
    violations: Vec<String>,
    fail: Option<FailFn>,
    /// `unmap_all` fails too (the fault plan covers single calls only).
    fail_unmap_all: bool,
    record: bool,
    calls: u64,
}

/// A host address space in memory that behaves like VFIO type1 v2: maps
/// must not overlap, unmaps must cover whole mappings, a failed call changes
/// nothing. Protocol violations are recorded (and refused).
#[derive(Default)]
pub struct FakeMapper {
    state: Mutex<FakeState>,
}

impl FakeMapper {
    /// An empty address space that records every call.
    pub fn new() -> Self {
        let m = FakeMapper::default();
        m.with(|s| s.record = true);
        m
    }

    /// An empty address space that only counts calls (for benches).
    pub fn counting() -> Self {
        FakeMapper::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut FakeState) -> R) -> R {
        let mut g = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Makes every call for which `pred` is true fail.
    pub fn fail_when(&self, pred: impl Fn(&FakeCall) -> bool + Send + 'static) {
        self.with(|s| s.fail = Some(Box::new(pred)));
    }

    /// Stops injecting failures.
    pub fn fail_never(&self) {
        self.with(|s| {
            s.fail = None;
            s.fail_unmap_all = false;
        });
    }

    /// Makes `unmap_all` fail as well (until [`Self::fail_never`]).
    pub fn fail_unmap_all(&self) {
        self.with(|s| s.fail_unmap_all = true);
    }

    /// Current mappings `(iova, size, gpa, perm)` in IOVA order.
    pub fn mappings(&self) -> Vec<(u64, u64, u64, DmaPerm)> {
        self.with(|s| {
            s.maps
                .iter()
                .map(|(&i, &(sz, g, p))| (i, sz, g, p))
                .collect()
        })
    }

    /// Calls seen (when recording).
    pub fn log(&self) -> Vec<FakeCall> {
        self.with(|s| s.log.clone())
    }

    /// Forgets the call log.
    pub fn clear_log(&self) {
        self.with(|s| s.log.clear());
    }

    /// Number of calls seen.
    pub fn calls(&self) -> u64 {
        self.with(|s| s.calls)
    }

    /// Protocol violations seen (overlapping maps, splitting unmaps).
    pub fn violations(&self) -> Vec<String> {
        self.with(|s| s.violations.clone())
    }

    fn injected(call: &FakeCall) -> DmaError {
        let (op, iova, size) = match *call {
            FakeCall::Map { iova, size, .. } => ("map", iova, size),
            FakeCall::Unmap { iova, size } => ("unmap", iova, size),
        };
        DmaError::Host {
            op,
            iova,
            size,
            source: std::io::Error::other("injected failure"),
        }
    }
}

impl DmaMapper for FakeMapper {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let call = FakeCall::Map {
            iova,
            gpa,
            size,
            perm,
        };
        self.with(|s| {
            s.calls += 1;
            if s.record {
                s.log.push(call);
            }
            let Some(end) = iova.checked_add(size).filter(|_| size > 0) else {
                s.violations
                    .push(format!("bad map range {iova:#x}+{size:#x}"));
                return Err(DmaError::Overlap { iova, size });
            };
            let overlap = s
                .maps
                .range(..end)
                .next_back()
                .is_some_and(|(&st, &(sz, _, _))| st + sz > iova);
            if overlap {
                s.violations
                    .push(format!("map over a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::Overlap { iova, size });
            }
            if s.fail.as_ref().is_some_and(|f| f(&call)) {
                return Err(Self::injected(&call));
            }
            s.maps.insert(iova, (size, gpa, perm));
            Ok(())
        })
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let call = FakeCall::Unmap { iova, size };
        self.with(|s| {
            s.calls += 1;
            if s.record {
                s.log.push(call);
            }
            let Some(end) = iova.checked_add(size).filter(|_| size > 0) else {
                s.violations
                    .push(format!("bad unmap range {iova:#x}+{size:#x}"));
                return Err(DmaError::SplitMapping { iova, size });
            };
            let hit: Vec<(u64, u64)> = s
                .maps
                .range(..end)
                .rev()
                .take_while(|(&st, &(sz, _, _))| st + sz > iova)
                .map(|(&st, &(sz, _, _))| (st, sz))
                .collect();
            if hit.iter().any(|&(st, sz)| st < iova || st + sz > end) {
                s.violations
                    .push(format!("unmap splits a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::SplitMapping { iova, size });
            }
            if s.fail.as_ref().is_some_and(|f| f(&call)) {
                return Err(Self::injected(&call));
            }
            for (st, _) in hit {
                s.maps.remove(&st);
            }
            Ok(())
        })
    }

    fn page_size_mask(&self) -> u64 {
        !0xfff
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        self.with(|s| {
            s.calls += 1;
            if s.fail_unmap_all {
                return Err(DmaError::Host {
                    op: "unmap all",
                    iova: 0,
                    size: u64::MAX,
                    source: std::io::Error::other("injected"),
                });
            }
            s.maps.clear();
            Ok(())
        })
    }
}

/// Bytes of guest memory reserved per descriptor head for request buffers.
const SLOT: u64 = 0x1000;
/// Offset of the writable part inside a slot.
const WOFF: u64 = 0x100;

/// A reply seen in the used ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// Head index.
    pub head: u16,
    /// Used length.
    pub len: u32,
    /// The tail's status (read when `len` covers the tail).
    pub status: Option<u8>,
}

/// Descriptors of an in-flight chain and its writable part (to find the tail).
type InFlight = (Vec<u16>, Option<(u64, u32)>);

/// The guest side of one split virtqueue: rings at `base`, request buffers
/// at `buffers` (one 4 KiB slot per descriptor index).
pub struct GuestDriver {
    size: u16,
    desc: u64,
    avail: u64,
    used: u64,
    buffers: u64,
    free: Vec<u16>,
    avail_idx: u16,
    last_used: u16,
    /// In-flight chains: head -> (descriptors, writable part to find the tail).
    chains: BTreeMap<u16, InFlight>,
}

impl GuestDriver {
    /// Lays out a queue of `size` entries (a power of two) at `base` with
    /// buffers at `buffers` (needs `size * 4 KiB`), zeroing the rings.
    pub fn new<M: GuestMemory>(mem: &M, base: u64, size: u16, buffers: u64) -> Self {
        let n = u64::from(size);
        let desc = base;
        let avail = desc + 16 * n;
        let used = (avail + 6 + 2 * n + 3) & !3;
        let end = used + 6 + 8 * n;
        let zero = vec![0u8; (end - base) as usize];
        mem.write_slice(&zero, GuestAddress(base))
            .expect("queue rings inside guest memory");
        GuestDriver {
            size,
            desc,
            avail,
            used,
            buffers,
            free: (0..size).rev().collect(),
            avail_idx: 0,
            last_used: 0,
            chains: BTreeMap::new(),
        }
    }

    /// A ready [`Queue`] for the device, matching this layout.
    pub fn queue(&self) -> Queue {
        let mut q = Queue::new(self.size).expect("power-of-two queue size");
        q.set_size(self.size);
        q.set_desc_table_address(Some(self.desc as u32), Some((self.desc >> 32) as u32));
        q.set_avail_ring_address(Some(self.avail as u32), Some((self.avail >> 32) as u32));
        q.set_used_ring_address(Some(self.used as u32), Some((self.used >> 32) as u32));
        q.set_ready(true);
        q
    }

    /// Free descriptors.
    pub fn free_descriptors(&self) -> usize {
        self.free.len()
    }

    fn write_desc<M: GuestMemory>(
        &self,
        mem: &M,
        idx: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..].copy_from_slice(&next.to_le_bytes());
        mem.write_slice(&d, GuestAddress(self.desc + 16 * u64::from(idx)))
            .expect("descriptor table inside guest memory");
    }

    fn publish<M: GuestMemory>(&mut self, mem: &M, head: u16) {
        let slot = u64::from(self.avail_idx % self.size);
        mem.write_obj(head.to_le(), GuestAddress(self.avail + 4 + 2 * slot))
            .expect("avail ring");
        self.avail_idx = self.avail_idx.wrapping_add(1);
        mem.store(
            self.avail_idx.to_le(),
            GuestAddress(self.avail + 2),
            Ordering::Release,
        )
        .expect("avail idx");
    }

    /// Queues a request: `readable` bytes, then a writable part of
    /// `writable_len` bytes (tail included). `None` if the queue is full.
    pub fn push<M: GuestMemory>(
        &mut self,
        mem: &M,
        readable: &[u8],
        writable_len: u32,
    ) -> Option<u16> {
        if self.free.len() < 2
            || readable.len() as u64 > WOFF
            || u64::from(writable_len) > SLOT - WOFF
        {
            return None;
        }
        let h = self.free.pop()?;
        let w = self.free.pop()?;
        let base = self.buffers + u64::from(h) * SLOT;
        mem.write_slice(readable, GuestAddress(base))
            .expect("buffer");
        // Poison the writable part so a test sees what the device wrote.
        let junk = vec![0xa5u8; writable_len as usize];
        mem.write_slice(&junk, GuestAddress(base + WOFF))
            .expect("buffer");
        self.write_desc(
            mem,
            h,
            base,
            readable.len() as u32,
            VRING_DESC_F_NEXT as u16,
            w,
        );
        self.write_desc(
            mem,
            w,
            base + WOFF,
            writable_len,
            VRING_DESC_F_WRITE as u16,
            0,
        );
        self.chains
            .insert(h, (vec![h, w], Some((base + WOFF, writable_len))));
        self.publish(mem, h);
        Some(h)
    }

    /// Queues a hand-made chain: `(addr, len, flags)` per descriptor (the
    /// NEXT flag and links are set here). Used for malformed requests.
    pub fn push_raw<M: GuestMemory>(&mut self, mem: &M, descs: &[(u64, u32, u16)]) -> Option<u16> {
        if descs.is_empty() || self.free.len() < descs.len() {
            return None;
        }
        let idx: Vec<u16> = (0..descs.len()).filter_map(|_| self.free.pop()).collect();
        for (k, &(addr, len, flags)) in descs.iter().enumerate() {
            let (flags, next) = match idx.get(k + 1) {
                Some(&n) => (flags | VRING_DESC_F_NEXT as u16, n),
                None => (flags & !(VRING_DESC_F_NEXT as u16), 0),
            };
            self.write_desc(mem, idx[k], addr, len, flags, next);
        }
        let wr = descs
            .last()
            .filter(|d| d.2 & VRING_DESC_F_WRITE as u16 != 0)
            .map(|d| (d.0, d.1));
        self.chains.insert(idx[0], (idx.clone(), wr));
        self.publish(mem, idx[0]);
        Some(idx[0])
    }

    /// The address of the buffer slot of descriptor `head` (for tests that
    /// build chains by hand).
    pub fn slot_addr(&self, head: u16) -> u64 {
        self.buffers + u64::from(head) * SLOT
    }

    /// Sets `used_event` (EVENT_IDX): the device should interrupt once the
    /// used index passes it.
    pub fn set_used_event<M: GuestMemory>(&self, mem: &M, v: u16) {
        mem.write_obj(
            v.to_le(),
            GuestAddress(self.avail + 4 + 2 * u64::from(self.size)),
        )
        .expect("used_event");
    }

    /// Overwrites the avail index (as a buggy or hostile driver might).
    pub fn set_avail_idx<M: GuestMemory>(&mut self, mem: &M, v: u16) {
        mem.write_obj(v.to_le(), GuestAddress(self.avail + 2))
            .expect("avail idx");
        self.avail_idx = v;
    }

    /// Sets the avail ring flags (e.g. `VRING_AVAIL_F_NO_INTERRUPT`).
    pub fn set_avail_flags<M: GuestMemory>(&self, mem: &M, v: u16) {
        mem.write_obj(v.to_le(), GuestAddress(self.avail))
            .expect("avail flags");
    }

    /// The device's used index.
    pub fn used_idx<M: GuestMemory>(&self, mem: &M) -> u16 {
        u16::from_le(
            mem.load(GuestAddress(self.used + 2), Ordering::Acquire)
                .expect("used idx"),
        )
    }

    /// Collects new used entries, reads their status, frees their descriptors.
    pub fn poll<M: GuestMemory>(&mut self, mem: &M) -> Vec<Used> {
        let idx = self.used_idx(mem);
        let mut out = Vec::new();
        while self.last_used != idx {
            let slot = u64::from(self.last_used % self.size);
            let mut e = [0u8; 8];
            mem.read_slice(&mut e, GuestAddress(self.used + 4 + 8 * slot))
                .expect("used ring");
            let head = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as u16;
            let len = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let mut status = None;
            if let Some((descs, wr)) = self.chains.remove(&head) {
                if let Some((addr, wlen)) = wr {
                    // Hand-made chains may point anywhere: no tail, no status.
                    let at = addr
                        .checked_add(u64::from(wlen))
                        .and_then(|e| e.checked_sub(4));
                    if let (true, Some(at)) = (wlen >= 4 && len >= 4, at) {
                        status = mem
                            .read_obj::<wire::ReqTail>(GuestAddress(at))
                            .ok()
                            .map(|t| t.status);
                    }
                }
                self.free.extend(descs);
            }
            out.push(Used { head, len, status });
            self.last_used = self.last_used.wrapping_add(1);
        }
        // Like Linux's virtqueue_get_buf(): ask for an interrupt at the next
        // completion (only read by a device that negotiated EVENT_IDX).
        self.set_used_event(mem, self.last_used);
        out
    }
}

/// Request bytes (device-readable part) of each type.
pub mod req {
    use super::*;

    fn head(t: u8) -> wire::ReqHead {
        wire::ReqHead {
            type_: t,
            reserved: [0; 3],
        }
    }

    /// ATTACH.
    pub fn attach(domain: u32, endpoint: u32, flags: u32) -> Vec<u8> {
        wire::AttachReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_ATTACH),
            domain: domain.into(),
            endpoint: endpoint.into(),
            flags: flags.into(),
            reserved: [0; 4],
        }
        .as_slice()
        .to_vec()
    }

    /// DETACH.
    pub fn detach(domain: u32, endpoint: u32) -> Vec<u8> {
        wire::DetachReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_DETACH),
            domain: domain.into(),
            endpoint: endpoint.into(),
            reserved: [0; 8],
        }
        .as_slice()
        .to_vec()
    }

    /// MAP of the inclusive range `[start, end]`.
    pub fn map(domain: u32, start: u64, end: u64, phys: u64, flags: u32) -> Vec<u8> {
        wire::MapReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_MAP),
            domain: domain.into(),
            virt_start: start.into(),
            virt_end: end.into(),
            phys_start: phys.into(),
            flags: flags.into(),
        }
        .as_slice()
        .to_vec()
    }

    /// UNMAP of the inclusive range `[start, end]`.
    pub fn unmap(domain: u32, start: u64, end: u64) -> Vec<u8> {
        wire::UnmapReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_UNMAP),
            domain: domain.into(),
            virt_start: start.into(),
            virt_end: end.into(),
            reserved: [0; 4],
        }
        .as_slice()
        .to_vec()
    }

    /// IOTLB_FLUSH of a domain (lazy domains' UNMAPs leave the host here).
    pub fn iotlb_flush(domain: u32) -> Vec<u8> {
        wire::IotlbFlushReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_IOTLB_FLUSH),
            domain: domain.into(),
            reserved: [0; 4],
        }
        .as_slice()
        .to_vec()
    }

    /// PROBE.
    pub fn probe(endpoint: u32) -> Vec<u8> {
        wire::ProbeReq {
            head: head(wire::req_type::VIRTIO_IOMMU_T_PROBE),
            endpoint: endpoint.into(),
            reserved: [0; 64],
        }
        .as_slice()
        .to_vec()
    }

    /// READ | WRITE.
    pub const RW: u32 = wire::VIRTIO_IOMMU_MAP_F_READ | wire::VIRTIO_IOMMU_MAP_F_WRITE;
    /// ATTACH flag of a lazy domain.
    pub const LAZY: u32 = wire::VIRTIO_IOMMU_ATTACH_F_LAZY;
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
        self.reqq = GuestDriver::new(&*self.mem, REQQ_BASE, self.reqq.size, REQQ_BUFFERS);
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
    /// unattached or in bypass) and that no mapper saw a protocol violation.
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
            let have = m.mappings();
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

    /// Notifies the device and collects the replies.
    pub fn kick(&mut self) -> Vec<Used> {
        self.dev.process_request_queue().expect("request queue");
        self.reqq.poll(&*self.mem)
    }

    /// Statuses of `send(reqs)`.
    pub fn statuses(&mut self, reqs: &[Vec<u8>]) -> Vec<Option<u8>> {
        self.send(reqs).iter().map(|u| u.status).collect()
    }
}

/// Request streams shaped like the Linux 6.1 virtio-iommu driver's.
pub mod workload {
    use std::collections::BTreeMap;

    use super::{req, DATA_BASE};

    /// How the guest driver sends its requests.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Pattern {
        /// Stock 6.1 (strict): every MAP and every UNMAP is sent and waited
        /// for on its own: one request per notification.
        StrictSync,
        /// Seed 003's single flush queue on 6.1: MAPs are synced
        /// (`iotlb_sync_map`), UNMAPs only queued, so each notification
        /// carries `[UNMAP old, MAP new]`.
        FlushQueue,
        /// Deferred unmaps flushed together: a burst of MAPs (one per I/O
        /// of a plugged batch) in one notification, then one notification
        /// with all their UNMAPs (`flush_iotlb_all`).
        DeferredBursts,
    }

    impl Pattern {
        /// All patterns.
        pub const ALL: [Pattern; 3] = [
            Pattern::StrictSync,
            Pattern::FlushQueue,
            Pattern::DeferredBursts,
        ];

        /// A short name for reports.
        pub fn name(self) -> &'static str {
            match self {
                Pattern::StrictSync => "strict-sync",
                Pattern::FlushQueue => "flush-queue",
                Pattern::DeferredBursts => "deferred-bursts",
            }
        }
    }

    /// Linux's IOVA allocator, roughly: top-down, freed ranges reused most
    /// recently freed first (the per-size rcache).
    #[derive(Debug)]
    pub struct IovaAllocator {
        cursor: u64,
        free: BTreeMap<u64, Vec<u64>>,
    }

    impl IovaAllocator {
        /// Allocates downwards from `top` (exclusive).
        pub fn new(top: u64) -> Self {
            IovaAllocator {
                cursor: top,
                free: BTreeMap::new(),
            }
        }

        /// A range of `size` bytes (a multiple of 4 KiB).
        pub fn alloc(&mut self, size: u64) -> u64 {
            if let Some(iova) = self.free.get_mut(&size).and_then(|v| v.pop()) {
                return iova;
            }
            self.cursor -= size;
            self.cursor
        }

        /// Returns a range.
        pub fn free(&mut self, iova: u64, size: u64) {
            self.free.entry(size).or_default().push(iova);
        }
    }

    /// A stream of notifications, each a list of requests, for `ios` I/Os
    /// of `io_size` bytes with `depth` I/Os in flight, on `domain`.
    ///
    /// Ends with every I/O unmapped (the domain is empty again).
    pub fn kicks(
        pattern: Pattern,
        io_size: u64,
        depth: usize,
        ios: usize,
        domain: u32,
    ) -> Vec<Vec<Vec<u8>>> {
        let depth = depth.max(1);
        // Below the x86 MSI window, like a 32-bit-first DMA allocator.
        let mut alloc = IovaAllocator::new(0xfee0_0000);
        // Physical buffers: a ring of `depth * 2` slots in guest RAM.
        let slots = (depth * 2) as u64;
        let phys = |n: usize| DATA_BASE + (n as u64 % slots) * io_size;
        let map =
            |iova: u64, n: usize| req::map(domain, iova, iova + io_size - 1, phys(n), req::RW);
        let unmap = |iova: u64| req::unmap(domain, iova, iova + io_size - 1);
        let mut out: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut inflight: std::collections::VecDeque<u64> = Default::default();
        match pattern {
            Pattern::StrictSync | Pattern::FlushQueue => {
                for n in 0..ios {
                    let mut kick = Vec::new();
                    if inflight.len() == depth {
                        let old = inflight.pop_front().unwrap_or_default();
                        if pattern == Pattern::StrictSync {
                            out.push(vec![unmap(old)]);
                        } else {
                            kick.push(unmap(old));
                        }
                        alloc.free(old, io_size);
                    }
                    let iova = alloc.alloc(io_size);
                    kick.push(map(iova, n));
                    inflight.push_back(iova);
                    out.push(kick);
                }
                // Drain.
                let rest: Vec<Vec<u8>> = inflight.drain(..).map(unmap).collect();
                if pattern == Pattern::StrictSync {
                    out.extend(rest.into_iter().map(|r| vec![r]));
                } else if !rest.is_empty() {
                    out.push(rest);
                }
            }
            Pattern::DeferredBursts => {
                let mut n = 0;
                while n < ios {
                    let burst = depth.min(ios - n);
                    let iovas: Vec<u64> = (0..burst).map(|_| alloc.alloc(io_size)).collect();
                    out.push(
                        iovas
                            .iter()
                            .enumerate()
                            .map(|(k, &i)| map(i, n + k))
                            .collect(),
                    );
                    out.push(iovas.iter().map(|&i| unmap(i)).collect());
                    for i in iovas {
                        alloc.free(i, io_size);
                    }
                    n += burst;
                }
            }
        }
        out
    }
}
