//! Direct boot of a bzImage: kernel, initramfs, command line and zero page
//! (`boot_params` with the e820 map), through `linux-loader`.

use std::path::Path;

use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, E820_MAX_ENTRIES_ZEROPAGE};
use linux_loader::loader::{load_cmdline, BzImage, KernelLoader};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::layout::{
    ACPI_END, ACPI_START, CMDLINE_MAX_SIZE, CMDLINE_START, EBDA_START, HIGH_RAM_START,
    MMIO32_HOLE_START, PCI_ECAM_SIZE, PCI_ECAM_START, RAM_64BIT_START, ZERO_PAGE_START,
};

/// e820 type: usable RAM.
pub const E820_RAM: u32 = 1;
/// e820 type: reserved.
pub const E820_RESERVED: u32 = 2;

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448; // "HdrS"
const KERNEL_LOADER_OTHER: u8 = 0xff;
/// Boot protocol 2.12 introduced `xloadflags` (and with it the 64-bit entry flag).
const MIN_BOOT_PROTOCOL: u16 = 0x020c;
const XLF_KERNEL_64: u16 = 1;
/// The 64-bit entry point is 0x200 bytes into the protected-mode kernel.
const ENTRY_64_OFFSET: u64 = 0x200;
const PAGE: u64 = 0x1000;

