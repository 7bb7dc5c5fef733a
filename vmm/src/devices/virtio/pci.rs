//! The virtio-pci modern transport: capabilities in config space, one
//! 64-bit memory BAR holding the common, ISR, device and notify regions
//! and the MSI-X table and PBA, and optionally a port I/O BAR with notify
//! registers of its own, offered first.
//!
//! Why notify by port: a notify write that leaves KVM for the VMM (the
//! vCPU serves the virtio-iommu's kicks, `--viommu-kicks vcpu`) costs KVM
//! an instruction emulation when it is an MMIO write (the exit says only
//! the address; KVM decodes the guest's instruction to learn the value),
//! and none for an `out` (the exit carries port, size and value, and the
//! next instruction's address on AMD). Both notify capabilities describe
//! the same queues; the spec lets a device offer several of a type, in
//! its order of preference, and Linux takes the first one it can use.
//!
//! Interrupts are MSI-X only (no INTx): a queue or config vector of
//! `NO_VECTOR` raises nothing but the ISR bit. The optional
//! VIRTIO_PCI_CAP_PCI_CFG access window is not offered yet.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use kvm_ioctls::IoEventAddress;
use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_DRIVER_OK, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
    VIRTIO_F_VERSION_1,
};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::{VirtioDevice, VirtioInterrupt};
use crate::bus::BusDevice;
use crate::pci::config::{BarKind, ConfigError, PciConfig, PciIds};
use crate::pci::msix::{send_all, MsiRouter, MsiSender, MsixTable, ENTRY_SIZE, NO_VECTOR};
use crate::pci::PciDevice;
use interrupt::{Irqfds, PciInterrupt, Vectors};

/// PCI vendor id of virtio devices.
pub const VIRTIO_PCI_VENDOR: u16 = 0x1af4;
/// Modern device ids are 0x1040 + the virtio device id.
pub const VIRTIO_PCI_DEVICE_BASE: u16 = 0x1040;

/// Size of BAR 0.
pub const BAR_SIZE: u64 = 0x8000;
const COMMON_OFFSET: u64 = 0x0000;
const COMMON_SIZE: u64 = 0x38;
const ISR_OFFSET: u64 = 0x1000;
const DEVICE_CFG_OFFSET: u64 = 0x2000;
const DEVICE_CFG_SIZE: u64 = 0x1000;
const NOTIFY_OFFSET: u64 = 0x3000;
const NOTIFY_MULTIPLIER: u32 = 4;
/// Port notify registers: 2 bytes per queue (the driver writes the
/// queue's index as a 16-bit value), in BAR 2.
const PORT_NOTIFY_MULTIPLIER: u32 = 2;
const PORT_NOTIFY_BAR: u8 = 2;
const MSIX_TABLE_OFFSET: u64 = 0x4000;
const MSIX_PBA_OFFSET: u64 = 0x6000;
const REGION_SIZE: u64 = 0x1000;

const CAP_VENDOR: u8 = 0x09;
const CAP_MSIX: u8 = 0x11;
const CFG_TYPE_COMMON: u8 = 1;
const CFG_TYPE_NOTIFY: u8 = 2;
const CFG_TYPE_ISR: u8 = 3;
const CFG_TYPE_DEVICE: u8 = 4;
const MSIX_ENABLE: u32 = 1 << 31; // in the dword holding message control
const MSIX_FUNCTION_MASK: u32 = 1 << 30;

/// Where a driver is offered the queues' notify registers
/// (`--viommu-notify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NotifyRegister {
    /// Port I/O registers offered first, the MMIO ones second (for drivers
    /// that map only memory): a notify that exits to the VMM needs no
    /// instruction emulation in KVM (module doc).
    Port,
    /// MMIO registers in BAR 0 only.
    Mmio,
}

/// Size of the port notify BAR for `queues` queues (a power of two, at
/// least the 4 bytes of the smallest I/O BAR).
pub fn port_notify_size(queues: usize) -> u16 {
    (PORT_NOTIFY_MULTIPLIER as usize * queues)
        .next_power_of_two()
        .max(4) as u16
}

/// A virtio_pci_cap (16 bytes) in BAR 0, or virtio_pci_notify_cap with the
/// multiplier.
fn virtio_cap(cfg_type: u8, offset: u64, length: u64, multiplier: Option<u32>) -> Vec<u8> {
    virtio_cap_in(0, cfg_type, offset, length, multiplier)
}

