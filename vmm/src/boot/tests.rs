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
pub(crate) fn fake_bzimage(version: u16, xloadflags: u16) -> std::path::PathBuf {
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
