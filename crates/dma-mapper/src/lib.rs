//! How a virtual IOMMU programs the host side of DMA translation.
//!
//! The virtio-iommu device model never touches VFIO or any other host
//! interface directly: it calls a [`DmaMapper`]. Backends implement it for a
//! VFIO type1 container or an iommufd IO address space (passthrough
//! devices; one [`VfioMapper`] over either, see [`iommufd`]), for a software address space
//! (emulated devices translate through it) and as a recording wrapper that
//! counts calls for metrics and benchmarks.
//!
//! Ranges are `(iova, size)` with `size > 0`; the end `iova + size` is
//! exclusive and never overflows `u64` (callers validate guest input first).

#![deny(missing_docs)]

mod fanout;
pub mod interval;
pub mod iommufd;
mod mapping;
pub mod recording;
pub mod soft;
pub mod vfio;

pub use fanout::{elapsed_ns, HostBackend, MapperSet};
pub use interval::IntervalMap;
pub use iommufd::{IommufdMapper, PinnedRamIoas, PinnedRamMapper};
pub use mapping::{adjacent_runs, Mapping, Run};
pub use recording::{DmaCall, DmaOp, FaultPlan, LoggedCall, RecordingMapper};
pub use soft::{SoftAddressSpace, TranslateError};
pub use vfio::{ContainerOps, HostIommuMapper, VfioMapper};

/// The smallest page size, 4 KiB, as a `page_size_mask`.
pub const PAGE_SIZE_4K_MASK: u64 = !0xfff;

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
    /// No access: the mapping exists (and must be unmapped whole) but grants nothing.
    pub const NONE: DmaPerm = DmaPerm {
        read: false,
        write: false,
    };
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

    /// Whether the mapping grants any access at all.
    pub fn any(self) -> bool {
        self.read || self.write
    }

    /// Whether `self` grants everything `need` asks for.
    pub fn allows(self, need: DmaPerm) -> bool {
        (self.read || !need.read) && (self.write || !need.write)
    }
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
    /// The range is empty or its end overflows `u64`.
    #[error("iova range {iova:#x}+{size:#x} is empty or wraps around")]
    InvalidRange {
        /// Start of the refused range.
        iova: u64,
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
    /// A map made of several host calls failed, and undoing the calls
    /// that had succeeded failed too: `left` bytes of the range stay
    /// mapped on the host. The backend keeps them as leftovers (retried,
    /// and removed by `unmap_all`); [`DmaMapper::has_leftovers`] says so
    /// until they are gone.
    #[error("host map of {iova:#x}+{size:#x} failed and {left:#x} bytes of it could not be unmapped again")]
    Leftover {
        /// Start of the range.
        iova: u64,
        /// Length of the range.
        size: u64,
        /// Bytes still mapped on the host.
        left: u64,
        /// Why the map failed.
        #[source]
        source: std::io::Error,
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

    /// Remove every mapping of this address space, whatever the caller
    /// believes is there: the last resort of a device reset or a detach
    /// when unmapping range by range failed, so that nothing the device
    /// forgets stays reachable. Backends that cannot say "everything" keep
    /// this default, which fails.
    fn unmap_all(&self) -> Result<(), DmaError> {
        Err(DmaError::Host {
            op: "unmap all",
            iova: 0,
            size: u64::MAX,
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "not supported by this backend",
            ),
        })
    }

    /// Whether the host holds mappings that no successful `map` made (the
    /// leftovers of a failed map whose undo failed, see
    /// [`DmaError::Leftover`]), after one more attempt to remove them.
    /// Whoever forgets this address space's mappings (a domain's end) must
    /// then [`unmap_all`](Self::unmap_all).
    fn has_leftovers(&self) -> bool {
        false
    }

    /// The caller made `[iova, iova + size)` with successful `map` calls
    /// (one or several adjacent whole mappings), failed to undo them (its
    /// rollback `unmap` failed) and no longer counts them as its own: the
    /// mapper keeps whatever of the range it still holds on the host as
    /// leftovers, removes them when it can, and reports them through
    /// [`has_leftovers`](Self::has_leftovers) until they are gone, so the
    /// end of the address space's domain removes them with
    /// [`unmap_all`](Self::unmap_all). A backend whose removals cannot fail
    /// may remove them at once.
    ///
    /// Required, with no default: a backend that ignored it would report no
    /// leftovers while the host still held mappings nobody tracks.
    fn disown(&self, iova: u64, size: u64);
}

impl<T: DmaMapper + ?Sized> DmaMapper for std::sync::Arc<T> {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        (**self).map(iova, gpa, size, perm)
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        (**self).unmap(iova, size)
    }

    fn page_size_mask(&self) -> u64 {
        (**self).page_size_mask()
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        (**self).unmap_all()
    }

    fn has_leftovers(&self) -> bool {
        (**self).has_leftovers()
    }

    fn disown(&self, iova: u64, size: u64) {
        (**self).disown(iova, size)
    }
}

viommu_counters::counters! {
    /// Host DMA calls: what a [`MapperSet`] made for a device, or what a
    /// [`RecordingMapper`] saw for one endpoint.
    pub struct DmaStats {
        /// Host map calls, failed ones included.
        pub map_calls: u64,
        /// Host unmap calls, failed ones included.
        pub unmap_calls: u64,
        /// Bytes of successful host map calls.
        pub bytes_mapped: u64,
        /// Bytes of successful host unmap calls (the ranges asked, holes included).
        pub bytes_unmapped: u64,
        /// Failed host map calls.
        pub map_failures: u64,
        /// Failed host unmap calls.
        pub unmap_failures: u64,
        /// Calls failed on purpose by a test's fault plan rather than the backend.
        pub injected_failures: u64,
        /// Nanoseconds spent in host map calls (where the caller times them).
        pub map_ns: u64,
        /// Nanoseconds spent in host unmap calls (where the caller times them).
        pub unmap_ns: u64,
    }
}

impl DmaStats {
    /// All backend calls, maps plus unmaps.
    pub fn calls(&self) -> u64 {
        self.map_calls + self.unmap_calls
    }

    /// All failed backend calls.
    pub fn failures(&self) -> u64 {
        self.map_failures + self.unmap_failures
    }

    /// Counts one map call of `size` bytes.
    pub fn count_map(&mut self, size: u64, ok: bool) {
        self.map_calls += 1;
        if ok {
            self.bytes_mapped += size;
        } else {
            self.map_failures += 1;
        }
    }

    /// Counts one unmap call of `size` bytes.
    pub fn count_unmap(&mut self, size: u64, ok: bool) {
        self.unmap_calls += 1;
        if ok {
            self.bytes_unmapped += size;
        } else {
            self.unmap_failures += 1;
        }
    }
}

/// Last IOVA of `[iova, iova + size)`, or [`DmaError::InvalidRange`].
pub(crate) fn checked_last(iova: u64, size: u64) -> Result<u64, DmaError> {
    interval::range_last(iova, size).ok_or(DmaError::InvalidRange { iova, size })
}

/// Check that `iova`, `gpa` and `size` are multiples of the smallest page
/// size in `mask`.
pub(crate) fn check_aligned(iova: u64, gpa: u64, size: u64, mask: u64) -> Result<(), DmaError> {
    // The smallest page size is the lowest set bit; a zero mask means "any".
    let granule_mask = mask & mask.wrapping_neg();
    let low = granule_mask.wrapping_sub(1);
    if granule_mask != 0 && (iova | gpa | size) & low != 0 {
        return Err(DmaError::Unaligned { iova, size, mask });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
