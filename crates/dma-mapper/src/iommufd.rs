//! iommufd backend: the [`VfioMapper`] on an iommufd IO address space.
//!
//! With iommufd (`/dev/iommu`, Linux 6.2+ with `CONFIG_IOMMUFD`) a VFIO
//! device is opened through its cdev (`/dev/vfio/devices/vfioN`, needs
//! `CONFIG_VFIO_DEVICE_CDEV`), bound to an iommufd and attached to an IO
//! address space (IOAS); guest DMA is then mapped with `IOMMU_IOAS_MAP`
//! and `IOMMU_IOAS_UNMAP` at fixed IOVAs. `vfio-ioctls`' `vfio_cdev`
//! feature opens, binds and attaches the device ([`VfioIommufd`] holds the
//! iommufd and the IOAS); this module makes that IOAS a [`ContainerOps`],
//! so the translation, splitting, rollback, whole-mapping unmap rule and
//! leftover tracking of [`VfioMapper`] are the same code for both
//! backends: a guest sees the same answers from either.
//!
//! # Where iommufd differs from type1, and how that is hidden
//! - Permissions: `IOMMU_IOAS_MAP` takes READABLE and WRITEABLE flags
//!   itself; `vfio-ioctls` always asks for both, so the map is issued here
//!   through `iommufd-ioctls` with the guest's own flags.
//! - Unmap: like type1 v2, `IOMMU_IOAS_UNMAP` removes every mapping inside
//!   the range and reports the bytes it removed; unlike type1 it answers
//!   `ENOENT` (not `EINVAL`) to a range that bisects a mapping, and
//!   `ENOENT` (not success with 0 bytes) to a range with nothing mapped.
//!   The mapper never sends either: it refuses a split from its table
//!   ([`DmaError::SplitMapping`](crate::DmaError::SplitMapping)) and makes
//!   no host call for a range that holds nothing on the host. So `ENOENT`
//!   reaching it means the host and the table disagree, which it reports
//!   as a host error with the table unchanged, as it does type1's `EINVAL`.
//! - Unmap all: `iova = 0, length = u64::MAX` is iommufd's unmap-all, and
//!   succeeds on an empty IOAS (type1's `VFIO_DMA_UNMAP_FLAG_ALL`).
//! - Page sizes: an IOAS reports a minimum IOVA alignment
//!   (`IOMMU_IOAS_IOVA_RANGES`), not a page-size bitmap: any multiple of
//!   it maps, and the kernel picks the IOMMU page sizes itself. The mask
//!   is every power of two from that alignment up, at least 4 KiB.
//! - DMA-available count: iommufd has no per-container mapping limit
//!   (type1's `dma_entry_limit`), so none is reported.
//!
//! # Pinned guest RAM (`PinnedRamIoas`)
//! Every `IOMMU_IOAS_MAP` pins the pages it maps, and its unmap unpins
//! them: per guest MAP that is a page walk and an accounting update on top
//! of the IOMMU programming. [`PinnedRamIoas`] maps all guest RAM once
//! into a second IOAS, no device attached, at IOVA = host virtual address,
//! and serves each map with `IOMMU_IOAS_COPY` from it: the kernel takes
//! references to pages that are already pinned, and the guest's MAP only
//! programs the IOMMU. The price: all guest RAM stays pinned (and counted
//! against `RLIMIT_MEMLOCK`) for the VM's life, whether the guest maps it
//! or not. Unmaps are the device IOAS's, unchanged.
//!
//! `iommufd-ioctls` 0.4 has no call for `IOMMU_IOAS_IOVA_RANGES` or
//! `IOMMU_IOAS_COPY`; they are issued here with the `iommufd-bindings`
//! structs.

use std::io;
use std::os::unix::io::AsRawFd;

use std::sync::Arc;

