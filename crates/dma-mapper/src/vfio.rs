//! VFIO container backend (type1 v2).
//!
//! [`VfioMapper`] turns `map(iova, gpa, size, perm)` into
//! `VFIO_IOMMU_MAP_DMA` calls on a container: it translates the
//! guest-physical range to host virtual addresses through the VM's guest
//! memory (one host call per host-contiguous run; a range spanning two
//! memory regions becomes two) and keeps a table of the live mappings.
//!
//! The host side is the thin trait [`ContainerOps`], implemented for
//! `vfio_ioctls::VfioContainer`. Everything above it (translation,
//! splitting, rollback, the whole-mapping unmap rule) is tested with a fake.
//!
//! # Permissions
//! `vfio-ioctls` 0.10 always maps READ|WRITE. A read-only or write-only
//! guest mapping must not grow on the host, so for those the container
//! issues `VFIO_IOMMU_MAP_DMA` itself with the right flags (the
//! `vfio-bindings` structs on the container fd). A mapping with no access
//! at all is kept in the table (it must still be unmapped whole) but makes
//! no host call: DMA to it faults, as it should.
//!
//! # Unmap and `InvalidDmaUnmapSize`
//! Type1 v2 refuses (`EINVAL`, nothing changed) an unmap that would bisect a
//! mapping, and otherwise removes every mapping inside the range, reporting
//! the byte count it removed: smaller than asked when the range had holes.
//! `vfio-ioctls` reports any difference as `InvalidDmaUnmapSize` and drops
//! the count, which would make a legitimate unmap across holes look like a
//! failure and hide a real mismatch. So the container issues
//! `VFIO_IOMMU_UNMAP_DMA` itself and returns the count, and the mapper
//! compares it with what its table says is mapped there:
//! - A range that splits a mapping is refused from the table, before any
//!   host call, with [`DmaError::SplitMapping`] (a guest error; nothing
//!   changed).
//! - A kernel `EINVAL`, or a count different from the table's, means the
//!   host and the table disagree: that is a VMM/host fault, reported as
//!   [`DmaError::Host`] (the device answers DEVERR, not a guest error).
//!   On a count mismatch the kernel has already removed every mapping in the
//!   range, so the table drops them too and stays equal to the host.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use vfio_ioctls::VfioContainer;
use vm_memory::{
    GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
};

use crate::interval::{push_merged, Extent, IntervalMap, Merge, Span};
use crate::mapping::check_unmap;
use crate::{
    check_aligned, checked_last, DmaError, DmaMapper, DmaPerm, Mapping, PAGE_SIZE_4K_MASK,
};

