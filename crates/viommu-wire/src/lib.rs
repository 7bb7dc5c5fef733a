//! The virtio-iommu wire format (OASIS virtio spec, "IOMMU device" section).
//!
//! Every structure is `#[repr(C, packed)]`, little-endian (`Le16`/`Le32`/`Le64`
//! fields) and [`ByteValued`], so it can be read from and written to guest
//! memory with `Bytes::read_obj`/`write_obj`. Sizes are asserted at compile
//! time against the spec layout.
//!
//! Requests are split in a device-readable part (head + body, the `*Req`
//! structs below) and a device-writable part (a [`ReqTail`], preceded for
//! PROBE by `probe_size` bytes of properties). The full request as the driver
//! lays it out is the readable struct followed by the writable part.

#![deny(missing_docs)]

use vm_memory::{ByteValued, Le16, Le32, Le64};

/// Index of the request virtqueue.
pub const REQUEST_QUEUE: u16 = 0;
/// Index of the event virtqueue.
pub const EVENT_QUEUE: u16 = 1;

/// Feature bits of the device (bit numbers).
pub mod features {
    /// `input_range` describes the available IOVA range.
    pub const VIRTIO_IOMMU_F_INPUT_RANGE: u32 = 0;
    /// `domain_range` describes the valid domain ids.
    pub const VIRTIO_IOMMU_F_DOMAIN_RANGE: u32 = 1;
    /// MAP and UNMAP requests are available.
    pub const VIRTIO_IOMMU_F_MAP_UNMAP: u32 = 2;
    /// Legacy: unattached endpoints bypass translation (superseded by BYPASS_CONFIG).
    pub const VIRTIO_IOMMU_F_BYPASS: u32 = 3;
    /// The PROBE request is available.
    pub const VIRTIO_IOMMU_F_PROBE: u32 = 4;
    /// The `VIRTIO_IOMMU_MAP_F_MMIO` flag is available.
    pub const VIRTIO_IOMMU_F_MMIO: u32 = 5;
    /// Config field `bypass` and `VIRTIO_IOMMU_ATTACH_F_BYPASS` are available.
    pub const VIRTIO_IOMMU_F_BYPASS_CONFIG: u32 = 6;
    /// Lazy domains, in the shape of virtio-spec issue #204
    /// (docs/lazy-unmap-contract.md): ATTACH may carry
    /// `VIRTIO_IOMMU_ATTACH_F_LAZY`, the device may keep the host
    /// translations of a lazy domain's UNMAPs until its IOTLB_FLUSH, and
    /// the IOTLB_FLUSH request is available. The number is ours until the
    /// specification assigns one: device-specific range 50-63, clear of the
    /// transport bits 24-49.
    pub const VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH: u32 = 60;
    /// Ours (docs/lazy-unmap-contract.md): PROBE reports the
    /// `VIRTIO_IOMMU_PROBE_T_POOL_HINT` property.
    pub const VIRTIO_IOMMU_F_POOL_HINT: u32 = 61;
}

/// Request types (`ReqHead::type_`).
pub mod req_type {
    /// Attach an endpoint to a domain.
    pub const VIRTIO_IOMMU_T_ATTACH: u8 = 1;
    /// Detach an endpoint from a domain.
    pub const VIRTIO_IOMMU_T_DETACH: u8 = 2;
    /// Map an IOVA range.
    pub const VIRTIO_IOMMU_T_MAP: u8 = 3;
    /// Unmap an IOVA range.
    pub const VIRTIO_IOMMU_T_UNMAP: u8 = 4;
    /// Probe the properties of an endpoint.
    pub const VIRTIO_IOMMU_T_PROBE: u8 = 5;
    /// With `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` (#204's shape, our number):
    /// invalidate the whole domain, i.e. remove from the host every range
    /// the domain's UNMAPs left reachable (docs/lazy-unmap-contract.md).
    pub const VIRTIO_IOMMU_T_IOTLB_FLUSH: u8 = 0x80;
}

/// Status codes (`ReqTail::status`).
pub mod status {
    /// All good.
    pub const VIRTIO_IOMMU_S_OK: u8 = 0;
    /// Virtio communication error.
    pub const VIRTIO_IOMMU_S_IOERR: u8 = 1;
    /// Unsupported request.
    pub const VIRTIO_IOMMU_S_UNSUPP: u8 = 2;
    /// Internal device error.
    pub const VIRTIO_IOMMU_S_DEVERR: u8 = 3;
    /// Invalid parameters.
    pub const VIRTIO_IOMMU_S_INVAL: u8 = 4;
    /// Out-of-range parameters.
    pub const VIRTIO_IOMMU_S_RANGE: u8 = 5;
    /// Entry not found.
    pub const VIRTIO_IOMMU_S_NOENT: u8 = 6;
    /// Bad address.
    pub const VIRTIO_IOMMU_S_FAULT: u8 = 7;
    /// Insufficient resources.
    pub const VIRTIO_IOMMU_S_NOMEM: u8 = 8;
}