use iommufd_bindings::{
    iommu_ioas_copy, iommu_ioas_iova_ranges, iommu_ioas_map, iommu_ioas_unmap, iommu_iova_range,
    iommufd_ioas_map_flags_IOMMU_IOAS_MAP_FIXED_IOVA,
    iommufd_ioas_map_flags_IOMMU_IOAS_MAP_READABLE,
    iommufd_ioas_map_flags_IOMMU_IOAS_MAP_WRITEABLE,
};
use iommufd_ioctls::{IommufdError, IommufdIoas};
use vfio_ioctls::VfioIommufd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

use crate::vfio::{ContainerOps, VfioMapper};
use crate::{DmaPerm, PAGE_SIZE_4K_MASK};

/// A [`VfioMapper`] on an iommufd IOAS (see the [module docs](self)).
pub type IommufdMapper<M = GuestMemoryMmap> = VfioMapper<VfioIommufd, M>;

/// A [`VfioMapper`] whose maps are copies from pinned guest RAM (see
/// [`PinnedRamIoas`]).
pub type PinnedRamMapper<M = GuestMemoryMmap> = VfioMapper<PinnedRamIoas, M>;

/// The `IOMMU_IOAS_MAP` flags of a fixed-IOVA map granting exactly `perm`.
pub fn map_flags(perm: DmaPerm) -> u32 {
    let mut flags = iommufd_ioas_map_flags_IOMMU_IOAS_MAP_FIXED_IOVA;
    if perm.read {
        flags |= iommufd_ioas_map_flags_IOMMU_IOAS_MAP_READABLE;
    }
    if perm.write {
        flags |= iommufd_ioas_map_flags_IOMMU_IOAS_MAP_WRITEABLE;
    }
    flags
}

/// The `IOMMU_IOAS_MAP` argument: `size` bytes of this process's memory at
/// `vaddr` mapped at `iova` in IOAS `ioas_id`, granting `perm`.
pub fn map_args(ioas_id: u32, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> iommu_ioas_map {
    iommu_ioas_map {
        size: std::mem::size_of::<iommu_ioas_map>() as u32,
        flags: map_flags(perm),
        ioas_id,
        __reserved: 0,
        user_va: vaddr,
        length: size,
        iova,
    }
}

/// The `IOMMU_IOAS_UNMAP` argument for `[iova, iova + size)` of IOAS
/// `ioas_id`; `(0, u64::MAX)` unmaps everything.
pub fn unmap_args(ioas_id: u32, iova: u64, size: u64) -> iommu_ioas_unmap {
    iommu_ioas_unmap {
        size: std::mem::size_of::<iommu_ioas_unmap>() as u32,
        ioas_id,
        iova,
        length: size,
    }
}

/// The `IOMMU_IOAS_COPY` argument: the `size` bytes at `src_iova` of IOAS
/// `src` mapped at `iova` of IOAS `dst`, granting `perm`.
pub fn copy_args(
    dst: u32,
    src: u32,
    iova: u64,
    size: u64,
    src_iova: u64,
    perm: DmaPerm,
) -> iommu_ioas_copy {
    iommu_ioas_copy {
        size: std::mem::size_of::<iommu_ioas_copy>() as u32,
        flags: map_flags(perm),
        dst_ioas_id: dst,
        src_ioas_id: src,
        length: size,
        dst_iova: iova,
        src_iova,
    }
}

/// The page size mask of an IOAS whose minimum IOVA alignment is `align`
/// (`out_iova_alignment`; 1 means any): every power of two from the
/// alignment up, and never below 4 KiB. `None` for an alignment that is
/// not a power of two (a kernel we do not understand).
pub fn page_size_mask(align: u64) -> Option<u64> {
    if !align.is_power_of_two() {
        return None;
    }
    Some(!(align - 1) & PAGE_SIZE_4K_MASK)
}

/// The errno of a failed `iommufd-ioctls` call as an `io::Error` (so the
/// mapper sees `EEXIST`, `ENOENT`, ... as it does from type1).
pub fn iommufd_to_io(e: IommufdError) -> io::Error {
    match e {
        IommufdError::IommuIoasMap(errno)
        | IommufdError::IommuIoasUnmap(errno)
        | IommufdError::IommuIoasAlloc(errno)
        | IommufdError::IommuDestroy(errno) => io::Error::from_raw_os_error(errno.errno()),
        IommufdError::OpenIommufd(e) => e,
        other => io::Error::other(other),
    }
}

mod ioctls {
    use iommufd_bindings::{IOMMUFD_CMD_IOAS_COPY, IOMMUFD_CMD_IOAS_IOVA_RANGES, IOMMUFD_TYPE};
    vmm_sys_util::ioctl_io_nr!(
        IOMMU_IOAS_IOVA_RANGES,
        IOMMUFD_TYPE as u32,
        IOMMUFD_CMD_IOAS_IOVA_RANGES
    );
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_COPY, IOMMUFD_TYPE as u32, IOMMUFD_CMD_IOAS_COPY);
}

