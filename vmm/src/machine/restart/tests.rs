use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::layout::{ACPI_START, CMDLINE_START, ZERO_PAGE_START};

fn setup() -> (GuestSetup, GuestMemoryMmap) {
    let k = crate::boot::tests::fake_bzimage(0x020f, 1);
    let initrd = std::env::temp_dir().join(format!("vmm-restart-initrd-{}", std::process::id()));
    std::fs::write(&initrd, vec![0x5a; 0x2345]).unwrap();
    let image = boot::GuestImage::read(&k, Some(&initrd)).unwrap();
    let _ = std::fs::remove_file(&k);
    let _ = std::fs::remove_file(&initrd);
    let mem_size = 64 << 20;
    let s = GuestSetup {
        image,
        mem_size,
        cmdline: "console=ttyS0 panic=-1".into(),
        acpi: acpi::AcpiConfig {
            cpus: 2,
            viot: None,
        },
    };
    (s, crate::vm::create_guest_memory(mem_size, false).unwrap())
}

fn snapshot(mem: &GuestMemoryMmap, at: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mem.read_slice(&mut v, GuestAddress(at)).unwrap();
    v
}

#[test]
fn a_reload_writes_the_first_boot_memory_again_and_nothing_the_guest_left_low() {
    let (s, mem) = setup();
    let info = s.load(&mem).unwrap();
    vcpu::write_boot_tables(&mem).unwrap();
    let (ia, is) = info.initrd.unwrap();
    let low = snapshot(&mem, 0, HIGH_RAM_START as usize);
    let kernel = snapshot(
        &mem,
        HIGH_RAM_START,
        (info.kernel_end - HIGH_RAM_START) as usize,
    );
    let initrd = snapshot(&mem, ia, is as usize);
    // What a running guest does to its boot memory.
    mem.write_slice(&[0xcc; 0x1000], GuestAddress(0x9000))
        .unwrap();
    mem.write_slice(&[0xcc; 64], GuestAddress(ZERO_PAGE_START))
        .unwrap();
    mem.write_slice(&[0xcc; 64], GuestAddress(CMDLINE_START))
        .unwrap();
    mem.write_slice(&[0xcc; 64], GuestAddress(ACPI_START))
        .unwrap();
    mem.write_slice(&[0xcc; 0x1000], GuestAddress(HIGH_RAM_START))
        .unwrap();
    mem.write_slice(&[0xcc; 0x100], GuestAddress(ia)).unwrap();
    // Between the kernel and the initramfs: the guest's, left as it is.
    let high = 0x20_0000;
    assert!(info.kernel_end <= high && high + 16 <= ia);
    mem.write_slice(&[0xcc; 16], GuestAddress(high)).unwrap();
    s.reload(&mem, info.entry).unwrap();
    assert!(snapshot(&mem, 0, HIGH_RAM_START as usize) == low);
    assert!(snapshot(&mem, HIGH_RAM_START, kernel.len()) == kernel);
    assert!(snapshot(&mem, ia, is as usize) == initrd);
    assert_eq!(snapshot(&mem, high, 16), vec![0xcc; 16]);
}

#[test]
fn a_reload_that_would_enter_elsewhere_is_refused() {
    let (s, mem) = setup();
    let info = s.load(&mem).unwrap();
    let e = s
        .reload(&mem, GuestAddress(info.entry.0 + 0x1000))
        .unwrap_err();
    assert!(matches!(e, RebootError::Load(_)), "{e}");
}
