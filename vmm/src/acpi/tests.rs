use super::*;
use crate::layout::ACPI_END;

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

fn read_table(mem: &GuestMemoryMmap, addr: u64) -> Vec<u8> {
    let mut hdr = [0u8; 8];
    mem.read_slice(&mut hdr, GuestAddress(addr)).unwrap();
    let mut t = vec![0u8; u32_at(&hdr, 4) as usize];
    mem.read_slice(&mut t, GuestAddress(addr)).unwrap();
    assert_eq!(sum(&t), 0, "checksum of {:?}", std::str::from_utf8(&t[..4]));
    t
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn tables(cfg: &AcpiConfig) -> (GuestMemoryMmap, Vec<Vec<u8>>) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
    let rsdp_addr = write_tables(&mem, cfg).unwrap();
    let mut rsdp = [0u8; 36];
    mem.read_slice(&mut rsdp, rsdp_addr).unwrap();
    assert_eq!(&rsdp[..8], b"RSD PTR ");
    assert_eq!(sum(&rsdp[..20]), 0);
    assert_eq!(sum(&rsdp), 0);
    assert_eq!(rsdp[15], 2, "ACPI 2.0+ RSDP");
    let xsdt = read_table(&mem, u64_at(&rsdp, 24));
    assert_eq!(&xsdt[..4], b"XSDT");
    let tables = xsdt[36..]
        .chunks_exact(8)
        .map(|c| read_table(&mem, u64::from_le_bytes(c.try_into().unwrap())))
        .collect();
    (mem, tables)
}

#[test]
fn table_set_without_viot() {
    let (mem, t) = tables(&AcpiConfig {
        cpus: 2,
        viot: None,
    });
    let sigs: Vec<&[u8]> = t.iter().map(|t| &t[..4]).collect();
    assert_eq!(sigs, [b"FACP", b"APIC", b"MCFG"]);

    let fadt = &t[0];
    let flags = u32_at(fadt, 112);
    assert_ne!(flags & (1 << 20), 0, "HW_REDUCED_ACPI");
    assert_ne!(flags & (1 << 10), 0, "RESET_REG_SUP");
    // Reset register GAS at 116: system I/O, 8 bits, our port.
    assert_eq!(fadt[116], 1);
    assert_eq!(u64_at(fadt, 120), u64::from(ACPI_RESET_PORT));
    assert_eq!(fadt[128], ACPI_RESET_VALUE);
    // Sleep control/status GAS at 244 and 256.
    assert_eq!(u64_at(fadt, 248), u64::from(ACPI_SLEEP_CONTROL_PORT));
    assert_eq!(u64_at(fadt, 260), u64::from(ACPI_SLEEP_STATUS_PORT));
    assert_eq!(u16::from_le_bytes([fadt[109], fadt[110]]), IAPC_BOOT_ARCH);
    let dsdt = read_table(&mem, u64_at(fadt, 140));
    assert_eq!(&dsdt[..4], b"DSDT");
    for name in [&b"PCI0"[..], b"COM1", b"MBRD", b"_S5_", b"_CRS"] {
        assert!(contains(&dsdt, name), "{}", String::from_utf8_lossy(name));
    }
    // PNP0A08 as a compressed EISA id (0x080ad041).
    assert!(contains(&dsdt, &[0x41, 0xd0, 0x0a, 0x08]));

    let madt = &t[1];
    assert_eq!(u32_at(madt, 36), APIC_START as u32);
    // Entries: type, length.
    let mut off = 44;
    let mut kinds = Vec::new();
    while off < madt.len() {
        kinds.push((madt[off], madt[off + 3]));
        off += madt[off + 1] as usize;
    }
    assert_eq!(
        kinds,
        [(0, 0), (0, 1), (1, 0)],
        "(type, APIC id) of LAPIC 0, 1, IOAPIC"
    );

    let mcfg = &t[2];
    assert_eq!(u64_at(mcfg, 44), PCI_ECAM_START);
    assert_eq!((mcfg[54], mcfg[55]), (0, 0), "bus 0..0");
}

