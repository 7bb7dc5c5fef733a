//! Reading a request out of a descriptor chain and writing its reply.
//!
//! A virtio-iommu request is a device-readable part (head + body) followed by
//! a device-writable part (PROBE properties, then the tail). Anything wrong
//! with the chain itself (a readable descriptor after a writable one, a
//! descriptor outside guest memory, a writable part too short to hold a
//! tail) makes the request unanswerable: it is returned with a used length
//! of zero and nothing written, as the spec says for a request whose tail
//! the device cannot find.

use std::ops::Deref;

use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestAddress, GuestMemory, Permissions};

/// The longest device-readable part we look at (PROBE: 72 bytes). Longer
/// parts are measured, not copied.
pub(crate) const MAX_READABLE: usize = 128;

/// Most descriptors one request chain may have. A request is a readable
/// and a writable part (Linux uses one descriptor each); a few more allow a
/// driver to split them. A longer chain is unanswerable: this bounds what a
/// guest can make the device walk and keep per notification (queue size x
/// this many descriptors) whatever the chain, an indirect table included.
pub(crate) const MAX_CHAIN_DESCRIPTORS: usize = 16;

/// `VRING_DESC_F_INDIRECT`: the descriptor points to a table of them.
const VRING_DESC_F_INDIRECT: u16 = 4;

/// A request as read from guest memory.
#[derive(Debug)]
pub(crate) struct RawRequest {
    /// Head index, for the used ring.
    pub head: u16,
    /// The first `min(readable_len, MAX_READABLE)` readable bytes.
    pub readable: [u8; MAX_READABLE],
    /// Total length of the device-readable part.
    pub readable_len: u64,
    /// Device-writable segments, in order.
    pub writable: Vec<(GuestAddress, u32)>,
    /// Total length of the device-writable part.
    pub writable_len: u64,
}

impl RawRequest {
    /// The readable bytes we hold.
    pub fn bytes(&self) -> &[u8] {
        let n = usize::try_from(self.readable_len)
            .unwrap_or(MAX_READABLE)
            .min(MAX_READABLE);
        &self.readable[..n]
    }
}

/// Why a chain cannot be answered (used length 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChainError {
    /// A device-readable descriptor follows a device-writable one.
    ReadableAfterWritable,
    /// A descriptor is not inside guest memory.
    OutsideMemory,
    /// The lengths overflow.
    TooLong,
    /// More than [`MAX_CHAIN_DESCRIPTORS`] descriptors.
    TooManyDescriptors,
    /// An indirect descriptor, though `VIRTIO_F_INDIRECT_DESC` is never
    /// offered (spec: the driver MUST NOT set the flag without it).
    Indirect,
}

/// Whether descriptor `head` of the table at `desc_table` has the indirect
/// flag (unreadable counts as not: the chain walk reports that itself).
pub(crate) fn head_is_indirect<M: GuestMemory + ?Sized>(
    mem: &M,
    desc_table: GuestAddress,
    head: u16,
) -> bool {
    let flags_at = desc_table
        .0
        .checked_add(16 * u64::from(head) + 12)
        .map(GuestAddress);
    flags_at
        .and_then(|a| mem.read_obj::<u16>(a).ok())
        .is_some_and(|f| u16::from_le(f) & VRING_DESC_F_INDIRECT != 0)
}

/// Reads the chain: copies the start of the readable part and records the
/// writable segments (checked to be guest memory).
pub(crate) fn read_chain<M>(chain: DescriptorChain<M>) -> Result<RawRequest, (u16, ChainError)>
where
    M: Deref + Clone,
    M::Target: GuestMemory,
{
    let head = chain.head_index();
    let mem = chain.memory();
    let mut req = RawRequest {
        head,
        readable: [0; MAX_READABLE],
        readable_len: 0,
        writable: Vec::new(),
        writable_len: 0,
    };
    for (n, desc) in chain.clone().enumerate() {
        if n >= MAX_CHAIN_DESCRIPTORS {
            return Err((head, ChainError::TooManyDescriptors));
        }
        let len = desc.len();
        if desc.is_write_only() {
            if !mem.check_range(desc.addr(), len as usize, Permissions::Write) {
                return Err((head, ChainError::OutsideMemory));
            }
            req.writable.push((desc.addr(), len));
            req.writable_len = req
                .writable_len
                .checked_add(u64::from(len))
                .ok_or((head, ChainError::TooLong))?;
        } else {
            if !req.writable.is_empty() {
                return Err((head, ChainError::ReadableAfterWritable));
            }
            if !mem.check_range(desc.addr(), len as usize, Permissions::Read) {
                return Err((head, ChainError::OutsideMemory));
            }
            let have = usize::try_from(req.readable_len).unwrap_or(MAX_READABLE);
            if have < MAX_READABLE {
                let n = (MAX_READABLE - have).min(len as usize);
                mem.read_slice(&mut req.readable[have..have + n], desc.addr())
                    .map_err(|_| (head, ChainError::OutsideMemory))?;
            }
            req.readable_len = req
                .readable_len
                .checked_add(u64::from(len))
                .ok_or((head, ChainError::TooLong))?;
        }
    }
    Ok(req)
}

/// Writes `data` at byte `offset` of the writable part.
pub(crate) fn write_at<M: GuestMemory + ?Sized>(
    mem: &M,
    segments: &[(GuestAddress, u32)],
    mut offset: u64,
    mut data: &[u8],
) -> Result<(), vm_memory::GuestMemoryError> {
    for &(addr, len) in segments {
        let len = u64::from(len);
        if data.is_empty() {
            break;
        }
        if offset >= len {
            offset -= len;
            continue;
        }
        let room = usize::try_from(len - offset).unwrap_or(usize::MAX);
        let n = room.min(data.len());
        let at = addr
            .0
            .checked_add(offset)
            .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(addr))?;
        mem.write_slice(&data[..n], GuestAddress(at))?;
        data = &data[n..];
        offset = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(vm_memory::GuestMemoryError::InvalidBackendAddress)
    }
}
