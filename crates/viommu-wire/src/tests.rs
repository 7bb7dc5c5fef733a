use super::*;

#[test]
fn map_request_is_little_endian() {
    let req = MapReq {
        head: ReqHead {
            type_: req_type::VIRTIO_IOMMU_T_MAP,
            reserved: [0; 3],
        },
        domain: 0x0102_0304.into(),
        virt_start: 0x1000.into(),
        virt_end: 0x1fff.into(),
        phys_start: 0xa000.into(),
        flags: (VIRTIO_IOMMU_MAP_F_READ | VIRTIO_IOMMU_MAP_F_WRITE).into(),
    };
    let b = req.as_slice();
    assert_eq!(b[0], 3);
    assert_eq!(&b[4..8], &[4, 3, 2, 1]);
    assert_eq!(&b[8..16], &0x1000u64.to_le_bytes());
    assert_eq!(&b[16..24], &0x1fffu64.to_le_bytes());
    assert_eq!(&b[24..32], &0xa000u64.to_le_bytes());
    assert_eq!(&b[32..36], &3u32.to_le_bytes());
}

#[test]
fn resv_mem_layout() {
    let p = ProbeResvMem::new(VIRTIO_IOMMU_RESV_MEM_T_MSI, 0xfee0_0000, 0xfeef_ffff);
    let b = p.as_slice();
    assert_eq!(&b[0..2], &1u16.to_le_bytes());
    assert_eq!(&b[2..4], &20u16.to_le_bytes());
    assert_eq!(b[4], 1);
    assert_eq!(&b[8..16], &0xfee0_0000u64.to_le_bytes());
    assert_eq!(&b[16..24], &0xfeef_ffffu64.to_le_bytes());
}

#[test]
fn lazy_domain_wire_layout() {
    let a = AttachReq {
        head: ReqHead {
            type_: req_type::VIRTIO_IOMMU_T_ATTACH,
            reserved: [0; 3],
        },
        domain: 7.into(),
        endpoint: 8.into(),
        flags: VIRTIO_IOMMU_ATTACH_F_LAZY.into(),
        reserved: [0; 4],
    };
    assert_eq!(&a.as_slice()[12..16], &[2, 0, 0, 0]);
    let f = IotlbFlushReq {
        head: ReqHead {
            type_: req_type::VIRTIO_IOMMU_T_IOTLB_FLUSH,
            reserved: [0; 3],
        },
        domain: 0x0102_0304.into(),
        reserved: [0; 4],
    };
    assert_eq!(f.as_slice(), &[0x80, 0, 0, 0, 4, 3, 2, 1, 0, 0, 0, 0]);
    let p = ProbePoolHint::new(0x1_0000, 0x1_0000_0000, 1 << 30, 64 << 20);
    let b = p.as_slice();
    assert_eq!(&b[0..2], &0x800u16.to_le_bytes());
    assert_eq!(&b[2..4], &28u16.to_le_bytes());
    assert_eq!(&b[4..8], &0x1_0000u32.to_le_bytes());
    assert_eq!(&b[8..16], &0x1_0000_0000u64.to_le_bytes());
    assert_eq!(&b[16..24], &(1u64 << 30).to_le_bytes());
    assert_eq!(&b[24..32], &(64u64 << 20).to_le_bytes());
}

#[test]
fn config_round_trips_through_bytes() {
    let cfg = Config {
        page_size_mask: 0x1000.into(),
        probe_size: 512.into(),
        bypass: 1,
        ..Default::default()
    };
    let copy = Config::from_slice(cfg.as_slice()).copied().unwrap();
    assert_eq!(copy, cfg);
    assert_eq!(cfg.as_slice()[CONFIG_BYPASS_OFFSET as usize], 1);
}
