//! The machine: wires the VM together from a checked configuration
//! (memory, the KVM VM, the devices through the [`DeviceManager`], ACPI,
//! boot, vCPUs), waits for the guest (or the API, or a signal) to stop it,
//! and tears it down in order.

mod restart;
pub(crate) mod running;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use crate::device_manager::DeviceManager;
use crate::devices::exit::{ExitReason, VmExit};
use crate::devices::serial::spawn_stdin_forwarder;
use crate::error::{io_err, kvm_err};
use crate::seccomp::{Known, Policy, ThreadKind};
use crate::{acpi, api, boot, cli, vcpu, vm};
use running::Running;

pub use crate::error::VmmError;

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only interrupts KVM_RUN (EINTR); the vCPU loop then sees `stop`.
}

/// Build the VM `cfg` describes, run it until it stops, and say why.
pub fn run(cfg: cli::VmConfig) -> Result<ExitReason, VmmError> {
    keep_freed_memory();
    // SAFETY: geteuid has no preconditions.
    warn_if_root_without_user(unsafe { libc::geteuid() }, cfg.user);
    if let Some(ids) = cfg.user {
        crate::privileges::prepare(ids).map_err(io_err("--user"))?;
        // One uid per VM: the operator's to give, the VMM's to check.
        crate::privileges::warn_if_uid_shared(std::path::Path::new("/proc"), ids);
    }
    // Before any thread exists, so that every thread inherits the mask.
    let stop_signals = block_stop_signals().map_err(io_err("cannot block SIGTERM/SIGINT"))?;
    let mem = vm::create_guest_memory(cfg.memory, cfg.hugepages)?;
    let vm = vm::Vm::new(mem.clone())?;
    let exit = Arc::new(VmExit::new().map_err(io_err("cannot create the exit eventfd"))?);
    let seccomp = cfg.seccomp;
    if !seccomp.enabled {
        tracing::warn!("seccomp filters are off (--seccomp=false)");
    }
    spawn_stop_signal_waiter(
        stop_signals,
        exit.clone(),
        seccomp.filter(ThreadKind::Signals)?,
    )
    .map_err(io_err("cannot spawn the signal thread"))?;
    // From here on, every way out of this function (an error return too)
    // stops the vCPUs that started and then releases the devices in order:
    // dropping `machine` does.
    let stop = Arc::new(AtomicBool::new(false));
    let mut machine = Running::new(DeviceManager::build(&vm, &exit, &cfg)?, stop.clone());
    let devices = machine.devices();

    let setup = restart::GuestSetup {
        image: boot::GuestImage::read(&cfg.kernel, cfg.initrd.as_deref())?,
        mem_size: cfg.memory,
        cmdline: cfg.cmdline.clone(),
        acpi: acpi::AcpiConfig {
            cpus: cfg.cpus,
            viot: devices.viot(),
        },
    };
    let boot = setup.load(&mem)?;
    tracing::info!(?boot, cpus = cfg.cpus, memory = cfg.memory, "guest loaded");
    let irqchips = restart::save_irqchips(&vm)?;
    let gate = Arc::new(vcpu::ParkGate::default());

    let vcpus = create_vcpus(
        &vm,
        &cfg,
        boot.entry,
        devices,
        &exit,
        (&stop, &machine.start_gate(), &gate),
    )?;
    let probes = vcpus.iter().map(|v| v.probe.clone()).collect();
    let known = Known {
        vfio_devices: machine.devices().vfio_fds(),
        api_dir: None,
        vcpu_serves_iommu: cfg.viommu
            && cfg.viommu_kicks == crate::devices::viommu::KickServing::Vcpu,
        // Read by a vCPU's hand-over to the polling; the filter grants it
        // only with vcpu_serves_iommu.
        host_load: machine.devices().viommu_host_load(),
        dma_fds: machine.devices().dma_fds(),
        vm: Some(std::os::fd::AsRawFd::as_raw_fd(vm.fd().as_ref())),
        pinned_ram: cfg.pin_guest_ram,
    };
    start_vcpus(&mut machine, vcpus, seccomp, &known)?;
    let devices = machine.devices();
    spawn_stdin_forwarder(devices.serial(), seccomp.filter(ThreadKind::Serial)?)
        .map_err(io_err("cannot spawn the stdin thread"))?;
    let mut socket = None;
    let reboots = Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(path) = &cfg.api_socket {
        let mut liveness = devices.liveness();
        liveness.reboots = reboots.clone();
        liveness.vcpu_clocks = machine.threads().iter().map(cpu_clock).collect();
        liveness.vcpu_probes = probes;
        let state = api::info::state(
            &cfg,
            &exit,
            devices.viommu_counters(),
            Some(liveness),
            &devices.vfio_bdfs(),
        );
        // Handed to --user as it is created, never by path; removed (by
        // its directory's descriptor) when `socket` drops.
        socket = Some(api::spawn(
            path,
            state,
            seccomp.filter(ThreadKind::Api)?,
            cfg.user,
        )?);
        tracing::info!(path = %path.display(), "API socket ready");
    }
    // The setup is done: the main thread gives up root too (the others
    // did as they started), then installs its own filter: from here on it
    // waits, stops the vCPUs and releases the devices, nothing else.
    crate::privileges::drop_this_thread().map_err(io_err("cannot drop to --user"))?;
    if let Some(ids) = cfg.user {
        tracing::info!(uid = ids.uid, gid = ids.gid, "running without root");
    }
    let known = Known {
        api_dir: socket.as_ref().map(api::bind::SocketEntry::dir_fd),
        ..known
    };
    crate::seccomp::install_here("main", seccomp.filter_with(ThreadKind::Main, &known)?)
        .map_err(io_err("cannot filter the main thread"))?;
    // Only now does the guest run: the vCPU threads waited at the gate.
    machine.release();

    let mut steps = restart::MachineSteps {
        machine: &machine,
        vm: &vm,
        gate: &gate,
        exit: &exit,
        cpus: usize::from(cfg.cpus),
        setup: &setup,
        entry: boot.entry,
        irqchips: &irqchips,
    };
    let reason = serve(&exit, cfg.reboot, &reboots, &mut steps)?;
    // Stops and joins the vCPUs, then releases the devices (or, if a vCPU
    // does not stop, leaves them to the kernel when the process exits).
    machine.finish();
    drop(socket);
    Ok(reason)
}