/// The host calls [`VfioMapper`] needs from a VFIO type1 container, or
/// from an iommufd IO address space.
///
/// Implemented for `vfio_ioctls::VfioContainer` and (in
/// [`crate::iommufd`]) `vfio_ioctls::VfioIommufd`; tests use a fake.
pub trait ContainerOps: Send + Sync {
    /// `VFIO_IOMMU_MAP_DMA`: map `size` bytes of this process's memory at
    /// `vaddr` to `iova`, granting exactly `perm` (which grants something).
    ///
    /// # Safety
    /// The contract of `vfio_ioctls::VfioContainer::vfio_dma_map`: until the
    /// range is unmapped, `[vaddr, vaddr + size)` is memory the device may
    /// access at any time, so no Rust reference to it may exist; it is only
    /// accessed through raw pointers, volatile accesses or system calls
    /// (guest memory accessed through `vm-memory`'s volatile accessors).
    unsafe fn map_dma(&self, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> io::Result<()>;

    /// `VFIO_IOMMU_UNMAP_DMA` with no flags: unmap every mapping inside
    /// `[iova, iova + size)`; returns the number of bytes the kernel unmapped.
    fn unmap_dma(&self, iova: u64, size: u64) -> io::Result<u64>;

    /// `VFIO_IOMMU_UNMAP_DMA` with `VFIO_DMA_UNMAP_FLAG_ALL`: unmap
    /// everything; returns the number of bytes unmapped. Kernels before 5.12
    /// fail with `EINVAL`.
    fn unmap_all_dma(&self) -> io::Result<u64>;

    /// `VFIO_IOMMU_GET_INFO`: the page sizes the IOMMU supports (bit n set =
    /// 2^n bytes). Valid once a group is attached and the IOMMU type set.
    fn iova_pgsizes(&self) -> io::Result<u64>;

    /// `VFIO_IOMMU_GET_INFO`'s IOVA-range capability: the IOVA ranges the
    /// IOMMU can map, inclusive, in order (holes are reserved regions such
    /// as the MSI window, or beyond the IOMMU's address width).
    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "IOVA ranges not available",
        ))
    }

    /// `VFIO_IOMMU_GET_INFO`'s DMA-available capability: how many more
    /// mappings the container accepts (the kernel's `dma_entry_limit`,
    /// 65535 by default, minus those in use). Kernels before 5.10 lack it.
    fn dma_avail(&self) -> io::Result<u32> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "DMA-available count not reported",
        ))
    }

    /// The descriptor the map and unmap ioctls go to (the container, or
    /// the iommufd), if there is one: the VMM's seccomp filters allow
    /// those ioctls on it alone. Fakes have none.
    fn host_fd(&self) -> Option<RawFd> {
        None
    }
}

/// A piece of a guest-physical range that is contiguous in host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRun {
    /// Offset of the piece from the start of the range.
    pub offset: u64,
    /// Host virtual address of its first byte.
    pub vaddr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Host-contiguous: a run's extent is in host virtual addresses.
impl Span for HostRun {
    fn start(&self) -> u64 {
        self.vaddr
    }
    fn size(&self) -> u64 {
        self.len
    }
}

impl Merge for HostRun {
    fn absorb(&mut self, next: Self) {
        self.len += next.len;
    }
}

/// Split the guest-physical range `[gpa, gpa + size)` into host-contiguous
/// runs, in order. Fails with [`DmaError::InvalidGpa`] if any byte of it is
/// not guest memory.
pub fn host_runs<M: GuestMemoryBackend>(
    mem: &M,
    gpa: u64,
    size: u64,
) -> Result<Vec<HostRun>, DmaError> {
    let invalid = || DmaError::InvalidGpa { gpa, size };
    let end = gpa.checked_add(size).ok_or_else(invalid)?;
    let mut runs: Vec<HostRun> = Vec::new();
    let mut cursor = gpa;
    while cursor < end {
        let region = mem.find_region(GuestAddress(cursor)).ok_or_else(invalid)?;
        let in_region = cursor - region.start_addr().0;
        let len = (region.len() - in_region).min(end - cursor);
        let vaddr = region
            .get_host_address(MemoryRegionAddress(in_region))
            .map_err(|_| invalid())? as u64;
        let offset = cursor - gpa;
        push_merged(&mut runs, HostRun { offset, vaddr, len });
        cursor += len;
    }
    Ok(runs)
}

/// A [`DmaMapper`] on a VFIO type1 v2 container. See the [module docs](self).
pub struct VfioMapper<C: ContainerOps = VfioContainer, M: GuestMemoryBackend = GuestMemoryMmap> {
    container: Arc<C>,
    mem: M,
    table: Mutex<IntervalMap<Mapping>>,
    /// Host mappings no guest mapping owns: the pieces of a failed
    /// multi-run map whose rollback failed too, and the mappings a caller
    /// [disowned](DmaMapper::disown) (its own rollback failed), as
    /// `(iova, size)`. They are
    /// retried before every later call, counted by `unmap` and `unmap_all`
    /// when inside their range, and make [`DmaMapper::has_leftovers`] true
    /// until removed. Lock order: `table`, then `strays`.
    strays: Mutex<Vec<(u64, u64)>>,
    page_size_mask: u64,
}