/// [`virtio_cap`] in BAR `bar`.
fn virtio_cap_in(
    bar: u8,
    cfg_type: u8,
    offset: u64,
    length: u64,
    multiplier: Option<u32>,
) -> Vec<u8> {
    let len: u8 = if multiplier.is_some() { 20 } else { 16 };
    let mut c = vec![CAP_VENDOR, 0, len, cfg_type, bar, 0, 0, 0];
    c.extend_from_slice(&(offset as u32).to_le_bytes());
    c.extend_from_slice(&(length as u32).to_le_bytes());
    if let Some(m) = multiplier {
        c.extend_from_slice(&m.to_le_bytes());
    }
    c
}

#[derive(Debug, Clone, Copy)]
struct QueueState {
    max: u16,
    size: u16,
    ready: bool,
    desc: u64,
    avail: u64,
    used: u64,
}

impl QueueState {
    fn new(max: u16) -> Self {
        QueueState {
            max,
            size: max,
            ready: false,
            desc: 0,
            avail: 0,
            used: 0,
        }
    }
}
/// Why a queue the driver set up cannot be used.
#[derive(Debug, thiserror::Error)]
enum QueueSetupError {
    #[error("queue max size {0} refused by virtio-queue")]
    Max(u16),
    #[error("size {0} is not a power of two from 1 to the maximum")]
    Size(u16),
    #[error("{what} address {addr:#x} is not aligned")]
    Align { what: &'static str, addr: u64 },
}

impl QueueState {
    /// The queue as the driver set it, every value checked: a value
    /// virtio-queue refuses is an error here, never its default (which
    /// would put the rings at GPA 0) nor a log line of its own.
    fn to_queue(self) -> Result<Queue, QueueSetupError> {
        let mut q = Queue::new(self.max).map_err(|_| QueueSetupError::Max(self.max))?;
        q.try_set_size(self.size)
            .map_err(|_| QueueSetupError::Size(self.size))?;
        let align = |what, addr| QueueSetupError::Align { what, addr };
        q.try_set_desc_table_address(GuestAddress(self.desc))
            .map_err(|_| align("descriptor table", self.desc))?;
        q.try_set_avail_ring_address(GuestAddress(self.avail))
            .map_err(|_| align("available ring", self.avail))?;
        q.try_set_used_ring_address(GuestAddress(self.used))
            .map_err(|_| align("used ring", self.used))?;
        q.set_ready(self.ready);
        Ok(q)
    }
}

/// A virtio device on PCI. Plug it into the PCI root (config space) and
/// map [`BAR_SIZE`] bytes of it on the MMIO bus at the address of BAR 0;
/// with port notify registers, a [`PortNotify`] of it on the port bus at
/// the BAR 2 port.
pub struct VirtioPciDevice {
    config: PciConfig,
    msix_cap: usize,
    device: Box<dyn VirtioDevice>,
    mem: GuestMemoryMmap,
    msix: Arc<Mutex<MsixTable>>,
    msi: Arc<dyn MsiSender>,
    /// The vectors' irqfds, once [`VirtioPciDevice::use_irqfds`] made
    /// them; until then interrupts go through `msi`.
    irqfds: Option<Arc<Irqfds>>,
    vectors: Arc<Vectors>,
    isr: Arc<AtomicU8>,
    queues: Vec<QueueState>,
    queue_select: u16,
    device_feature_select: u32,
    driver_feature_select: u32,
    driver_features: u64,
    status: u8,
    config_generation: u8,
    active: bool,
    /// The device status before a reset the device has not finished yet
    /// (see [`VirtioDevice::reset_pending`]).
    resetting: Option<u8>,
}

impl VirtioPciDevice {
    /// Wrap `device`; its BAR 0 is programmed at `bar_addr`, and with
    /// `notify_port` BAR 2 holds port notify registers from that port
    /// ([`port_notify_size`] ports), offered before BAR 0's.
    pub fn new(
        device: Box<dyn VirtioDevice>,
        mem: GuestMemoryMmap,
        msi: Arc<dyn MsiSender>,
        bar_addr: u64,
        notify_port: Option<u16>,
    ) -> Result<Self, ConfigError> {
        let max_sizes = device.queue_max_sizes();
        let nvec = max_sizes.len() as u16 + 1; // one per queue plus config
        let mut config = PciConfig::new(PciIds {
            vendor: VIRTIO_PCI_VENDOR,
            device: VIRTIO_PCI_DEVICE_BASE + device.device_type() as u16,
            revision: 1,
            // Other system peripheral.
            class: (0x08, 0x80, 0x00),
            subsystem_vendor: VIRTIO_PCI_VENDOR,
            subsystem: 0x1100,
        });
        config.add_bar(0, BAR_SIZE, BarKind::Mmio64)?;
        config.set_bar_address(0, bar_addr);
        if let Some(port) = notify_port {
            let bar = usize::from(PORT_NOTIFY_BAR);
            config.add_bar(
                bar,
                u64::from(port_notify_size(max_sizes.len())),
                BarKind::Io,
            )?;
            config.set_bar_address(bar, u64::from(port));
            let cap = virtio_cap_in(
                PORT_NOTIFY_BAR,
                CFG_TYPE_NOTIFY,
                0,
                u64::from(PORT_NOTIFY_MULTIPLIER) * max_sizes.len() as u64,
                Some(PORT_NOTIFY_MULTIPLIER),
            );
            config.add_capability(CAP_VENDOR, &cap, &[])?;
        }
        for cap in [
            virtio_cap(CFG_TYPE_COMMON, COMMON_OFFSET, COMMON_SIZE, None),
            virtio_cap(CFG_TYPE_ISR, ISR_OFFSET, 1, None),
            virtio_cap(CFG_TYPE_DEVICE, DEVICE_CFG_OFFSET, DEVICE_CFG_SIZE, None),
            virtio_cap(
                CFG_TYPE_NOTIFY,
                NOTIFY_OFFSET,
                u64::from(NOTIFY_MULTIPLIER) * max_sizes.len() as u64,
                Some(NOTIFY_MULTIPLIER),
            ),
        ] {
            config.add_capability(CAP_VENDOR, &cap, &[])?;
        }
        let mut msix_cap = vec![CAP_MSIX, 0];
        msix_cap.extend_from_slice(&(nvec - 1).to_le_bytes());
        msix_cap.extend_from_slice(&(MSIX_TABLE_OFFSET as u32).to_le_bytes()); // BIR 0
        msix_cap.extend_from_slice(&(MSIX_PBA_OFFSET as u32).to_le_bytes());
        // Only the enable and function-mask bits are writable.
        let msix_cap = config.add_capability(CAP_MSIX, &msix_cap, &[0, 0, 0, 0xc0])?;
        let queues = max_sizes.iter().map(|&m| QueueState::new(m)).collect();
        let vectors = Arc::new(Vectors {
            config: AtomicU16::new(NO_VECTOR),
            queues: max_sizes
                .iter()
                .map(|_| AtomicU16::new(NO_VECTOR))
                .collect(),
        });
        Ok(VirtioPciDevice {
            config,
            msix_cap,
            device,
            mem,
            msix: Arc::new(Mutex::new(MsixTable::new(nvec))),
            msi,
            irqfds: None,
            vectors,
            isr: Arc::new(AtomicU8::new(0)),
            queues,
            queue_select: 0,
            device_feature_select: 0,
            driver_feature_select: 0,
            driver_features: 0,
            status: 0,
            config_generation: 0,
            active: false,
            resetting: None,
        })
    }

