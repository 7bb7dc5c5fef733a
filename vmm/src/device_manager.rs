//! The device manager: creates the VM's devices, puts them on the port and
//! MMIO buses and the PCI root bus, and releases them in order when the VM
//! ends.
//!
//! [`DeviceManager::build`] plugs, in this order:
//! 1. the platform devices: serial port (COM1, `KVM_IRQ_LINE`), i8042 reset, ACPI
//!    power control;
//! 2. the `--vfio` devices (`vfio.rs`: KVM-VFIO device, container, reset,
//!    mapper, BAR placement and mmap, bus insertion);
//! 3. the virtio-iommu on its virtio-pci transport, with the VFIO devices
//!    as its endpoints, or without `--viommu` a 1:1 DMA map of guest RAM
//!    for each VFIO device (`virtio.rs`);
//! 4. PCI configuration access (ECAM and ports `0xcf8`/`0xcfc`) to the
//!    finished root bus.
//!
//! Dropping the manager releases the devices in the order `release.rs`
//! describes, whether the VM ran or `build` failed half-way.

mod reboot;
mod release;
mod vfio;
mod virtio;

use std::sync::{Arc, Mutex};

use dma_mapper::HostIommuMapper;
use vfio_ioctls::{VfioDevice, VfioDeviceFd};
use vm_superio::I8042Device;

use crate::acpi::ViotConfig;
use crate::bus::Bus;
use crate::cli::VmConfig;
use crate::devices::console::{console, ConsoleFlusher, ConsoleOut, CONSOLE_BUFFER};
use crate::devices::exit::VmExit;
use crate::devices::power::{AcpiPowerDevice, ResetTrigger, I8042};
use crate::devices::serial::{KvmIrqLine, SerialDevice};
use crate::devices::vfio_pci::ViommuAttachments;
use crate::devices::viommu::{DeviceThread, ThreadStatus};
use crate::error::{io_err, VmmError};
use crate::layout::*;
use crate::pci::alloc::{BarWindow, BarWindows};
use crate::pci::msix::{MsiRouter, MsiSender};
use crate::pci::{Bdf, PciConfigIo, PciEcam, PciRoot};
use crate::vm::{KvmMsiRouter, KvmMsiSender, Vm};

/// An endpoint's mapper with its own host-call counters: what
/// `GET /metrics` shows per passed-through device.
pub type EndpointMapper = dma_mapper::RecordingMapper<Arc<dyn HostIommuMapper>>;

/// A passed-through device as DMA sees it: its guest BDF and the mapper
/// that programs its VFIO container or iommufd IOAS (the virtio-iommu
/// counts the host calls it makes through it, and `counted` counts this
/// endpoint's own; the VMM's two `--vfio` devices have two containers or
/// IOASes, so two mappers).
struct Endpoint {
    bdf: Bdf,
    mapper: Arc<dyn HostIommuMapper>,
    /// `mapper`, counting: what the virtio-iommu programs.
    counted: Arc<EndpointMapper>,
}

