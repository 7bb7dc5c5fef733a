//! Address buses: which device answers a port or MMIO access.
//!
//! One [`Bus`] for port I/O and one for MMIO. A device is inserted at a
//! base with a length and sees accesses as `(offset, data)`. Lookups are
//! read-mostly and happen on every exit, so the map sits behind an
//! `RwLock` and each device behind its own `Mutex`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

/// A device on a bus.
pub trait BusDevice: Send {
    /// Read `data.len()` bytes at `offset` from the device's base.
    fn read(&mut self, offset: u64, data: &mut [u8]);
    /// Write `data` at `offset` from the device's base.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// Why a device could not be inserted.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The range is empty, wraps, or overlaps a device already there.
    #[error("bus range {base:#x}+{len:#x} is empty or overlaps another device")]
    Overlap {
        /// Requested base.
        base: u64,
        /// Requested length.
        len: u64,
    },
}

struct Slot {
    len: u64,
    device: Arc<Mutex<dyn BusDevice>>,
}

/// A set of non-overlapping device ranges.
#[derive(Default)]
pub struct Bus {
    slots: RwLock<BTreeMap<u64, Slot>>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        f.debug_list()
            .entries(slots.iter().map(|(b, s)| (*b, s.len)))
            .finish()
    }
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Put `device` at `[base, base + len)`.
    pub fn insert(
        &self,
        device: Arc<Mutex<dyn BusDevice>>,
        base: u64,
        len: u64,
    ) -> Result<(), BusError> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(BusError::Overlap { base, len })?;
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let before = slots
            .range(..end)
            .next_back()
            .is_some_and(|(b, s)| b + s.len > base);
        if before {
            return Err(BusError::Overlap { base, len });
        }
        slots.insert(base, Slot { len, device });
        Ok(())
    }

    /// The device and offset for an access of `size` bytes at `addr`, if
    /// one device covers all of it.
    fn find(&self, addr: u64, size: usize) -> Option<(Arc<Mutex<dyn BusDevice>>, u64)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let (base, slot) = slots.range(..=addr).next_back()?;
        let offset = addr - base;
        let end = offset.checked_add(size as u64)?;
        (end <= slot.len).then(|| (slot.device.clone(), offset))
    }

    /// Dispatch a read; returns false (and fills `data` with 0xff, as an
    /// unclaimed bus reads) if no device claims it.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((dev, offset)) => {
                dev.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .read(offset, data);
                true
            }
            None => {
                data.fill(0xff);
                false
            }
        }
    }

    /// Dispatch a write; returns false if no device claims it.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((dev, offset)) => {
                dev.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .write(offset, data);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
