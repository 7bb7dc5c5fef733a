use super::*;

#[test]
fn map_flags_grant_exactly_the_guest_perm_at_a_fixed_iova() {
    const FIXED: u32 = 1;
    const W: u32 = 2;
    const R: u32 = 4;
    assert_eq!(map_flags(DmaPerm::RW), FIXED | R | W);
    assert_eq!(map_flags(DmaPerm::RO), FIXED | R);
    assert_eq!(map_flags(DmaPerm::WO), FIXED | W);
    assert_eq!(map_flags(DmaPerm::NONE), FIXED);
}

#[test]
fn map_and_unmap_arguments() {
    let m = map_args(7, 0x10_0000, 0x2000, 0x7f00_0000_0000, DmaPerm::RO);
    assert_eq!(m.size, 40, "sizeof(struct iommu_ioas_map)");
    assert_eq!(
        (m.ioas_id, m.iova, m.length, m.user_va, m.__reserved),
        (7, 0x10_0000, 0x2000, 0x7f00_0000_0000, 0)
    );
    let u = unmap_args(7, 0x10_0000, 0x2000);
    assert_eq!(u.size, 24, "sizeof(struct iommu_ioas_unmap)");
    assert_eq!((u.ioas_id, u.iova, u.length), (7, 0x10_0000, 0x2000));
}

#[test]
fn copy_arguments() {
    let c = copy_args(3, 9, 0x10_0000, 0x2000, 0x7f00_0000_1000, DmaPerm::WO);
    assert_eq!(c.size, 40, "sizeof(struct iommu_ioas_copy)");
    assert_eq!(c.flags, map_flags(DmaPerm::WO));
    assert_eq!(
        (
            c.dst_ioas_id,
            c.src_ioas_id,
            c.dst_iova,
            c.length,
            c.src_iova
        ),
        (3, 9, 0x10_0000, 0x2000, 0x7f00_0000_1000)
    );
}

#[test]
fn page_size_mask_from_the_ioas_alignment() {
    assert_eq!(page_size_mask(0x1000), Some(PAGE_SIZE_4K_MASK));
    assert_eq!(page_size_mask(1), Some(PAGE_SIZE_4K_MASK), "any: 4K still");
    assert_eq!(page_size_mask(0x10000), Some(!0xffff));
    assert_eq!(page_size_mask(0), None);
    assert_eq!(page_size_mask(0x3000), None);
}

#[test]
fn errno_survives_the_conversion() {
    let e = iommufd_to_io(IommufdError::IommuIoasMap(vmm_sys_util::errno::Error::new(
        libc::EEXIST,
    )));
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let e = iommufd_to_io(IommufdError::IommuIoasUnmap(
        vmm_sys_util::errno::Error::new(libc::ENOENT),
    ));
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = iommufd_to_io(IommufdError::HwQueueUnsupported);
    assert_eq!(e.raw_os_error(), None);
}

#[test]
fn iova_ranges_ioctl_on_a_non_iommufd_fails_cleanly() {
    let f = std::fs::File::open("/dev/null").unwrap();
    assert!(ioas_iova_ranges(&f, 1).is_err());
}
