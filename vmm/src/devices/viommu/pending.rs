//! The requests a driver published on the request queue and the device has
//! not taken yet, by type, read from the rings when `GET /metrics` asks
//! (the bench tool does before it kills a guest it found hung).
//!
//! Published and not taken has several readings, and the avail indices
//! alone cannot tell them apart: a lazy guest queues its UNMAPs without a
//! notification until its next sync (docs/lazy-unmap-contract.md), which
//! is harmless; Linux (6.5 and later) adds MAPs and notifies once in
//! `iotlb_sync_map`, so a MAP waits there for a moment; and a request the
//! driver notified that the device never saw is a missed kick. UNMAPs
//! alone are the first; anything else is one of the other two, told apart
//! by whether a vCPU waits in the driver's sync (the bench tool's "owed"
//! check). The request's type is the first byte its head descriptor
//! points at.
//!
//! Guest memory is hostile and changes under the reader: every index is
//! taken modulo the queue size, every address is checked by `vm-memory`
//! (a read that fails counts as unreadable), and at most [`PEEK_MAX`]
//! entries are looked at. A reading is a snapshot for a diagnosis, never
//! used to serve anything.

use viommu_device::req_type;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory};

/// Entries looked at, at most, per reading.
pub const PEEK_MAX: u16 = 64;

/// `VIRTQ_DESC_F_INDIRECT`: the descriptor points at a table of them.
const DESC_F_INDIRECT: u16 = 4;

/// The pending requests of one reading, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingTypes {
    /// MAP requests.
    pub map: u16,
    /// UNMAP requests.
    pub unmap: u16,
    /// IOTLB_FLUSH requests (the lazy contract's sync).
    pub flush: u16,
    /// Any other type (ATTACH, DETACH, PROBE, unknown).
    pub other: u16,
    /// Entries whose descriptor or request could not be read (indirect
    /// descriptors, addresses outside guest memory).
    pub unreadable: u16,
    /// Entries published beyond [`PEEK_MAX`], not looked at.
    pub not_read: u16,
}

/// Where the request queue's rings are in guest memory.
#[derive(Debug, Clone, Copy)]
pub struct RingAddrs {
    /// The descriptor table.
    pub desc: GuestAddress,
    /// The avail ring.
    pub avail: GuestAddress,
    /// The queue size (a power of two; 0: not set up).
    pub size: u16,
}

/// The types of the requests in avail ring entries `next..driver` (the
/// device's next index up to the driver's avail index, wrapping).
pub fn peek<M: GuestMemory>(mem: &M, rings: RingAddrs, next: u16, driver: u16) -> PendingTypes {
    let mut out = PendingTypes::default();
    if rings.size == 0 {
        return out;
    }
    // More than a queue's worth published is itself a driver bug; look at
    // no more than the ring holds.
    let published = driver.wrapping_sub(next).min(rings.size);
    let looked = published.min(PEEK_MAX);
    out.not_read = published - looked;
    for i in 0..looked {
        let slot = next.wrapping_add(i) % rings.size;
        match request_type(mem, rings, slot) {
            Some(req_type::VIRTIO_IOMMU_T_MAP) => out.map += 1,
            Some(req_type::VIRTIO_IOMMU_T_UNMAP) => out.unmap += 1,
            Some(req_type::VIRTIO_IOMMU_T_IOTLB_FLUSH) => out.flush += 1,
            Some(_) => out.other += 1,
            None => out.unreadable += 1,
        }
    }
    out
}

/// The type byte of the request in avail ring slot `slot`, if readable.
fn request_type<M: GuestMemory>(mem: &M, rings: RingAddrs, slot: u16) -> Option<u8> {
    let read16 = |a: GuestAddress| mem.read_obj::<u16>(a).ok().map(u16::from_le);
    let entry = rings.avail.checked_add(4 + 2 * u64::from(slot))?;
    let head = read16(entry)?;
    if head >= rings.size {
        return None;
    }
    let desc = rings.desc.checked_add(16 * u64::from(head))?;
    let addr = u64::from_le(mem.read_obj::<u64>(desc).ok()?);
    let len = u32::from_le(mem.read_obj::<u32>(desc.checked_add(8)?).ok()?);
    let flags = read16(desc.checked_add(12)?)?;
    if flags & DESC_F_INDIRECT != 0 || len == 0 {
        return None;
    }
    mem.read_obj::<u8>(GuestAddress(addr)).ok()
}

#[cfg(test)]
mod tests;
