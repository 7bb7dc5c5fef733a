use super::*;
use vm_memory::{GuestAddress, GuestMemoryMmap};

const PAGE: u64 = 0x1000;

/// Removals cannot fail here: a disowned mapping goes at once.
#[test]
fn disown_removes_at_once() {
    let s = SoftAddressSpace::default();
    s.map(0x10_000, 0x80_000, 2 * PAGE, DmaPerm::RW).unwrap();
    s.map(0x12_000, 0x80_000, PAGE, DmaPerm::RW).unwrap();
    s.disown(0x10_000, 2 * PAGE);
    assert_eq!(s.mappings(), vec![(0x12_000, PAGE, 0x80_000, DmaPerm::RW)]);
    assert!(!s.has_leftovers());
}

#[test]
fn translate_checks_holes_and_perms() {
    let s = SoftAddressSpace::default();
    s.map(0x10_000, 0x80_000, 2 * PAGE, DmaPerm::RO).unwrap();
    assert_eq!(s.translate(0x10_000, 8, DmaPerm::RO), Ok(0x80_000));
    assert_eq!(s.translate(0x11_ff8, 8, DmaPerm::RO), Ok(0x81_ff8));
    assert_eq!(
        s.translate(0x10_000, 8, DmaPerm::WO),
        Err(TranslateError::Denied {
            iova: 0x10_000,
            granted: DmaPerm::RO,
            needed: DmaPerm::WO
        })
    );
    // Runs off the end into a hole: the first unmapped byte is named.
    assert_eq!(
        s.translate(0x11_ff8, 16, DmaPerm::RO),
        Err(TranslateError::Unmapped { iova: 0x12_000 })
    );
    assert_eq!(
        s.translate(0xf_fff, 2, DmaPerm::RO),
        Err(TranslateError::Unmapped { iova: 0xf_fff })
    );
    assert!(matches!(
        s.translate(0x10_000, 0, DmaPerm::RO),
        Err(TranslateError::InvalidRange { .. })
    ));
    assert!(matches!(
        s.translate(u64::MAX, 2, DmaPerm::RO),
        Err(TranslateError::InvalidRange { .. })
    ));
}

#[test]
fn translate_across_adjacent_mappings() {
    let s = SoftAddressSpace::default();
    s.map(0, 0x5000, PAGE, DmaPerm::RW).unwrap();
    s.map(PAGE, 0x6000, PAGE, DmaPerm::RO).unwrap(); // gpa-contiguous
    s.map(2 * PAGE, 0x9000, PAGE, DmaPerm::RW).unwrap(); // not contiguous
    assert_eq!(s.translate(0x800, PAGE, DmaPerm::RO), Ok(0x5800));
    // The second mapping is read-only: a write through both fails there.
    assert!(matches!(
        s.translate(0x800, PAGE, DmaPerm::WO),
        Err(TranslateError::Denied { iova: 0x1000, .. })
    ));
    assert_eq!(
        s.translate(0x800, 2 * PAGE, DmaPerm::RO),
        Err(TranslateError::Discontiguous {
            iova: 0x800,
            len: 2 * PAGE
        })
    );
    assert_eq!(
        s.translate_ranges(0x800, 2 * PAGE, DmaPerm::RO).unwrap(),
        vec![(0x5800, 0x1800), (0x9000, 0x800)]
    );
}

#[test]
fn map_refuses_overlap_misalignment_and_bad_ranges() {
    let s = SoftAddressSpace::default();
    s.map(0x4000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    assert!(matches!(
        s.map(0x5000, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { iova: 0x5000, .. })
    ));
    assert!(matches!(
        s.map(0x3000, 0, 2 * PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert!(matches!(
        s.map(0x10_800, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Unaligned { .. })
    ));
    assert!(matches!(
        s.map(0x10_000, 0x800, PAGE, DmaPerm::RW),
        Err(DmaError::Unaligned { .. })
    ));
    assert!(matches!(
        s.map(0x10_000, 0, 0, DmaPerm::RW),
        Err(DmaError::InvalidRange { .. })
    ));
    assert!(matches!(
        s.map(u64::MAX - 0xfff, 0, 2 * PAGE, DmaPerm::RW),
        Err(DmaError::InvalidRange { .. })
    ));
    assert!(matches!(
        s.map(0x10_000, u64::MAX - 0xfff, 2 * PAGE, DmaPerm::RW),
        Err(DmaError::InvalidGpa { .. })
    ));
    assert_eq!(s.mapping_count(), 1);
}

#[test]
fn unmap_is_whole_mapping_only() {
    let s = SoftAddressSpace::default();
    s.map(0x1000, 0x1000, PAGE, DmaPerm::RW).unwrap();
    s.map(0x2000, 0x2000, 2 * PAGE, DmaPerm::RW).unwrap();
    s.map(0x8000, 0x8000, PAGE, DmaPerm::RW).unwrap();
    // Splitting the middle mapping changes nothing.
    assert!(matches!(
        s.unmap(0x1000, 2 * PAGE),
        Err(DmaError::SplitMapping {
            iova: 0x1000,
            size: 0x2000
        })
    ));
    assert!(matches!(
        s.unmap(0x3000, PAGE),
        Err(DmaError::SplitMapping { .. })
    ));
    assert_eq!(s.mapping_count(), 3);
    // Holes are fine; several whole mappings go at once.
    s.unmap(0, 0x8000).unwrap();
    assert_eq!(s.mappings(), vec![(0x8000, PAGE, 0x8000, DmaPerm::RW)]);
    s.unmap(0x100_000, PAGE).unwrap();
    assert_eq!(s.mapping_count(), 1);
    assert_eq!(s.unmap_all(), PAGE);
    assert_eq!(s.mapping_count(), 0);
    assert!(s.translate(0x8000, 1, DmaPerm::RO).is_err());
}

#[test]
fn for_memory_refuses_gpa_outside_ram() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[
        (GuestAddress(0), 0x10_000),
        (GuestAddress(0x10_000), 0x10_000),
        (GuestAddress(0x100_000), 0x10_000),
    ])
    .unwrap();
    let s = SoftAddressSpace::for_memory(&mem, PAGE_SIZE_4K_MASK);
    // Spans two adjacent regions.
    s.map(0, 0xf000, 2 * PAGE, DmaPerm::RW).unwrap();
    assert!(matches!(
        s.map(0x10_000, 0x1f_000, 2 * PAGE, DmaPerm::RW),
        Err(DmaError::InvalidGpa {
            gpa: 0x1f_000,
            size: 0x2000
        })
    ));
    assert!(s.map(0x10_000, 0x100_000, PAGE, DmaPerm::RW).is_ok());
    assert!(s.map(0x20_000, 0x200_000, PAGE, DmaPerm::RW).is_err());
}
