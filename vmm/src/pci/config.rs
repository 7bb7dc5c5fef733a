//! A type 0 PCI configuration space: header, BARs with sizing, and a
//! capability list. Devices own one and answer config cycles through it.

/// Bytes of configuration space (PCI Express: 4 KiB).
pub const CONFIG_SPACE_SIZE: usize = 4096;
const DWORDS: usize = CONFIG_SPACE_SIZE / 4;
/// Number of BARs in a type 0 header.
pub const NUM_BARS: usize = 6;
const BAR0_REG: usize = 4;
const STATUS_CAP_LIST: u32 = 1 << 20; // bit 4 of the status word (reg 1, high half)
const CAP_PTR_REG: usize = 0xd;
const FIRST_CAP_OFFSET: usize = 0x40;
const BAR_MEM_64: u32 = 0b100;
const BAR_PREFETCH: u32 = 0b1000;
const BAR_IO: u32 = 0b1;

/// What kind of memory a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// 32-bit memory BAR.
    Mmio32,
    /// 64-bit memory BAR (takes two BAR slots).
    Mmio64,
    /// Port I/O BAR (x86 port space; 4 to 256 bytes).
    Io,
}

/// Why a BAR or capability could not be added.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Bad BAR index, or its slot (or its upper half's) is taken.
    #[error("BAR {0} is out of range or already used")]
    BarSlot(usize),
    /// BAR sizes are powers of two: memory BARs at least 16 bytes, port
    /// I/O BARs 4 to 256.
    #[error("BAR size {0:#x} is not a power of two >= 16 (memory) or 4-256 (port I/O)")]
    BarSize(u64),
    /// The capability does not fit below 256 bytes.
    #[error("capability of {0} bytes does not fit in the config space")]
    CapabilityTooBig(usize),
}

#[derive(Debug, Clone, Copy)]
struct Bar {
    size: u64,
    kind: BarKind,
}

/// Identity of a function: the fixed part of its header.
#[derive(Debug, Clone, Copy, Default)]
pub struct PciIds {
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Revision.
    pub revision: u8,
    /// Class, subclass, programming interface.
    pub class: (u8, u8, u8),
    /// Subsystem vendor id.
    pub subsystem_vendor: u16,
    /// Subsystem id.
    pub subsystem: u16,
}

/// A function's configuration space.
#[derive(Clone)]
pub struct PciConfig {
    regs: Box<[u32; DWORDS]>,
    /// Bits the guest may change, per dword.
    writable: Box<[u32; DWORDS]>,
    bars: [Option<Bar>; NUM_BARS],
    last_cap: Option<usize>,
    next_cap: usize,
}

impl std::fmt::Debug for PciConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PciConfig")
            .field("id", &format_args!("{:08x}", self.regs[0]))
            .field("bars", &self.bars)
            .finish()
    }
}

impl PciConfig {
    /// A header with `ids`; command register writable (I/O, memory, bus
    /// master, INTx disable).
    pub fn new(ids: PciIds) -> Self {
        let mut regs = Box::new([0u32; DWORDS]);
        let mut writable = Box::new([0u32; DWORDS]);
        regs[0] = u32::from(ids.device) << 16 | u32::from(ids.vendor);
        let (class, sub, prog_if) = ids.class;
        regs[2] = u32::from(class) << 24
            | u32::from(sub) << 16
            | u32::from(prog_if) << 8
            | u32::from(ids.revision);
        regs[0xb] = u32::from(ids.subsystem) << 16 | u32::from(ids.subsystem_vendor);
        writable[1] = 0x0000_0407; // command: IO, MEM, bus master, INTx disable
        writable[0xf] = 0x0000_00ff; // interrupt line
        PciConfig {
            regs,
            writable,
            bars: [None; NUM_BARS],
            last_cap: None,
            next_cap: FIRST_CAP_OFFSET,
        }
    }

    /// Declare BAR `index` of `size` bytes.
    pub fn add_bar(&mut self, index: usize, size: u64, kind: BarKind) -> Result<(), ConfigError> {
        let slots = if kind == BarKind::Mmio64 { 2 } else { 1 };
        if index + slots > NUM_BARS || self.bars[index..index + slots].iter().any(Option::is_some) {
            return Err(ConfigError::BarSlot(index));
        }
        let sizes = match kind {
            BarKind::Mmio32 => 16..=1 << 31,
            BarKind::Mmio64 => 16..=u64::MAX,
            BarKind::Io => 4..=256,
        };
        if !size.is_power_of_two() || !sizes.contains(&size) {
            return Err(ConfigError::BarSize(size));
        }
        let mask = !(size - 1);
        let reg = BAR0_REG + index;
        match kind {
            BarKind::Mmio32 => {
                self.writable[reg] = mask as u32;
            }
            BarKind::Io => {
                self.regs[reg] = BAR_IO;
                self.writable[reg] = mask as u32 & !0x3;
            }
            BarKind::Mmio64 => {
                self.regs[reg] = BAR_MEM_64 | BAR_PREFETCH;
                self.writable[reg] = mask as u32 & !0xf;
                self.writable[reg + 1] = (mask >> 32) as u32;
                // The upper half is part of this BAR, not a BAR of its own.
                self.bars[index + 1] = Some(Bar { size: 0, kind });
            }
        }
        self.bars[index] = Some(Bar { size, kind });
        Ok(())
    }

