//! Direct boot of a bzImage: kernel, initramfs, command line and zero page
//! (`boot_params` with the e820 map), through `linux-loader`.

use std::fs::File;
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
    let read_err = |flag, path: &Path| {
        let path = path.to_path_buf();
        move |source| BootError::Read { flag, path, source }
    };
    let mut kfile = File::open(kernel).map_err(read_err("kernel", kernel))?;
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
    if let Some(path) = initrd {
        let mut f = File::open(path).map_err(read_err("initrd", path))?;
        let size = f.metadata().map_err(read_err("initrd", path))?.len();
        let low_end = mem_size.min(MMIO32_HOLE_START);
        let limit = low_end.min(u64::from(hdr.initrd_addr_max).saturating_add(1));
        let addr =
            initrd_address(size, kernel_end.next_multiple_of(PAGE), limit).ok_or_else(|| {
                BootError::InitrdTooBig {
                    path: path.to_path_buf(),
                    size,
                    limit,
                }
            })?;
        mem.read_exact_volatile_from(GuestAddress(addr), &mut f, size as usize)
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
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn e820_small_and_large() {
        let m = e820_map(512 << 20);
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].addr, m[0].size, m[0].r#type), (0, 0x9_fc00, E820_RAM));
        assert_eq!((m[2].addr, m[2].size), (0x10_0000, (512 << 20) - 0x10_0000));
        assert_eq!((m[3].addr, m[3].r#type), (PCI_ECAM_START, E820_RESERVED));
        let m = e820_map(6 << 30);
        assert_eq!(m.len(), 5);
        assert_eq!(m[2].addr + m[2].size, MMIO32_HOLE_START);
        assert_eq!((m[4].addr, m[4].size), (RAM_64BIT_START, 3 << 30));
        // Sorted and disjoint.
        for w in m.windows(2) {
            assert!(w[0].addr + w[0].size <= w[1].addr);
        }
    }

    #[test]
    fn initrd_goes_high_and_page_aligned() {
        assert_eq!(
            initrd_address(0x1800, 0x20_0000, 0x100_0000),
            Some(0xffe000)
        );
        assert_eq!(
            initrd_address(0x1000, 0x20_0000, 0x100_0000),
            Some(0xfff000)
        );
        assert_eq!(initrd_address(0x100_0000, 0x20_0000, 0x100_0000), None);
        assert_eq!(initrd_address(u64::MAX, 0, 0x100_0000), None);
    }

    /// A minimal file linux-loader accepts as a bzImage: one setup sector
    /// plus the boot sector, and a protected-mode "kernel" payload.
    fn fake_bzimage(version: u16, xloadflags: u16) -> std::path::PathBuf {
        let mut img = vec![0u8; 2 * 512];
        img[0x1f1] = 1; // setup_sects
        img[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
        img[0x202..0x206].copy_from_slice(&KERNEL_HDR_MAGIC.to_le_bytes());
        img[0x206..0x208].copy_from_slice(&version.to_le_bytes());
        img[0x211] = 1; // loadflags: LOADED_HIGH
        img[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes()); // code32_start
        img[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
        img[0x236..0x238].copy_from_slice(&xloadflags.to_le_bytes());
        img[0x238..0x23c].copy_from_slice(&2048u32.to_le_bytes()); // cmdline_size
        img.extend_from_slice(&[0xf4; 0x3000]); // "kernel": hlt
                                                // Tests run as threads of one process: a name per call, or two tests
                                                // with the same header rewrite each other's file while it is read.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!(
            "vmm-boot-{}-{n}-{version:x}-{xloadflags}",
            std::process::id()
        ));
        std::fs::File::create(&p).unwrap().write_all(&img).unwrap();
        p
    }

    #[test]
    fn loads_kernel_initrd_cmdline_and_zero_page() {
        let mem_size = 64 << 20;
        let mem = crate::vm::create_guest_memory(mem_size, false).unwrap();
        let k = fake_bzimage(0x020f, XLF_KERNEL_64);
        let initrd = std::env::temp_dir().join(format!("vmm-initrd-{}", std::process::id()));
        std::fs::write(&initrd, vec![0x5a; 0x2345]).unwrap();
        let info = load(
            &mem,
            mem_size,
            &k,
            Some(&initrd),
            "console=ttyS0 panic=-1",
            GuestAddress(ACPI_START),
        )
        .unwrap();
        assert_eq!(info.entry, GuestAddress(0x10_0200));
        assert_eq!(info.kernel_end, 0x10_3000);
        let (ia, is) = info.initrd.unwrap();
        assert_eq!(is, 0x2345);
        assert_eq!(ia % PAGE, 0);
        assert!(ia + is <= mem_size && ia >= info.kernel_end);
        assert_eq!(mem.read_obj::<u8>(GuestAddress(ia + 0x2344)).unwrap(), 0x5a);
        assert_eq!(mem.read_obj::<u8>(GuestAddress(0x10_0000)).unwrap(), 0xf4);

        let p: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_START)).unwrap();
        let hdr = p.hdr;
        assert_eq!({ hdr.boot_flag }, KERNEL_BOOT_FLAG_MAGIC);
        assert_eq!({ hdr.type_of_loader }, KERNEL_LOADER_OTHER);
        assert_eq!({ hdr.cmd_line_ptr }, CMDLINE_START as u32);
        assert_eq!({ hdr.ramdisk_image }, ia as u32);
        assert_eq!({ hdr.ramdisk_size }, is as u32);
        assert_eq!({ p.acpi_rsdp_addr }, ACPI_START);
        assert_eq!(p.e820_entries, 4);
        let e2 = p.e820_table[2];
        assert_eq!(
            ({ e2.addr }, { e2.size }),
            (0x10_0000, mem_size - 0x10_0000)
        );
        let mut cl = [0u8; 23];
        mem.read_slice(&mut cl, GuestAddress(CMDLINE_START))
            .unwrap();
        assert_eq!(&cl, b"console=ttyS0 panic=-1\0");
        assert_eq!({ hdr.cmdline_size }, 22);
    }

    #[test]
    fn refuses_32bit_only_and_bad_cmdline() {
        let mem = crate::vm::create_guest_memory(64 << 20, false).unwrap();
        let k = fake_bzimage(0x020a, 0);
        let e = load(&mem, 64 << 20, &k, None, "", GuestAddress(0)).unwrap_err();
        assert!(
            matches!(
                e,
                BootError::Not64Bit {
                    version: 0x020a,
                    ..
                }
            ),
            "{e}"
        );
        let k = fake_bzimage(0x020f, XLF_KERNEL_64);
        let long = "x".repeat(4096);
        let e = load(&mem, 64 << 20, &k, None, &long, GuestAddress(0)).unwrap_err();
        assert!(e.to_string().starts_with("--cmdline:"), "{e}");
        let e = load(
            &mem,
            64 << 20,
            Path::new("/nonexistent"),
            None,
            "",
            GuestAddress(0),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("--kernel /nonexistent"), "{e}");
    }
}
