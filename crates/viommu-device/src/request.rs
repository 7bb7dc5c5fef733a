//! Parsing a request's bytes into a typed request, and building PROBE
//! properties.

use std::mem::size_of;

use viommu_wire as wire;
use viommu_wire::req_type::*;
use viommu_wire::status::*;
use vm_memory::ByteValued;

use crate::chain::RawRequest;
use crate::DeviceConfig;

/// A request whose buffers have the right shape.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Req {
    Attach(wire::AttachReq),
    Detach(wire::DetachReq),
    Map(wire::MapReq),
    Unmap(wire::UnmapReq),
    Probe { endpoint: u32 },
    IotlbFlush(wire::IotlbFlushReq),
}

/// What to do with a raw request.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Execute it.
    Req(Req),
    /// Answer with this status without executing anything.
    Status(u8),
    /// Return the buffers unwritten (used length 0).
    Unanswerable,
}

fn read<T: ByteValued>(bytes: &[u8]) -> Option<T> {
    T::from_slice(bytes.get(..size_of::<T>())?).copied()
}

/// Checks the sizes of both parts of the request against its type.
///
/// - No room for a tail: unanswerable (`Unanswerable`), as the spec says for a
///   request whose tail the device cannot find.
/// - Unknown type: `Unanswerable` (spec: "If a request type is not recognized, the
///   device SHOULD NOT write the buffer and SHOULD set the used length to zero.").
/// - Readable part shorter or longer than the type's, or a writable part
///   that is not exactly a tail (PROBE: properties + tail): `S_IOERR`.
/// - PROBE properties area larger than `probe_size`: `S_IOERR`; smaller:
///   `S_INVAL` (spec:
///   "If the properties list is smaller than probe_size, the device SHOULD
///   NOT write any property. It SHOULD reject the request and set status to
///   VIRTIO_IOMMU_S_INVAL.").
/// - IOTLB_FLUSH without `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` (`lazy` false):
///   `S_UNSUPP`, whatever its sizes (contract: "like any unsupported type").
pub(crate) fn parse(raw: &RawRequest, probe_size: u32, lazy: bool) -> Parsed {
    let tail = size_of::<wire::ReqTail>() as u64;
    if raw.writable_len < tail {
        return Parsed::Unanswerable;
    }
    let bytes = raw.bytes();
    let Some(head) = read::<wire::ReqHead>(bytes) else {
        return Parsed::Status(VIRTIO_IOMMU_S_IOERR);
    };
    let want = match head.type_ {
        VIRTIO_IOMMU_T_ATTACH => size_of::<wire::AttachReq>(),
        VIRTIO_IOMMU_T_DETACH => size_of::<wire::DetachReq>(),
        VIRTIO_IOMMU_T_MAP => size_of::<wire::MapReq>(),
        VIRTIO_IOMMU_T_UNMAP => size_of::<wire::UnmapReq>(),
        VIRTIO_IOMMU_T_PROBE => size_of::<wire::ProbeReq>(),
        VIRTIO_IOMMU_T_IOTLB_FLUSH if lazy => size_of::<wire::IotlbFlushReq>(),
        VIRTIO_IOMMU_T_IOTLB_FLUSH => return Parsed::Status(VIRTIO_IOMMU_S_UNSUPP),
        _ => return Parsed::Unanswerable,
    } as u64;
    if raw.readable_len != want {
        return Parsed::Status(VIRTIO_IOMMU_S_IOERR);
    }
    if head.type_ == VIRTIO_IOMMU_T_PROBE {
        let area = raw.writable_len - tail;
        if area < u64::from(probe_size) {
            return Parsed::Status(VIRTIO_IOMMU_S_INVAL);
        }
        // Driver: "The size of properties MUST be probe_size bytes." A larger
        // area is refused rather than zero-filled (it could be gigabytes).
        if area > u64::from(probe_size) {
            return Parsed::Status(VIRTIO_IOMMU_S_IOERR);
        }
    } else if raw.writable_len != tail {
        return Parsed::Status(VIRTIO_IOMMU_S_IOERR);
    }
    let req = match head.type_ {
        VIRTIO_IOMMU_T_ATTACH => read(bytes).map(Req::Attach),
        VIRTIO_IOMMU_T_DETACH => read(bytes).map(Req::Detach),
        VIRTIO_IOMMU_T_MAP => read(bytes).map(Req::Map),
        VIRTIO_IOMMU_T_UNMAP => read(bytes).map(Req::Unmap),
        VIRTIO_IOMMU_T_IOTLB_FLUSH => read(bytes).map(Req::IotlbFlush),
        _ => read::<wire::ProbeReq>(bytes).map(|p| Req::Probe {
            endpoint: p.endpoint.to_native(),
        }),
    };
    match req {
        Some(r) => Parsed::Req(r),
        None => Parsed::Status(VIRTIO_IOMMU_S_IOERR),
    }
}

/// The PROBE properties every endpoint gets: RESV_MEM MSI for the MSI
/// window, RESV_MEM RESERVED for each reserved range, and POOL_HINT when
/// configured and `pool_hint` (negotiated) is true.
pub(crate) fn properties(cfg: &DeviceConfig, pool_hint: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some((s, e)) = cfg.msi_window {
        let p = wire::ProbeResvMem::new(wire::VIRTIO_IOMMU_RESV_MEM_T_MSI, s, e);
        out.extend_from_slice(p.as_slice());
    }
    for &(s, e) in &cfg.reserved {
        let p = wire::ProbeResvMem::new(wire::VIRTIO_IOMMU_RESV_MEM_T_RESERVED, s, e);
        out.extend_from_slice(p.as_slice());
    }
    if let Some(h) = cfg.pool_hint.filter(|_| pool_hint) {
        let p = wire::ProbePoolHint::new(h.threshold, h.window_start, h.window_size, h.pool_max);
        out.extend_from_slice(p.as_slice());
    }
    out
}
