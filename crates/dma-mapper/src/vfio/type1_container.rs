//! The VFIO type1 v2 container as [`ContainerOps`]: map and unmap with
//! the guest's permissions and the kernel's byte count (see the parent
//! module), and `VFIO_IOMMU_GET_INFO`'s page sizes, IOVA ranges and
//! DMA-available count, parsed from its capability chain.

use std::io;
use std::os::unix::io::AsRawFd;

use vfio_bindings::bindings::vfio::{
    vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_iommu_type1_info,
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_DMA_UNMAP_FLAG_ALL, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL,
};
use vfio_ioctls::{VfioContainer, VfioError};

use super::ContainerOps;
use crate::DmaPerm;

/// Offset of the capability `id` in a `VFIO_IOMMU_GET_INFO` answer `buf`
/// whose first capability is at `first_cap`.
fn find_cap(buf: &[u8], first_cap: u32, id: u32) -> Option<usize> {
    let mut off = first_cap as usize;
    // Capability chains are short; a loop in a corrupt chain must end.
    for _ in 0..16 {
        if off == 0 {
            return None;
        }
        let hdr = buf.get(off..off + 8)?;
        if u32::from(u16::from_le_bytes([hdr[0], hdr[1]])) == id {
            return Some(off);
        }
        off = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    }
    None
}