impl<C: ContainerOps, M: GuestMemoryBackend> std::fmt::Debug for VfioMapper<C, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioMapper")
            .field(
                "page_size_mask",
                &format_args!("{:#x}", self.page_size_mask),
            )
            .field("mappings", &self.lock().len())
            .finish()
    }
}

impl<C: ContainerOps, M: GuestMemoryBackend> VfioMapper<C, M> {
    /// A mapper programming `container` with translations into `mem`.
    ///
    /// The page size mask is queried from the container
    /// (`VFIO_IOMMU_GET_INFO`); if that fails (no group attached yet), 4 KiB.
    ///
    /// # Safety
    /// The regions of `mem` are handed to the device for DMA: for as long as
    /// any mapping made through this mapper exists, no Rust reference to
    /// that memory may exist (access guest memory only through `vm-memory`'s
    /// volatile accessors), as [`ContainerOps::map_dma`] requires. The
    /// mapper keeps `mem` (and so its mmaps) alive; dropping it unmaps all.
    pub unsafe fn new(container: Arc<C>, mem: M) -> Self {
        let page_size_mask = match container.iova_pgsizes() {
            Ok(mask) => mask,
            Err(e) => {
                tracing::warn!("host IOMMU page sizes unknown ({e}); assuming 4 KiB IOMMU pages");
                PAGE_SIZE_4K_MASK
            }
        };
        VfioMapper {
            container,
            mem,
            table: Mutex::new(IntervalMap::new()),
            strays: Mutex::new(Vec::new()),
            page_size_mask,
        }
    }

    fn lock(&self) -> MutexGuard<'_, IntervalMap<Mapping>> {
        // Every table update is one insert or one removal pass after the host
        // call returned, so a poisoned lock still holds a consistent table.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn strays(&self) -> MutexGuard<'_, Vec<(u64, u64)>> {
        self.strays.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Try again to remove the leftovers of failed rollbacks; keeps those
    /// the host still refuses. Call with the table locked.
    fn retry_strays(&self) {
        self.strays()
            .retain(|&(iova, size)| match self.container.unmap_dma(iova, size) {
                Ok(_) => {
                    tracing::warn!(iova, size, "leftover host mapping of a failed map removed");
                    false
                }
                Err(e) => {
                    tracing::debug!(
                        iova,
                        size,
                        "leftover host mapping still cannot be removed: {e}"
                    );
                    true
                }
            });
    }

    /// The leftovers of failed rollbacks still on the host, `(iova, size)`.
    pub fn leftovers(&self) -> Vec<(u64, u64)> {
        self.strays().clone()
    }

    /// The container this mapper programs.
    pub fn container(&self) -> &Arc<C> {
        &self.container
    }

