//! The machine: builds the VM from a checked configuration (memory, buses
//! and devices, PCI, VFIO passthrough, virtio-iommu, ACPI, boot), runs the
//! vCPUs, serves the control plane, and tears it all down in order when the
//! guest (or the API) stops it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vm_superio::I8042Device;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use crate::bus::{Bus, BusError};
use crate::devices::exit::{ExitReason, VmExit};
use crate::devices::power::{AcpiPowerDevice, ResetTrigger, I8042};
use crate::devices::serial::{spawn_stdin_forwarder, SerialDevice};
use crate::devices::vfio_pci::{mmap_bar, VfioBar, VfioPciDevice};
use crate::devices::viommu::ViommuDevice;
use crate::devices::virtio::pci::{VirtioPciDevice, BAR_SIZE};
use crate::layout::*;
use crate::pci::alloc::BarWindows;
use crate::pci::msix::{MsiRouter, MsiSender};
use crate::{acpi, api, boot, cli, pci, vcpu, vm};
use dma_mapper::{DmaMapper, DmaPerm, VfioMapper};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioDeviceFd, VfioOps};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// The host DMA mapper of one passed-through device (the virtio-iommu
/// counts the calls it makes through it).
type EndpointMapper = VfioMapper;

/// Why the VMM could not start or keep running the VM.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// Memory or the KVM VM.
    #[error(transparent)]
    Vm(#[from] vm::VmError),
    /// vCPU setup.
    #[error(transparent)]
    Vcpu(#[from] vcpu::VcpuError),
    /// Loading the guest.
    #[error(transparent)]
    Boot(#[from] boot::BootError),
    /// Writing the ACPI tables.
    #[error(transparent)]
    Acpi(#[from] acpi::AcpiError),
    /// The control plane socket.
    #[error(transparent)]
    Api(#[from] api::ApiError),
    /// Overlapping device ranges (a VMM bug).
    #[error("cannot place a device")]
    Bus(#[from] BusError),
    /// The PCI windows are full.
    #[error("cannot place a PCI BAR")]
    Bar(#[from] pci::alloc::AllocError),
    /// The PCI bus is full.
    #[error("cannot plug a PCI device")]
    Pci(#[from] pci::PciError),
    /// A device's config space could not be built (a VMM bug).
    #[error("bad PCI configuration space")]
    PciConfig(#[from] pci::config::ConfigError),
    /// The virtio-iommu model refused its configuration.
    #[error("cannot create the virtio-iommu")]
    Viommu(#[from] viommu_device::Error),
    /// A `--vfio` device could not be set up.
    #[error("--vfio {path}: {what}")]
    Vfio {
        /// The device.
        path: String,
        /// What failed, and the fix.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A host resource (eventfd, thread, socket) failed.
    #[error("{what}")]
    Io {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A KVM call failed.
    #[error("KVM {what} failed")]
    Kvm {
        /// Which call.
        what: &'static str,
        /// Why.
        #[source]
        source: kvm_ioctls::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(std::io::Error) -> VmmError {
    move |source| VmmError::Io { what, source }
}

fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmmError {
    move |source| VmmError::Kvm { what, source }
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only interrupts KVM_RUN (EINTR); the vCPU loop then sees `stop`.
}

/// The PCI devices being put together: the root bus, BAR windows and
/// interrupt plumbing.
struct PciBuilder<'a> {
    vm: &'a vm::Vm,
    mmio: &'a Arc<Bus>,
    root: pci::PciRoot,
    bars: BarWindows,
    msi: Arc<dyn MsiSender>,
    router: Arc<dyn MsiRouter>,
    /// The passed-through devices, for [`OrderedRelease`].
    vfio: Vec<Arc<VfioDevice>>,
}

impl PciBuilder<'_> {
    /// Pass `specs` through; returns each device's guest BDF and mapper.
    fn add_vfio(
        &mut self,
        specs: &[cli::VfioDeviceSpec],
    ) -> Result<Vec<(pci::Bdf, Arc<EndpointMapper>)>, VmmError> {
        let mut endpoints = Vec::new();
        if specs.is_empty() {
            return Ok(endpoints);
        }
        let vm = self.vm;
        let mut kvm_vfio = kvm_bindings::kvm_create_device {
            type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
            fd: 0,
            flags: 0,
        };
        let kvm_vfio = vm
            .fd()
            .create_device(&mut kvm_vfio)
            .map_err(kvm_err("KVM_CREATE_DEVICE (VFIO)"))?;
        let kvm_vfio = Arc::new(VfioDeviceFd::new_from_kvm(kvm_vfio));
        for spec in specs {
            let verr = |what: &'static str| {
                let path = spec.sysfs.display().to_string();
                move |e: vfio_ioctls::VfioError| VmmError::Vfio {
                    path,
                    what,
                    source: Box::new(e),
                }
            };
            let container = Arc::new(
                VfioContainer::new(Some(kvm_vfio.clone()))
                    .map_err(verr("cannot open /dev/vfio/vfio (load vfio_iommu_type1)"))?,
            );
            let device = VfioDevice::new(&spec.sysfs, container.clone() as Arc<dyn VfioOps>, false)
                .map_err(verr(
                    "cannot open the device (is its whole IOMMU group bound to vfio-pci?)",
                ))?;
            // Start from a clean device, whatever its previous user left in
            // it (VFIO_DEVICE_RESET, where the device supports one; on close
            // vfio-pci resets the function itself).
            device.reset();
            tracing::debug!(device = %spec.bdf, "VFIO device reset before use");
            // SAFETY: guest memory is only accessed through vm-memory's
            // volatile accessors and KVM; no Rust reference to it exists.
            let mapper = unsafe { VfioMapper::new(container, vm.memory().clone()) };
            let device = Arc::new(device);
            self.vfio.push(device.clone());
            let mut dev = VfioPciDevice::new(device.clone(), self.router.clone())
                .map_err(io_err("cannot set up the VFIO device's interrupts"))?;
            let bars: Vec<_> = dev.bars().to_vec();
            let mut placed = Vec::new();
            for b in &bars {
                let addr = self.bars.allocate(b.size, b.is64)?;
                dev.set_bar_address(b.index, addr);
                placed.push((b.index, addr, b.size));
                // Direct access to all but the MSI-X pages; the rest traps.
                let maps = mmap_bar(&device, b, addr, dev.msix_info())
                    .map_err(io_err("cannot mmap a VFIO BAR"))?;
                for m in maps {
                    tracing::debug!(
                        bar = b.index,
                        gpa = m.gpa,
                        len = m.len,
                        "BAR mapped into the guest"
                    );
                    vm.add_device_memory(m)?;
                }
            }
            let dev = Arc::new(Mutex::new(dev));
            let slot = self.root.add_device(dev.clone())?;
            for (bar, addr, size) in placed {
                self.mmio.insert(
                    Arc::new(Mutex::new(VfioBar {
                        dev: dev.clone(),
                        bar,
                    })),
                    addr,
                    size,
                )?;
            }
            tracing::info!(device = %spec.bdf, slot, "VFIO device passed through");
            let bdf = pci::Bdf::slot(slot);
            endpoints.push((bdf, Arc::new(mapper)));
        }
        Ok(endpoints)
    }

    /// Plug the virtio-iommu with `endpoints` behind it; returns its VIOT
    /// description and its counters.
    fn add_viommu(
        &mut self,
        endpoints: &[(pci::Bdf, Arc<EndpointMapper>)],
        cfg: &cli::VmConfig,
    ) -> Result<(acpi::ViotConfig, Arc<Mutex<viommu_device::Counters>>), VmmError> {
        let vm = self.vm;
        let dcfg = endpoints
            .iter()
            .fold(
                viommu_device::ConfigBuilder::new()
                    .lazy_unmap(cfg.lazy_unmap)
                    .pool(cfg.pool_hint)
                    .avoid(avoid_iovas(cfg)),
                |b, (_, m)| b.host_iommu(m.page_size_mask(), m.iova_ranges()),
            )
            .build();
        let mut device = ViommuDevice::new(dcfg)?;
        for (bdf, mapper) in endpoints {
            let id = bdf.id();
            device
                .model()
                .add_endpoint(id, mapper.clone() as Arc<dyn DmaMapper>)?;
        }
        let counters = device.counters();
        let bar = self.bars.allocate(BAR_SIZE, true)?;
        let transport = Arc::new(Mutex::new(VirtioPciDevice::new(
            Box::new(device),
            vm.memory().clone(),
            self.msi.clone(),
            bar,
        )?));
        let slot = self.root.add_device(transport.clone())?;
        // Kicks are served on the vCPU that wrote the notify register: the
        // guest driver waits for each request's completion, and a hop to a
        // device thread (ioeventfd) made requests several times slower in
        // the lab.
        self.mmio.insert(transport, bar, BAR_SIZE)?;
        tracing::info!(
            slot,
            bar,
            endpoints = endpoints.len(),
            "virtio-iommu on PCI"
        );
        let viot = acpi::ViotConfig {
            iommu: pci::Bdf::slot(slot),
            endpoints: endpoints.iter().map(|(b, _)| *b).collect(),
        };
        Ok((viot, counters))
    }
}

/// Without a vIOMMU: each device sees all guest RAM at its guest-physical
/// address.
fn map_all_ram(vm: &vm::Vm, endpoints: &[(pci::Bdf, Arc<EndpointMapper>)]) -> Result<(), VmmError> {
    for (bdf, mapper) in endpoints {
        for r in vm.memory().iter() {
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

/// The buses with the platform devices on them.
struct Platform {
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    serial: Arc<Mutex<SerialDevice>>,
    viot: Option<acpi::ViotConfig>,
    /// The passed-through devices (guest BDF) and their mappers: dropping
    /// a mapper unmaps its DMA.
    dma: Vec<(pci::Bdf, Arc<EndpointMapper>)>,
    /// The virtio-iommu's counters, if there is one.
    viommu_counters: Option<Arc<Mutex<viommu_device::Counters>>>,
    /// The passed-through devices.
    vfio: Vec<Arc<VfioDevice>>,
}

/// Put the serial port, power control, PCI config access and the PCI
/// devices on the buses.
fn platform(vm: &vm::Vm, exit: &Arc<VmExit>, cfg: &cli::VmConfig) -> Result<Platform, VmmError> {
    let pio = Arc::new(Bus::new());
    let mmio = Arc::new(Bus::new());

    let serial_irq = EventFd::new(0).map_err(io_err("cannot create the serial irqfd"))?;
    vm.fd()
        .register_irqfd(&serial_irq, SERIAL_IRQ)
        .map_err(kvm_err("KVM_IRQFD (serial)"))?;
    let serial = Arc::new(Mutex::new(SerialDevice::new(
        serial_irq,
        Box::new(std::io::stdout()),
    )));
    pio.insert(serial.clone(), u64::from(SERIAL_PORT), 8)?;
    pio.insert(
        Arc::new(Mutex::new(I8042(I8042Device::new(ResetTrigger(
            exit.clone(),
        ))))),
        u64::from(I8042_PORT),
        5,
    )?;
    pio.insert(
        Arc::new(Mutex::new(AcpiPowerDevice::new(exit.clone()))),
        u64::from(ACPI_SLEEP_CONTROL_PORT),
        3,
    )?;

    let mut pci = PciBuilder {
        vm,
        mmio: &mmio,
        root: pci::PciRoot::new(),
        bars: BarWindows::default(),
        msi: Arc::new(vm::KvmMsiSender(vm.fd().clone())),
        router: Arc::new(vm::KvmMsiRouter::new(vm.fd().clone())),
        vfio: Vec::new(),
    };
    // Passed-through devices, with the mappers that program their containers.
    let endpoints = pci.add_vfio(&cfg.vfio)?;
    let (viot, viommu_counters) = if cfg.viommu {
        let (viot, counters) = pci.add_viommu(&endpoints, cfg)?;
        (Some(viot), Some(counters))
    } else {
        map_all_ram(vm, &endpoints)?;
        (None, None)
    };
    let vfio = std::mem::take(&mut pci.vfio);
    let root = Arc::new(pci.root);
    mmio.insert(
        Arc::new(Mutex::new(pci::PciEcam(root.clone()))),
        PCI_ECAM_START,
        PCI_ECAM_SIZE,
    )?;
    pio.insert(
        Arc::new(Mutex::new(pci::PciConfigIo::new(root))),
        u64::from(PCI_CONFIG_IO_PORT),
        8,
    )?;
    Ok(Platform {
        pio,
        mmio,
        serial,
        viot,
        dma: endpoints,
        viommu_counters,
        vfio,
    })
}

/// What `GET /api/v1/vm.info` answers.
#[derive(Debug, serde::Serialize)]
struct VmInfo<'a> {
    cpus: u8,
    memory_bytes: u64,
    hugepages: bool,
    kernel: &'a std::path::Path,
    initrd: Option<&'a std::path::Path>,
    cmdline: &'a str,
    viommu: bool,
    lazy_unmap: bool,
    pool_hint: Option<PoolHintInfo>,
    vfio: Vec<VfioInfo<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct PoolHintInfo {
    threshold: u32,
    pool_max: u64,
}

#[derive(Debug, serde::Serialize)]
struct VfioInfo<'a> {
    host: &'a str,
    guest: String,
    iommu_group: u32,
}

/// What the control plane answers from.
fn api_state(
    cfg: &cli::VmConfig,
    exit: &Arc<VmExit>,
    viommu: Option<Arc<Mutex<viommu_device::Counters>>>,
    dma: &[(pci::Bdf, Arc<EndpointMapper>)],
) -> api::ApiState {
    let info = VmInfo {
        cpus: cfg.cpus,
        memory_bytes: cfg.memory,
        hugepages: cfg.hugepages,
        kernel: &cfg.kernel,
        initrd: cfg.initrd.as_deref(),
        cmdline: &cfg.cmdline,
        viommu: cfg.viommu,
        lazy_unmap: cfg.viommu && cfg.lazy_unmap,
        pool_hint: cfg
            .pool_hint
            .filter(|_| cfg.viommu)
            .map(|(threshold, pool_max)| PoolHintInfo {
                threshold,
                pool_max,
            }),
        vfio: cfg
            .vfio
            .iter()
            .zip(dma)
            .map(|(spec, (b, _))| VfioInfo {
                host: &spec.bdf,
                guest: b.to_string(),
                iommu_group: spec.group,
            })
            .collect(),
    };
    let metrics = Box::new(move || match &viommu {
        Some(c) => {
            let c = *c.lock().unwrap_or_else(|e| e.into_inner());
            viommu_counters::prometheus_text("viommu", &c)
        }
        None => String::new(),
    });
    api::ApiState {
        info: serde_json::to_value(&info).unwrap_or_default(),
        metrics,
        exit: exit.clone(),
    }
}

/// Build the VM `cfg` describes, run it until it stops, and say why.
pub fn run(cfg: cli::VmConfig) -> Result<ExitReason, VmmError> {
    // Before any thread exists, so that every thread inherits the mask.
    let stop_signals = block_stop_signals().map_err(io_err("cannot block SIGTERM/SIGINT"))?;
    let mem = vm::create_guest_memory(cfg.memory, cfg.hugepages)?;
    let vm = vm::Vm::new(mem.clone())?;
    let exit = Arc::new(VmExit::new().map_err(io_err("cannot create the exit eventfd"))?);
    spawn_stop_signal_waiter(stop_signals, exit.clone())
        .map_err(io_err("cannot spawn the signal thread"))?;
    let Platform {
        pio,
        mmio,
        serial,
        viot,
        dma,
        viommu_counters,
        vfio,
    } = platform(&vm, &exit, &cfg)?;
    // From here on, every way out of this function (an error return too)
    // releases the devices in order.
    let mut release = OrderedRelease {
        vm: &vm,
        vfio,
        dma: dma.clone(),
        buses: vec![pio.clone(), mmio.clone()],
        armed: true,
    };

    let rsdp = acpi::write_tables(
        &mem,
        &acpi::AcpiConfig {
            cpus: cfg.cpus,
            viot,
        },
    )?;
    let boot = boot::load(
        &mem,
        cfg.memory,
        &cfg.kernel,
        cfg.initrd.as_deref(),
        &cfg.cmdline,
        rsdp,
    )?;
    tracing::info!(?boot, cpus = cfg.cpus, memory = cfg.memory, "guest loaded");

    let base_cpuid = vm
        .kvm()
        .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut vcpus = Vec::new();
    for id in 0..cfg.cpus {
        let fd = vm
            .fd()
            .create_vcpu(u64::from(id))
            .map_err(kvm_err("KVM_CREATE_VCPU"))?;
        let entry = (id == 0).then_some(boot.entry);
        vcpu::configure(&fd, id, cfg.cpus, &base_cpuid, &mem, entry)?;
        vcpus.push(vcpu::Vcpu {
            fd,
            id,
            pio: pio.clone(),
            mmio: mmio.clone(),
            exit: exit.clone(),
            stop: stop.clone(),
        });
    }

    register_signal_handler(SIGRTMIN(), kick_handler)
        .map_err(|e| io_err("cannot install the vCPU kick handler")(e.into()))?;
    let mut threads = Vec::new();
    for v in vcpus {
        let name = format!("vcpu{}", v.id);
        threads.push(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || v.run())
                .map_err(io_err("cannot spawn a vCPU thread"))?,
        );
    }
    spawn_stdin_forwarder(serial).map_err(io_err("cannot spawn the stdin thread"))?;
    if let Some(path) = &cfg.api_socket {
        api::spawn(path, api_state(&cfg, &exit, viommu_counters, &dma))?;
        tracing::info!(path = %path.display(), "API socket ready");
    }

    // Wait for the guest (or a vCPU) to end the VM.
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(exit.eventfd()),
        events: libc::POLLIN,
        revents: 0,
    };
    while exit.reason().is_none() {
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, -1) };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(io_err("poll on the exit eventfd")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    let reason = exit.reason().unwrap_or(ExitReason::PowerOff);

    // Stop the vCPUs: kick until each has left KVM_RUN (a kick that lands
    // before the thread re-enters KVM_RUN is lost, hence the repeats).
    stop.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(2);
    while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
        for t in threads.iter().filter(|t| !t.is_finished()) {
            let _ = t.kill(SIGRTMIN());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for t in threads {
        if t.is_finished() {
            let _ = t.join();
        } else {
            // It still holds the buses: releasing devices under a running
            // vCPU is unsafe for the guest's state; the kernel releases
            // them when the process exits.
            tracing::warn!("a vCPU thread did not stop; leaving the devices to the kernel");
            release.armed = false;
        }
    }
    drop((pio, mmio, dma));
    drop(release);
    if let Some(path) = &cfg.api_socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(reason)
}

/// Blocks SIGTERM and SIGINT in the calling thread (and so in every thread
/// it starts later); returns the set for [`spawn_stop_signal_waiter`].
fn block_stop_signals() -> std::io::Result<libc::sigset_t> {
    let set = vmm_sys_util::signal::create_sigset(&[libc::SIGTERM, libc::SIGINT])
        .map_err(std::io::Error::from)?;
    // SAFETY: `set` is an initialised signal set; the old mask is not asked for.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(set)
}

/// A thread that turns SIGTERM or SIGINT into an orderly VM exit (the
/// devices are released as after a power-off; exit code 128 + signal).
fn spawn_stop_signal_waiter(set: libc::sigset_t, exit: Arc<VmExit>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` holds signals blocked in every thread; `sig` is
            // a valid place for the answer.
            let r = unsafe { libc::sigwait(&set, &mut sig) };
            if r == 0 {
                tracing::info!(signal = sig, "stop signal received; stopping the VM");
                exit.request(ExitReason::Signal(sig));
            }
        })
        .map(|_| ())
}

/// The IOVA ranges the guest must not use: what the user reserved
/// (`--reserve-iova`) and, unless turned off, the host's PCI windows and the
/// passed-through functions' BARs (see [`crate::host_pci`]).
fn avoid_iovas(cfg: &cli::VmConfig) -> Vec<(u64, u64)> {
    let mut avoid = cfg.reserve_iova.clone();
    if cfg.host_pci_reserve {
        let iomem = std::fs::read_to_string("/proc/iomem").ok();
        let dirs: Vec<&std::path::Path> = cfg.vfio.iter().map(|v| v.sysfs.as_path()).collect();
        avoid.extend(crate::host_pci::p2p_ranges(&dirs, iomem.as_deref()));
    }
    avoid
}

/// Releases the devices of a stopped guest in the one order that leaves
/// nothing behind (no VFIO error, no mapping, no pinned page), on every way
/// out of [`run`]:
/// 1. reset each passed-through device (`VFIO_DEVICE_RESET`), so it stops
///    DMA;
/// 2. remove every DMA mapping while each device's group is still in its
///    container (after the last group leaves, the container has no IOMMU
///    and the unmap calls would fail);
/// 3. take the BAR mmaps out of KVM and unmap them: an mmap holds the
///    device file open, and `VFIO_GROUP_UNSET_CONTAINER` fails with EBUSY
///    while it is;
/// 4. close the devices (dropping the buses that own them): the group
///    leaves its container.
struct OrderedRelease<'a> {
    vm: &'a vm::Vm,
    vfio: Vec<Arc<VfioDevice>>,
    dma: Vec<(pci::Bdf, Arc<EndpointMapper>)>,
    buses: Vec<Arc<Bus>>,
    /// False when a vCPU may still run: then nothing is released here.
    armed: bool,
}

impl Drop for OrderedRelease<'_> {
    fn drop(&mut self) {
        if !self.armed {
            // Leak our references: dropping the last one of a device under
            // a running vCPU would close it in the middle of an access.
            std::mem::forget(std::mem::take(&mut self.vfio));
            std::mem::forget(std::mem::take(&mut self.buses));
            std::mem::forget(std::mem::take(&mut self.dma));
            return;
        }
        for d in &self.vfio {
            d.reset();
        }
        for (bdf, m) in &self.dma {
            if let Err(e) = m.unmap_all() {
                tracing::warn!(
                    device = bdf.device,
                    "removing the DMA mappings at exit failed: {e}"
                );
            }
        }
        self.vm.release_device_memory();
        self.vfio.clear();
        self.buses.clear();
        self.dma.clear();
        tracing::debug!("devices released");
    }
}
