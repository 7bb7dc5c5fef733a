use super::*;

#[test]
fn perm_allows() {
    assert!(DmaPerm::RW.allows(DmaPerm::RO));
    assert!(DmaPerm::RW.allows(DmaPerm::WO));
    assert!(DmaPerm::RO.allows(DmaPerm::RO));
    assert!(!DmaPerm::RO.allows(DmaPerm::WO));
    assert!(!DmaPerm::WO.allows(DmaPerm::RO));
    assert!(!DmaPerm::NONE.allows(DmaPerm::RO));
    assert!(DmaPerm::NONE.allows(DmaPerm::NONE));
    assert!(!DmaPerm::NONE.any());
}

#[test]
fn alignment_uses_smallest_page() {
    let mask = PAGE_SIZE_4K_MASK & !(1 << 13); // 4K | 16K | 32K...
    assert!(check_aligned(0x1000, 0x2000, 0x3000, mask).is_ok());
    assert!(matches!(
        check_aligned(0x1800, 0, 0x1000, mask),
        Err(DmaError::Unaligned { iova: 0x1800, .. })
    ));
    assert!(check_aligned(0, 0x10, 0x1000, mask).is_err());
    assert!(check_aligned(0, 0, 0x10, mask).is_err());
    // 2M-only mask.
    assert!(check_aligned(0x1000, 0, 0x20_0000, !0x1f_ffff).is_err());
    assert!(check_aligned(0x20_0000, 0, 0x20_0000, !0x1f_ffff).is_ok());
    assert!(check_aligned(1, 1, 1, 0).is_ok());
}

#[test]
fn checked_last_refuses_empty_and_wrap() {
    assert!(matches!(
        checked_last(5, 0),
        Err(DmaError::InvalidRange { .. })
    ));
    assert!(matches!(
        checked_last(u64::MAX, 1),
        Err(DmaError::InvalidRange { .. })
    ));
    assert_eq!(checked_last(0x1000, 0x1000).unwrap(), 0x1fff);
}