/// The VM's devices, from creation to ordered release.
pub struct DeviceManager<'a> {
    vm: &'a Vm,
    /// Port I/O bus (owns the platform devices and 0xcf8 access).
    pio: Arc<Bus>,
    /// MMIO bus (owns the BARs, hence every PCI device, and ECAM).
    mmio: Arc<Bus>,
    /// Bus 0 while devices are plugged; moved onto the buses by
    /// [`DeviceManager::add_pci_config_access`].
    root: PciRoot,
    bars: BarWindows,
    /// Ports for port I/O BARs.
    ports: BarWindow,
    msi: Arc<dyn MsiSender>,
    router: Arc<dyn MsiRouter>,
    /// The KVM-VFIO pseudo device, created with the first VFIO device.
    kvm_vfio: Option<Arc<VfioDeviceFd>>,
    /// The passed-through devices, for the ordered release.
    vfio: Vec<Arc<VfioDevice>>,
    /// Their emulated PCI functions, reset on a reboot.
    vfio_pci: Vec<Arc<Mutex<crate::devices::vfio_pci::VfioPciDevice>>>,
    /// The virtio-pci transports, reset on a reboot.
    transports: Vec<Arc<Mutex<crate::devices::virtio::pci::VirtioPciDevice>>>,
    /// Their endpoints, in `--vfio` order: dropping a mapper unmaps its DMA.
    endpoints: Vec<Endpoint>,
    /// With `--viommu`: whether the guest attached anything to it yet,
    /// for the passed-through functions' bus-mastering check.
    attachments: Option<Arc<ViommuAttachments>>,
    serial: Arc<Mutex<SerialDevice>>,
    /// The serial console's output thread, flushed last on release.
    console: ConsoleFlusher,
    viot: Option<ViotConfig>,
    viommu_counters: Option<Arc<Mutex<viommu_device::Counters>>>,
    viommu_status: Option<Arc<ThreadStatus>>,
    /// `/proc/loadavg` as the virtio-iommu's spare-CPU check holds it open
    /// (polling only), for the vCPUs' seccomp filter: a vCPU that serves a
    /// kick reads it before handing over to the thread's polling.
    viommu_host_load: Option<std::os::fd::RawFd>,
    /// The virtio-iommu's device thread: stopped before the DMA mappings
    /// are removed.
    viommu_thread: Option<DeviceThread>,
    /// The seccomp filters of the threads the devices start.
    seccomp: crate::seccomp::Policy,
    /// False when a vCPU may still run: then nothing is released on drop.
    armed: bool,
}

impl<'a> DeviceManager<'a> {
    /// Create every device `cfg` asks for on `vm`; devices report VM exits
    /// (power off, reset) to `exit`.
    pub fn build(vm: &'a Vm, exit: &Arc<VmExit>, cfg: &VmConfig) -> Result<Self, VmmError> {
        let mut dm = DeviceManager::new(vm, cfg.seccomp)?;
        dm.attachments = cfg.viommu.then(Default::default);
        dm.add_platform_devices(exit)?;
        dm.add_vfio_devices(&cfg.vfio, cfg.pin_guest_ram)?;
        if cfg.viommu {
            dm.add_viommu(cfg)?;
        } else {
            dm.map_all_ram()?;
        }
        dm.add_pci_config_access()?;
        Ok(dm)
    }

    /// Empty buses and PCI root, the BAR windows of the layout, MSIs
    /// through KVM, and the serial port (not on a bus yet).
    fn new(vm: &'a Vm, seccomp: crate::seccomp::Policy) -> Result<Self, VmmError> {
        let (out, console) = console(
            Box::new(std::io::stdout()),
            CONSOLE_BUFFER,
            seccomp.filter(crate::seccomp::ThreadKind::Serial)?,
        )
        .map_err(io_err("cannot start the serial output thread"))?;
        Ok(DeviceManager {
            vm,
            serial: Arc::new(Mutex::new(serial_port(vm, out)?)),
            console,
            pio: Arc::new(Bus::new()),
            mmio: Arc::new(Bus::new()),
            root: PciRoot::new(),
            bars: BarWindows::default(),
            ports: BarWindow::ports(),
            msi: Arc::new(KvmMsiSender(vm.fd().clone())),
            router: Arc::new(KvmMsiRouter::new(vm.fd().clone())),
            kvm_vfio: None,
            vfio: Vec::new(),
            vfio_pci: Vec::new(),
            transports: Vec::new(),
            endpoints: Vec::new(),
            attachments: None,
            viot: None,
            viommu_counters: None,
            viommu_status: None,
            viommu_host_load: None,
            viommu_thread: None,
            seccomp,
            armed: true,
        })
    }

    /// The serial port, i8042 reset and ACPI power control on the port bus.
    fn add_platform_devices(&mut self, exit: &Arc<VmExit>) -> Result<(), VmmError> {
        self.pio
            .insert(self.serial.clone(), u64::from(SERIAL_PORT), 8)?;
        self.pio.insert(
            Arc::new(Mutex::new(I8042(I8042Device::new(ResetTrigger(
                exit.clone(),
            ))))),
            u64::from(I8042_PORT),
            5,
        )?;
        self.pio.insert(
            Arc::new(Mutex::new(AcpiPowerDevice::new(exit.clone()))),
            u64::from(ACPI_SLEEP_CONTROL_PORT),
            3,
        )?;
        Ok(())
    }

