use super::*;

#[test]
fn ecam_and_cf8_decoding() {
    let a = ConfigAddress::from_ecam((1 << 20) | (3 << 15) | (2 << 12) | 0x104);
    assert_eq!(
        a,
        ConfigAddress {
            bus: 1,
            device: 3,
            function: 2,
            offset: 0x104
        }
    );
    assert_eq!(ConfigAddress::from_cf8(0x0000_1810), None);
    let a = ConfigAddress::from_cf8(0x8001_1a10).unwrap();
    assert_eq!((a.bus, a.device, a.function, a.offset), (1, 3, 2, 0x10));
    let a = ConfigAddress::from_cf8(0x8100_0004).unwrap();
    assert_eq!(a.offset, 0x104, "extended register bits");
}

#[test]
fn host_bridge_through_ecam_and_ports() {
    let mut root = PciRoot::new();
    let slot = root
        .add_device(Arc::new(Mutex::new(HostBridge::default())))
        .unwrap();
    assert_eq!(slot, 1);
    let root = Arc::new(root);
    let mut ecam = PciEcam(root.clone());
    let mut d = [0u8; 4];
    ecam.read(0, &mut d);
    assert_eq!(u32::from_le_bytes(d), 0x0008_1b36);
    let mut w = [0u8; 2];
    ecam.read(2, &mut w);
    assert_eq!(u16::from_le_bytes(w), 0x0008);
    let mut b = [0u8; 1];
    ecam.read(0xb, &mut b);
    assert_eq!(b[0], 0x06, "class: bridge");
    // Empty slot, other function, other bus: all ones.
    for off in [2 << 15, 1 << 12, 1 << 20] {
        ecam.read(off, &mut d);
        assert_eq!(d, [0xff; 4]);
    }
    // Command register round trip through 0xcf8/0xcfc.
    let mut io = PciConfigIo::new(root.clone());
    io.write(0, &0x8000_0804u32.to_le_bytes()); // 00:01.0 reg 4
    io.write(4, &[0x06, 0x00]);
    io.read(4, &mut w);
    assert_eq!(u16::from_le_bytes(w), 0x0006);
    io.read(0, &mut d);
    assert_eq!(u32::from_le_bytes(d), 0x8000_0804);
    ecam.read((1 << 15) | 4, &mut d);
    assert_eq!(u32::from_le_bytes(d) & 0xffff, 0x0006);
    // Disabled address: all ones.
    io.write(0, &0u32.to_le_bytes());
    io.read(4, &mut d);
    assert_eq!(d, [0xff; 4]);
}

#[test]
fn bus_fills_up() {
    let mut root = PciRoot::new();
    for _ in 1..32 {
        root.add_device(Arc::new(Mutex::new(HostBridge::default())))
            .unwrap();
    }
    assert_eq!(
        root.add_device(Arc::new(Mutex::new(HostBridge::default()))),
        Err(PciError::Full)
    );
}