/// Most ranges we read back; a real IOAS has a handful (reserved regions
/// such as the MSI window cut the space).
const MAX_RANGES: u32 = 4096;

/// `IOMMU_IOAS_IOVA_RANGES` on IOAS `ioas_id` of the iommufd `fd`: the
/// allowed IOVA ranges (inclusive, in order) and the minimum IOVA
/// alignment. Not in `iommufd-ioctls` 0.4, hence the raw ioctl.
pub fn ioas_iova_ranges<F: AsRawFd>(fd: &F, ioas_id: u32) -> io::Result<(Vec<(u64, u64)>, u64)> {
    let mut want: u32 = 0;
    // The ranges can change between the two calls (a device attached or
    // detached): ask again while the kernel says the buffer is too small.
    for _ in 0..4 {
        let mut buf = vec![iommu_iova_range::default(); want as usize];
        let mut arg = iommu_ioas_iova_ranges {
            size: std::mem::size_of::<iommu_ioas_iova_ranges>() as u32,
            ioas_id,
            num_iovas: want,
            __reserved: 0,
            allowed_iovas: if want == 0 {
                0
            } else {
                buf.as_mut_ptr() as u64
            },
            out_iova_alignment: 0,
        };
        // SAFETY: `fd` is an iommufd (the caller's), the request number
        // matches the argument type, `arg` is live and correctly sized, and
        // `allowed_iovas` points to `num_iovas` writable ranges in `buf`
        // (or is null with a count of 0); the kernel writes no more.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_mut_ref(fd, ioctls::IOMMU_IOAS_IOVA_RANGES(), &mut arg)
        };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EMSGSIZE)
                && arg.num_iovas > want
                && arg.num_iovas <= MAX_RANGES
            {
                want = arg.num_iovas;
                continue;
            }
            return Err(e);
        }
        let n = (arg.num_iovas as usize).min(buf.len());
        let ranges = buf[..n].iter().map(|r| (r.start, r.last)).collect();
        return Ok((ranges, arg.out_iova_alignment));
    }
    Err(io::Error::other(
        "IOMMU_IOAS_IOVA_RANGES kept changing its range count",
    ))
}

impl ContainerOps for VfioIommufd {
    unsafe fn map_dma(&self, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> io::Result<()> {
        let map = map_args(self.ioas().id(), iova, size, vaddr, perm);
        // `iommufd-ioctls` issues the ioctl; the memory at `vaddr` is the
        // caller's to hand to the device (this fn's contract).
        self.iommufd().map_iommu_ioas(&map).map_err(iommufd_to_io)
    }

    fn unmap_dma(&self, iova: u64, size: u64) -> io::Result<u64> {
        let mut unmap = unmap_args(self.ioas().id(), iova, size);
        self.iommufd()
            .unmap_iommu_ioas(&mut unmap)
            .map_err(iommufd_to_io)?;
        Ok(unmap.length)
    }

    fn unmap_all_dma(&self) -> io::Result<u64> {
        self.unmap_dma(0, u64::MAX)
    }

    fn iova_pgsizes(&self) -> io::Result<u64> {
        let (_, align) = ioas_iova_ranges(self.iommufd().as_ref(), self.ioas().id())?;
        page_size_mask(align).ok_or_else(|| {
            io::Error::other(format!(
                "IOMMU_IOAS_IOVA_RANGES reported an IOVA alignment of {align:#x}"
            ))
        })
    }

    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        ioas_iova_ranges(self.iommufd().as_ref(), self.ioas().id()).map(|(r, _)| r)
    }

