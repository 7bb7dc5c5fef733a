//! `vmm`: boot a Linux guest on KVM with a PCI segment, ACPI and a serial
//! console; the virtio-iommu and VFIO passthrough plug into that PCI
//! segment (issue 4).
//!
//! Exit codes: 0 guest powered off, 3 guest reset (reboot), 4 triple
//! fault, 1 VMM error, 2 bad command line.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use vm_superio::I8042Device;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use vmm::devices::bus::{Bus, BusError};
use vmm::devices::exit::{ExitReason, VmExit};
use vmm::devices::power::{AcpiPowerDevice, ResetTrigger, I8042};
use vmm::devices::serial::{spawn_stdin_forwarder, SerialDevice};
use vmm::devices::viommu::ViommuDevice;
use vmm::devices::virtio::msix::MsiSender;
use vmm::devices::virtio::pci::{VirtioPciDevice, BAR_SIZE};
use vmm::layout::*;
use vmm::pci::alloc::BarAllocator;
use vmm::{acpi, boot, cli, pci, vcpu, vm};

/// Why the VMM could not start or keep running the VM.
#[derive(Debug, thiserror::Error)]
enum VmmError {
    #[error(transparent)]
    Vm(#[from] vm::VmError),
    #[error(transparent)]
    Vcpu(#[from] vcpu::VcpuError),
    #[error(transparent)]
    Boot(#[from] boot::BootError),
    #[error(transparent)]
    Acpi(#[from] acpi::AcpiError),
    #[error("cannot place a device")]
    Bus(#[from] BusError),
    #[error("cannot place a PCI BAR")]
    Bar(#[from] pci::alloc::AllocError),
    #[error("cannot plug a PCI device")]
    Pci(#[from] pci::PciError),
    #[error("bad PCI configuration space")]
    PciConfig(#[from] pci::config::ConfigError),
    #[error("cannot create the virtio-iommu")]
    Viommu(#[from] viommu_device::Error),
    #[error("{what}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("KVM {what} failed")]
    Kvm {
        what: &'static str,
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

/// One line: the error and its causes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only interrupts KVM_RUN (EINTR); the vCPU loop then sees `stop`.
}

/// The buses with the platform devices on them.
struct Platform {
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    serial: Arc<Mutex<SerialDevice>>,
    viot: Option<acpi::ViotConfig>,
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

    let mut root = pci::PciRoot::new();
    let mut bars = BarAllocator::new(PCI_MMIO32_START, PCI_MMIO32_SIZE);
    let mut viot = None;
    if cfg.viommu {
        let device = ViommuDevice::new(viommu_device::DeviceConfig::default())?;
        let bar = bars.allocate(BAR_SIZE)?;
        let msi: Arc<dyn MsiSender> = Arc::new(vm::KvmMsiSender(vm.fd().clone()));
        let transport = Arc::new(Mutex::new(VirtioPciDevice::new(
            Box::new(device),
            vm.memory().clone(),
            msi,
            bar,
        )?));
        let slot = root.add_device(transport.clone())?;
        mmio.insert(transport, bar, BAR_SIZE)?;
        tracing::info!(slot, bar, "virtio-iommu on PCI");
        viot = Some(acpi::ViotConfig {
            iommu: acpi::Bdf {
                bus: 0,
                device: slot,
                function: 0,
            },
            // VFIO endpoints join here (issue 4, item 4).
            endpoints: Vec::new(),
        });
    }
    let root = Arc::new(root);
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
    })
}

fn run(cfg: cli::VmConfig) -> Result<ExitReason, VmmError> {
    let mem = vm::create_guest_memory(cfg.memory, cfg.hugepages)?;
    let vm = vm::Vm::new(mem.clone())?;
    let exit = Arc::new(VmExit::new().map_err(io_err("cannot create the exit eventfd"))?);
    let Platform {
        pio,
        mmio,
        serial,
        viot,
    } = platform(&vm, &exit, &cfg)?;

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
            tracing::warn!("a vCPU thread did not stop; exiting anyway");
        }
    }
    Ok(reason)
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cfg = match args.validate(Path::new("/dev/vfio")) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("vmm: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    match run(cfg) {
        Ok(reason) => {
            if let ExitReason::Error(msg) = &reason {
                eprintln!("vmm: {msg}");
            }
            tracing::info!(?reason, "VM stopped");
            ExitCode::from(reason.exit_code())
        }
        Err(e) => {
            eprintln!("vmm: {}", chain(&e));
            ExitCode::from(1)
        }
    }
}
