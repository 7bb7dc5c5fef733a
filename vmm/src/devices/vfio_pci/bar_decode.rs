//! The guest's Memory Space enable bit of a passed-through function, and
//! the KVM memory slots that follow it.
//!
//! Most of a BAR is mmap-ed from the VFIO device into the guest as memory
//! slots. When the guest clears Memory Space in the command register,
//! vfio-pci revokes those mmaps, and a guest access through a slot would
//! make `KVM_RUN` fail with `EFAULT`: the VMM would end as if it had failed.
//! So the slots go away before that write reaches the device, and come
//! back after a write that sets the bit again. In between, a guest access
//! to the BAR is an MMIO exit, answered as a device that does not decode:
//! reads are all-ones, writes are dropped, and a rate-limited warning says so.

use std::sync::Arc;

use viommu_device::{guest_error, guest_warn};

/// The command register's offset in config space.
const COMMAND: usize = 0x04;
/// Memory Space enable, bit 1 of the command register's low byte.
const MEMORY_SPACE: u8 = 1 << 1;

/// A passed-through function's BAR memory slots, taken out of the guest's
/// memory map and put back (in KVM: `KVM_SET_USER_MEMORY_REGION`, size 0
/// to remove).
pub trait BarSlots: Send + Sync {
    /// Put the slots in the guest's memory map (`true`) or take them out.
    fn set_present(&self, present: bool) -> std::io::Result<()>;
}

/// Memory Space as the guest last wrote it, and the slots that follow it.
pub struct MemDecode {
    slots: Option<Arc<dyn BarSlots>>,
    /// What the guest last wrote (on until it writes otherwise: the slots
    /// are in place from the start).
    enabled: bool,
}

impl Default for MemDecode {
    fn default() -> Self {
        MemDecode {
            slots: None,
            enabled: true,
        }
    }
}

impl MemDecode {
    /// The slots to take out and put back; without them (no BAR mapped
    /// into the guest) only the accesses are refused while decode is off.
    pub fn set_slots(&mut self, slots: Arc<dyn BarSlots>) {
        self.slots = Some(slots);
    }

    /// Whether the guest has Memory Space on (as far as it last wrote).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The Memory Space bit a guest config write of `data` at byte `off`
    /// sets or clears, if it writes the command register's low byte.
    fn written_bit(off: usize, data: &[u8]) -> Option<bool> {
        let i = COMMAND.checked_sub(off)?;
        data.get(i).map(|b| b & MEMORY_SPACE != 0)
    }

    /// Before a guest config write of `data` at byte `off` reaches the
    /// device: if it clears Memory Space, take the slots out first (an
    /// access after the device stops decoding must not reach its mmap).
    pub fn before_write(&mut self, off: usize, data: &[u8]) {
        if Self::written_bit(off, data) == Some(false) && self.enabled {
            self.enabled = false;
            self.set_present(false);
        }
    }

    /// After the write reached the device: if it set Memory Space again,
    /// put the slots back.
    pub fn after_write(&mut self, off: usize, data: &[u8]) {
        if Self::written_bit(off, data) == Some(true) && !self.enabled {
            self.enabled = true;
            self.set_present(true);
        }
    }

    fn set_present(&self, present: bool) {
        let Some(slots) = &self.slots else { return };
        match slots.set_present(present) {
            Ok(()) => tracing::debug!(present, "VFIO BAR memory slots follow Memory Space"),
            Err(e) => guest_error!(
                present,
                "VFIO BAR memory slots could not follow Memory Space: {e}"
            ),
        }
    }

    /// A guest read of BAR `bar` while Memory Space is off: all-ones.
    pub fn refuse_read(&self, bar: usize, offset: u64, data: &mut [u8]) {
        data.fill(0xff);
        guest_warn!(
            bar,
            offset,
            len = data.len(),
            "guest read a VFIO BAR with Memory Space off: all-ones"
        );
    }

    /// A guest write of BAR `bar` while Memory Space is off: dropped.
    pub fn refuse_write(&self, bar: usize, offset: u64, len: usize) {
        guest_warn!(
            bar,
            offset,
            len,
            "guest wrote a VFIO BAR with Memory Space off: dropped"
        );
    }
}

#[cfg(test)]
mod tests;
