//! The allow lists, one line each with why: the system calls every
//! thread may make ([`COMMON`]), those of each kind of thread
//! ([`kind_syscalls`]), those allowed only with some arguments
//! ([`conditional`]), and the ioctl requests of each kind ([`ioctls`]).

use std::os::fd::RawFd;

use seccompiler::{SeccompCmpArgLen, SeccompCmpOp};

use super::{Known, ThreadKind};

// ---- the lists --------------------------------------------------------------

/// ioctl request numbers (the second argument), from the kernel's uapi
/// headers: KVM's `_IO*(KVMIO = 0xae, nr, type)`, VFIO's
/// `_IO(VFIO_TYPE = ';', VFIO_BASE = 100 + n)` and iommufd's
/// `_IO(IOMMUFD_TYPE = ';', IOMMUFD_CMD_BASE = 0x80 + n)`.
pub(super) mod ioctl {
    const KVMIO: u32 = 0xae;
    const VFIO_TYPE: u32 = b';' as u32;
    const VFIO_BASE: u32 = 100;
    const IOMMUFD_TYPE: u32 = b';' as u32;
    const IOMMUFD_CMD_BASE: u32 = 0x80;
    vmm_sys_util::ioctl_io_nr!(KVM_RUN, KVMIO, 0x80);
    vmm_sys_util::ioctl_iow_nr!(KVM_IRQ_LINE, KVMIO, 0x61, kvm_bindings::kvm_irq_level);
    vmm_sys_util::ioctl_ior_nr!(KVM_GET_REGS, KVMIO, 0x81, kvm_bindings::kvm_regs);
    vmm_sys_util::ioctl_ior_nr!(KVM_GET_SREGS, KVMIO, 0x83, kvm_bindings::kvm_sregs);
    vmm_sys_util::ioctl_iowr_nr!(KVM_TRANSLATE, KVMIO, 0x85, kvm_bindings::kvm_translation);
    vmm_sys_util::ioctl_iowr_nr!(KVM_GET_MSRS, KVMIO, 0x88, kvm_bindings::kvm_msrs);
    vmm_sys_util::ioctl_iow_nr!(KVM_SIGNAL_MSI, KVMIO, 0xa5, kvm_bindings::kvm_msi);
    vmm_sys_util::ioctl_iow_nr!(
        KVM_SET_GSI_ROUTING,
        KVMIO,
        0x6a,
        kvm_bindings::kvm_irq_routing
    );
    vmm_sys_util::ioctl_iow_nr!(KVM_IRQFD, KVMIO, 0x76, kvm_bindings::kvm_irqfd);
    vmm_sys_util::ioctl_iow_nr!(
        KVM_SET_USER_MEMORY_REGION,
        KVMIO,
        0x46,
        kvm_bindings::kvm_userspace_memory_region
    );
    vmm_sys_util::ioctl_iow_nr!(
        KVM_SET_DEVICE_ATTR,
        KVMIO,
        0xe1,
        kvm_bindings::kvm_device_attr
    );
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_REGS, KVMIO, 0x82, kvm_bindings::kvm_regs);
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_SREGS, KVMIO, 0x84, kvm_bindings::kvm_sregs);
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_MSRS, KVMIO, 0x89, kvm_bindings::kvm_msrs);
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_FPU, KVMIO, 0x8d, kvm_bindings::kvm_fpu);
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_LAPIC, KVMIO, 0x8f, kvm_bindings::kvm_lapic_state);
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_MP_STATE, KVMIO, 0x99, kvm_bindings::kvm_mp_state);
    vmm_sys_util::ioctl_iow_nr!(
        KVM_SET_VCPU_EVENTS,
        KVMIO,
        0xa0,
        kvm_bindings::kvm_vcpu_events
    );
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_XCRS, KVMIO, 0xa7, kvm_bindings::kvm_xcrs);
    vmm_sys_util::ioctl_ior_nr!(KVM_SET_IRQCHIP, KVMIO, 0x63, kvm_bindings::kvm_irqchip);
    vmm_sys_util::ioctl_io_nr!(VFIO_GROUP_UNSET_CONTAINER, VFIO_TYPE, VFIO_BASE + 5);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE, VFIO_BASE + 10);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE, VFIO_BASE + 11);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_MAP_DMA, VFIO_TYPE, VFIO_BASE + 13);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_UNMAP_DMA, VFIO_TYPE, VFIO_BASE + 14);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_DETACH_IOMMUFD_PT, VFIO_TYPE, VFIO_BASE + 20);
    vmm_sys_util::ioctl_io_nr!(IOMMU_DESTROY, IOMMUFD_TYPE, IOMMUFD_CMD_BASE);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_COPY, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 3);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_MAP, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 5);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_UNMAP, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 6);
}