#[test]
fn viot_names_iommu_and_endpoints() {
    let bdf = |device| Bdf {
        bus: 0,
        device,
        function: 0,
    };
    let (_, t) = tables(&AcpiConfig {
        cpus: 1,
        viot: Some(ViotConfig {
            iommu: bdf(2),
            endpoints: vec![bdf(3), bdf(4)],
        }),
    });
    let viot = t.iter().find(|t| &t[..4] == b"VIOT").expect("VIOT listed");
    assert_eq!(u16::from_le_bytes([viot[36], viot[37]]), 3, "node count");
    let first = u16::from_le_bytes([viot[38], viot[39]]) as usize;
    let mut off = first;
    let mut nodes = Vec::new();
    while off < viot.len() {
        let len = u16::from_le_bytes([viot[off + 2], viot[off + 3]]) as usize;
        nodes.push((viot[off], off));
        off += len;
    }
    assert_eq!(nodes.iter().map(|n| n.0).collect::<Vec<_>>(), [3, 1, 1]);
    let iommu_off = nodes[0].1 as u16;
    // virtio-pci IOMMU node: segment at +4, BDF at +6 (device 2 = 0x10).
    assert_eq!(
        u16::from_le_bytes([viot[nodes[0].1 + 6], viot[nodes[0].1 + 7]]),
        2 << 3
    );
    for (i, (_, o)) in nodes[1..].iter().enumerate() {
        let o = *o;
        let start = u16::from_le_bytes([viot[o + 12], viot[o + 13]]);
        let end = u16::from_le_bytes([viot[o + 14], viot[o + 15]]);
        assert_eq!(u32_at(viot, o + 4), u32::from(start), "endpoint id = BDF");
        assert_eq!((start, end), (((3 + i) << 3) as u16, ((3 + i) << 3) as u16));
        let handle = u16::from_le_bytes([viot[o + 16], viot[o + 17]]);
        assert_eq!(handle, iommu_off, "output node is the IOMMU");
    }
}

#[test]
fn many_cpus_still_fit() {
    let (_, t) = tables(&AcpiConfig {
        cpus: crate::cli::MAX_CPUS,
        viot: None,
    });
    assert_eq!(t[1].len(), 44 + 8 * 254 + 12);
}

/// The BIOS reset vector's stub, decoded: real-mode `mov dx, imm16`,
/// `mov al, imm8`, `out dx, al`, `hlt`, and a short jump back to the `out`.
#[test]
fn the_reset_vector_writes_the_reset_register() {
    let s = reset_vector_stub();
    assert_eq!(s[0], 0xba, "mov dx, imm16");
    assert_eq!(u16::from_le_bytes([s[1], s[2]]), ACPI_RESET_PORT);
    assert_eq!((s[3], s[4]), (0xb0, ACPI_RESET_VALUE), "mov al, imm8");
    assert_eq!(
        (s[5], s[6], s[7]),
        (0xee, 0xf4, 0xeb),
        "out dx, al; hlt; jmp rel8"
    );
    let after_jmp = 9i32;
    assert_eq!(
        after_jmp + i32::from(s[8] as i8),
        5,
        "the jump goes back to the out"
    );
    // It fits before 1 MiB, in the area the e820 map reserves.
    assert!(RESET_VECTOR + s.len() as u64 <= ACPI_END);
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
    write_reset_vector(&mem).unwrap();
    let mut got = [0u8; 9];
    mem.read_slice(&mut got, GuestAddress(RESET_VECTOR))
        .unwrap();
    assert_eq!(got, s);
    // The tables, the most there can be, stop short of it.
    write_tables(
        &mem,
        &AcpiConfig {
            cpus: 254,
            viot: None,
        },
    )
    .unwrap();
    let mut after = [0u8; 9];
    mem.read_slice(&mut after, GuestAddress(RESET_VECTOR))
        .unwrap();
    assert_eq!(after, s);
}
