use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
use vmm_sys_util::eventfd::EventFd;

use super::*;
use crate::devices::vfio_pci::VfioRegions;
use crate::layout::PCI_MMIO32_START;
use crate::pci::msix::MsiRouter;
use crate::pci::PciDevice;

/// A function with a 16 KiB 64-bit BAR 0 and a 256-byte BAR 2, no
/// MSI-X; BAR reads answer the BAR index.
struct TwoBars;

impl VfioRegions for TwoBars {
    fn read(&self, index: u32, buf: &mut [u8], offset: u64) {
        let reg: u32 = match (index, offset) {
            (VFIO_PCI_CONFIG_REGION_INDEX, 0x10) => 0x4, // 64-bit memory
            (VFIO_PCI_CONFIG_REGION_INDEX, _) => 0,
            (bar, _) => bar,
        };
        buf.copy_from_slice(&reg.to_le_bytes()[..buf.len()]);
    }
    fn write(&self, _: u32, _: &[u8], _: u64) {}
    fn size(&self, index: u32) -> u64 {
        match index {
            0 => 0x4000,
            2 => 0x100,
            _ => 0,
        }
    }
    fn enable_msix(&self, _: &[&EventFd]) -> std::io::Result<()> {
        Ok(())
    }
    fn disable_msix(&self) -> std::io::Result<()> {
        Ok(())
    }
}

struct NoVectors;

impl MsiRouter for NoVectors {
    fn allocate(&self) -> std::io::Result<u32> {
        Err(std::io::Error::other("no vectors in this test"))
    }
    fn route(&self, _: u32, _: u64, _: u32) -> std::io::Result<()> {
        Ok(())
    }
    fn attach(&self, _: &EventFd, _: u32) -> std::io::Result<()> {
        Ok(())
    }
    fn detach(&self, _: &EventFd, _: u32) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn bars_are_placed_programmed_and_on_the_bus() {
    let mut dev = VfioPciDevice::new(Arc::new(TwoBars), Arc::new(NoVectors)).unwrap();
    let mut windows = BarWindows::default();
    let placed = place_bars(&mut windows, &mut dev).unwrap();
    let gpas: Vec<_> = placed.iter().map(|b| (b.info.index, b.gpa)).collect();
    assert_eq!(
        gpas,
        [(0, PCI_MMIO32_START), (2, PCI_MMIO32_START + 0x4000)]
    );
    // The emulated BAR registers hold the addresses (64-bit BAR 0 keeps
    // its type bits, its upper half is 0 below 4 GiB).
    assert_eq!(dev.read_config(4), PCI_MMIO32_START as u32 | 0x4);
    assert_eq!(dev.read_config(5), 0);
    assert_eq!(dev.read_config(6), (PCI_MMIO32_START + 0x4000) as u32);

    let dev = Arc::new(Mutex::new(dev));
    let mmio = Bus::new();
    insert_bars(&mmio, &dev, &placed).unwrap();
    let mut d = [0u8; 4];
    assert!(mmio.read(PCI_MMIO32_START + 0x3ffc, &mut d));
    assert_eq!(u32::from_le_bytes(d), 0, "BAR 0");
    assert!(mmio.read(PCI_MMIO32_START + 0x4010, &mut d));
    assert_eq!(u32::from_le_bytes(d), 2, "BAR 2");
    assert!(!mmio.read(PCI_MMIO32_START + 0x4100, &mut d), "past BAR 2");
}