/// Syscalls every thread makes, with why.
pub(super) const COMMON: &[(libc::c_long, &str)] = &[
    (
        libc::SYS_futex,
        "mutexes, condition variables, channels, join",
    ),
    (
        libc::SYS_write,
        "log lines to stderr, eventfd signals, the SIGSYS report",
    ),
    (libc::SYS_brk, "the allocator"),
    (
        libc::SYS_munmap,
        "the allocator; thread exit frees its signal stack",
    ),
    (libc::SYS_mremap, "the allocator (growing large blocks)"),
    (
        libc::SYS_madvise,
        "the allocator; glibc frees a finished thread's stack",
    ),
    (
        libc::SYS_close,
        "dropping an fd (eventfd copies, a vCPU fd at exit)",
    ),
    (
        libc::SYS_clock_gettime,
        "Instant::now when the vDSO is not used",
    ),
    (libc::SYS_sched_yield, "spinning locks"),
    (libc::SYS_getrandom, "hash map seeds, drawn once per thread"),
    (
        libc::SYS_rt_sigreturn,
        "return from a signal handler (the vCPU kick)",
    ),
    (
        libc::SYS_rt_sigprocmask,
        "glibc blocks signals while a thread exits",
    ),
    (
        libc::SYS_sigaltstack,
        "std removes the thread's signal stack at exit",
    ),
    (libc::SYS_exit, "thread exit"),
    (
        libc::SYS_exit_group,
        "process exit (the SIGSYS report ends with it)",
    ),
];

/// Syscalls of one kind of thread beyond [`COMMON`], with why.
pub(super) fn kind_syscalls(kind: ThreadKind) -> &'static [(libc::c_long, &'static str)] {
    match kind {
        ThreadKind::Vcpu => &[(libc::SYS_gettid, "its thread id, for the probe's kick")],
        ThreadKind::Device => &[
            (libc::SYS_poll, "waiting for a kick or a command"),
            (libc::SYS_ppoll, "the same, where libc's poll is ppoll"),
            (libc::SYS_read, "reading the kick and command eventfds"),
        ],
        ThreadKind::Api => &[
            (libc::SYS_epoll_wait, "the tokio reactor"),
            (libc::SYS_epoll_pwait, "the tokio reactor"),
            (
                libc::SYS_epoll_ctl,
                "the tokio reactor registers connections",
            ),
            (libc::SYS_accept4, "accepting a connection"),
            (libc::SYS_read, "requests, the reactor's wake-up eventfd"),
            (libc::SYS_recvfrom, "requests"),
            (libc::SYS_writev, "answers"),
            (libc::SYS_sendto, "answers"),
            (libc::SYS_getsockopt, "SO_PEERCRED: the client's uid"),
            (
                libc::SYS_geteuid,
                "the VMM's own uid, which a client may have",
            ),
            (libc::SYS_shutdown, "closing a connection's write side"),
            (libc::SYS_fcntl, "non-blocking mode of a connection"),
            (libc::SYS_getpid, "vm.vcpus: kicking a vCPU thread (tgkill)"),
            (
                libc::SYS_nanosleep,
                "vm.vcpus: waiting for the vCPU's answer",
            ),
            (
                libc::SYS_clock_nanosleep,
                "the same, where sleep is clock_nanosleep",
            ),
        ],
        ThreadKind::Signals => &[(libc::SYS_rt_sigtimedwait, "sigwait for SIGTERM/SIGINT")],
        ThreadKind::Serial => &[
            (libc::SYS_read, "stdin"),
            (libc::SYS_nanosleep, "waiting for room in the guest's FIFO"),
            (
                libc::SYS_clock_nanosleep,
                "the same, where sleep is clock_nanosleep",
            ),
        ],
        ThreadKind::Main => &[
            (
                libc::SYS_getpid,
                "stopping the vCPUs: pthread_kill names this process (tgkill)",
            ),
            (
                libc::SYS_nanosleep,
                "stopping the vCPUs: the pause between kicks",
            ),
            (
                libc::SYS_clock_nanosleep,
                "the same, where sleep is clock_nanosleep",
            ),
            (
                libc::SYS_readlink,
                "vfio-ioctls reads a device's iommu_group link as it closes the device",
            ),
            (libc::SYS_readlinkat, "the same, where libc uses readlinkat"),
        ],
    }
}

