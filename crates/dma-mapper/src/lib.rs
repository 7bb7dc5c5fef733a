//! How a virtual IOMMU programs the host side of DMA translation.
//!
//! The virtio-iommu device model never touches VFIO or any other host
//! interface directly: it calls a [`DmaMapper`]. Backends implement it for a
//! VFIO container (passthrough devices), for a software address space
//! (emulated devices translate through it) and as a recording wrapper that
//! counts calls for metrics and benchmarks.
//!
//! Ranges are `(iova, size)` with `size > 0`; the end `iova + size` is
//! exclusive and never overflows `u64` (callers validate guest input first).

#![deny(missing_docs)]

/// Access rights of a mapping, as the guest asked for them.
///
/// A backend must not grant more than asked: a read-only guest mapping stays
/// read-only on the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DmaPerm {
    /// The device may read memory through the mapping.
    pub read: bool,
    /// The device may write memory through the mapping.
    pub write: bool,
}

impl DmaPerm {
    /// Read and write.
    pub const RW: DmaPerm = DmaPerm {
        read: true,
        write: true,
    };
    /// Read only (device reads guest memory: DMA_TO_DEVICE).
    pub const RO: DmaPerm = DmaPerm {
        read: true,
        write: false,
    };
    /// Write only (device writes guest memory: DMA_FROM_DEVICE).
    pub const WO: DmaPerm = DmaPerm {
        read: false,
        write: true,
    };
}

/// Why a backend refused or failed a map or unmap.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// The range, or part of it, is already mapped.
    #[error("iova range {iova:#x}+{size:#x} overlaps an existing mapping")]
    Overlap {
        /// Start of the refused range.
        iova: u64,
        /// Length of the refused range.
        size: u64,
    },
    /// The guest-physical range is not backed by guest memory.
    #[error("guest-physical range {gpa:#x}+{size:#x} is not guest memory")]
    InvalidGpa {
        /// Start of the refused guest-physical range.
        gpa: u64,
        /// Length of the refused range.
        size: u64,
    },
    /// An unmap would split a mapping made by one earlier `map` call.
    #[error("unmap of {iova:#x}+{size:#x} would split a host mapping")]
    SplitMapping {
        /// Start of the refused range.
        iova: u64,
        /// Length of the refused range.
        size: u64,
    },
    /// The range is not a multiple of, or not aligned to, the backend's page size.
    #[error("range {iova:#x}+{size:#x} is not aligned to the page size mask {mask:#x}")]
    Unaligned {
        /// Start of the refused range.
        iova: u64,
        /// Length of the refused range.
        size: u64,
        /// The backend's supported page sizes.
        mask: u64,
    },
    /// The host interface failed (an ioctl error, out of memory, ...).
    #[error("host DMA backend failed on {op} {iova:#x}+{size:#x}")]
    Host {
        /// "map" or "unmap".
        op: &'static str,
        /// Start of the range.
        iova: u64,
        /// Length of the range.
        size: u64,
        /// What the host said.
        #[source]
        source: std::io::Error,
    },
}

/// Programs host DMA translations for one address space (one virtio-iommu
/// domain, or one VFIO container shared by the endpoints of a domain).
///
/// Methods take `&self`: backends that keep state use interior mutability,
/// so a mapper can be shared between the device and the metrics endpoint.
pub trait DmaMapper: Send + Sync {
    /// Map `size` bytes of IOVA space at `iova` to guest-physical `gpa`.
    ///
    /// On error nothing of the range stays mapped.
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError>;

    /// Unmap `size` bytes at `iova`.
    ///
    /// The range must consist of whole ranges of earlier `map` calls (one or
    /// several adjacent ones); a range that would split one fails with
    /// [`DmaError::SplitMapping`] and changes nothing. Unmapping a range that
    /// holds no mapping at all succeeds (as VFIO type1 does).
    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError>;

    /// Page sizes the backend can map, as a bitmask (bit n set = 2^n bytes),
    /// the same encoding as virtio-iommu's `page_size_mask`.
    fn page_size_mask(&self) -> u64;
}
