//! The transport's interrupts: the vector assignments, the irqfd per
//! MSI-X vector the device thread raises, and the handle a device raises
//! its queue and config interrupts through.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::devices::virtio::VirtioInterrupt;
use crate::pci::msix::{MsiRouter, MsiSender, MsixTable, NO_VECTOR};

/// Vector assignments, shared with the interrupt handle.
pub(super) struct Vectors {
    pub(super) config: AtomicU16,
    pub(super) queues: Vec<AtomicU16>,
}

/// One interrupt line per MSI-X vector: a KVM GSI routed to the vector's
/// message and the irqfd that raises it, so the device thread raises an
/// interrupt with an eventfd write (no KVM ioctl; the device thread's
/// seccomp list has none). The routes follow the guest's writes to the
/// MSI-X table; masking and pending bits stay in the table.
pub(super) struct Irqfds {
    pub(super) router: Arc<dyn MsiRouter>,
    /// (GSI, irqfd) by vector.
    pub(super) lines: Vec<(u32, EventFd)>,
}

impl Irqfds {
    pub(super) fn new(router: Arc<dyn MsiRouter>, vectors: usize) -> std::io::Result<Self> {
        let mut lines = Vec::with_capacity(vectors);
        for _ in 0..vectors {
            let gsi = router.allocate()?;
            let fd = EventFd::new(EFD_NONBLOCK)?;
            router.attach(&fd, gsi)?;
            lines.push((gsi, fd));
        }
        Ok(Irqfds { router, lines })
    }

    /// Route vector `v`'s line to `msg`.
    pub(super) fn route(&self, v: usize, (address, data): (u64, u32)) {
        if let Some((gsi, _)) = self.lines.get(v) {
            if let Err(e) = self.router.route(*gsi, address, data) {
                viommu_device::guest_error!(
                    vector = v,
                    gsi,
                    "cannot route a virtio MSI-X vector: {e}"
                );
            }
        }
    }
}

impl Drop for Irqfds {
    fn drop(&mut self) {
        for (gsi, fd) in &self.lines {
            let _ = self.router.detach(fd, *gsi);
        }
    }
}

pub(super) struct PciInterrupt {
    pub(super) vectors: Arc<Vectors>,
    pub(super) isr: Arc<AtomicU8>,
    pub(super) msix: Arc<Mutex<MsixTable>>,
    pub(super) msi: Arc<dyn MsiSender>,
    pub(super) irqfds: Option<Arc<Irqfds>>,
}

impl PciInterrupt {
    pub(super) fn raise(&self, isr_bit: u8, vector: u16) -> std::io::Result<()> {
        self.isr.fetch_or(isr_bit, Ordering::AcqRel);
        if vector == NO_VECTOR {
            return Ok(());
        }
        let msg = self
            .msix
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .raise(vector);
        let line = self
            .irqfds
            .as_ref()
            .and_then(|l| l.lines.get(usize::from(vector)));
        match (msg, line) {
            (Some(_), Some((_, fd))) => fd.write(1),
            (Some((addr, data)), None) => self.msi.send(addr, data),
            (None, _) => Ok(()),
        }
    }
}

impl VirtioInterrupt for PciInterrupt {
    fn trigger_queue(&self, queue: u16) -> std::io::Result<()> {
        let v = self
            .vectors
            .queues
            .get(usize::from(queue))
            .map_or(NO_VECTOR, |v| v.load(Ordering::Acquire));
        self.raise(1, v)
    }

    fn trigger_config(&self) -> std::io::Result<()> {
        self.raise(2, self.vectors.config.load(Ordering::Acquire))
    }
}