/// One argument condition: `(argument index, width, comparison, value)`.
pub(super) type Arg = (u8, SeccompCmpArgLen, SeccompCmpOp, u64);

/// Syscalls of one kind of thread allowed only with some arguments, with
/// why: every condition of an entry must hold; several entries for one
/// number are alternatives. A number here must not be in [`COMMON`] or
/// [`kind_syscalls`] (which allow it whatever its arguments).
pub(super) fn conditional(
    kind: ThreadKind,
    known: &Known,
) -> Vec<(libc::c_long, Vec<Arg>, &'static str)> {
    use SeccompCmpArgLen::{Dword, Qword};
    use SeccompCmpOp::{Eq, MaskedEq};
    let no_exec = || MaskedEq(libc::PROT_EXEC as u64);
    // A descriptor as a filter value (argument 0 of these calls, an int).
    let fd = |fd: RawFd| u64::try_from(fd).unwrap_or(u64::MAX);
    // tgkill(tgid = this process, tid, sig = the vCPU kick).
    let kick = || {
        vec![
            (0, Dword, Eq, u64::from(std::process::id())),
            (2, Dword, Eq, kick_signal()),
        ]
    };
    // Every thread: memory, never executable (argument 2 is `prot`).
    let mut v = vec![
        (
            libc::SYS_mmap,
            vec![(2, Dword, no_exec(), 0)],
            "the allocator (large blocks), never PROT_EXEC",
        ),
        (
            libc::SYS_mprotect,
            vec![(2, Dword, no_exec(), 0)],
            "the allocator (glibc grows a thread's arena), never PROT_EXEC",
        ),
    ];
    // The API thread allows fcntl whatever its arguments.
    if kind != ThreadKind::Api {
        v.push((
            libc::SYS_fcntl,
            vec![(1, Dword, Eq, libc::F_GETFD as u64)],
            "std's check, in debug builds, that an fd it closes is open (F_GETFD only)",
        ));
    }
    match kind {
        ThreadKind::Vcpu => {
            v.push((
                libc::SYS_poll,
                // poll(fds, nfds = 1, timeout = 0): one fd, never waits.
                vec![(1, Qword, Eq, 1), (2, Dword, Eq, 0)],
                "the VFIO function's PBA: whether a masked vector's eventfd holds a signal",
            ));
            // One alternative per device: pread64(fd = a device, ...).
            for &dev in &known.vfio_devices {
                v.push((
                    libc::SYS_pread64,
                    vec![(0, Dword, Eq, fd(dev))],
                    "VFIO config space and BAR reads the guest makes, on a passed-through device's file only",
                ));
                v.push((
                    libc::SYS_pwrite64,
                    vec![(0, Dword, Eq, fd(dev))],
                    "VFIO config space and BAR writes the guest makes, on a passed-through device's file only",
                ));
            }
        }
        ThreadKind::Api => v.push((
            libc::SYS_tgkill,
            kick(),
            "vm.vcpus: kicking a vCPU thread of this process with the kick signal",
        )),
        ThreadKind::Main => {
            v.push((
                libc::SYS_tgkill,
                kick(),
                "stopping the vCPUs: the kick, to a thread of this process only",
            ));
            if let Some(dir) = known.api_dir {
                v.push((
                    libc::SYS_unlinkat,
                    // unlinkat(the socket's directory, name, flags = 0).
                    vec![(0, Dword, Eq, fd(dir)), (2, Dword, Eq, 0)],
                    "removing the API socket at exit, in its directory only",
                ));
                v.push((
                    libc::SYS_newfstatat,
                    vec![(0, Dword, Eq, fd(dir))],
                    "checking that the socket there is still ours before removing it",
                ));
                v.push((
                    libc::SYS_statx,
                    vec![(0, Dword, Eq, fd(dir))],
                    "the same, where libc's fstatat is statx",
                ));
            }
        }
        _ => {}
    }
    // The spare-CPU check before polling: the device thread's, and a
    // vCPU's that serves the request queue and may hand over to it.
    let reads_load = match kind {
        ThreadKind::Device => true,
        ThreadKind::Vcpu => known.vcpu_serves_iommu,
        _ => false,
    };
    if let (true, Some(load)) = (reads_load, known.host_load) {
        v.push((
            libc::SYS_pread64,
            vec![(0, Dword, Eq, fd(load))],
            "/proc/loadavg before polling the request queue (a spare CPU?), that file only",
        ));
    }
    v
}

