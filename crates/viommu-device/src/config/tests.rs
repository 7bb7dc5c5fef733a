use super::*;

#[test]
fn pool_window_placement() {
    const G: u64 = 1 << 30;
    let msi = (0xfee0_0000, 0xfeef_ffff);
    // The preferred place is free.
    assert_eq!(
        place_pool_window((0, (1 << 39) - 1), &[msi], G, 4 * G, 4096),
        Some(4 * G)
    );
    // It is reserved: the next aligned place above it.
    let hole = (4 * G, 5 * G + 0x1fff);
    assert_eq!(
        place_pool_window((0, (1 << 39) - 1), &[hole, msi], G, 4 * G, 1 << 21),
        Some(5 * G + (1 << 21))
    );
    // Nothing above it: the first place below (the MSI window is skipped).
    assert_eq!(
        place_pool_window((0, 4 * G - 1), &[msi], G, 4 * G, 4096),
        Some(0)
    );
    assert_eq!(
        place_pool_window((0xfe00_0000, 0xffff_ffff), &[msi], 0x100_0000, 4 * G, 4096),
        Some(0xfef0_0000)
    );
    // Nothing fits, or nonsense.
    assert_eq!(place_pool_window((0, G - 1), &[], 2 * G, 0, 4096), None);
    assert_eq!(place_pool_window((0, u64::MAX), &[], 0, 0, 4096), None);
    assert_eq!(place_pool_window((0, u64::MAX), &[], G, 0, 3), None);
    // Up to the very top of the address space, no overflow.
    assert_eq!(
        place_pool_window((0, u64::MAX), &[(0, u64::MAX - G)], G, 4 * G, 4096),
        Some(u64::MAX - G + 1)
    );
}

#[test]
fn iova_space_from_host_ranges() {
    let msi = Some((0xfee0_0000, 0xfeef_ffff));
    // VT-d with 39-bit addresses: the MSI hole is reported by the device.
    let vtd = vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
    assert_eq!(
        iova_space(std::slice::from_ref(&vtd), msi),
        Some(((0, (1 << 39) - 1), vec![]))
    );
    // Another endpoint with a hole elsewhere and a narrower width: its
    // hole is reserved, the MSI hole stays the device's MSI region.
    let other = vec![(0x1000, 0x7fff_ffff), (0x9000_0000, (1 << 36) - 1)];
    assert_eq!(
        iova_space(&[vtd.clone(), other.clone()], msi),
        Some(((0x1000, (1 << 36) - 1), vec![(0x8000_0000, 0x8fff_ffff)]))
    );
    // Without an MSI window every hole is reserved.
    assert_eq!(
        iova_space(&[vtd, other], None).unwrap().1,
        vec![(0x8000_0000, 0x8fff_ffff), (0xfee0_0000, 0xfeef_ffff)]
    );
    assert_eq!(iova_space(&[], msi), None);
    assert_eq!(iova_space(&[vec![(0, 10)], vec![(20, 30)]], None), None);
}

#[test]
fn merge_and_clip_ranges() {
    assert_eq!(
        merge_ranges(vec![(10, 20), (0, 4), (5, 6), (15, 30), (40, 41), (9, 3)]),
        vec![(0, 6), (10, 30), (40, 41)]
    );
    assert_eq!(
        merge_ranges(vec![(0, u64::MAX), (5, 6)]),
        vec![(0, u64::MAX)]
    );
    let msi = Some((0xfee0_0000, 0xfeef_ffff));
    assert_eq!(
        clip_ranges(
            &[(0xc000_0000, 0xffff_ffff), (0x80_0000_0000, 0x90_0000_0000)],
            (0, (1 << 39) - 1),
            msi
        ),
        vec![(0xc000_0000, 0xfedf_ffff), (0xfef0_0000, 0xffff_ffff)]
    );
    assert_eq!(
        clip_ranges(&[(0xfee1_0000, 0xfee2_0000)], (0, u64::MAX), msi),
        vec![]
    );
}

#[test]
fn builder_reserves_what_to_avoid_and_places_the_pool_clear_of_it() {
    let vtd = vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
    // The host's PCI window below 4G and a BAR high up, where the
    // default pool window (4 GiB + 1 GiB) lies.
    let cfg = ConfigBuilder::new()
        .host_iommu(!0xfff, Ok(vtd))
        .avoid([(0xc000_0000, 0xfebf_ffff), (0x1_0000_0000, 0x1_0000_3fff)])
        .pool(Some((4096, 1 << 20)))
        .build();
    assert!(
        cfg.reserved.contains(&(0xc000_0000, 0xfebf_ffff)),
        "{:x?}",
        cfg.reserved
    );
    assert!(cfg.reserved.contains(&(0x1_0000_0000, 0x1_0000_3fff)));
    let hint = cfg.pool_hint.unwrap();
    assert!(
        hint.window_start > 0x1_0000_3fff,
        "{:#x}",
        hint.window_start
    );
}

#[test]
fn builder_takes_the_host_iommus_into_account() {
    let vtd = vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
    let cfg = ConfigBuilder::new()
        .lazy_unmap(false)
        .host_iommu(!0xfff & !(1 << 13), Ok(vtd))
        .pool(Some((4096, 1 << 20)))
        .build();
    assert!(!cfg.lazy_unmap);
    assert_eq!(cfg.page_size_mask, !0xfff & !(1 << 13));
    assert_eq!(cfg.input_range, (0, (1 << 39) - 1));
    let hint = cfg.pool_hint.unwrap();
    assert_eq!((hint.threshold, hint.pool_max), (4096, 1 << 20));
    assert_eq!(hint.window_start, PoolHint::default().window_start);
    // Unknown ranges: the default input range; no room: no hint.
    let cfg = ConfigBuilder::new()
        .host_iommu(!0xfff, Err(std::io::Error::other("no caps")))
        .build();
    assert_eq!(cfg.input_range, DeviceConfig::default().input_range);
    assert_eq!(cfg.pool_hint, None);
    let cfg = ConfigBuilder::new()
        .host_iommu(!0xfff, Ok(vec![(0, 0xfff_ffff)]))
        .pool(Some((4096, 1 << 20)))
        .build();
    assert_eq!(cfg.pool_hint, None);
}

#[test]
fn a_full_64_bit_host_aperture_loses_only_its_last_page() {
    // A host behind a virtio-iommu reports 0..2^64-1 (seen in the lab
    // with --host-iommu virtio): the device used to refuse to start.
    let cfg = ConfigBuilder::new()
        .host_iommu(!0xfff, Ok(vec![(0, u64::MAX)]))
        .pool(Some((4096, 1 << 20)))
        .build();
    assert_eq!(cfg.input_range, (0, u64::MAX - 0x1000));
    assert_eq!((cfg.input_range.1 + 1) & 0xfff, 0);
    assert!(cfg.pool_hint.is_some());
    assert!(crate::VirtioIommu::<crate::testing::TestMem>::new(cfg).is_ok());
    // 64 KiB host pages: the last 64 KiB go; a hole below stays reserved.
    let cfg = ConfigBuilder::new()
        .host_iommu(
            !0xffff,
            Ok(vec![(0, 0xffff_ffff), (0x2_0000_0000, u64::MAX)]),
        )
        .build();
    assert_eq!(cfg.input_range, (0, u64::MAX - 0x1_0000));
    assert_eq!(cfg.reserved, vec![(0x1_0000_0000, 0x1_ffff_ffff)]);
    assert_eq!(below_top_page((0, 1 << 40), !0xfff), (0, 1 << 40));
}
