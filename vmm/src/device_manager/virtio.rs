//! The virtio-iommu on its virtio-pci transport, and the DMA of the VFIO
//! devices without one.

use std::sync::{Arc, Mutex};

use dma_mapper::{DmaMapper, DmaPerm};
use kvm_ioctls::{IoEventAddress, NoDatamatch};
use viommu_device::{ConfigBuilder, DeviceConfig};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use super::{DeviceManager, Endpoint};
use crate::acpi::ViotConfig;
use crate::cli::VmConfig;
use crate::devices::viommu::spare_cpu::SpareCpu;
use crate::devices::viommu::{KickServing, ViommuDevice, ViommuModel};
use crate::devices::virtio::pci::{
    port_notify_size, NotifyRegister, PortNotify, VirtioPciDevice, BAR_SIZE,
};
use crate::devices::virtio::VirtioDevice;
use crate::error::{io_err, kvm_err, VmmError};
use crate::pci::Bdf;

impl DeviceManager<'_> {
    /// Plug the virtio-iommu with the VFIO devices plugged so far behind
    /// it: records its VIOT description and its counters.
    /// Starts its device thread (stopped and joined on release, before the
    /// DMA mappings are removed) and makes the queues' notify registers
    /// ioeventfds of that thread.
    pub(super) fn add_viommu(&mut self, cfg: &VmConfig) -> Result<(), VmmError> {
        let mut model = ViommuModel::new(viommu_config(cfg, &self.endpoints))?;
        for e in &self.endpoints {
            model.add_endpoint(e.bdf.id(), e.counted.clone() as Arc<dyn DmaMapper>)?;
        }
        // The spare-CPU check is only read before polling.
        let spare = if cfg.viommu_poll.is_zero() {
            SpareCpu::fixed(true)
        } else {
            SpareCpu::open()
        };
        self.viommu_host_load = spare.fd();
        let known = crate::seccomp::Known {
            host_load: spare.fd(),
            dma_fds: self.dma_fds(),
            pinned_ram: cfg.pin_guest_ram,
            ..Default::default()
        };
        let filter = self
            .seccomp
            .filter_with(crate::seccomp::ThreadKind::Device, &known)?;
        let (device, thread) =
            ViommuDevice::spawn(model, filter, cfg.viommu_poll, cfg.viommu_kicks, spare)
                .map_err(io_err("cannot start the virtio-iommu device thread"))?;
        self.viommu_thread = Some(thread);
        let counters = device.counters();
        self.viommu_status = Some(device.status());
        let kicks = device
            .kick_eventfds()
            .map_err(io_err("cannot copy the virtio-iommu kick eventfds"))?;
        let (bdf, bar, notify) = self.add_virtio_pci(Box::new(device), cfg.viommu_notify)?;
        for (q, (evt, addrs)) in kicks.iter().zip(notify).enumerate() {
            if q == 0 && cfg.viommu_kicks == KickServing::Vcpu {
                // The notify write leaves KVM for the vCPU thread, which
                // serves it (see `KickServing::Vcpu`).
                continue;
            }
            for addr in addrs {
                self.vm
                    .fd()
                    .register_ioevent(evt, &addr, NoDatamatch)
                    .map_err(kvm_err("KVM_IOEVENTFD (virtio-iommu notify)"))?;
            }
        }
        tracing::info!(
            slot = bdf.device,
            bar,
            notify = ?cfg.viommu_notify,
            endpoints = self.endpoints.len(),
            "virtio-iommu on PCI"
        );
        self.viot = Some(ViotConfig {
            iommu: bdf,
            endpoints: self.vfio_bdfs(),
        });
        if let Some(a) = &self.attachments {
            a.set(counters.clone());
        }
        self.viommu_counters = Some(counters);
        Ok(())
    }

    /// Put `device` on a virtio-pci transport of its own: BARs placed, on
    /// the root bus, the MMIO bus and (port notify registers) the port
    /// bus. Returns its BDF, BAR 0's address and the notify addresses of
    /// each queue.
    fn add_virtio_pci(
        &mut self,
        device: Box<dyn VirtioDevice>,
        notify_register: NotifyRegister,
    ) -> Result<(Bdf, u64, Vec<Vec<IoEventAddress>>), VmmError> {
        // The transport's memory BAR is 64-bit.
        let bar = self.bars.allocate(BAR_SIZE, true)?;
        let ports = port_notify_size(device.queue_max_sizes().len());
        let port = match notify_register {
            // The port window lies below 0x2000 (`layout::PCI_IO_START`).
            NotifyRegister::Port => Some(self.ports.allocate(u64::from(ports))? as u16),
            NotifyRegister::Mmio => None,
        };
        let mut transport = VirtioPciDevice::new(
            device,
            self.vm.memory().clone(),
            self.msi.clone(),
            bar,
            port,
        )?;
        transport
            .use_irqfds(self.router.clone())
            .map_err(io_err("cannot set up the virtio-pci interrupt irqfds"))?;
        let notify = transport.notify_addresses();
        let transport = Arc::new(Mutex::new(transport));
        self.transports.push(transport.clone());
        let slot = self.root.add_device(transport.clone())?;
        if let Some(port) = port {
            self.pio.insert(
                Arc::new(Mutex::new(PortNotify(transport.clone()))),
                u64::from(port),
                u64::from(ports),
            )?;
        }
        self.mmio.insert(transport, bar, BAR_SIZE)?;
        Ok((Bdf::slot(slot), bar, notify))
    }

    /// Without a vIOMMU: each device sees all guest RAM at its
    /// guest-physical address.
    pub(super) fn map_all_ram(&self) -> Result<(), VmmError> {
        for Endpoint { bdf, mapper, .. } in &self.endpoints {
            for r in self.vm.memory().iter() {
                mapper
                    .map(r.start_addr().0, r.start_addr().0, r.len(), DmaPerm::RW)
                    .map_err(|e| VmmError::Vfio {
                        path: format!("(slot {})", bdf.device),
                        what: "cannot map guest RAM for DMA",
                        source: Box::new(e),
                    })?;
            }
        }
        Ok(())
    }
}

/// The virtio-iommu's configuration: the options of `cfg`, what the
/// endpoints' host IOMMUs can map, and the IOVAs to keep clear.
fn viommu_config(cfg: &VmConfig, endpoints: &[Endpoint]) -> DeviceConfig {
    endpoints
        .iter()
        .fold(
            ConfigBuilder::new()
                .lazy_unmap(cfg.lazy_unmap)
                .pool(cfg.pool_hint)
                .avoid(avoid_iovas(cfg))
                .guest_memory(cfg.memory),
            |b, e| {
                b.host_iommu(e.mapper.page_size_mask(), e.mapper.iova_ranges())
                    .host_dma_limit(e.mapper.dma_avail())
            },
        )
        .build()
}

/// The IOVA ranges the guest must not use: what the user reserved
/// (`--reserve-iova`) and, unless turned off, the host's PCI windows and the
/// passed-through functions' BARs (see [`crate::host_pci`]).
fn avoid_iovas(cfg: &VmConfig) -> Vec<(u64, u64)> {
    let mut avoid = cfg.reserve_iova.clone();
    if cfg.host_pci_reserve {
        let iomem = std::fs::read_to_string("/proc/iomem").ok();
        let dirs: Vec<&std::path::Path> = cfg.vfio.iter().map(|v| v.sysfs.as_path()).collect();
        avoid.extend(crate::host_pci::p2p_ranges(&dirs, iomem.as_deref()));
    }
    avoid
}