/// The vCPU kick signal (SIGRTMIN), as a filter value.
fn kick_signal() -> u64 {
    u64::try_from(libc::SIGRTMIN()).unwrap_or(u64::MAX)
}

/// The ioctls of one kind of thread allowed on one known descriptor
/// only, as `(descriptor, request, why)`: the DMA ioctls on each of the
/// [`Known::dma_fds`] ([`dma_ioctls`]), and a vCPU's memory slot updates
/// on the VM.
pub(super) fn fd_ioctls(kind: ThreadKind, known: &Known) -> Vec<(RawFd, u64, &'static str)> {
    let mut v: Vec<(RawFd, u64, &str)> = dma_ioctls(kind, known)
        .into_iter()
        .flat_map(|(req, why)| known.dma_fds.iter().map(move |&fd| (fd, req, why)))
        .collect();
    if let (ThreadKind::Vcpu, Some(vm), false) = (kind, known.vm, known.vfio_devices.is_empty()) {
        v.push((
            vm,
            ioctl::KVM_SET_USER_MEMORY_REGION(),
            "the guest turns a passed-through device's Memory Space off or on: its BAR slots leave or come back",
        ));
    }
    v
}

/// The DMA ioctls of one kind of thread, with why, each allowed on the
/// [`Known::dma_fds`] only ([`fd_ioctls`]): the device thread's (it serves virtio-iommu
/// requests), a vCPU's that serves them too ([`Known::vcpu_serves_iommu`]),
/// and the main thread's unmap-all at release. `VFIO_IOMMU_GET_INFO` is
/// in none: only setup asks it, unfiltered.
fn dma_ioctls(kind: ThreadKind, known: &Known) -> Vec<(u64, &'static str)> {
    use ioctl::*;
    let serves = match kind {
        ThreadKind::Device => true,
        ThreadKind::Vcpu => known.vcpu_serves_iommu,
        ThreadKind::Main => {
            return vec![
                (
                    VFIO_IOMMU_UNMAP_DMA(),
                    "removing every DMA mapping (unmap-all, or run by run)",
                ),
                (
                    IOMMU_IOAS_UNMAP(),
                    "removing every DMA mapping of an iommufd IOAS (unmap-all)",
                ),
            ]
        }
        _ => false,
    };
    if !serves {
        return Vec::new();
    }
    let mut v = vec![
        (VFIO_IOMMU_MAP_DMA(), "a guest MAP"),
        (
            VFIO_IOMMU_UNMAP_DMA(),
            "a guest UNMAP, DETACH, FLUSH or reset (and unmap-all)",
        ),
        (IOMMU_IOAS_MAP(), "a guest MAP (--vfio-backend iommufd)"),
        (
            IOMMU_IOAS_UNMAP(),
            "a guest UNMAP, DETACH, FLUSH or reset, and unmap-all (iommufd)",
        ),
    ];
    if known.pinned_ram {
        v.push((
            IOMMU_IOAS_COPY(),
            "a guest MAP with --pin-guest-ram (iommufd)",
        ));
    }
    v
}