    /// Raise the device's interrupts through an irqfd per MSI-X vector,
    /// routed by `router` (call before the device is activated). Interrupts
    /// that become deliverable on an unmask still go through the
    /// `MsiSender`, from the vCPU that unmasked.
    pub fn use_irqfds(&mut self, router: Arc<dyn MsiRouter>) -> std::io::Result<()> {
        let n = self.msix().len();
        let lines = Irqfds::new(router, n)?;
        for v in 0..n {
            lines.route(v, self.msix().message(v));
        }
        self.irqfds = Some(Arc::new(lines));
        Ok(())
    }

    /// A system reset (the guest reboots): the device reset as by a
    /// status write of 0, MSI-X disabled with every vector masked, and
    /// memory decode and bus mastering off. The BARs keep their addresses.
    pub fn system_reset(&mut self) {
        self.reset();
        self.config.write_reg(self.msix_cap / 4, 2, &[0, 0]);
        self.msix().reset();
        self.config.write_reg(1, 0, &[0, 0]);
    }

    /// Where BAR 0 is programmed.
    pub fn bar_address(&self) -> u64 {
        self.config.bar_address(0).unwrap_or(0)
    }

    /// Where each queue's notify registers are (for ioeventfds), in queue
    /// order: its MMIO register, and its port when there are port
    /// registers.
    pub fn notify_addresses(&self) -> Vec<Vec<IoEventAddress>> {
        let port = self.config.bar_address(usize::from(PORT_NOTIFY_BAR));
        (0..self.queues.len() as u64)
            .map(|q| {
                let mmio = self.bar_address() + NOTIFY_OFFSET + q * u64::from(NOTIFY_MULTIPLIER);
                let mut at = vec![IoEventAddress::Mmio(mmio)];
                if let Some(port) = port {
                    at.push(IoEventAddress::Pio(
                        port + q * u64::from(PORT_NOTIFY_MULTIPLIER),
                    ));
                }
                at
            })
            .collect()
    }