/// `AttachReq::flags`: the domain is a bypass (identity) domain.
pub const VIRTIO_IOMMU_ATTACH_F_BYPASS: u32 = 1 << 0;
/// `AttachReq::flags` (with `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH`): the domain
/// is lazy: its UNMAPs may stay reachable until its next IOTLB_FLUSH.
pub const VIRTIO_IOMMU_ATTACH_F_LAZY: u32 = 1 << 1;

/// `MapReq::flags`: read access allowed.
pub const VIRTIO_IOMMU_MAP_F_READ: u32 = 1 << 0;
/// `MapReq::flags`: write access allowed.
pub const VIRTIO_IOMMU_MAP_F_WRITE: u32 = 1 << 1;
/// `MapReq::flags`: the physical range is device MMIO.
pub const VIRTIO_IOMMU_MAP_F_MMIO: u32 = 1 << 2;

/// Probe property type: end of list.
pub const VIRTIO_IOMMU_PROBE_T_NONE: u16 = 0;
/// Probe property type: reserved memory region.
pub const VIRTIO_IOMMU_PROBE_T_RESV_MEM: u16 = 1;
/// Probe property type (ours, with `VIRTIO_IOMMU_F_POOL_HINT`): bounce-pool hints.
pub const VIRTIO_IOMMU_PROBE_T_POOL_HINT: u16 = 0x800;
/// Bits of `ProbeProperty::type_` that hold the type (bits 12-15 are reserved).
pub const VIRTIO_IOMMU_PROBE_T_MASK: u16 = 0x0fff;

/// RESV_MEM subtype: addresses that cannot be mapped.
pub const VIRTIO_IOMMU_RESV_MEM_T_RESERVED: u8 = 0;
/// RESV_MEM subtype: an MSI doorbell window.
pub const VIRTIO_IOMMU_RESV_MEM_T_MSI: u8 = 1;

/// Fault reason: unknown or internal.
pub const VIRTIO_IOMMU_FAULT_R_UNKNOWN: u8 = 0;
/// Fault reason: the endpoint is not attached to a domain.
pub const VIRTIO_IOMMU_FAULT_R_DOMAIN: u8 = 1;
/// Fault reason: no mapping (or insufficient rights) for the address.
pub const VIRTIO_IOMMU_FAULT_R_MAPPING: u8 = 2;

/// Fault flag: the faulting access was a read.
pub const VIRTIO_IOMMU_FAULT_F_READ: u32 = 1 << 0;
/// Fault flag: the faulting access was a write.
pub const VIRTIO_IOMMU_FAULT_F_WRITE: u32 = 1 << 1;
/// Fault flag: the faulting access was an instruction fetch.
pub const VIRTIO_IOMMU_FAULT_F_EXEC: u32 = 1 << 2;
/// Fault flag: `address` is valid.
pub const VIRTIO_IOMMU_FAULT_F_ADDRESS: u32 = 1 << 8;

/// A 64-bit inclusive range (`struct virtio_iommu_range_64`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range64 {
    /// First address.
    pub start: Le64,
    /// Last address (inclusive).
    pub end: Le64,
}

/// A 32-bit inclusive range (`struct virtio_iommu_range_32`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range32 {
    /// First value.
    pub start: Le32,
    /// Last value (inclusive).
    pub end: Le32,
}

/// Device configuration space (`struct virtio_iommu_config`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Supported page sizes; the lowest set bit is the mapping granularity.
    pub page_size_mask: Le64,
    /// IOVA range the device can translate (with F_INPUT_RANGE).
    pub input_range: Range64,
    /// Valid domain ids (with F_DOMAIN_RANGE).
    pub domain_range: Range32,
    /// Size of the properties area of a PROBE request (with F_PROBE).
    pub probe_size: Le32,
    /// 1 if unattached endpoints bypass translation (with F_BYPASS_CONFIG).
    pub bypass: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
}

/// Offset of `Config::bypass`, the only field a driver may write.
pub const CONFIG_BYPASS_OFFSET: u64 = 36;

