//! MSI-X: the vector table and pending bits of one PCI function, and
//! delivery of its messages.

use std::sync::Arc;

/// Bytes per MSI-X table entry.
pub const ENTRY_SIZE: u64 = 16;
const CTRL_MASKED: u32 = 1;
/// "No vector" as virtio writes it.
pub const NO_VECTOR: u16 = 0xffff;

/// Sends an MSI message (on KVM: `KVM_SIGNAL_MSI`).
pub trait MsiSender: Send + Sync {
    /// Deliver the message `data` to `address`.
    fn send(&self, address: u64, data: u32) -> std::io::Result<()>;
}

/// Routes MSIs to interrupt lines that devices signal by eventfd (on KVM:
/// GSI routing plus irqfd), so interrupts bypass the VMM.
pub trait MsiRouter: Send + Sync {
    /// A fresh interrupt line.
    fn allocate(&self) -> std::io::Result<u32>;
    /// Make `gsi` deliver the message `data` to `address`.
    fn route(&self, gsi: u32, address: u64, data: u32) -> std::io::Result<()>;
    /// Signals of `fd` raise `gsi` (a signal pending from before is delivered now).
    fn attach(&self, fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()>;
    /// Signals of `fd` no longer raise `gsi` (they accumulate in the eventfd).
    fn detach(&self, fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()>;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    addr_lo: u32,
    addr_hi: u32,
    data: u32,
    ctrl: u32,
}

impl Default for MsixTable {
    fn default() -> Self {
        Self::new(1)
    }
}

/// The table, the pending bits and the capability's enable/mask bits.
#[derive(Debug)]
pub struct MsixTable {
    entries: Vec<Entry>,
    pending: Vec<bool>,
    enabled: bool,
    function_masked: bool,
}

impl MsixTable {
    /// A table of `vectors` entries, all masked (the reset state).
    pub fn new(vectors: u16) -> Self {
        let n = usize::from(vectors.max(1));
        MsixTable {
            entries: vec![
                Entry {
                    ctrl: CTRL_MASKED,
                    ..Default::default()
                };
                n
            ],
            pending: vec![false; n],
            enabled: false,
            function_masked: false,
        }
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty (never: at least one vector).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether MSI-X is enabled in the capability.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Vector `v`'s message, if it may be delivered now (MSI-X enabled,
    /// function and vector unmasked).
    pub fn deliverable_message(&self, v: usize) -> Option<(u64, u32)> {
        (v < self.entries.len() && self.deliverable(v)).then(|| self.message(v))
    }

    /// Reset to all masked, nothing pending, disabled.
    pub fn reset(&mut self) {
        *self = Self::new(self.entries.len() as u16);
    }

    /// Update from the capability's message control word; returns the
    /// messages that became deliverable (vectors pending and now unmasked).
    pub fn set_control(&mut self, enabled: bool, function_masked: bool) -> Vec<(u64, u32)> {
        self.enabled = enabled;
        self.function_masked = function_masked;
        self.flush_pending()
    }

    fn deliverable(&self, v: usize) -> bool {
        self.enabled && !self.function_masked && self.entries[v].ctrl & CTRL_MASKED == 0
    }

    /// Vector `v`'s message (address, data), masked or not; `v` must be
    /// in range.
    pub fn message(&self, v: usize) -> (u64, u32) {
        let e = &self.entries[v];
        (u64::from(e.addr_hi) << 32 | u64::from(e.addr_lo), e.data)
    }

    fn flush_pending(&mut self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        for v in 0..self.entries.len() {
            if self.pending[v] && self.deliverable(v) {
                self.pending[v] = false;
                out.push(self.message(v));
            }
        }
        out
    }

    /// Raise `vector`: the message to send now, or `None` if it was
    /// masked (then it is pending) or out of range.
    pub fn raise(&mut self, vector: u16) -> Option<(u64, u32)> {
        let v = usize::from(vector);
        if v >= self.entries.len() {
            return None;
        }
        if self.deliverable(v) {
            Some(self.message(v))
        } else {
            self.pending[v] = true;
            None
        }
    }

    /// Read table bytes (dword or qword accesses, as the spec allows).
    pub fn read_table(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let mut bytes = [0u8; 8];
        for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&self.dword(offset + 4 * i as u64).to_le_bytes());
        }
        if offset.is_multiple_of(4) && data.len() <= 8 {
            let n = data.len();
            data.copy_from_slice(&bytes[..n]);
        }
    }

    fn dword(&self, offset: u64) -> u32 {
        let v = (offset / ENTRY_SIZE) as usize;
        let Some(e) = self.entries.get(v) else {
            return 0;
        };
        match offset % ENTRY_SIZE {
            0 => e.addr_lo,
            4 => e.addr_hi,
            8 => e.data,
            12 => e.ctrl,
            _ => 0,
        }
    }

    /// Write table bytes; returns messages that became deliverable
    /// (an entry unmasked with its pending bit set).
    pub fn write_table(&mut self, offset: u64, data: &[u8]) -> Vec<(u64, u32)> {
        if !offset.is_multiple_of(4) || !(data.len() == 4 || data.len() == 8) {
            return Vec::new();
        }
        for (i, chunk) in data.chunks_exact(4).enumerate() {
            let off = offset + 4 * i as u64;
            let val = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let v = (off / ENTRY_SIZE) as usize;
            let Some(e) = self.entries.get_mut(v) else {
                continue;
            };
            match off % ENTRY_SIZE {
                0 => e.addr_lo = val,
                4 => e.addr_hi = val,
                8 => e.data = val,
                _ => e.ctrl = val & CTRL_MASKED,
            }
        }
        self.flush_pending()
    }

    /// Read the pending bit array.
    pub fn read_pba(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let base = (offset as usize + i) * 8;
            *b = (0..8)
                .filter(|bit| self.pending.get(base + bit).copied().unwrap_or(false))
                .fold(0u8, |acc, bit| acc | (1 << bit));
        }
    }
}