    /// Size of BAR `index`, if it is the start of a BAR.
    pub fn bar_size(&self, index: usize) -> Option<u64> {
        self.bars.get(index)?.filter(|b| b.size > 0).map(|b| b.size)
    }

    /// The address BAR `index` is programmed with.
    pub fn bar_address(&self, index: usize) -> Option<u64> {
        let bar = self.bars.get(index)?.filter(|b| b.size > 0)?;
        let lo = u64::from(self.regs[BAR0_REG + index] & !0xf);
        Some(match bar.kind {
            BarKind::Mmio32 => lo,
            BarKind::Io => u64::from(self.regs[BAR0_REG + index] & !0x3),
            BarKind::Mmio64 => lo | u64::from(self.regs[BAR0_REG + index + 1]) << 32,
        })
    }

    /// Program BAR `index` with `addr` (as firmware would).
    pub fn set_bar_address(&mut self, index: usize, addr: u64) {
        let Some(bar) = self.bars.get(index).copied().flatten() else {
            return;
        };
        let reg = BAR0_REG + index;
        // The bits the guest cannot write are the BAR's kind and zeros.
        self.regs[reg] =
            (self.regs[reg] & !self.writable[reg]) | (addr as u32 & self.writable[reg]);
        if bar.kind == BarKind::Mmio64 {
            self.regs[reg + 1] = (addr >> 32) as u32 & self.writable[reg + 1];
        }
    }

    /// Append a capability: `body` starts with the capability id and a
    /// placeholder next pointer (both bytes are filled in here). Bytes
    /// set in `writable_mask` (same length as `body`) are guest-writable.
    /// Returns the capability's offset.
    pub fn add_capability(
        &mut self,
        id: u8,
        body: &[u8],
        writable_mask: &[u8],
    ) -> Result<usize, ConfigError> {
        let len = body.len().max(2).next_multiple_of(4);
        let off = self.next_cap;
        if off + len > 256 {
            return Err(ConfigError::CapabilityTooBig(body.len()));
        }
        for (i, &b) in body.iter().enumerate() {
            let v = match i {
                0 => id,
                1 => 0,
                _ => b,
            };
            self.set_byte(off + i, v);
            let w = writable_mask.get(i).copied().unwrap_or(0);
            let (reg, shift) = ((off + i) / 4, ((off + i) % 4) * 8);
            self.writable[reg] = (self.writable[reg] & !(0xff << shift)) | (u32::from(w) << shift);
        }
        match self.last_cap {
            Some(prev) => self.set_byte(prev + 1, off as u8),
            None => {
                self.set_byte(CAP_PTR_REG * 4, off as u8);
                self.regs[1] |= STATUS_CAP_LIST;
            }
        }
        self.last_cap = Some(off);
        self.next_cap = off + len;
        Ok(off)
    }

    fn set_byte(&mut self, off: usize, v: u8) {
        let (reg, shift) = (off / 4, (off % 4) * 8);
        self.regs[reg] = (self.regs[reg] & !(0xff << shift)) | (u32::from(v) << shift);
    }

    /// Read dword register `reg` (0..1024); out of range reads all ones.
    pub fn read_reg(&self, reg: usize) -> u32 {
        self.regs.get(reg).copied().unwrap_or(u32::MAX)
    }

    /// Write `data` (1, 2 or 4 bytes) at byte `offset` of dword `reg`,
    /// keeping read-only bits.
    pub fn write_reg(&mut self, reg: usize, offset: usize, data: &[u8]) {
        if reg >= DWORDS || offset + data.len() > 4 || data.is_empty() {
            return;
        }
        let mut val = 0u32;
        let mut lanes = 0u32;
        for (i, b) in data.iter().enumerate() {
            val |= u32::from(*b) << ((offset + i) * 8);
            lanes |= 0xff << ((offset + i) * 8);
        }
        let mask = self.writable[reg] & lanes;
        self.regs[reg] = (self.regs[reg] & !mask) | (val & mask);
    }

    /// Write a whole dword as the device itself (ignores write masks).
    pub fn write_reg_internal(&mut self, reg: usize, val: u32) {
        if let Some(r) = self.regs.get_mut(reg) {
            *r = val;
        }
    }
}

#[cfg(test)]
mod tests;