/// Head of every request (`struct virtio_iommu_req_head`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqHead {
    /// One of [`req_type`].
    pub type_: u8,
    /// Reserved; the device ignores it.
    pub reserved: [u8; 3],
}

/// Tail of every request, written by the device (`struct virtio_iommu_req_tail`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqTail {
    /// One of [`status`].
    pub status: u8,
    /// Reserved, written as zero.
    pub reserved: [u8; 3],
}

/// Device-readable part of an ATTACH request.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttachReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_ATTACH`).
    pub head: ReqHead,
    /// Domain id; created if it does not exist.
    pub domain: Le32,
    /// Endpoint id.
    pub endpoint: Le32,
    /// `VIRTIO_IOMMU_ATTACH_F_*`.
    pub flags: Le32,
    /// Reserved; must be zero.
    pub reserved: [u8; 4],
}

/// Device-readable part of a DETACH request.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetachReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_DETACH`).
    pub head: ReqHead,
    /// Domain id.
    pub domain: Le32,
    /// Endpoint id.
    pub endpoint: Le32,
    /// Reserved; ignored.
    pub reserved: [u8; 8],
}

/// Device-readable part of a MAP request.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_MAP`).
    pub head: ReqHead,
    /// Domain id.
    pub domain: Le32,
    /// First IOVA of the mapping.
    pub virt_start: Le64,
    /// Last IOVA of the mapping (inclusive).
    pub virt_end: Le64,
    /// Guest-physical address `virt_start` maps to.
    pub phys_start: Le64,
    /// `VIRTIO_IOMMU_MAP_F_*`.
    pub flags: Le32,
}

/// Device-readable part of an UNMAP request.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnmapReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_UNMAP`).
    pub head: ReqHead,
    /// Domain id.
    pub domain: Le32,
    /// First IOVA of the range.
    pub virt_start: Le64,
    /// Last IOVA of the range (inclusive).
    pub virt_end: Le64,
    /// Reserved; ignored by the device (the specification lets it reject
    /// a non-zero value but does not require it).
    pub reserved: [u8; 4],
}

/// Device-readable part of an IOTLB_FLUSH request
/// (`VIRTIO_IOMMU_T_IOTLB_FLUSH`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IotlbFlushReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_IOTLB_FLUSH`).
    pub head: ReqHead,
    /// Domain to invalidate: every range its UNMAPs left on the host goes.
    pub domain: Le32,
    /// Reserved; must be zero.
    pub reserved: [u8; 4],
}

/// Device-readable part of a PROBE request.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReq {
    /// Request head (`type_ == VIRTIO_IOMMU_T_PROBE`).
    pub head: ReqHead,
    /// Endpoint id.
    pub endpoint: Le32,
    /// Reserved; ignored.
    pub reserved: [u8; 64],
}

impl Default for ProbeReq {
    fn default() -> Self {
        ProbeReq {
            head: ReqHead::default(),
            endpoint: Le32::default(),
            reserved: [0; 64],
        }
    }
}

/// Header of a probe property (`struct virtio_iommu_probe_property`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeProperty {
    /// Bits 0-11: property type; bits 12-15 reserved (zero).
    pub type_: Le16,
    /// Size of the value following this header, in bytes.
    pub length: Le16,
}

/// RESV_MEM probe property (`struct virtio_iommu_probe_resv_mem`), header included.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeResvMem {
    /// Property header (`type_ == VIRTIO_IOMMU_PROBE_T_RESV_MEM`, `length == 20`).
    pub head: ProbeProperty,
    /// `VIRTIO_IOMMU_RESV_MEM_T_*`.
    pub subtype: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
    /// First reserved IOVA.
    pub start: Le64,
    /// Last reserved IOVA (inclusive).
    pub end: Le64,
}

impl ProbeResvMem {
    /// Value of `head.length` for this property (its size without the header).
    pub const LENGTH: u16 =
        (core::mem::size_of::<ProbeResvMem>() - core::mem::size_of::<ProbeProperty>()) as u16;

    /// A RESV_MEM property for the inclusive IOVA range `[start, end]`.
    pub fn new(subtype: u8, start: u64, end: u64) -> Self {
        ProbeResvMem {
            head: ProbeProperty {
                type_: VIRTIO_IOMMU_PROBE_T_RESV_MEM.into(),
                length: Self::LENGTH.into(),
            },
            subtype,
            reserved: [0; 3],
            start: start.into(),
            end: end.into(),
        }
    }
}

