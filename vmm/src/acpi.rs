//! ACPI tables, built with `acpi_tables` and written below 1 MiB.
//!
//! RSDP (at [`ACPI_START`], also where Linux scans for it) -> XSDT ->
//! FADT (hardware-reduced: sleep control/status and reset registers in
//! I/O space, see [`crate::devices::power`]) -> DSDT (PCI host bridge on
//! ECAM, COM1, the ECAM reservation, `_S5_`), MADT (local APICs, IOAPIC),
//! MCFG (ECAM of segment 0, bus 0) and, when a virtio-iommu is present,
//! VIOT naming it and the PCI endpoints behind it. At the end of the area,
//! the BIOS reset vector's stub ([`write_reset_vector`]).

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
    ACPI_RESET_PORT, ACPI_RESET_VALUE, ACPI_SLEEP_CONTROL_PORT, ACPI_SLEEP_STATUS_PORT, ACPI_START,
    APIC_START, IOAPIC_START, PCI_CONFIG_IO_PORT, PCI_ECAM_SIZE, PCI_ECAM_START, PCI_MMIO32_SIZE,
    PCI_MMIO32_START, PCI_MMIO64_SIZE, PCI_MMIO64_START, RESET_VECTOR, SERIAL_IRQ, SERIAL_PORT,
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

/// Real-mode code at the BIOS reset vector: write the reset register
/// (`mov dx, ACPI_RESET_PORT; mov al, ACPI_RESET_VALUE; out dx, al`),
/// then `hlt` and, if woken, write it again.
pub fn reset_vector_stub() -> [u8; 9] {
    let [port_lo, port_hi] = ACPI_RESET_PORT.to_le_bytes();
    [
        0xba,
        port_lo,
        port_hi, // mov dx, port
        0xb0,
        ACPI_RESET_VALUE, // mov al, value
        0xee,             // out dx, al  (offset 5)
        0xf4,             // hlt
        0xeb,
        0xfc, // jmp -4: back to the out at offset 5
    ]
}

/// Write [`reset_vector_stub`] at [`RESET_VECTOR`].
///
/// Linux on a hardware-reduced ACPI platform, built with EFI support (as
/// distribution kernels are), reboots through EFI (`reboot_init` in
/// `arch/x86/kernel/reboot.c`: `efi_reboot_required()` is true on such a
/// platform, whether or not there is EFI), and without EFI runtime
/// services it falls through to the BIOS: real mode, a far jump to
/// `F000:FFF0`. Never the reset register, which it tries only when it
/// starts from ACPI. With nothing there the vCPU ran zeros in real mode
/// for ever (seen with Debian 13's kernel after sysrq `b`; its `reboot`
/// takes the same path). The stub makes that jump a reset, as on a
/// machine with firmware.
pub fn write_reset_vector(mem: &GuestMemoryMmap) -> Result<(), AcpiError> {
    mem.write_slice(&reset_vector_stub(), GuestAddress(RESET_VECTOR))
        .map_err(AcpiError::Memory)
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
    if cursor > RESET_VECTOR {
        return Err(AcpiError::TooBig {
            need: cursor - ACPI_START,
            have: RESET_VECTOR - ACPI_START,
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
mod tests;