    /// The IOVA ranges the container's IOMMU can map, inclusive.
    pub fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        self.container.iova_ranges()
    }

    /// How many more mappings the container accepts (VFIO's DMA-available
    /// count), where the kernel reports it.
    pub fn dma_avail(&self) -> io::Result<u32> {
        self.container.dma_avail()
    }

    /// Number of live mappings (including no-access ones).
    pub fn mapping_count(&self) -> usize {
        self.lock().len()
    }

    /// The live mappings as `(iova, size, gpa, perm)`, in IOVA order.
    pub fn mappings(&self) -> Vec<(u64, u64, u64, DmaPerm)> {
        self.lock()
            .iter()
            .map(|e| (e.iova, e.size, e.gpa, e.perm))
            .collect()
    }

    /// Unmap everything this mapper mapped, in one `VFIO_DMA_UNMAP_FLAG_ALL`
    /// call where the kernel has it (5.12+), else one call per run of
    /// adjacent mappings. Assumes the container's address space is this
    /// mapper's alone (one container per domain).
    ///
    /// Returns the number of bytes unmapped on the host.
    pub fn unmap_all(&self) -> Result<u64, DmaError> {
        let mut table = self.lock();
        let mut strays = self.strays();
        let expected: u64 = table
            .iter()
            .filter(|e| e.perm.any())
            .map(|e| e.size)
            .sum::<u64>()
            + strays.iter().map(|s| s.1).sum::<u64>();
        if expected == 0 {
            table.take_all();
            return Ok(0);
        }
        let host_err = |iova, size, source| DmaError::Host {
            op: "unmap",
            iova,
            size,
            source,
        };
        let unmapped = match self.container.unmap_all_dma() {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("VFIO_DMA_UNMAP_FLAG_ALL unsupported; unmapping run by run");
                let mut extents: Vec<Extent> = table
                    .iter()
                    .filter(|e| e.perm.any())
                    .map(|e| Extent {
                        start: e.iova,
                        size: e.size,
                    })
                    .chain(strays.iter().map(|&(start, size)| Extent { start, size }))
                    .collect();
                extents.sort_by_key(|e| e.start);
                let mut runs: Vec<Extent> = Vec::new();
                for e in extents {
                    push_merged(&mut runs, e);
                }
                let mut total = 0;
                for run in runs {
                    let (iova, size) = (run.start, run.size);
                    match self.container.unmap_dma(iova, size) {
                        Ok(n) => {
                            total += n;
                            table.remove_within(iova, run.last());
                            strays.retain(|&(i, _)| i < iova || i > run.last());
                        }
                        Err(e) => return Err(host_err(iova, size, e)),
                    }
                }
                total
            }
            Err(e) => return Err(host_err(0, u64::MAX, e)),
        };
        table.take_all();
        strays.clear();
        if unmapped != expected {
            return Err(host_err(
                0,
                u64::MAX,
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("kernel unmapped {unmapped:#x} bytes, mapping table had {expected:#x}"),
                ),
            ));
        }
        Ok(unmapped)
    }
}