/// POOL_HINT probe property (ours), header included.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbePoolHint {
    /// Property header (`type_ == VIRTIO_IOMMU_PROBE_T_POOL_HINT`, `length == 28`).
    pub head: ProbeProperty,
    /// DMA of up to this many bytes is best bounced through a pool buffer.
    pub threshold: Le32,
    /// First IOVA of the window the device suggests for pool buffers.
    pub window_start: Le64,
    /// Size of that window in bytes.
    pub window_size: Le64,
    /// Most bytes of pool buffers per domain the device suggests.
    pub pool_max: Le64,
}

impl ProbePoolHint {
    /// Value of `head.length` for this property (its size without the header).
    pub const LENGTH: u16 =
        (core::mem::size_of::<ProbePoolHint>() - core::mem::size_of::<ProbeProperty>()) as u16;

    /// A POOL_HINT property.
    pub fn new(threshold: u32, window_start: u64, window_size: u64, pool_max: u64) -> Self {
        ProbePoolHint {
            head: ProbeProperty {
                type_: VIRTIO_IOMMU_PROBE_T_POOL_HINT.into(),
                length: Self::LENGTH.into(),
            },
            threshold: threshold.into(),
            window_start: window_start.into(),
            window_size: window_size.into(),
            pool_max: pool_max.into(),
        }
    }
}

/// A fault report on the event queue (`struct virtio_iommu_fault`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// `VIRTIO_IOMMU_FAULT_R_*`.
    pub reason: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
    /// `VIRTIO_IOMMU_FAULT_F_*`.
    pub flags: Le32,
    /// Endpoint that faulted.
    pub endpoint: Le32,
    /// Reserved, zero.
    pub reserved1: Le32,
    /// Faulting address (valid with `VIRTIO_IOMMU_FAULT_F_ADDRESS`).
    pub address: Le64,
}

// SAFETY (for every impl below): each type is `repr(C, packed)`, made only of
// integers, little-endian wrappers and byte arrays, so it has no padding and
// every bit pattern is a valid value.
macro_rules! byte_valued {
    ($($t:ty),*) => {$(
        // SAFETY: see the comment above the macro: packed POD, no padding, any bit pattern valid.
        unsafe impl ByteValued for $t {}
    )*};
}
byte_valued!(
    Range64,
    Range32,
    Config,
    ReqHead,
    ReqTail,
    AttachReq,
    DetachReq,
    MapReq,
    UnmapReq,
    ProbeReq,
    IotlbFlushReq,
    ProbeProperty,
    ProbeResvMem,
    ProbePoolHint,
    Fault
);

const _: () = {
    use core::mem::size_of;
    assert!(size_of::<Range64>() == 16);
    assert!(size_of::<Range32>() == 8);
    assert!(size_of::<Config>() == 40);
    assert!(size_of::<ReqHead>() == 4);
    assert!(size_of::<ReqTail>() == 4);
    assert!(size_of::<AttachReq>() == 20);
    assert!(size_of::<DetachReq>() == 20);
    assert!(size_of::<MapReq>() == 36);
    assert!(size_of::<UnmapReq>() == 28);
    assert!(size_of::<ProbeReq>() == 72);
    assert!(size_of::<ProbeProperty>() == 4);
    assert!(size_of::<ProbeResvMem>() == 24);
    assert!(ProbeResvMem::LENGTH == 20);
    assert!(size_of::<Fault>() == 24);
    assert!(size_of::<IotlbFlushReq>() == 12);
    assert!(size_of::<ProbePoolHint>() == 32);
    assert!(ProbePoolHint::LENGTH == 28);
    assert!(core::mem::offset_of!(UnmapReq, reserved) == 24);
    assert!(core::mem::offset_of!(ProbePoolHint, window_start) == 8);
    // Our feature bits are device-specific (50-63), not transport (24-49).
    assert!(
        features::VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH >= 50
            && features::VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH < 64
    );
    assert!(features::VIRTIO_IOMMU_F_POOL_HINT >= 50 && features::VIRTIO_IOMMU_F_POOL_HINT < 64);
    assert!(VIRTIO_IOMMU_PROBE_T_POOL_HINT & !VIRTIO_IOMMU_PROBE_T_MASK == 0);
    assert!(core::mem::offset_of!(Config, bypass) == CONFIG_BYPASS_OFFSET as usize);
    assert!(core::mem::offset_of!(Config, probe_size) == 32);
    assert!(core::mem::offset_of!(MapReq, flags) == 32);
    assert!(core::mem::offset_of!(ProbeResvMem, start) == 8);
    assert!(core::mem::offset_of!(Fault, address) == 16);
};

#[cfg(test)]
mod tests;
