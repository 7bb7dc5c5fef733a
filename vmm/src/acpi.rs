//! ACPI tables, built with `acpi_tables` and written below 1 MiB.
//!
//! RSDP (at [`ACPI_START`], also where Linux scans for it) -> XSDT ->
//! FADT (hardware-reduced: sleep control/status and reset registers in
//! I/O space, see [`crate::devices::power`]) -> DSDT (PCI host bridge on
//! ECAM, COM1, the ECAM reservation, `_S5_`), MADT (local APICs, IOAPIC),
//! MCFG (ECAM of segment 0, bus 0) and, when a virtio-iommu is present,
//! VIOT naming it and the PCI endpoints behind it.

use acpi_tables::aml::{
    self, AddressSpace, AddressSpaceCacheable, EISAName, Interrupt, Memory32Fixed, Name, Package,
    Path, ResourceTemplate, IO,
};
use acpi_tables::fadt::{FADTBuilder, Flags, PmProfile};
use acpi_tables::gas::{AccessSize, AddressSpace as GasSpace, GAS};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::mcfg::MCFG;
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::viot::{PciDevice, PciRange, VirtIoPciIommu, VIOT};
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::devices::power::S5_SLEEP_TYPE;
use crate::layout::{
    ACPI_END, ACPI_RESET_PORT, ACPI_RESET_VALUE, ACPI_SLEEP_CONTROL_PORT, ACPI_SLEEP_STATUS_PORT,
    ACPI_START, APIC_START, IOAPIC_START, PCI_CONFIG_IO_PORT, PCI_ECAM_SIZE, PCI_ECAM_START,
    PCI_MMIO32_SIZE, PCI_MMIO32_START, PCI_MMIO64_SIZE, PCI_MMIO64_START, SERIAL_IRQ, SERIAL_PORT,
};
use crate::pci::Bdf;

const OEM_ID: [u8; 6] = *b"VIOMMU";
const OEM_TABLE_ID: [u8; 8] = *b"VIOMMVMM";
const OEM_REVISION: u32 = 1;
/// IAPC_BOOT_ARCH: no VGA (bit 2), no CMOS RTC (bit 5).
const IAPC_BOOT_ARCH: u16 = (1 << 2) | (1 << 5);

fn viot_function(b: Bdf) -> PciDevice {
    PciDevice::new(0, b.bus, b.device, b.function)
}

/// A virtio-iommu and the endpoints it translates for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViotConfig {
    /// The virtio-iommu PCI function.
    pub iommu: Bdf,
    /// Endpoints behind it.
    pub endpoints: Vec<Bdf>,
}

/// What the tables describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpiConfig {
    /// vCPU count (APIC ids 0..cpus).
    pub cpus: u8,
    /// The vIOMMU topology, if any.
    pub viot: Option<ViotConfig>,
}

