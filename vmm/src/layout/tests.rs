use super::*;

#[test]
fn ram_splits_around_the_hole() {
    assert_eq!(ram_regions(512 << 20), vec![(GuestAddress(0), 512 << 20)]);
    assert_eq!(
        ram_regions(3 << 30),
        vec![(GuestAddress(0), MMIO32_HOLE_START)]
    );
    assert_eq!(
        ram_regions(4 << 30),
        vec![
            (GuestAddress(0), MMIO32_HOLE_START),
            (GuestAddress(RAM_64BIT_START), 1 << 30)
        ]
    );
}

#[test]
fn windows_do_not_overlap() {
    let ranges = [
        (PCI_MMIO32_START, PCI_MMIO32_SIZE),
        (PCI_ECAM_START, PCI_ECAM_SIZE),
        (IOAPIC_START, 0x1000),
        (APIC_START, 0x10_0000),
    ];
    for (i, a) in ranges.iter().enumerate() {
        assert!(a.0 >= MMIO32_HOLE_START && a.0 + a.1 <= RAM_64BIT_START);
        for b in &ranges[i + 1..] {
            assert!(a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0, "{a:x?} {b:x?}");
        }
    }
}
