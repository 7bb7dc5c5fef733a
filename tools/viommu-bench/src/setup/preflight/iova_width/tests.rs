use super::*;

#[test]
fn a_virtio_iommu_hosts_input_range_is_its_width() {
    // The lab host behind the outer QEMU's virtio-iommu (39 bits).
    let regions =
        "0x00000000fee00000 0x00000000feefffff msi\n0x0000008000000000 0xffffffffffffffff reserved";
    assert_eq!(iova_bits_of(Some(regions), None), Some(39));
    // An MSI window alone says nothing.
    assert_eq!(
        iova_bits_of(Some("0x00000000fee00000 0x00000000feefffff msi"), None),
        None
    );
    assert_eq!(iova_bits_of(Some(""), None), None);
    assert_eq!(iova_bits_of(Some("garbage here\n1 2"), None), None);
}

#[test]
fn vt_d_mgaw_from_cap() {
    // A client part: MGAW 38 (+1 = 39 bits); a server part: 47 (48 bits).
    assert_eq!(iova_bits_of(None, Some("d2008c40660462")), Some(39));
    assert_eq!(iova_bits_of(None, Some("0xd2f0462")), Some(48));
    assert_eq!(iova_bits_of(None, Some("not hex")), None);
    // Both sources: the narrower wins.
    let regions = "0x0000008000000000 0xffffffffffffffff reserved";
    assert_eq!(iova_bits_of(Some(regions), Some("d2f0462")), Some(39));
}
