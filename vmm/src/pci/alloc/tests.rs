use super::*;

#[test]
fn natural_alignment_and_exhaustion() {
    let mut a = BarWindow::new(0xc000_0000, 0x10_0000).unwrap();
    assert_eq!(a.allocate(0x100), Ok(0xc000_0000));
    assert_eq!(a.allocate(0x4000), Ok(0xc000_4000));
    assert_eq!(a.allocate(0x8_0000), Ok(0xc008_0000));
    assert_eq!(a.allocate(0x3000), Err(AllocError::Size(0x3000)));
    assert_eq!(a.allocate(0), Err(AllocError::Size(0)));
    let full = Err(AllocError::Exhausted {
        size: 0x8_0000,
        start: 0xc000_0000,
        end: 0xc00f_ffff,
    });
    assert_eq!(a.allocate(0x8_0000), full);
    // First fit: the gaps left by alignment are used by smaller BARs.
    assert_eq!(a.allocate(0x1000), Ok(0xc000_1000));
    assert_eq!(a.allocate(0x8000), Ok(0xc000_8000));
    assert!(BarWindow::new(u64::MAX - 0xfff, 0x2000).is_none());
    let mut top = BarWindow::new(u64::MAX - 0xfff, 0x1000).unwrap();
    assert!(top.allocate(0x2000).is_err());
    let msg = a.allocate(0x10_0000).unwrap_err().to_string();
    assert_eq!(
        msg,
        "no room for a 0x100000-byte BAR in the PCI window 0xc0000000-0xc00fffff; pass fewer --vfio devices"
    );
}

#[test]
fn large_64bit_bars_go_above_4g() {
    let mut w = BarWindows::default();
    assert_eq!(w.allocate(0x4000, true), Ok(PCI_MMIO32_START));
    assert_eq!(
        w.allocate(LARGE_BAR, false),
        Ok(PCI_MMIO32_START + LARGE_BAR)
    );
    assert_eq!(w.allocate(LARGE_BAR, true), Ok(PCI_MMIO64_START));
    assert_eq!(w.allocate(0x8000, false), Ok(PCI_MMIO32_START + 0x8000));
}

#[test]
fn port_bars_take_only_their_size() {
    let mut p = BarWindow::ports();
    let base = u64::from(PCI_IO_START);
    assert_eq!(p.allocate(4), Ok(base));
    assert_eq!(p.allocate(8), Ok(base + 8));
    assert_eq!(p.allocate(4), Ok(base + 4));
    assert!(p.allocate(u64::from(PCI_IO_SIZE)).is_err());
}