/// Why the guest could not be set up to boot.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// A file flag's file could not be read.
    #[error("--{flag} {}: cannot read ({source})", path.display())]
    Read {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// linux-loader refused the kernel.
    #[error("--kernel {}: not a loadable bzImage ({source}); pass arch/x86/boot/bzImage", path.display())]
    Kernel {
        /// The path.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The kernel cannot be entered in 64-bit mode.
    #[error("--kernel {}: boot protocol {version:#x} without a 64-bit entry point; need a 64-bit kernel with protocol >= 2.12", path.display())]
    Not64Bit {
        /// The path.
        path: std::path::PathBuf,
        /// Its boot protocol version.
        version: u16,
    },
    /// The command line is unusable.
    #[error("--cmdline: {0}")]
    Cmdline(String),
    /// The initramfs does not fit.
    #[error("--initrd {}: {size} bytes do not fit in guest RAM below {limit:#x} above the kernel; give more --memory", path.display())]
    InitrdTooBig {
        /// The path.
        path: std::path::PathBuf,
        /// Its size.
        size: u64,
        /// Highest usable address.
        limit: u64,
    },
    /// Writing to guest memory failed.
    #[error("cannot write {what} to guest memory: {reason}")]
    Memory {
        /// What.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// The e820 map for `mem_size` bytes of RAM laid out by
/// [`crate::layout::ram_regions`]: RAM, the BIOS/ACPI area and the ECAM
/// window reserved (Linux only uses MMCONFIG that is reserved here).
pub fn e820_map(mem_size: u64) -> Vec<boot_e820_entry> {
    let e = |addr, size, r#type| boot_e820_entry { addr, size, r#type };
    let low_end = mem_size.min(MMIO32_HOLE_START);
    let mut map = vec![
        e(0, EBDA_START, E820_RAM),
        e(ACPI_START, ACPI_END - ACPI_START, E820_RESERVED),
        e(HIGH_RAM_START, low_end - HIGH_RAM_START, E820_RAM),
        e(PCI_ECAM_START, PCI_ECAM_SIZE, E820_RESERVED),
    ];
    if mem_size > low_end {
        map.push(e(RAM_64BIT_START, mem_size - low_end, E820_RAM));
    }
    map
}

/// Where to put an initramfs of `size` bytes: the highest page-aligned
/// address whose end stays below `limit` (exclusive) and above `floor`.
pub fn initrd_address(size: u64, floor: u64, limit: u64) -> Option<u64> {
    let start = limit.checked_sub(size)? & !(PAGE - 1);
    (start >= floor).then_some(start)
}

/// What [`load`] put where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootInfo {
    /// The 64-bit entry point.
    pub entry: GuestAddress,
    /// End of the loaded kernel.
    pub kernel_end: u64,
    /// Initramfs address and size, if any.
    pub initrd: Option<(u64, u64)>,
}

/// The kernel and initramfs bytes, read once at start: a reboot loads
/// them again from here (the main thread's seccomp filter allows no
/// `open`, and a file replaced on disk meanwhile is not what the VM was
/// started with).
#[derive(Debug, Clone)]
pub struct GuestImage {
    kernel_path: std::path::PathBuf,
    kernel: Vec<u8>,
    initrd: Option<(std::path::PathBuf, Vec<u8>)>,
}

impl GuestImage {
    /// Read `kernel` and `initrd` whole.
    pub fn read(kernel: &Path, initrd: Option<&Path>) -> Result<Self, BootError> {
        let read = |flag, path: &Path| {
            std::fs::read(path).map_err(|source| BootError::Read {
                flag,
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(GuestImage {
            kernel_path: kernel.to_path_buf(),
            kernel: read("kernel", kernel)?,
            initrd: match initrd {
                Some(p) => Some((p.to_path_buf(), read("initrd", p)?)),
                None => None,
            },
        })
    }
}

/// Load the kernel, initramfs and command line, and write the zero page
/// (pointing at the ACPI RSDP at `rsdp`).
pub fn load(
    mem: &GuestMemoryMmap,
    mem_size: u64,
    kernel: &Path,
    initrd: Option<&Path>,
    cmdline: &str,
    rsdp: GuestAddress,
) -> Result<BootInfo, BootError> {
    load_image(
        mem,
        mem_size,
        &GuestImage::read(kernel, initrd)?,
        cmdline,
        rsdp,
    )
}

/// [`load`] from bytes read before.
pub fn load_image(
    mem: &GuestMemoryMmap,
    mem_size: u64,
    image: &GuestImage,
    cmdline: &str,
    rsdp: GuestAddress,
) -> Result<BootInfo, BootError> {
    let kernel = image.kernel_path.as_path();
    let mut kfile = std::io::Cursor::new(image.kernel.as_slice());
    let loaded = BzImage::load(mem, None, &mut kfile, Some(GuestAddress(HIGH_RAM_START))).map_err(
        |source| BootError::Kernel {
            path: kernel.to_path_buf(),
            source,
        },
    )?;
    let mut hdr = loaded.setup_header.ok_or_else(|| BootError::Not64Bit {
        path: kernel.to_path_buf(),
        version: 0,
    })?;
    if hdr.version < MIN_BOOT_PROTOCOL || hdr.xloadflags & XLF_KERNEL_64 == 0 {
        return Err(BootError::Not64Bit {
            path: kernel.to_path_buf(),
            version: hdr.version,
        });
    }
    // linux-loader reports the end as an address, not a size.
    let kernel_end = loaded.kernel_end;

    let limit = (hdr.cmdline_size as usize).clamp(1, CMDLINE_MAX_SIZE);
    let mut cl = Cmdline::new(limit).map_err(|e| BootError::Cmdline(e.to_string()))?;
    cl.insert_str(cmdline)
        .map_err(|e| BootError::Cmdline(format!("{e} (the kernel accepts {} bytes)", limit - 1)))?;
    load_cmdline(mem, GuestAddress(CMDLINE_START), &cl).map_err(|e| BootError::Memory {
        what: "the command line",
        reason: e.to_string(),
    })?;
    let cmdline_len = cl.as_cstring().map(|c| c.as_bytes().len()).unwrap_or(0);

    let mut initrd_info = None;
    if let Some((path, bytes)) = &image.initrd {
        let size = bytes.len() as u64;
        let low_end = mem_size.min(MMIO32_HOLE_START);
        let limit = low_end.min(u64::from(hdr.initrd_addr_max).saturating_add(1));
        let addr =
            initrd_address(size, kernel_end.next_multiple_of(PAGE), limit).ok_or_else(|| {
                BootError::InitrdTooBig {
                    path: path.clone(),
                    size,
                    limit,
                }
            })?;
        mem.write_slice(bytes, GuestAddress(addr))
            .map_err(|e| BootError::Memory {
                what: "the initramfs",
                reason: e.to_string(),
            })?;
        hdr.ramdisk_image = addr as u32;
        hdr.ramdisk_size = size as u32;
        initrd_info = Some((addr, size));
    }

    hdr.type_of_loader = KERNEL_LOADER_OTHER;
    hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    hdr.header = KERNEL_HDR_MAGIC;
    hdr.cmd_line_ptr = CMDLINE_START as u32;
    hdr.cmdline_size = cmdline_len as u32;

    let mut params = boot_params {
        hdr,
        acpi_rsdp_addr: rsdp.raw_value(),
        ..Default::default()
    };
    let map = e820_map(mem_size);
    assert!(map.len() <= E820_MAX_ENTRIES_ZEROPAGE);
    params.e820_table[..map.len()].copy_from_slice(&map);
    params.e820_entries = map.len() as u8;
    LinuxBootConfigurator::write_bootparams(
        &BootParams::new(&params, GuestAddress(ZERO_PAGE_START)),
        mem,
    )
    .map_err(|e| BootError::Memory {
        what: "the zero page",
        reason: e.to_string(),
    })?;
    debug_assert!(mem.address_in_range(GuestAddress(kernel_end.saturating_sub(1))));
    Ok(BootInfo {
        entry: GuestAddress(loaded.kernel_load.raw_value() + ENTRY_64_OFFSET),
        kernel_end,
        initrd: initrd_info,
    })
}

#[cfg(test)]
pub(crate) mod tests;
