//! Guest accesses of a VFIO device's regions (config space, BARs that
//! trap), checked before they reach the kernel: an access the region
//! cannot take (outside it, or one it does not allow) is refused here with
//! a rate-limited warning, instead of going to `vfio-ioctls`, whose
//! `region_read`/`region_write` log every such access unlimited (a guest
//! reading a conventional function's extended config space, or a BAR
//! after clearing Memory Enable, would flood the log).

use std::os::fd::RawFd;

use vfio_bindings::bindings::vfio::{VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE};
use viommu_device::guest_warn;

/// Where a region is in the device file and what it allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Region {
    /// Offset of the region in the device file.
    pub offset: u64,
    /// Bytes of the region.
    pub size: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
}

impl Region {
    /// The region `index` of `dev` (flags 0 for an index it does not
    /// have: every access is then refused).
    pub fn of(dev: &vfio_ioctls::VfioDevice, index: u32) -> Region {
        // get_region_flags is silent about an unknown index (get_region_size
        // is not).
        let flags = dev.get_region_flags(index);
        if flags == 0 {
            return Region {
                offset: 0,
                size: 0,
                flags: 0,
            };
        }
        Region {
            offset: dev.get_region_offset(index),
            size: dev.get_region_size(index),
            flags,
        }
    }

    /// The file offset of an access of `len` bytes at `addr` that needs
    /// `flag`, or `None` if the region cannot take it.
    fn file_offset(&self, addr: u64, len: usize, flag: u32) -> Option<u64> {
        let end = addr.checked_add(u64::try_from(len).ok()?)?;
        if self.flags & flag == 0 || end > self.size {
            return None;
        }
        self.offset.checked_add(addr)
    }
}

/// Reads `buf.len()` bytes at `addr` of region `index` (`region`) of the
/// device file `fd`. On a refused or failed access `buf` is left as it
/// was and a rate-limited warning logged.
pub(super) fn read(fd: RawFd, index: u32, region: Region, buf: &mut [u8], addr: u64) {
    let Some(off) = region.file_offset(addr, buf.len(), VFIO_REGION_INFO_FLAG_READ) else {
        guest_warn!(
            index,
            addr,
            len = buf.len(),
            size = region.size,
            "VFIO region read outside the region; ignored"
        );
        return;
    };
    let len = buf.len();
    let r = each_chunk(len, off, |done, at| {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes for the
        // call; pread64 writes at most that many.
        unsafe { libc::pread64(fd, rest.as_mut_ptr().cast(), rest.len(), at) }
    });
    if let Err(e) = r {
        guest_warn!(index, addr, len, "VFIO region read failed: {e}");
    }
}

/// Writes `buf` at `addr` of region `index` (`region`) of the device file
/// `fd`. A refused or failed access is dropped with a rate-limited
/// warning.
pub(super) fn write(fd: RawFd, index: u32, region: Region, buf: &[u8], addr: u64) {
    let Some(off) = region.file_offset(addr, buf.len(), VFIO_REGION_INFO_FLAG_WRITE) else {
        guest_warn!(
            index,
            addr,
            len = buf.len(),
            size = region.size,
            "VFIO region write outside the region; ignored"
        );
        return;
    };
    let len = buf.len();
    let r = each_chunk(len, off, |done, at| {
        let rest = &buf[done..];
        // SAFETY: `rest` is valid for reads of `rest.len()` bytes for the
        // call.
        unsafe { libc::pwrite64(fd, rest.as_ptr().cast(), rest.len(), at) }
    });
    if let Err(e) = r {
        guest_warn!(index, addr, len, "VFIO region write failed: {e}");
    }
}

/// Moves `len` bytes from file offset `off` in calls of `op(done, at)`
/// (one pread64 or pwrite64 of what is left, `done` bytes in, at file
/// offset `at`), until all moved, the file ends, or a call fails
/// (EINTR is retried).
fn each_chunk(
    len: usize,
    off: u64,
    mut op: impl FnMut(usize, libc::off64_t) -> isize,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let Ok(at) = libc::off64_t::try_from(off + done as u64) else {
            return Ok(());
        };
        match usize::try_from(op(done, at)) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
