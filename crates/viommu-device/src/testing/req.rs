//! Request bytes (device-readable part) of each type.

use viommu_wire as wire;
use vm_memory::ByteValued;

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