    /// The driver wrote the notify register of queue `q` (when no ioeventfd
    /// took the write first).
    pub fn notify(&mut self, q: u16) {
        if self.active && self.resetting.is_none() && usize::from(q) < self.queues.len() {
            self.device.queue_notify(q);
        }
    }

    fn msix(&self) -> std::sync::MutexGuard<'_, MsixTable> {
        self.msix.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn selected(&self) -> Option<&QueueState> {
        self.queues.get(usize::from(self.queue_select))
    }

    fn common_bytes(&self) -> [u8; COMMON_SIZE as usize] {
        let mut b = [0u8; COMMON_SIZE as usize];
        let features = self.device.features();
        let dev_features = match self.device_feature_select {
            0 => features as u32,
            1 => (features >> 32) as u32,
            _ => 0,
        };
        let drv_features = match self.driver_feature_select {
            0 => self.driver_features as u32,
            1 => (self.driver_features >> 32) as u32,
            _ => 0,
        };
        b[0x00..0x04].copy_from_slice(&self.device_feature_select.to_le_bytes());
        b[0x04..0x08].copy_from_slice(&dev_features.to_le_bytes());
        b[0x08..0x0c].copy_from_slice(&self.driver_feature_select.to_le_bytes());
        b[0x0c..0x10].copy_from_slice(&drv_features.to_le_bytes());
        b[0x10..0x12].copy_from_slice(&self.vectors.config.load(Ordering::Acquire).to_le_bytes());
        b[0x12..0x14].copy_from_slice(&(self.queues.len() as u16).to_le_bytes());
        b[0x14] = self.visible_status();
        b[0x15] = self.config_generation;
        b[0x16..0x18].copy_from_slice(&self.queue_select.to_le_bytes());
        if let Some(q) = self.selected() {
            let qi = usize::from(self.queue_select);
            b[0x18..0x1a].copy_from_slice(&q.size.to_le_bytes());
            b[0x1a..0x1c].copy_from_slice(
                &self.vectors.queues[qi]
                    .load(Ordering::Acquire)
                    .to_le_bytes(),
            );
            b[0x1c..0x1e].copy_from_slice(&u16::from(q.ready).to_le_bytes());
            b[0x1e..0x20].copy_from_slice(&self.queue_select.to_le_bytes()); // notify off
            b[0x20..0x28].copy_from_slice(&q.desc.to_le_bytes());
            b[0x28..0x30].copy_from_slice(&q.avail.to_le_bytes());
            b[0x30..0x38].copy_from_slice(&q.used.to_le_bytes());
        }
        b
    }

    /// The status a driver reads: the old one while the device finishes a
    /// reset, so that the driver waits for it (spec 2.4.2).
    fn visible_status(&self) -> u8 {
        match self.resetting {
            Some(old) if self.device.reset_pending() => old,
            _ => self.status,
        }
    }

    /// Whether a reset is still in progress (the driver's writes to the
    /// common configuration are then ignored: it must wait for status 0).
    fn still_resetting(&mut self) -> bool {
        if self.resetting.is_some() && !self.device.reset_pending() {
            self.resetting = None;
        }
        self.resetting.is_some()
    }

    fn valid_vector(&self, v: u16) -> u16 {
        if usize::from(v) < self.msix().len() {
            v
        } else {
            NO_VECTOR
        }
    }

