use super::*;

fn cfg() -> PciConfig {
    PciConfig::new(PciIds {
        vendor: 0x1af4,
        device: 0x1057,
        revision: 1,
        class: (0x08, 0x80, 0),
        subsystem_vendor: 0x1af4,
        subsystem: 0x40,
    })
}

#[test]
fn header_ids_and_readonly_fields() {
    let mut c = cfg();
    assert_eq!(c.read_reg(0), 0x1057_1af4);
    assert_eq!(c.read_reg(2), 0x0880_0001);
    c.write_reg(0, 0, &[0, 0, 0, 0]);
    assert_eq!(c.read_reg(0), 0x1057_1af4, "ids are read-only");
    c.write_reg(1, 0, &[0x06, 0x00]);
    assert_eq!(c.read_reg(1) & 0xffff, 0x6);
    c.write_reg(1, 0, &[0xff, 0xff]);
    assert_eq!(c.read_reg(1) & 0xffff, 0x407);
    assert_eq!(c.read_reg(5000), u32::MAX);
}

#[test]
fn bar_sizing_and_programming() {
    let mut c = cfg();
    c.add_bar(0, 0x4000, BarKind::Mmio64).unwrap();
    c.add_bar(2, 0x1000, BarKind::Mmio32).unwrap();
    assert_eq!(
        c.add_bar(1, 0x1000, BarKind::Mmio32),
        Err(ConfigError::BarSlot(1))
    );
    assert_eq!(
        c.add_bar(5, 0x1000, BarKind::Mmio64),
        Err(ConfigError::BarSlot(5))
    );
    assert_eq!(
        c.add_bar(3, 0x1001, BarKind::Mmio32),
        Err(ConfigError::BarSize(0x1001))
    );
    assert_eq!(c.bar_size(0), Some(0x4000));
    assert_eq!(c.bar_size(1), None);
    // Sizing protocol: write all ones, read back the size mask.
    c.write_reg(4, 0, &[0xff; 4]);
    c.write_reg(5, 0, &[0xff; 4]);
    assert_eq!(c.read_reg(4), 0xffff_c00c);
    assert_eq!(c.read_reg(5), 0xffff_ffff);
    c.write_reg(6, 0, &[0xff; 4]);
    assert_eq!(c.read_reg(6), 0xffff_f000);
    // Program addresses.
    c.write_reg(4, 0, &0x0000_8000u32.to_le_bytes());
    c.write_reg(5, 0, &0x10u32.to_le_bytes());
    assert_eq!(c.bar_address(0), Some(0x10_0000_8000));
    c.set_bar_address(2, 0xc000_1000);
    assert_eq!(c.bar_address(2), Some(0xc000_1000));
    assert_eq!(c.read_reg(6), 0xc000_1000);
    // Unused BARs read zero and ignore writes.
    c.write_reg(7, 0, &[0xff; 4]);
    assert_eq!(c.read_reg(7), 0);
}

#[test]
fn port_io_bar_sizes_reads_its_kind_and_programs() {
    let mut c = cfg();
    assert_eq!(c.add_bar(4, 2, BarKind::Io), Err(ConfigError::BarSize(2)));
    assert_eq!(
        c.add_bar(4, 512, BarKind::Io),
        Err(ConfigError::BarSize(512))
    );
    c.add_bar(4, 8, BarKind::Io).unwrap();
    assert_eq!(c.read_reg(8), 0x1, "bit 0: port I/O space");
    c.write_reg(8, 0, &[0xff; 4]);
    assert_eq!(c.read_reg(8), 0xffff_fff9, "size 8, I/O bit kept");
    c.set_bar_address(4, 0x1008);
    assert_eq!(c.read_reg(8), 0x1009);
    assert_eq!(c.bar_address(4), Some(0x1008));
    assert_eq!(c.bar_size(4), Some(8));
}

#[test]
fn capability_list_links() {
    let mut c = cfg();
    let a = c
        .add_capability(0x11, &[0, 0, 0x12, 0x34], &[0, 0, 0xff, 0])
        .unwrap();
    let b = c.add_capability(0x09, &[0; 6], &[]).unwrap();
    assert_eq!((a, b), (0x40, 0x44));
    assert_ne!(c.read_reg(1) & STATUS_CAP_LIST, 0);
    assert_eq!(c.read_reg(CAP_PTR_REG) & 0xff, 0x40);
    assert_eq!(c.read_reg(0x10), 0x3412_4411, "id 0x11, next 0x44, body");
    assert_eq!(c.read_reg(0x11) & 0xffff, 0x0009, "last cap: next 0");
    c.write_reg(0x10, 2, &[0xaa, 0xbb]);
    assert_eq!(
        c.read_reg(0x10) >> 16,
        0x34aa,
        "only the masked byte changed"
    );
    assert!(c.add_capability(0x09, &[0; 200], &[]).is_err());
}