impl<C: ContainerOps, M: GuestMemoryBackend + Send + Sync> DmaMapper for VfioMapper<C, M> {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let last = checked_last(iova, size)?;
        check_aligned(iova, gpa, size, self.page_size_mask)?;
        let runs = host_runs(&self.mem, gpa, size)?;
        let mut table = self.lock();
        self.retry_strays();
        if table.overlaps(iova, last)
            || self
                .strays()
                .iter()
                .any(|&(i, s)| i <= last && iova <= i + (s - 1))
        {
            return Err(DmaError::Overlap { iova, size });
        }
        if perm.any() {
            for (i, run) in runs.iter().enumerate() {
                let run_iova = iova + run.offset;
                // SAFETY: `run` lies in a region of `self.mem`, which this
                // mapper keeps mapped; `new`'s contract makes the caller
                // access that memory only in ways map_dma allows.
                let res = unsafe { self.container.map_dma(run_iova, run.len, run.vaddr, perm) };
                if let Err(source) = res {
                    // Roll back the runs already mapped: on error nothing of
                    // the range stays mapped. A run the host refuses to
                    // unmap stays a stray: recorded, retried before every
                    // later call, and reported to the caller.
                    let mut left = 0;
                    for done in &runs[..i] {
                        let done_iova = iova + done.offset;
                        if let Err(e) = self.container.unmap_dma(done_iova, done.len) {
                            tracing::error!(
                                "rollback unmap of {done_iova:#x}+{:#x} failed: {e}",
                                done.len
                            );
                            self.strays().push((done_iova, done.len));
                            left += done.len;
                        }
                    }
                    if left > 0 {
                        return Err(DmaError::Leftover {
                            iova,
                            size,
                            left,
                            source,
                        });
                    }
                    if source.raw_os_error() == Some(libc::EEXIST) {
                        return Err(DmaError::Overlap { iova, size });
                    }
                    return Err(DmaError::Host {
                        op: "map",
                        iova,
                        size,
                        source,
                    });
                }
            }
        }
        tracing::trace!(iova, gpa, size, ?perm, runs = runs.len(), "vfio map");
        table.insert(Mapping {
            iova,
            size,
            gpa,
            perm,
        });
        Ok(())
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let mut table = self.lock();
        let last = check_unmap(&table, iova, size)?;
        self.retry_strays();
        // The kernel removes strays inside the range along with the rest.
        let strays_inside: u64 = self
            .strays()
            .iter()
            .filter(|&&(i, s)| iova <= i && i + (s - 1) <= last)
            .map(|s| s.1)
            .sum();
        let expected: u64 = table
            .within(iova, last)
            .filter(|e| e.perm.any())
            .map(|e| e.size)
            .sum::<u64>()
            + strays_inside;
        if expected == 0 {
            // Nothing on the host: holes or no-access mappings only.
            table.remove_within(iova, last);
            return Ok(());
        }
        let host_err = |source| DmaError::Host {
            op: "unmap",
            iova,
            size,
            source,
        };
        let unmapped = self.container.unmap_dma(iova, size).map_err(host_err)?;
        // The kernel removed every mapping inside the range (it refuses a
        // bisecting unmap as a whole), so the table follows whatever it said.
        let gone = table.remove_within(iova, last);
        self.strays()
            .retain(|&(i, s)| !(iova <= i && i + (s - 1) <= last));
        tracing::trace!(iova, size, mappings = gone.len(), unmapped, "vfio unmap");
        if unmapped != expected {
            return Err(host_err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kernel unmapped {unmapped:#x} bytes, mapping table had {expected:#x}"),
            )));
        }
        Ok(())
    }

    fn page_size_mask(&self) -> u64 {
        self.page_size_mask
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        VfioMapper::unmap_all(self).map(|_| ())
    }

    fn has_leftovers(&self) -> bool {
        let _table = self.lock();
        self.retry_strays();
        !self.strays().is_empty()
    }

    /// The disowned mappings leave the table and become strays: retried
    /// before every later call, removed by `unmap_all`, reported by
    /// `has_leftovers` (no-access ones were never on the host).
    fn disown(&self, iova: u64, size: u64) {
        let Ok(last) = checked_last(iova, size) else {
            return;
        };
        let mut table = self.lock();
        let gone = table.remove_within(iova, last);
        let mut strays = self.strays();
        for m in gone.into_iter().filter(|m| m.perm.any()) {
            tracing::warn!(
                iova = m.iova,
                size = m.size,
                "host mapping disowned after a failed rollback; kept as a leftover"
            );
            strays.push((m.iova, m.size));
        }
    }
}

/// What the VMM asks of a passed-through device's mapper, whichever host
/// interface (VFIO container or iommufd IOAS) programs it.
pub trait HostIommuMapper: DmaMapper {
    /// The IOVA ranges the host IOMMU can map, inclusive.
    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>>;
    /// How many more mappings the host accepts, where it has a limit.
    fn dma_avail(&self) -> io::Result<u32>;
    /// The descriptor its DMA ioctls go to ([`ContainerOps::host_fd`]);
    /// none for fakes.
    fn host_fd(&self) -> Option<RawFd> {
        None
    }
}

impl<C: ContainerOps, M: GuestMemoryBackend + Send + Sync> HostIommuMapper for VfioMapper<C, M> {
    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        VfioMapper::iova_ranges(self)
    }

    fn dma_avail(&self) -> io::Result<u32> {
        VfioMapper::dma_avail(self)
    }

    fn host_fd(&self) -> Option<RawFd> {
        self.container.host_fd()
    }
}

impl<C: ContainerOps, M: GuestMemoryBackend> Drop for VfioMapper<C, M> {
    fn drop(&mut self) {
        if let Err(e) = self.unmap_all() {
            tracing::error!("unmapping all on drop failed: {e}");
        }
    }
}

mod type1_container;

pub use type1_container::{parse_dma_avail, parse_iova_ranges};

#[cfg(test)]
mod tests;
