//! BAR address allocation inside the PCI MMIO windows.

/// Hands out naturally aligned ranges from `[start, end)`, bump style
/// (devices are plugged once at startup; nothing is freed).
#[derive(Debug, Clone)]
pub struct BarAllocator {
    next: u64,
    end: u64,
}

/// Why a BAR could not be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    /// Sizes are powers of two.
    #[error("BAR size {0:#x} is not a power of two")]
    Size(u64),
    /// The window is full.
    #[error("no room for a {size:#x}-byte BAR in the PCI window")]
    Exhausted {
        /// Requested size.
        size: u64,
    },
}

/// BARs are at least a page so each can be mapped on its own.
pub const MIN_BAR_ALIGN: u64 = 0x1000;

impl BarAllocator {
    /// An allocator for the window `[start, start + size)`.
    pub fn new(start: u64, size: u64) -> Self {
        BarAllocator {
            next: start,
            end: start.saturating_add(size),
        }
    }

    /// A range of `size` bytes aligned to its size (and to at least a page).
    pub fn allocate(&mut self, size: u64) -> Result<u64, AllocError> {
        if !size.is_power_of_two() {
            return Err(AllocError::Size(size));
        }
        let align = size.max(MIN_BAR_ALIGN);
        let base = self
            .next
            .checked_next_multiple_of(align)
            .ok_or(AllocError::Exhausted { size })?;
        let end = base
            .checked_add(size.max(MIN_BAR_ALIGN))
            .filter(|&e| e <= self.end)
            .ok_or(AllocError::Exhausted { size })?;
        self.next = end;
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_alignment_and_exhaustion() {
        let mut a = BarAllocator::new(0xc000_0000, 0x10_0000);
        assert_eq!(a.allocate(0x100), Ok(0xc000_0000));
        assert_eq!(a.allocate(0x4000), Ok(0xc000_4000));
        assert_eq!(a.allocate(0x1000), Ok(0xc000_8000));
        assert_eq!(a.allocate(0x8_0000), Ok(0xc008_0000));
        assert_eq!(a.allocate(0x3000), Err(AllocError::Size(0x3000)));
        assert_eq!(
            a.allocate(0x8_0000),
            Err(AllocError::Exhausted { size: 0x8_0000 })
        );
        // Bump allocation: gaps left by alignment are not reused.
        assert_eq!(
            a.allocate(0x1000),
            Err(AllocError::Exhausted { size: 0x1000 })
        );
        let mut top = BarAllocator::new(u64::MAX - 0xfff, 0x1000);
        assert!(top.allocate(0x2000).is_err());
    }
}
