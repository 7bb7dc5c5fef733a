//! PCI segment 0: the root bus with its host bridge, configuration access
//! through ECAM (MMIO) and mechanism #1 ports (0xcf8/0xcfc), and the BAR
//! allocator.
//!
//! Only bus 0 and function 0 of each device exist; every other config
//! read returns all ones (no device), as on real hardware.

pub mod alloc;
pub mod config;
pub mod msix;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::bus::BusDevice;
use config::{PciConfig, PciIds};

/// A PCI function on segment 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bdf {
    /// Bus.
    pub bus: u8,
    /// Device (0-31).
    pub device: u8,
    /// Function (0-7).
    pub function: u8,
}

impl Bdf {
    /// Function 0 of `device` on bus 0.
    pub fn slot(device: u8) -> Bdf {
        Bdf {
            bus: 0,
            device,
            function: 0,
        }
    }

    /// The routing id (bus << 8 | device << 3 | function), which is the
    /// endpoint id the virtio-iommu knows it by.
    pub fn id(self) -> u32 {
        u32::from(self.bus) << 8 | u32::from(self.device) << 3 | u32::from(self.function)
    }
}

impl std::fmt::Display for Bdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "0000:{:02x}:{:02x}.{}",
            self.bus, self.device, self.function
        )
    }
}

/// A PCI function as the root bus sees it.
pub trait PciDevice: Send {
    /// Read dword register `reg` (byte offset / 4) of its config space.
    fn read_config(&mut self, reg: usize) -> u32;
    /// Write `data` at byte `offset` (0-3) within dword register `reg`.
    fn write_config(&mut self, reg: usize, offset: usize, data: &[u8]);
}

/// The host bridge at 00.0 (a Red Hat "QEMU PCIe host bridge" id, which
/// guests treat as a plain host bridge).
pub struct HostBridge {
    config: PciConfig,
}

impl Default for HostBridge {
    fn default() -> Self {
        HostBridge {
            config: PciConfig::new(PciIds {
                vendor: 0x1b36,
                device: 0x0008,
                class: (0x06, 0x00, 0x00),
                ..Default::default()
            }),
        }
    }
}

impl PciDevice for HostBridge {
    fn read_config(&mut self, reg: usize) -> u32 {
        self.config.read_reg(reg)
    }
    fn write_config(&mut self, reg: usize, offset: usize, data: &[u8]) {
        self.config.write_reg(reg, offset, data);
    }
}

/// A decoded configuration address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigAddress {
    /// Bus number.
    pub bus: u8,
    /// Device number (0-31).
    pub device: u8,
    /// Function (0-7).
    pub function: u8,
    /// Byte offset in the function's config space (0-4095).
    pub offset: u16,
}

impl ConfigAddress {
    /// Decode an offset into the ECAM window.
    pub fn from_ecam(offset: u64) -> Self {
        ConfigAddress {
            bus: (offset >> 20) as u8,
            device: ((offset >> 15) & 0x1f) as u8,
            function: ((offset >> 12) & 0x7) as u8,
            offset: (offset & 0xfff) as u16,
        }
    }

    /// Decode a 0xcf8 address register value, or `None` if the enable bit
    /// is clear. Bits 27:24 extend the register number (AMD extended
    /// config space), as Linux uses them.
    pub fn from_cf8(value: u32) -> Option<Self> {
        if value & (1 << 31) == 0 {
            return None;
        }
        Some(ConfigAddress {
            bus: (value >> 16) as u8,
            device: ((value >> 11) & 0x1f) as u8,
            function: ((value >> 8) & 0x7) as u8,
            offset: ((value & 0xfc) | ((value >> 16) & 0xf00)) as u16,
        })
    }
}

/// The devices of bus 0, by device number.
#[derive(Default)]
pub struct PciRoot {
    devices: BTreeMap<u8, Arc<Mutex<dyn PciDevice>>>,
}

/// Why a device could not be plugged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PciError {
    /// No free slot, or the slot asked for is taken or out of range.
    #[error("PCI slot {0} is taken or out of range (0-31)")]
    Slot(u8),
    /// Bus 0 is full.
    #[error("PCI bus 0 has no free slot")]
    Full,
}

impl PciRoot {
    /// Bus 0 with the host bridge at 00.0.
    pub fn new() -> Self {
        let mut root = PciRoot::default();
        root.devices
            .insert(0, Arc::new(Mutex::new(HostBridge::default())));
        root
    }

    /// Plug `dev` into the first free slot; returns its device number.
    pub fn add_device(&mut self, dev: Arc<Mutex<dyn PciDevice>>) -> Result<u8, PciError> {
        let slot = (0..32u8)
            .find(|s| !self.devices.contains_key(s))
            .ok_or(PciError::Full)?;
        self.devices.insert(slot, dev);
        Ok(slot)
    }

    fn device(&self, a: ConfigAddress) -> Option<&Arc<Mutex<dyn PciDevice>>> {
        if a.bus != 0 || a.function != 0 {
            return None;
        }
        self.devices.get(&a.device)
    }

    /// Config read of `data.len()` (1, 2 or 4) bytes at `a`.
    pub fn config_read(&self, a: ConfigAddress, data: &mut [u8]) {
        let reg = usize::from(a.offset / 4);
        let byte = usize::from(a.offset % 4);
        let value = match self.device(a) {
            Some(d) if byte + data.len() <= 4 => {
                d.lock().unwrap_or_else(|e| e.into_inner()).read_config(reg)
            }
            _ => u32::MAX,
        };
        let bytes = value.to_le_bytes();
        for (i, d) in data.iter_mut().enumerate() {
            *d = bytes.get(byte + i).copied().unwrap_or(0xff);
        }
    }

    /// Config write of `data` at `a`.
    pub fn config_write(&self, a: ConfigAddress, data: &[u8]) {
        let byte = usize::from(a.offset % 4);
        if byte + data.len() > 4 {
            return;
        }
        if let Some(d) = self.device(a) {
            d.lock().unwrap_or_else(|e| e.into_inner()).write_config(
                usize::from(a.offset / 4),
                byte,
                data,
            );
        }
    }
}

/// ECAM on the MMIO bus.
pub struct PciEcam(pub Arc<PciRoot>);

impl BusDevice for PciEcam {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        self.0.config_read(ConfigAddress::from_ecam(offset), data);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.config_write(ConfigAddress::from_ecam(offset), data);
    }
}

/// Configuration mechanism #1 on ports 0xcf8-0xcff.
pub struct PciConfigIo {
    root: Arc<PciRoot>,
    address: u32,
}

impl PciConfigIo {
    /// Ports answering for `root`.
    pub fn new(root: Arc<PciRoot>) -> Self {
        PciConfigIo { root, address: 0 }
    }

    fn target(&self, offset: u64) -> Option<ConfigAddress> {
        let mut a = ConfigAddress::from_cf8(self.address)?;
        a.offset += (offset - 4) as u16;
        Some(a)
    }
}

impl BusDevice for PciConfigIo {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        match offset {
            0 if data.len() == 4 => data.copy_from_slice(&self.address.to_le_bytes()),
            4..=7 => match self.target(offset) {
                Some(a) => self.root.config_read(a, data),
                None => data.fill(0xff),
            },
            _ => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        match offset {
            0 if data.len() == 4 => {
                self.address = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            }
            4..=7 => {
                if let Some(a) = self.target(offset) {
                    self.root.config_write(a, data);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
