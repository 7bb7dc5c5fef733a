use super::*;

#[test]
fn qemu_versions_are_read_from_their_first_line() {
    assert_eq!(
        parse_qemu_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-1)"),
        Some((10, 0))
    );
    assert_eq!(
        parse_qemu_version("QEMU emulator version 11.1.0"),
        Some((11, 1))
    );
    assert_eq!(parse_qemu_version("qemu, no version"), None);
    assert!(Some((10, 0)) < Some(AMD_IOMMU_VFIO_QEMU) && (11, 1) >= AMD_IOMMU_VFIO_QEMU);
}