    /// Make the root bus with every device plugged so far reachable through
    /// ECAM and ports 0xcf8/0xcfc. Plug no PCI device after this.
    fn add_pci_config_access(&mut self) -> Result<(), VmmError> {
        let root = Arc::new(std::mem::take(&mut self.root));
        self.mmio.insert(
            Arc::new(Mutex::new(PciEcam(root.clone()))),
            PCI_ECAM_START,
            PCI_ECAM_SIZE,
        )?;
        self.pio.insert(
            Arc::new(Mutex::new(PciConfigIo::new(root))),
            u64::from(PCI_CONFIG_IO_PORT),
            8,
        )?;
        Ok(())
    }

    /// The port I/O bus, for the vCPUs.
    pub fn pio(&self) -> Arc<Bus> {
        self.pio.clone()
    }

    /// The MMIO bus, for the vCPUs.
    pub fn mmio(&self) -> Arc<Bus> {
        self.mmio.clone()
    }

    /// The serial port, for the stdin forwarder.
    pub fn serial(&self) -> Arc<Mutex<SerialDevice>> {
        self.serial.clone()
    }

    /// The VIOT description of the virtio-iommu and its endpoints, if there
    /// is a virtio-iommu.
    pub fn viot(&self) -> Option<ViotConfig> {
        self.viot.clone()
    }

    /// The virtio-iommu's counters, if there is a virtio-iommu.
    pub fn viommu_counters(&self) -> Option<Arc<Mutex<viommu_device::Counters>>> {
        self.viommu_counters.clone()
    }

    /// Where the liveness gauges of `GET /metrics` come from.
    pub fn liveness(&self) -> crate::api::liveness::Liveness {
        crate::api::liveness::Liveness {
            serial: self.serial.clone(),
            viommu: self.viommu_status.clone(),
            vcpu_clocks: Vec::new(),
            vcpu_probes: Vec::new(),
            endpoint_dma: self
                .endpoints
                .iter()
                .map(|e| (e.bdf, e.counted.clone()))
                .collect(),
            reboots: Default::default(),
        }
    }

    /// The guest BDF of each passed-through device, in `--vfio` order.
    pub fn vfio_bdfs(&self) -> Vec<Bdf> {
        self.endpoints.iter().map(|e| e.bdf).collect()
    }

    /// The passed-through devices' file descriptors: the only files a
    /// vCPU reads and writes (seccomp argument conditions, [`Known`]).
    ///
    /// [`Known`]: crate::seccomp::Known
    pub fn vfio_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.vfio.iter().map(|d| d.as_raw_fd()).collect()
    }

    /// The passed-through devices' VFIO containers and iommufds: the only
    /// descriptors the DMA ioctls may go to ([`Known::dma_fds`]).
    ///
    /// [`Known::dma_fds`]: crate::seccomp::Known::dma_fds
    pub fn dma_fds(&self) -> Vec<std::os::fd::RawFd> {
        let mut fds: Vec<_> = self
            .endpoints
            .iter()
            .filter_map(|e| e.mapper.host_fd())
            .collect();
        fds.sort_unstable();
        fds.dedup();
        fds
    }

    /// `/proc/loadavg`'s descriptor, open while the virtio-iommu's device
    /// thread runs, when it polls: the file a vCPU that serves its kicks
    /// may `pread64` ([`Known::host_load`]).
    ///
    /// [`Known::host_load`]: crate::seccomp::Known::host_load
    pub fn viommu_host_load(&self) -> Option<std::os::fd::RawFd> {
        self.viommu_host_load
    }

    /// Release nothing on drop: a vCPU did not stop and may still access
    /// the devices; the kernel releases them when the process exits.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

/// COM1 writing to `out` (the guest's stdout, through the console
/// buffer), driving IRQ 4 with `KVM_IRQ_LINE`.
fn serial_port(vm: &Vm, out: ConsoleOut) -> Result<SerialDevice, VmmError> {
    let line = KvmIrqLine::new(vm.fd().clone(), SERIAL_IRQ);
    Ok(SerialDevice::new(Arc::new(line), Box::new(out)))
}
