use super::*;

#[test]
fn a_virtio_iommu_host_is_39_bits_unless_its_regions_say() {
    // A reserved region up to the top: its start is the width.
    let regions =
        "0x00000000fee00000 0x00000000feefffff msi\n0x0000010000000000 0xffffffffffffffff reserved";
    assert_eq!(iova_bits_of(Unit::Other, Some(regions)), Some(40));
    // The lab host behind the outer QEMU's virtio-iommu shows only its
    // MSI window: QEMU's q35 default, 39 bits.
    let msi = "0x00000000fee00000 0x00000000feefffff msi";
    assert_eq!(iova_bits_of(Unit::Other, Some(msi)), Some(39));
    assert_eq!(iova_bits_of(Unit::Other, None), Some(39));
    assert_eq!(
        iova_bits_of(Unit::Other, Some("garbage here\n1 2")),
        Some(39)
    );
}

#[test]
fn vt_d_mgaw_from_cap() {
    // A client part: MGAW 38 (+1 = 39 bits); a server part: 47 (48 bits).
    assert_eq!(
        iova_bits_of(Unit::Intel(Some("d2008c40660462")), None),
        Some(39)
    );
    assert_eq!(iova_bits_of(Unit::Intel(Some("0xd2f0462")), None), Some(48));
    assert_eq!(iova_bits_of(Unit::Intel(Some("not hex")), None), None);
    assert_eq!(iova_bits_of(Unit::Intel(None), None), None);
    // AMD-Vi: QEMU's default suits it.
    assert_eq!(
        iova_bits_of(Unit::Amd, Some("0x00000000fee00000 0x00000000feefffff msi")),
        None
    );
}