/// The ioctls of one kind of thread, with why. Any other ioctl is denied.
pub(super) fn ioctls(kind: ThreadKind) -> Vec<(u64, &'static str)> {
    use ioctl::*;
    let v: Vec<(u64, &str)> = match kind {
        ThreadKind::Vcpu => vec![
            (KVM_RUN(), "run the vCPU"),
            (
                KVM_GET_REGS(),
                "registers for a triple fault's log and the vm.vcpus probe",
            ),
            (KVM_GET_SREGS(), "the same, segment and control registers"),
            (
                KVM_TRANSLATE(),
                "the vm.vcpus probe: the stack pointer's guest-physical address",
            ),
            (
                KVM_IRQ_LINE(),
                "the serial port's interrupt line after a guest access",
            ),
            (
                KVM_SIGNAL_MSI(),
                "virtio-pci MSI-X: a pending vector the guest unmasks",
            ),
            (
                KVM_SET_GSI_ROUTING(),
                "VFIO and virtio-pci MSI-X: the guest programs a vector",
            ),
            (
                KVM_IRQFD(),
                "VFIO MSI-X: a vector's irqfd attached or detached on (un)mask",
            ),
            (
                VFIO_DEVICE_SET_IRQS(),
                "VFIO MSI-X enabled or disabled by the guest",
            ),
            (KVM_SET_MP_STATE(), "a reboot: the vCPU's first-boot state"),
            (KVM_SET_REGS(), "the same, general registers"),
            (KVM_SET_SREGS(), "the same, segment and control registers"),
            (KVM_SET_XCRS(), "the same, extended control registers"),
            (KVM_SET_FPU(), "the same, FPU"),
            (KVM_SET_LAPIC(), "the same, local APIC"),
            (
                KVM_SET_MSRS(),
                "the same, MSRs (the guest's kvmclock and the like off)",
            ),
            (KVM_SET_VCPU_EVENTS(), "the same, pending events cleared"),
            (
                KVM_GET_MSRS(),
                "the same, the TSC read to be written back (its offset again)",
            ),
        ],
        // Its DMA ioctls are in `dma_ioctls`, on known descriptors.
        ThreadKind::Device => vec![],
        ThreadKind::Api => vec![(libc::FIONBIO, "non-blocking mode of a connection")],
        ThreadKind::Serial => vec![(
            KVM_IRQ_LINE(),
            "serial-in: the data-available interrupt line",
        )],
        ThreadKind::Signals => vec![],
        // The release of the devices, in `device_manager/release.rs` order.
        ThreadKind::Main => vec![
            (
                KVM_IRQFD(),
                "detaching the virtio-pci and VFIO MSI-X irqfds as the devices drop",
            ),
            (
                VFIO_DEVICE_SET_IRQS(),
                "disabling a VFIO device's MSI-X as it drops",
            ),
            (
                VFIO_DEVICE_RESET(),
                "resetting each VFIO device (stops its DMA)",
            ),
            (
                KVM_SET_IRQCHIP(),
                "a reboot: the PICs and IOAPIC back to their first-boot state",
            ),
            (
                KVM_SET_USER_MEMORY_REGION(),
                "taking the BAR mmaps out of KVM before unmapping them",
            ),
            (
                KVM_SET_DEVICE_ATTR(),
                "removing a VFIO group from the KVM-VFIO device as it closes",
            ),
            (
                VFIO_GROUP_UNSET_CONTAINER(),
                "a VFIO group leaving its container as it closes",
            ),
            (
                VFIO_DEVICE_DETACH_IOMMUFD_PT(),
                "a VFIO cdev leaving its IOAS as it closes (iommufd)",
            ),
            (
                IOMMU_DESTROY(),
                "destroying the IOAS once its device is gone (iommufd)",
            ),
        ],
    };
    v
}