/// Send each message through `sender`, logging failures.
pub fn send_all(sender: &Arc<dyn MsiSender>, msgs: Vec<(u64, u32)>) {
    for (addr, data) in msgs {
        if let Err(e) = sender.send(addr, data) {
            // The guest programmed the message.
            viommu_device::guest_warn!("MSI to {addr:#x} data {data:#x} failed: {e}");
        }
    }
}

/// A router that records routes and keeps the attached irqfds (tests of
/// the devices that route their vectors).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct RecordingRouter {
    next: std::sync::Mutex<u32>,
    pub(crate) routes: std::sync::Mutex<std::collections::BTreeMap<u32, (u64, u32)>>,
    pub(crate) attached:
        std::sync::Mutex<std::collections::BTreeMap<u32, vmm_sys_util::eventfd::EventFd>>,
}

#[cfg(test)]
impl MsiRouter for RecordingRouter {
    fn allocate(&self) -> std::io::Result<u32> {
        let mut n = self.next.lock().unwrap();
        *n += 1;
        Ok(23 + *n)
    }
    fn route(&self, gsi: u32, address: u64, data: u32) -> std::io::Result<()> {
        self.routes.lock().unwrap().insert(gsi, (address, data));
        Ok(())
    }
    fn attach(&self, fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()> {
        self.attached.lock().unwrap().insert(gsi, fd.try_clone()?);
        Ok(())
    }
    fn detach(&self, _fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()> {
        self.attached.lock().unwrap().remove(&gsi);
        Ok(())
    }
}

#[cfg(test)]
impl RecordingRouter {
    /// Whether an irqfd is attached to `gsi`.
    pub(crate) fn is_attached(&self, gsi: u32) -> bool {
        self.attached.lock().unwrap().contains_key(&gsi)
    }

    /// Signals on `gsi`'s irqfd since the last call.
    pub(crate) fn fired(&self, gsi: u32) -> u64 {
        self.attached.lock().unwrap()[&gsi].read().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
