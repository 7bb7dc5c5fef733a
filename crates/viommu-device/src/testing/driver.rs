//! The guest side of a split virtqueue: puts virtio-iommu requests in guest
//! memory, publishes them, and reads the used ring and the replies' status.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use viommu_wire as wire;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemory};

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

    /// Entries of the queue.
    pub fn size(&self) -> u16 {
        self.size
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

    /// The avail index the driver published last.
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }

    /// Sets the avail ring flags (e.g. `VRING_AVAIL_F_NO_INTERRUPT`).
    pub fn set_avail_flags<M: GuestMemory>(&self, mem: &M, v: u16) {
        mem.write_obj(v.to_le(), GuestAddress(self.avail))
            .expect("avail flags");
    }

    /// The `avail_event` the device published (EVENT_IDX): the driver
    /// notifies when its avail index passes it.
    pub fn avail_event<M: GuestMemory>(&self, mem: &M) -> u16 {
        u16::from_le(
            mem.load(
                GuestAddress(self.used + 4 + 8 * u64::from(self.size)),
                Ordering::Acquire,
            )
            .expect("avail_event"),
        )
    }

    /// The used ring's flags (`VRING_USED_F_NO_NOTIFY`: without EVENT_IDX,
    /// the device asks the driver not to notify).
    pub fn used_flags<M: GuestMemory>(&self, mem: &M) -> u16 {
        u16::from_le(
            mem.load(GuestAddress(self.used), Ordering::Acquire)
                .expect("used flags"),
        )
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
