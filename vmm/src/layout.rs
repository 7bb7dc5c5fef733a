//! Guest-physical and port layout of the x86_64 machine.
//!
//! ```text
//! 0x0000_0500  GDT                    0x0000_7000  zero page (boot_params)
//! 0x0000_0520  IDT                    0x0000_8ff0  boot stack top
//! 0x0000_9000  PML4, PDPT, 4 PDs      0x0002_0000  kernel command line
//! 0x000e_0000  ACPI tables (RSDP first, where Linux also scans for it)
//! 0x0010_0000  kernel (bzImage protected-mode part), then RAM
//! 0xc000_0000  PCI 32-bit MMIO window (BARs)       512 MiB
//! 0xe000_0000  PCI ECAM, bus 0                       1 MiB
//! 0xfec0_0000  IOAPIC            0xfee0_0000  local APICs
//! 0x1_0000_0000  RAM above 4 GiB, if any
//! 64 GiB       PCI 64-bit MMIO window (64-bit BARs)  64 GiB
//! ```

use vm_memory::GuestAddress;

/// GDT written by the VMM for the 64-bit entry.
pub const GDT_START: u64 = 0x500;
/// An empty IDT (the kernel installs its own).
pub const IDT_START: u64 = 0x520;
/// The Linux zero page (`struct boot_params`).
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer of the boot vCPU.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// Level 4 page table; the PDPT and page directories follow it page by page.
pub const PML4_START: u64 = 0x9000;
/// Kernel command line.
pub const CMDLINE_START: u64 = 0x2_0000;
/// Room for the command line (the kernel's own limit is 2048 on old
/// protocols and `cmdline_size` on new ones; we cap lower).
pub const CMDLINE_MAX_SIZE: usize = 0x1_0000;
/// Start of the extended BIOS data area: RAM below it is usable.
pub const EBDA_START: u64 = 0x9_fc00;
/// ACPI tables, RSDP first.
pub const ACPI_START: u64 = 0xe_0000;
/// End (exclusive) of the ACPI area (reserved in the e820 map): the
/// tables, then the reset vector's stub.
pub const ACPI_END: u64 = 0x10_0000;
/// Where a real-mode far jump to the BIOS reset vector (`F000:FFF0`)
/// lands. There is no BIOS: a stub there writes the ACPI reset register
/// ([`crate::acpi::write_reset_vector`]), so a guest that reboots through
/// the BIOS is reset too. The ACPI tables end before it.
pub const RESET_VECTOR: u64 = 0xf_fff0;
/// Where the kernel is loaded, and where RAM above 1 MiB starts.
pub const HIGH_RAM_START: u64 = 0x10_0000;

/// Start of the 32-bit MMIO hole; low RAM ends here at most.
pub const MMIO32_HOLE_START: u64 = 0xc000_0000;
/// PCI 32-bit MMIO window for BARs.
pub const PCI_MMIO32_START: u64 = 0xc000_0000;
/// Size of the 32-bit BAR window.
pub const PCI_MMIO32_SIZE: u64 = 0x2000_0000;
/// PCI Express enhanced configuration space (ECAM), bus 0 only.
pub const PCI_ECAM_START: u64 = 0xe000_0000;
/// ECAM size: 1 MiB per bus, one bus.
pub const PCI_ECAM_SIZE: u64 = 0x10_0000;
/// The (in-kernel) IOAPIC.
pub const IOAPIC_START: u64 = 0xfec0_0000;
/// The local APICs.
pub const APIC_START: u64 = 0xfee0_0000;
/// RAM beyond the hole continues here.
pub const RAM_64BIT_START: u64 = 0x1_0000_0000;
/// PCI 64-bit MMIO window for 64-bit BARs (needs 37 guest physical address bits).
pub const PCI_MMIO64_START: u64 = 0x10_0000_0000;
/// Size of the 64-bit BAR window.
pub const PCI_MMIO64_SIZE: u64 = 0x10_0000_0000;

/// 16550 UART (COM1) ports and IRQ.
pub const SERIAL_PORT: u16 = 0x3f8;
/// COM1's legacy IRQ (= IOAPIC pin = GSI).
pub const SERIAL_IRQ: u32 = 4;
/// i8042 data port; the command port is this + 4. A write of 0xfe to the
/// command port resets the machine.
pub const I8042_PORT: u16 = 0x60;
/// ACPI hardware-reduced sleep control register (FADT), 1 byte.
pub const ACPI_SLEEP_CONTROL_PORT: u16 = 0x600;
/// ACPI hardware-reduced sleep status register (FADT), 1 byte.
pub const ACPI_SLEEP_STATUS_PORT: u16 = 0x601;
/// ACPI reset register (FADT), 1 byte.
pub const ACPI_RESET_PORT: u16 = 0x602;
/// The value the guest writes to [`ACPI_RESET_PORT`] to reset.
pub const ACPI_RESET_VALUE: u8 = 0x1;
/// PCI configuration mechanism #1 address port (data at 0xcfc).
pub const PCI_CONFIG_IO_PORT: u16 = 0xcf8;
/// Ports for port I/O BARs (the virtio notify registers): inside the host
/// bridge's I/O window above 0xd00 in the DSDT, clear of the platform ports.
pub const PCI_IO_START: u16 = 0x1000;
/// Size of the port window for BARs.
pub const PCI_IO_SIZE: u16 = 0x1000;

// Fixed low structures stay clear of each other and below the EBDA.
const _: () = assert!(ZERO_PAGE_START + 0x1000 <= BOOT_STACK_POINTER);
const _: () = assert!(BOOT_STACK_POINTER < PML4_START);
const _: () = assert!(PML4_START + 6 * 0x1000 <= CMDLINE_START);
const _: () = assert!(CMDLINE_START + CMDLINE_MAX_SIZE as u64 <= EBDA_START);
const _: () = assert!(ACPI_START < RESET_VECTOR && RESET_VECTOR + 16 == ACPI_END);

/// Guest RAM regions for `mem_size` bytes of RAM: below the 32-bit hole,
/// then above 4 GiB.
pub fn ram_regions(mem_size: u64) -> Vec<(GuestAddress, u64)> {
    let low = mem_size.min(MMIO32_HOLE_START);
    let mut regions = vec![(GuestAddress(0), low)];
    if mem_size > low {
        regions.push((GuestAddress(RAM_64BIT_START), mem_size - low));
    }
    regions
}

#[cfg(test)]
mod tests;