    fn dma_avail(&self) -> io::Result<u32> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "iommufd has no limit on the number of mappings",
        ))
    }

    fn host_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.iommufd().as_raw_fd())
    }
}

/// A device's IOAS ([`VfioIommufd`]) served from a second IOAS of the
/// same iommufd that holds all guest RAM, mapped once at IOVA = host
/// virtual address: maps are `IOMMU_IOAS_COPY`s from it, so no guest MAP
/// pins a page (see the [module docs](self)).
pub struct PinnedRamIoas {
    device: Arc<VfioIommufd>,
    ram: IommufdIoas,
    /// Guest RAM bytes pinned in `ram`.
    pinned: u64,
}

impl PinnedRamIoas {
    /// Map every region of `mem` into a new IOAS of `device`'s iommufd
    /// (pinning all of it) and serve `device`'s IOAS from there.
    ///
    /// # Safety
    /// The contract of [`ContainerOps::map_dma`] for all of `mem`, for the
    /// life of the returned value: its regions stay mapped in this process
    /// and no Rust reference to their memory exists.
    pub unsafe fn new<M: GuestMemoryBackend>(
        device: Arc<VfioIommufd>,
        mem: &M,
    ) -> io::Result<Self> {
        let ram = IommufdIoas::new(device.iommufd().clone()).map_err(iommufd_to_io)?;
        let mut pinned = 0;
        for region in mem.iter() {
            let vaddr = region
                .get_host_address(MemoryRegionAddress(0))
                .map_err(io::Error::other)? as u64;
            let len = region.len();
            let map = map_args(ram.id(), vaddr, len, vaddr, DmaPerm::RW);
            // Dropping `ram` on an error destroys the IOAS and with it
            // whatever was mapped so far.
            device
                .iommufd()
                .map_iommu_ioas(&map)
                .map_err(iommufd_to_io)?;
            pinned += len;
        }
        Ok(PinnedRamIoas {
            device,
            ram,
            pinned,
        })
    }

    /// The device's IOAS (and its iommufd).
    pub fn device(&self) -> &Arc<VfioIommufd> {
        &self.device
    }

    /// Guest RAM bytes held pinned.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned
    }
}

impl ContainerOps for PinnedRamIoas {
    unsafe fn map_dma(&self, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> io::Result<()> {
        let copy = copy_args(
            self.device.ioas().id(),
            self.ram.id(),
            iova,
            size,
            vaddr,
            perm,
        );
        // SAFETY: the fd is an iommufd, the request number matches the
        // argument type and the kernel only reads `copy`. The source
        // pages are guest RAM this value keeps pinned (`new`'s contract);
        // handing them to the device is the caller's (this fn's contract).
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_ref(
                self.device.iommufd().as_ref(),
                ioctls::IOMMU_IOAS_COPY(),
                &copy,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn unmap_dma(&self, iova: u64, size: u64) -> io::Result<u64> {
        self.device.unmap_dma(iova, size)
    }

    fn unmap_all_dma(&self) -> io::Result<u64> {
        self.device.unmap_all_dma()
    }

    fn iova_pgsizes(&self) -> io::Result<u64> {
        self.device.iova_pgsizes()
    }

    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        ContainerOps::iova_ranges(self.device.as_ref())
    }

    fn dma_avail(&self) -> io::Result<u32> {
        ContainerOps::dma_avail(self.device.as_ref())
    }

    fn host_fd(&self) -> Option<std::os::fd::RawFd> {
        self.device.host_fd()
    }
}

#[cfg(test)]
mod tests;