/// Wait for the VM to stop; restart the guest in place on the reboots
/// `policy` restarts. Returns why the VM stops.
fn serve(
    exit: &VmExit,
    policy: crate::reboot::RebootPolicy,
    reboots: &std::sync::atomic::AtomicU64,
    steps: &mut impl crate::reboot::RebootSteps,
) -> Result<ExitReason, VmmError> {
    let mut limiter = crate::reboot::RebootLimiter::new(policy);
    loop {
        let reason = wait_for_exit(exit)?;
        match limiter.decide(reason, std::time::Instant::now()) {
            crate::reboot::Decision::Exit(r) => return Ok(r),
            crate::reboot::Decision::Restart(cause) => {
                let n = reboots.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                tracing::info!(cause, reboots = n, "restarting the guest in place");
                if let Err(e) = crate::reboot::run_steps(steps) {
                    tracing::error!("the reboot failed: {e}");
                    return Ok(ExitReason::Error(format!("reboot: {e}")));
                }
            }
        }
    }
}

/// Without `--user` every thread keeps the rights the VMM started with:
/// root's, usually. Seccomp still limits each thread's system calls, but
/// say it, once, at startup.
fn warn_if_root_without_user(euid: u32, user: Option<crate::privileges::Ids>) {
    if euid == 0 && user.is_none() {
        tracing::warn!(
            "running as root without --user: every thread keeps root's rights after the setup; --user UID[:GID] drops them"
        );
    }
}

