//! BAR placement inside the PCI MMIO windows and the port window, on
//! rust-vmm's `vm-allocator`.
//!
//! The windows themselves are [`vm_allocator::AddressAllocator`]s; what is
//! ours is the PCI policy on top: a BAR is naturally aligned (a PCI
//! requirement: its low address bits are its size bits), a memory BAR
//! takes at least a page so that each BAR can be mapped into the guest on
//! its own, and a large 64-bit BAR goes to the window above 4 GiB.
//! Allocation is first fit from the bottom of the window
//! (`AllocPolicy::FirstMatch`), so a gap left by an alignment is filled by
//! a later, smaller BAR.

use vm_allocator::{AddressAllocator, AllocPolicy};

use crate::layout::{
    PCI_IO_SIZE, PCI_IO_START, PCI_MMIO32_SIZE, PCI_MMIO32_START, PCI_MMIO64_SIZE, PCI_MMIO64_START,
};

/// BARs are at least a page so each can be mapped on its own.
pub const MIN_BAR_ALIGN: u64 = 0x1000;

/// 64-bit BARs of this size or more go to the window above 4 GiB; smaller
/// ones stay below it, where every guest can reach them.
pub const LARGE_BAR: u64 = 0x1000_0000;

/// Why a BAR could not be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    /// Sizes are powers of two.
    #[error("BAR size {0:#x} is not a power of two (PCI BARs are; the device reports a bad size)")]
    Size(u64),
    /// The window is full.
    #[error("no room for a {size:#x}-byte BAR in the PCI window {start:#x}-{end:#x}; pass fewer --vfio devices")]
    Exhausted {
        /// Requested size.
        size: u64,
        /// First address of the window.
        start: u64,
        /// Last address of the window.
        end: u64,
    },
}

/// One PCI window (MMIO or ports) handing out naturally aligned BAR ranges.
#[derive(Debug, Clone)]
pub struct BarWindow {
    space: AddressAllocator,
    /// The least a BAR takes: a page in MMIO windows, nothing more than
    /// its size for ports (they are not mapped).
    min: u64,
}

impl BarWindow {
    /// The MMIO window `[start, start + size)`; `None` if it is empty or
    /// wraps.
    pub fn new(start: u64, size: u64) -> Option<Self> {
        AddressAllocator::new(start, size)
            .ok()
            .map(|space| BarWindow {
                space,
                min: MIN_BAR_ALIGN,
            })
    }

    /// The port window of the layout, for port I/O BARs.
    pub fn ports() -> Self {
        BarWindow {
            space: AddressAllocator::new(u64::from(PCI_IO_START), u64::from(PCI_IO_SIZE))
                .expect("the port window of the layout is a valid range"),
            min: 1,
        }
    }

    /// A range of `size` bytes (a power of two) aligned to its size and to
    /// at least a page in an MMIO window; returns its first address.
    pub fn allocate(&mut self, size: u64) -> Result<u64, AllocError> {
        if !size.is_power_of_two() {
            return Err(AllocError::Size(size));
        }
        let len = size.max(self.min);
        self.space
            .allocate(len, len, AllocPolicy::FirstMatch)
            .map(|r| r.start())
            .map_err(|_| AllocError::Exhausted {
                size,
                start: self.space.base(),
                end: self.space.end(),
            })
    }
}

/// The guest's two PCI MMIO windows: 32-bit below the MMIO hole's top and
/// 64-bit above RAM (see [`crate::layout`]).
#[derive(Debug, Clone)]
pub struct BarWindows {
    below_4g: BarWindow,
    above_4g: BarWindow,
}

impl Default for BarWindows {
    fn default() -> Self {
        BarWindows {
            below_4g: BarWindow::new(PCI_MMIO32_START, PCI_MMIO32_SIZE)
                .expect("the 32-bit PCI window of the layout is a valid range"),
            above_4g: BarWindow::new(PCI_MMIO64_START, PCI_MMIO64_SIZE)
                .expect("the 64-bit PCI window of the layout is a valid range"),
        }
    }
}

impl BarWindows {
    /// Place a BAR of `size` bytes: a 64-bit BAR of [`LARGE_BAR`] or more
    /// above 4 GiB, anything else below.
    pub fn allocate(&mut self, size: u64, is64: bool) -> Result<u64, AllocError> {
        if is64 && size >= LARGE_BAR {
            self.above_4g.allocate(size)
        } else {
            self.below_4g.allocate(size)
        }
    }
}

#[cfg(test)]
mod tests;