/// The DMA-available count of a `VFIO_IOMMU_GET_INFO` answer, if reported.
pub fn parse_dma_avail(buf: &[u8], first_cap: u32) -> Option<u32> {
    let off = find_cap(buf, first_cap, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL)?;
    let b = buf.get(off + 8..off + 12)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The IOVA ranges of a `VFIO_IOMMU_GET_INFO` answer `buf` whose first
/// capability is at `first_cap`; `None` without a well-formed
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`.
pub fn parse_iova_ranges(buf: &[u8], first_cap: u32) -> Option<Vec<(u64, u64)>> {
    let u32_at = |o: usize| {
        buf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        buf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let off = find_cap(buf, first_cap, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE)?;
    let n = u32_at(off + 8)? as usize;
    let mut ranges = Vec::with_capacity(n.min(64));
    for i in 0..n {
        let r = off.checked_add(16)?.checked_add(i.checked_mul(16)?)?;
        let (start, end) = (u64_at(r)?, u64_at(r + 8)?);
        if start > end {
            return None;
        }
        ranges.push((start, end));
    }
    Some(ranges)
}

mod ioctls {
    use vfio_bindings::bindings::vfio::{VFIO_BASE, VFIO_TYPE};
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 12);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_MAP_DMA, VFIO_TYPE as u32, VFIO_BASE + 13);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_UNMAP_DMA, VFIO_TYPE as u32, VFIO_BASE + 14);
}

fn vfio_to_io(e: VfioError) -> io::Error {
    match e {
        VfioError::IommuDmaMap(errno) | VfioError::IommuDmaUnmap(errno) => errno.into(),
        other => io::Error::other(other),
    }
}

fn unmap_ioctl<F: AsRawFd>(fd: &F, flags: u32, iova: u64, size: u64) -> io::Result<u64> {
    let mut unmap = vfio_iommu_type1_dma_unmap {
        argsz: std::mem::size_of::<vfio_iommu_type1_dma_unmap>() as u32,
        flags,
        iova,
        size,
        ..Default::default()
    };
    // SAFETY: `fd` is a VFIO container, the request number matches the
    // argument type, `unmap` is a live, correctly sized struct whose argsz
    // excludes the trailing flexible array (no bitmap flag is set), and the
    // kernel only writes back `size` inside it.
    let ret = unsafe {
        vmm_sys_util::ioctl::ioctl_with_mut_ref(fd, ioctls::VFIO_IOMMU_UNMAP_DMA(), &mut unmap)
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unmap.size)
}

impl ContainerOps for VfioContainer {
    unsafe fn map_dma(&self, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> io::Result<()> {
        if perm == DmaPerm::RW {
            let size = usize::try_from(size).map_err(io::Error::other)?;
            // SAFETY: the caller upholds vfio_dma_map's contract (it is ours).
            return unsafe { self.vfio_dma_map(iova, size, vaddr as *mut u8) }.map_err(vfio_to_io);
        }
        let mut flags = 0;
        if perm.read {
            flags |= VFIO_DMA_MAP_FLAG_READ;
        }
        if perm.write {
            flags |= VFIO_DMA_MAP_FLAG_WRITE;
        }
        let map = vfio_iommu_type1_dma_map {
            argsz: std::mem::size_of::<vfio_iommu_type1_dma_map>() as u32,
            flags,
            vaddr,
            iova,
            size,
        };
        // SAFETY: `self` is a VFIO container, the request number matches the
        // argument type and the kernel only reads `map`. The memory at
        // `vaddr` is the caller's to hand to the device (this fn's contract).
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_ref(self, ioctls::VFIO_IOMMU_MAP_DMA(), &map)
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn unmap_dma(&self, iova: u64, size: u64) -> io::Result<u64> {
        unmap_ioctl(self, 0, iova, size)
    }

    fn unmap_all_dma(&self) -> io::Result<u64> {
        unmap_ioctl(self, VFIO_DMA_UNMAP_FLAG_ALL, 0, 0)
    }

    fn iova_pgsizes(&self) -> io::Result<u64> {
        let mut info = vfio_iommu_type1_info {
            argsz: std::mem::size_of::<vfio_iommu_type1_info>() as u32,
            ..Default::default()
        };
        // SAFETY: `self` is a VFIO container, the request number matches the
        // argument type, and the kernel writes at most `argsz` bytes into
        // `info`, which is that large.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_mut_ref(self, ioctls::VFIO_IOMMU_GET_INFO(), &mut info)
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        if info.flags & VFIO_IOMMU_INFO_PGSIZES == 0 || info.iova_pgsizes == 0 {
            return Err(io::Error::other(
                "VFIO_IOMMU_GET_INFO reported no page sizes",
            ));
        }
        Ok(info.iova_pgsizes)
    }

    fn iova_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        let (bytes, first_cap) = info_with_caps(self)?;
        parse_iova_ranges(&bytes, first_cap)
            .ok_or_else(|| io::Error::other("no IOVA-range capability"))
    }

    fn dma_avail(&self) -> io::Result<u32> {
        let (bytes, first_cap) = info_with_caps(self)?;
        parse_dma_avail(&bytes, first_cap)
            .ok_or_else(|| io::Error::other("no DMA-available capability"))
    }

    fn host_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.as_raw_fd())
    }
}

/// `VFIO_IOMMU_GET_INFO` with its capability chain: the answer's bytes and
/// the offset of its first capability.
fn info_with_caps(container: &VfioContainer) -> io::Result<(Vec<u8>, u32)> {
    {
        let base = std::mem::size_of::<vfio_iommu_type1_info>();
        let mut info = vfio_iommu_type1_info {
            argsz: base as u32,
            ..Default::default()
        };
        // SAFETY: as in iova_pgsizes: the kernel writes at most `argsz`
        // bytes and reports the size it needs for the capabilities there.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_mut_ref(
                container,
                ioctls::VFIO_IOMMU_GET_INFO(),
                &mut info,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let need = info.argsz as usize;
        if info.flags & VFIO_IOMMU_INFO_CAPS == 0 || need <= base || need > 1 << 20 {
            return Err(io::Error::other("VFIO_IOMMU_GET_INFO has no capabilities"));
        }
        // u64 elements keep the buffer aligned for the struct.
        let mut buf = vec![0u64; need.div_ceil(8)];
        buf[0] = u64::from(need as u32);
        // SAFETY: `buf` is at least `need` bytes, 8-byte aligned, starts
        // with a vfio_iommu_type1_info whose argsz is `need`; the kernel
        // writes at most that many bytes into it.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_mut_ptr(
                container,
                ioctls::VFIO_IOMMU_GET_INFO(),
                buf.as_mut_ptr().cast::<vfio_iommu_type1_info>(),
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
        let cap_offset = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        bytes.truncate(need);
        Ok((bytes, cap_offset))
    }
}