    fn write_common(&mut self, offset: u64, data: &[u8]) {
        if self.still_resetting() {
            tracing::debug!(offset, "virtio common cfg write during a reset ignored");
            return;
        }
        let mut raw = [0u8; 8];
        let n = data.len().min(8);
        raw[..n].copy_from_slice(&data[..n]);
        let v = u64::from_le_bytes(raw);
        let qi = usize::from(self.queue_select);
        let can_configure = self.queues.get(qi).is_some_and(|q| !q.ready) && !self.active;
        match (offset, data.len()) {
            (0x00, 4) => self.device_feature_select = v as u32,
            (0x08, 4) => self.driver_feature_select = v as u32,
            (0x0c, 4) if self.status & VIRTIO_CONFIG_S_FEATURES_OK as u8 == 0 => {
                match self.driver_feature_select {
                    0 => self.driver_features = (self.driver_features & !0xffff_ffff) | v,
                    1 => self.driver_features = (self.driver_features & 0xffff_ffff) | v << 32,
                    _ => {}
                }
            }
            (0x10, 2) => {
                let vec = self.valid_vector(v as u16);
                self.vectors.config.store(vec, Ordering::Release);
            }
            (0x14, 1) => self.write_status(v as u8),
            (0x16, 2) => self.queue_select = v as u16,
            (0x18, 2) if can_configure => {
                let q = &mut self.queues[qi];
                q.size = (v as u16).min(q.max);
            }
            (0x1a, 2) if qi < self.queues.len() => {
                let vec = self.valid_vector(v as u16);
                self.vectors.queues[qi].store(vec, Ordering::Release);
            }
            (0x1c, 2) if can_configure && v == 1 => self.queues[qi].ready = true,
            (0x20..=0x37, 4 | 8) if can_configure => {
                let q = &mut self.queues[qi];
                let field = match offset & !7 {
                    0x20 => &mut q.desc,
                    0x28 => &mut q.avail,
                    _ => &mut q.used,
                };
                *field = match (offset % 8, data.len()) {
                    (0, 8) => v,
                    (0, 4) => (*field & !0xffff_ffff) | v,
                    (4, 4) => (*field & 0xffff_ffff) | v << 32,
                    _ => *field,
                };
            }
            _ => tracing::debug!(offset, len = data.len(), "ignored virtio common cfg write"),
        }
    }

    fn reset(&mut self) {
        let old = self.status;
        self.device.reset();
        self.resetting = self.device.reset_pending().then_some(old);
        for q in &mut self.queues {
            *q = QueueState::new(q.max);
        }
        for v in &self.vectors.queues {
            v.store(NO_VECTOR, Ordering::Release);
        }
        self.vectors.config.store(NO_VECTOR, Ordering::Release);
        self.isr.store(0, Ordering::Release);
        self.queue_select = 0;
        self.device_feature_select = 0;
        self.driver_feature_select = 0;
        self.driver_features = 0;
        self.status = 0;
        self.active = false;
    }

    fn interrupt(&self) -> Arc<dyn VirtioInterrupt> {
        Arc::new(PciInterrupt {
            vectors: self.vectors.clone(),
            isr: self.isr.clone(),
            msix: self.msix.clone(),
            msi: self.msi.clone(),
            irqfds: self.irqfds.clone(),
        })
    }

    fn write_status(&mut self, new: u8) {
        if new == 0 {
            self.reset();
            return;
        }
        let old = self.status;
        // Spec: "The driver MUST NOT clear a device status bit." Only a
        // reset (0) clears them, so features are negotiated once per reset
        // and cannot change under an active device.
        let mut new = new | old;
        let features_ok = VIRTIO_CONFIG_S_FEATURES_OK as u8;
        if new & features_ok != 0 && old & features_ok == 0 {
            let offered = self.device.features();
            let f = self.driver_features;
            if f & !offered != 0 || f & (1 << VIRTIO_F_VERSION_1) == 0 {
                viommu_device::guest_warn!(
                    "driver features {f:#x} not acceptable (offered {offered:#x}, VERSION_1 required)"
                );
                new &= !features_ok;
            } else {
                self.device.ack_features(f);
            }
        }
        let driver_ok = VIRTIO_CONFIG_S_DRIVER_OK as u8;
        if new & driver_ok != 0 && old & driver_ok == 0 && new & features_ok != 0 && !self.active {
            match self.activate() {
                Ok(()) => self.active = true,
                Err(e) => {
                    // The driver's queue setup; it may reset and retry.
                    viommu_device::guest_error!("{e}");
                    new |= VIRTIO_CONFIG_S_NEEDS_RESET as u8;
                    self.status = new;
                    let _ = self.interrupt().trigger_config();
                    return;
                }
            }
        }
        self.status = new;
    }