/// Why the tables could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AcpiError {
    /// They outgrew the area reserved for them.
    #[error("ACPI tables need {need} bytes, only {have} reserved")]
    TooBig {
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// Guest memory rejected the write.
    #[error("cannot write ACPI tables to guest memory")]
    Memory(#[source] vm_memory::GuestMemoryError),
}

fn bytes(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

/// The DSDT: PCI host bridge, COM1, motherboard resources, `_S5_`.
pub fn dsdt() -> Vec<u8> {
    let mmio32_end = (PCI_MMIO32_START + PCI_MMIO32_SIZE - 1) as u32;
    let mmio64_end = PCI_MMIO64_START + PCI_MMIO64_SIZE - 1;
    let bus = AddressSpace::new_bus_number(0u16, 0u16);
    let cf8 = IO::new(PCI_CONFIG_IO_PORT, PCI_CONFIG_IO_PORT, 1, 8);
    let io_lo = AddressSpace::new_io(0u16, PCI_CONFIG_IO_PORT - 1, None);
    let io_hi = AddressSpace::new_io(0xd00u16, 0xffffu16, None);
    let mem32 = AddressSpace::new_memory(
        AddressSpaceCacheable::NotCacheable,
        true,
        PCI_MMIO32_START as u32,
        mmio32_end,
        None,
    );
    let mem64 = AddressSpace::new_memory(
        AddressSpaceCacheable::NotCacheable,
        true,
        PCI_MMIO64_START,
        mmio64_end,
        None,
    );
    let pci_crs = ResourceTemplate::new(vec![&bus, &cf8, &io_lo, &io_hi, &mem32, &mem64]);
    let hid_pcie = EISAName::new("PNP0A08");
    let cid_pci = EISAName::new("PNP0A03");
    // Temporaries in one statement live until it ends, so each device is
    // serialized where it is built.
    let pci0 = bytes(&aml::Device::new(
        "_SB_.PCI0".into(),
        vec![
            &Name::new("_HID".into(), &hid_pcie),
            &Name::new("_CID".into(), &cid_pci),
            &Name::new("_ADR".into(), &aml::ZERO),
            &Name::new("_SEG".into(), &aml::ZERO),
            &Name::new("_UID".into(), &aml::ZERO),
            &Name::new("_BBN".into(), &aml::ZERO),
            &Name::new("_CRS".into(), &pci_crs),
        ],
    ));

    let com_irq = Interrupt::new(true, true, false, false, SERIAL_IRQ);
    let com_io = IO::new(SERIAL_PORT, SERIAL_PORT, 1, 8);
    let com_crs = ResourceTemplate::new(vec![&com_io, &com_irq]);
    let hid_uart = EISAName::new("PNP0501");
    let com1 = bytes(&aml::Device::new(
        "_SB_.COM1".into(),
        vec![
            &Name::new("_HID".into(), &hid_uart),
            &Name::new("_UID".into(), &aml::ZERO),
            &Name::new("_CRS".into(), &com_crs),
        ],
    ));

    // Motherboard resources: Linux accepts MMCONFIG reserved here (or in e820).
    let ecam = Memory32Fixed::new(false, PCI_ECAM_START as u32, PCI_ECAM_SIZE as u32);
    let pm_io = IO::new(ACPI_SLEEP_CONTROL_PORT, ACPI_SLEEP_CONTROL_PORT, 1, 3);
    let mbrd_crs = ResourceTemplate::new(vec![&ecam, &pm_io]);
    let hid_mbrd = EISAName::new("PNP0C02");
    let mbrd = bytes(&aml::Device::new(
        "_SB_.MBRD".into(),
        vec![
            &Name::new("_HID".into(), &hid_mbrd),
            &Name::new("_UID".into(), &aml::ZERO),
            &Name::new("_CRS".into(), &mbrd_crs),
        ],
    ));

    let s5_typ = S5_SLEEP_TYPE;
    let s5 = bytes(&Name::new(
        Path::new("_S5_"),
        &Package::new(vec![&s5_typ, &s5_typ, &aml::ZERO, &aml::ZERO]),
    ));

    let mut sdt = Sdt::new(*b"DSDT", 36, 6, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    for part in [pci0, com1, mbrd, s5] {
        sdt.append_slice(&part);
    }
    sdt.as_slice().to_vec()
}

/// The FADT: hardware-reduced ACPI with our sleep and reset registers.
pub fn fadt(dsdt_addr: u64) -> Vec<u8> {
    let io_byte = |port: u16| {
        GAS::new(
            GasSpace::SystemIo,
            8,
            0,
            AccessSize::ByteAccess,
            port.into(),
        )
    };
    let mut b = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .preferred_pm_profile(PmProfile::EnterpriseServer)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::ResetRegSup)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    b.reset_reg = io_byte(ACPI_RESET_PORT);
    b.reset_value = ACPI_RESET_VALUE;
    b.sleep_control_reg = io_byte(ACPI_SLEEP_CONTROL_PORT);
    b.sleep_status_reg = io_byte(ACPI_SLEEP_STATUS_PORT);
    b.iapc_boot_arch = IAPC_BOOT_ARCH.into();
    b.hypervisor_vendor_identity = u64::from_le_bytes(*b"VIOMMVMM").into();
    bytes(&b.finalize())
}

/// The MADT: one enabled local APIC per vCPU and the IOAPIC (GSI base 0).
pub fn madt(cpus: u8) -> Vec<u8> {
    let mut m = MADT::new(
        OEM_ID,
        OEM_TABLE_ID,
        OEM_REVISION,
        LocalInterruptController::Address(APIC_START as u32),
    );
    for cpu in 0..cpus {
        m.add_structure(ProcessorLocalApic::new(cpu, cpu, EnabledStatus::Enabled));
    }
    m.add_structure(IoApic::new(0, IOAPIC_START as u32, 0));
    bytes(&m)
}

/// The MCFG: ECAM for segment 0, bus 0.
pub fn mcfg() -> Vec<u8> {
    let mut m = MCFG::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    m.add_ecam(PCI_ECAM_START, 0, 0, 0);
    bytes(&m)
}

/// The VIOT: a virtio-iommu on PCI and one single-function range per endpoint.
pub fn viot(cfg: &ViotConfig) -> Vec<u8> {
    let mut v = VIOT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    let handle = v.add_virtio_pci_iommu(VirtIoPciIommu::new(viot_function(cfg.iommu)));
    for ep in &cfg.endpoints {
        v.add_pci_range(PciRange::new(
            viot_function(*ep),
            viot_function(*ep),
            &handle,
        ));
    }
    bytes(&v)
}

/// Write all tables at [`ACPI_START`]; returns the RSDP address.
pub fn write_tables(mem: &GuestMemoryMmap, cfg: &AcpiConfig) -> Result<GuestAddress, AcpiError> {
    let rsdp_addr = ACPI_START;
    let mut cursor = (rsdp_addr + Rsdp::len() as u64).next_multiple_of(16);
    let mut tables: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut place = |t: Vec<u8>| {
        let at = cursor;
        cursor = (cursor + t.len() as u64).next_multiple_of(16);
        tables.push((at, t));
        at
    };
    let dsdt_addr = place(dsdt());
    let mut xsdt_entries = vec![place(fadt(dsdt_addr)), place(madt(cfg.cpus)), place(mcfg())];
    if let Some(v) = &cfg.viot {
        xsdt_entries.push(place(viot(v)));
    }
    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    for e in xsdt_entries {
        xsdt.add_entry(e);
    }
    let xsdt_addr = place(bytes(&xsdt));
    if cursor > ACPI_END {
        return Err(AcpiError::TooBig {
            need: cursor - ACPI_START,
            have: ACPI_END - ACPI_START,
        });
    }
    mem.write_slice(
        &bytes(&Rsdp::new(OEM_ID, xsdt_addr)),
        GuestAddress(rsdp_addr),
    )
    .map_err(AcpiError::Memory)?;
    for (at, t) in tables {
        mem.write_slice(&t, GuestAddress(at))
            .map_err(AcpiError::Memory)?;
    }
    Ok(GuestAddress(rsdp_addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn read_table(mem: &GuestMemoryMmap, addr: u64) -> Vec<u8> {
        let mut hdr = [0u8; 8];
        mem.read_slice(&mut hdr, GuestAddress(addr)).unwrap();
        let mut t = vec![0u8; u32_at(&hdr, 4) as usize];
        mem.read_slice(&mut t, GuestAddress(addr)).unwrap();
        assert_eq!(sum(&t), 0, "checksum of {:?}", std::str::from_utf8(&t[..4]));
        t
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    fn tables(cfg: &AcpiConfig) -> (GuestMemoryMmap, Vec<Vec<u8>>) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
        let rsdp_addr = write_tables(&mem, cfg).unwrap();
        let mut rsdp = [0u8; 36];
        mem.read_slice(&mut rsdp, rsdp_addr).unwrap();
        assert_eq!(&rsdp[..8], b"RSD PTR ");
        assert_eq!(sum(&rsdp[..20]), 0);
        assert_eq!(sum(&rsdp), 0);
        assert_eq!(rsdp[15], 2, "ACPI 2.0+ RSDP");
        let xsdt = read_table(&mem, u64_at(&rsdp, 24));
        assert_eq!(&xsdt[..4], b"XSDT");
        let tables = xsdt[36..]
            .chunks_exact(8)
            .map(|c| read_table(&mem, u64::from_le_bytes(c.try_into().unwrap())))
            .collect();
        (mem, tables)
    }

    #[test]
    fn table_set_without_viot() {
        let (mem, t) = tables(&AcpiConfig {
            cpus: 2,
            viot: None,
        });
        let sigs: Vec<&[u8]> = t.iter().map(|t| &t[..4]).collect();
        assert_eq!(sigs, [b"FACP", b"APIC", b"MCFG"]);

        let fadt = &t[0];
        let flags = u32_at(fadt, 112);
        assert_ne!(flags & (1 << 20), 0, "HW_REDUCED_ACPI");
        assert_ne!(flags & (1 << 10), 0, "RESET_REG_SUP");
        // Reset register GAS at 116: system I/O, 8 bits, our port.
        assert_eq!(fadt[116], 1);
        assert_eq!(u64_at(fadt, 120), u64::from(ACPI_RESET_PORT));
        assert_eq!(fadt[128], ACPI_RESET_VALUE);
        // Sleep control/status GAS at 244 and 256.
        assert_eq!(u64_at(fadt, 248), u64::from(ACPI_SLEEP_CONTROL_PORT));
        assert_eq!(u64_at(fadt, 260), u64::from(ACPI_SLEEP_STATUS_PORT));
        assert_eq!(u16::from_le_bytes([fadt[109], fadt[110]]), IAPC_BOOT_ARCH);
        let dsdt = read_table(&mem, u64_at(fadt, 140));
        assert_eq!(&dsdt[..4], b"DSDT");
        for name in [&b"PCI0"[..], b"COM1", b"MBRD", b"_S5_", b"_CRS"] {
            assert!(contains(&dsdt, name), "{}", String::from_utf8_lossy(name));
        }
        // PNP0A08 as a compressed EISA id (0x080ad041).
        assert!(contains(&dsdt, &[0x41, 0xd0, 0x0a, 0x08]));

        let madt = &t[1];
        assert_eq!(u32_at(madt, 36), APIC_START as u32);
        // Entries: type, length.
        let mut off = 44;
        let mut kinds = Vec::new();
        while off < madt.len() {
            kinds.push((madt[off], madt[off + 3]));
            off += madt[off + 1] as usize;
        }
        assert_eq!(
            kinds,
            [(0, 0), (0, 1), (1, 0)],
            "(type, APIC id) of LAPIC 0, 1, IOAPIC"
        );

        let mcfg = &t[2];
        assert_eq!(u64_at(mcfg, 44), PCI_ECAM_START);
        assert_eq!((mcfg[54], mcfg[55]), (0, 0), "bus 0..0");
    }

    #[test]
    fn viot_names_iommu_and_endpoints() {
        let bdf = |device| Bdf {
            bus: 0,
            device,
            function: 0,
        };
        let (_, t) = tables(&AcpiConfig {
            cpus: 1,
            viot: Some(ViotConfig {
                iommu: bdf(2),
                endpoints: vec![bdf(3), bdf(4)],
            }),
        });
        let viot = t.iter().find(|t| &t[..4] == b"VIOT").expect("VIOT listed");
        assert_eq!(u16::from_le_bytes([viot[36], viot[37]]), 3, "node count");
        let first = u16::from_le_bytes([viot[38], viot[39]]) as usize;
        let mut off = first;
        let mut nodes = Vec::new();
        while off < viot.len() {
            let len = u16::from_le_bytes([viot[off + 2], viot[off + 3]]) as usize;
            nodes.push((viot[off], off));
            off += len;
        }
        assert_eq!(nodes.iter().map(|n| n.0).collect::<Vec<_>>(), [3, 1, 1]);
        let iommu_off = nodes[0].1 as u16;
        // virtio-pci IOMMU node: segment at +4, BDF at +6 (device 2 = 0x10).
        assert_eq!(
            u16::from_le_bytes([viot[nodes[0].1 + 6], viot[nodes[0].1 + 7]]),
            2 << 3
        );
        for (i, (_, o)) in nodes[1..].iter().enumerate() {
            let o = *o;
            let start = u16::from_le_bytes([viot[o + 12], viot[o + 13]]);
            let end = u16::from_le_bytes([viot[o + 14], viot[o + 15]]);
            assert_eq!(u32_at(viot, o + 4), u32::from(start), "endpoint id = BDF");
            assert_eq!((start, end), (((3 + i) << 3) as u16, ((3 + i) << 3) as u16));
            let handle = u16::from_le_bytes([viot[o + 16], viot[o + 17]]);
            assert_eq!(handle, iommu_off, "output node is the IOMMU");
        }
    }

    #[test]
    fn many_cpus_still_fit() {
        let (_, t) = tables(&AcpiConfig {
            cpus: crate::cli::MAX_CPUS,
            viot: None,
        });
        assert_eq!(t[1].len(), 44 + 8 * 254 + 12);
    }
}