/// The vCPUs of `cfg`, configured for the 64-bit entry (the boot vCPU at
/// `entry`), on the manager's buses; each checks `stop`, waits at `start`
/// before it enters the guest and parks at `gate` for a reboot.
fn create_vcpus(
    vm: &vm::Vm,
    cfg: &cli::VmConfig,
    entry: vm_memory::GuestAddress,
    devices: &DeviceManager,
    exit: &Arc<VmExit>,
    (stop, start, gate): (
        &Arc<AtomicBool>,
        &Arc<vcpu::StartGate>,
        &Arc<vcpu::ParkGate>,
    ),
) -> Result<Vec<vcpu::Vcpu>, VmmError> {
    let mut base_cpuid = vm
        .kvm()
        .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    let tsc_deadline = vm.kvm().check_extension(kvm_ioctls::Cap::TscDeadlineTimer);
    vcpu::add_emulated_features(&mut base_cpuid, tsc_deadline);
    vcpu::remove_async_pf(&mut base_cpuid);
    let mut vcpus = Vec::new();
    for id in 0..cfg.cpus {
        let fd = vm
            .fd()
            .create_vcpu(u64::from(id))
            .map_err(kvm_err("KVM_CREATE_VCPU"))?;
        let entry = (id == 0).then_some(entry);
        vcpu::configure(&fd, id, cfg.cpus, &base_cpuid, vm.memory(), entry)?;
        let first_boot = vcpu::FirstBoot::capture(&fd, id)?;
        vcpus.push(vcpu::Vcpu {
            gate: gate.clone(),
            first_boot,
            fd,
            id,
            pio: devices.pio(),
            mmio: devices.mmio(),
            exit: exit.clone(),
            stop: stop.clone(),
            start: start.clone(),
            probe: Default::default(),
            mem: vm.memory().clone(),
        });
    }
    Ok(vcpus)
}

/// Install the kick handler and run each vCPU on a thread of its own,
/// with the vCPU seccomp filter. Each thread joins `machine` as it starts,
/// so a failure half-way stops the ones already running before the
/// devices go. The threads wait at `machine`'s start gate: none enters
/// the guest before [`Running::release`].
fn start_vcpus(
    machine: &mut Running<DeviceManager<'_>>,
    vcpus: Vec<vcpu::Vcpu>,
    seccomp: Policy,
    known: &Known,
) -> Result<(), VmmError> {
    register_signal_handler(SIGRTMIN(), kick_handler)
        .map_err(|e| io_err("cannot install the vCPU kick handler")(e.into()))?;
    for v in vcpus {
        let name = format!("vcpu{}", v.id);
        let filter = seccomp.filter_with(ThreadKind::Vcpu, known)?;
        machine.push(
            crate::seccomp::spawn(&name, filter, move || v.run())
                .map_err(io_err("cannot spawn a vCPU thread"))?,
        );
    }
    Ok(())
}

/// Tell the allocator to keep what the VMM frees instead of giving it back
/// to the kernel. Trimming a heap (`madvise`/`munmap`, and `mmap`'d blocks
/// freed with `munmap`) flushes the TLB of every CPU that runs a thread of
/// this process, vCPUs included: an inter-processor interrupt that drags a
/// vCPU out of its guest each time the device thread frees a batch's
/// buffers. The VMM's heap is small and bounded (guest-triggerable
/// resources are capped), so holding its peak costs little. Also: glibc
/// reads /proc/sys/vm/overcommit_memory the first time a thread's arena
/// shrinks, an `open` the seccomp filters refuse.
fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

/// The CPU-time clock of a running thread (`None` if it has none): read
/// after the thread is gone, it fails (`EINVAL`), nothing worse.
fn cpu_clock(t: &JoinHandle<()>) -> Option<libc::clockid_t> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the pthread handle is a live, unjoined thread's (we hold its
    // JoinHandle); `clock` is a valid place for the answer.
    let rc = unsafe { libc::pthread_getcpuclockid(t.as_pthread_t(), &mut clock) };
    (rc == 0).then_some(clock)
}

/// Wait for the guest (or a vCPU, the API, a signal) to end the VM.
fn wait_for_exit(exit: &VmExit) -> Result<ExitReason, VmmError> {
    Ok(exit.wait())
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
fn spawn_stop_signal_waiter(
    set: libc::sigset_t,
    exit: Arc<VmExit>,
    seccomp: Option<crate::seccomp::Filter>,
) -> std::io::Result<()> {
    crate::seccomp::spawn("signals", seccomp, move || loop {
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

#[cfg(test)]
mod tests;