    fn activate(&mut self) -> Result<(), super::ActivateError> {
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.to_queue()
                    .map_err(|e| super::ActivateError(format!("queue {i}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let interrupt = self.interrupt();
        self.device.activate(self.mem.clone(), queues, interrupt)
    }

    fn msix_control_changed(&mut self) {
        let ctrl = self.config.read_reg(self.msix_cap / 4);
        let msgs = self
            .msix()
            .set_control(ctrl & MSIX_ENABLE != 0, ctrl & MSIX_FUNCTION_MASK != 0);
        send_all(&self.msi, msgs);
    }
}

impl PciDevice for VirtioPciDevice {
    fn read_config(&mut self, reg: usize) -> u32 {
        self.config.read_reg(reg)
    }

    fn write_config(&mut self, reg: usize, offset: usize, data: &[u8]) {
        self.config.write_reg(reg, offset, data);
        if reg == self.msix_cap / 4 {
            self.msix_control_changed();
        }
    }
}

impl BusDevice for VirtioPciDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let len = data.len() as u64;
        match offset {
            o if o + len <= COMMON_OFFSET + COMMON_SIZE => {
                let b = self.common_bytes();
                data.copy_from_slice(&b[o as usize..(o + len) as usize]);
            }
            ISR_OFFSET => {
                data.fill(0);
                data[0] = self.isr.swap(0, Ordering::AcqRel);
            }
            o if (DEVICE_CFG_OFFSET..DEVICE_CFG_OFFSET + DEVICE_CFG_SIZE).contains(&o) => {
                self.device.read_config(o - DEVICE_CFG_OFFSET, data);
            }
            o if (MSIX_TABLE_OFFSET..MSIX_TABLE_OFFSET + 2 * REGION_SIZE).contains(&o) => {
                self.msix().read_table(o - MSIX_TABLE_OFFSET, data);
            }
            o if (MSIX_PBA_OFFSET..MSIX_PBA_OFFSET + REGION_SIZE).contains(&o) => {
                self.msix().read_pba(o - MSIX_PBA_OFFSET, data);
            }
            _ => data.fill(0),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        match offset {
            o if o < COMMON_OFFSET + COMMON_SIZE => self.write_common(o, data),
            o if (DEVICE_CFG_OFFSET..DEVICE_CFG_OFFSET + DEVICE_CFG_SIZE).contains(&o) => {
                self.device.write_config(o - DEVICE_CFG_OFFSET, data);
            }
            o if (NOTIFY_OFFSET..NOTIFY_OFFSET + REGION_SIZE).contains(&o) => {
                self.notify(((o - NOTIFY_OFFSET) / u64::from(NOTIFY_MULTIPLIER)) as u16);
            }
            o if (MSIX_TABLE_OFFSET..MSIX_TABLE_OFFSET + 2 * REGION_SIZE).contains(&o) => {
                let msgs = self.msix().write_table(o - MSIX_TABLE_OFFSET, data);
                if let Some(lines) = &self.irqfds {
                    let v = ((o - MSIX_TABLE_OFFSET) / ENTRY_SIZE) as usize;
                    if v < self.msix().len() {
                        lines.route(v, self.msix().message(v));
                    }
                }
                send_all(&self.msi, msgs);
            }
            _ => tracing::debug!(offset, "ignored virtio-pci BAR write"),
        }
    }
}

/// The port notify registers of a [`VirtioPciDevice`], on the port bus.
pub struct PortNotify(pub Arc<Mutex<VirtioPciDevice>>);

impl BusDevice for PortNotify {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&mut self, offset: u64, _data: &[u8]) {
        let step = u64::from(PORT_NOTIFY_MULTIPLIER);
        if !offset.is_multiple_of(step) {
            return;
        }
        if let Ok(q) = u16::try_from(offset / step) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).notify(q);
        }
    }
}

const _: () = assert!(MSIX_TABLE_OFFSET + 2 * REGION_SIZE <= MSIX_PBA_OFFSET);
const _: () = assert!(ENTRY_SIZE * 64 <= 2 * REGION_SIZE);

mod interrupt;

#[cfg(test)]
mod tests;
