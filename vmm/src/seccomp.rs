//! seccomp filters, one per kind of thread, and the report of a denied
//! system call.
//!
//! Every thread the VMM starts after setup installs the filter of its
//! kind before it runs ([`spawn`]): vCPUs, the virtio-iommu device thread,
//! the API server, the signal waiter and the serial threads. The main
//! thread installs its own once the setup is done ([`install_here`]): it
//! opens /dev/kvm and the VFIO devices and maps memory first, unfiltered;
//! after that it only waits on the exit eventfd, stops the vCPUs and
//! releases the devices, and its list allows just that.
//!
//! Some calls are allowed only on descriptors known when the filter is
//! built ([`Known`]): a vCPU reads and writes (`pread64`/`pwrite64`) the
//! passed-through devices' files only, the main thread unlinks in the API
//! socket's directory only.
//!
//! A system call outside its thread's list (or an `ioctl` outside the
//! listed requests) is not run: the kernel sends `SIGSYS`
//! (`SECCOMP_RET_TRAP`), and the handler installed by [`install_handler`]
//! writes one line to stderr, with the thread's name and the syscall
//! number, then ends the process with exit code 159 (128 + SIGSYS):
//!
//! ```text
//! vmm: seccomp: thread viommu made a denied system call (number 110); exiting
//! ```
//!
//! `open` and `openat` are the exception: they fail with `EACCES` (see
//! `FAIL_WITH_EACCES` for why) instead of trapping.
//!
//! `--seccomp=false` installs no filter (for debugging with strace, gdb or
//! extra logging). The lists are below, one line each with why.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::mpsc::sync_channel;
use std::thread::JoinHandle;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// A thread's compiled filters, ready to install (all of them: the kernel
/// applies the strictest answer of any).
pub type Filter = Vec<seccompiler::BpfProgram>;

/// The calls that fail with `EACCES` instead of ending the VMM: opening a
/// file. No filtered thread has a file to open, but glibc's allocator
/// does once, lazily: the first time a thread's arena gives memory back it
/// reads `/proc/sys/vm/overcommit_memory` (glibc `check_may_shrink_heap`;
/// seen in the lab on the device thread after a burst of unmaps), and it
/// takes a failed open as "no" and uses `madvise` instead. A trap here
/// killed the VMM mid-run; an error keeps the file closed and the VMM up.
const FAIL_WITH_EACCES: [(libc::c_long, &str); 2] = [
    (
        libc::SYS_openat,
        "glibc malloc's one-time read of overcommit_memory",
    ),
    (libc::SYS_open, "the same, where libc uses open"),
];

/// Exit code of the process after a denied system call: 128 + SIGSYS.
pub const DENIED_EXIT_CODE: i32 = 128 + libc::SIGSYS;

/// Why a filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// seccompiler refused the rules (a bug in the lists below).
    #[error("cannot build the seccomp filter of the {kind} threads")]
    Build {
        /// The kind of thread.
        kind: &'static str,
        /// The error.
        #[source]
        source: seccompiler::BackendError,
    },
    /// The SIGSYS handler could not be installed.
    #[error("cannot install the SIGSYS handler")]
    Handler(#[source] std::io::Error),
}

/// The kinds of threads, each with its own list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ThreadKind {
    /// A vCPU: KVM_RUN and the device emulation its exits reach.
    Vcpu,
    /// The virtio-iommu device thread: VFIO DMA map/unmap.
    Device,
    /// The API server (tokio, Unix socket).
    Api,
    /// The SIGTERM/SIGINT waiter.
    Signals,
    /// The serial console's threads (stdin to the guest, guest to stdout).
    Serial,
    /// The main thread once the VM is set up: waits for the exit, stops
    /// the vCPUs, releases the devices.
    Main,
}

impl ThreadKind {
    fn name(self) -> &'static str {
        match self {
            ThreadKind::Vcpu => "vcpu",
            ThreadKind::Device => "device",
            ThreadKind::Api => "api",
            ThreadKind::Signals => "signals",
            ThreadKind::Serial => "serial",
            ThreadKind::Main => "main",
        }
    }
}

/// File descriptors known when a filter is built: some calls are allowed
/// on these only (argument conditions on the descriptor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    /// The passed-through VFIO devices' files: the only ones a vCPU may
    /// `pread64`/`pwrite64` (their config space, the BARs that trap).
    pub vfio_devices: Vec<RawFd>,
    /// The API socket's directory: the only one the main thread may
    /// unlink in (the socket, at exit).
    pub api_dir: Option<RawFd>,
    /// vCPUs serve virtio-iommu requests (`--viommu-kicks vcpu`): they
    /// get the device thread's DMA map/unmap ioctls.
    pub vcpu_serves_iommu: bool,
    /// `/proc/loadavg`, open: the only file the virtio-iommu device thread
    /// may `pread64` (its spare-CPU check before polling), and the vCPUs
    /// with [`vcpu_serves_iommu`](Self::vcpu_serves_iommu) (the same check
    /// before they hand over to that polling).
    pub host_load: Option<RawFd>,
}

/// Whether threads get filters (`--seccomp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Install the filters (the default).
    pub enabled: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { enabled: true }
    }
}

impl Policy {
    /// The filter for a thread of `kind` that needs no [`Known`]
    /// descriptor, or `None` with seccomp off. Installs the SIGSYS
    /// handler the first time.
    pub fn filter(&self, kind: ThreadKind) -> Result<Option<Filter>, SeccompError> {
        self.filter_with(kind, &Known::default())
    }

    /// The filter for a thread of `kind`, its descriptor conditions on
    /// `known`, or `None` with seccomp off.
    pub fn filter_with(
        &self,
        kind: ThreadKind,
        known: &Known,
    ) -> Result<Option<Filter>, SeccompError> {
        if !self.enabled {
            return Ok(None);
        }
        install_handler()?;
        build(kind, known).map(Some)
    }
}

// ---- the lists --------------------------------------------------------------

/// ioctl request numbers (the second argument), from the kernel's uapi
/// headers: KVM's `_IO*(KVMIO = 0xae, nr, type)`, VFIO's
/// `_IO(VFIO_TYPE = ';', VFIO_BASE = 100 + n)` and iommufd's
/// `_IO(IOMMUFD_TYPE = ';', IOMMUFD_CMD_BASE = 0x80 + n)`.
mod ioctl {
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
    vmm_sys_util::ioctl_io_nr!(VFIO_GROUP_UNSET_CONTAINER, VFIO_TYPE, VFIO_BASE + 5);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE, VFIO_BASE + 10);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE, VFIO_BASE + 11);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_GET_INFO, VFIO_TYPE, VFIO_BASE + 12);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_MAP_DMA, VFIO_TYPE, VFIO_BASE + 13);
    vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_UNMAP_DMA, VFIO_TYPE, VFIO_BASE + 14);
    vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_DETACH_IOMMUFD_PT, VFIO_TYPE, VFIO_BASE + 20);
    vmm_sys_util::ioctl_io_nr!(IOMMU_DESTROY, IOMMUFD_TYPE, IOMMUFD_CMD_BASE);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_COPY, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 3);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_MAP, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 5);
    vmm_sys_util::ioctl_io_nr!(IOMMU_IOAS_UNMAP, IOMMUFD_TYPE, IOMMUFD_CMD_BASE + 6);
}

/// Syscalls every thread makes, with why.
const COMMON: &[(libc::c_long, &str)] = &[
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
fn extra(kind: ThreadKind) -> &'static [(libc::c_long, &'static str)] {
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
type Arg = (u8, SeccompCmpArgLen, SeccompCmpOp, u64);

/// Syscalls of one kind of thread allowed only with some arguments, with
/// why: every condition of an entry must hold; several entries for one
/// number are alternatives. A number here must not be in [`COMMON`] or
/// [`extra`] (which allow it whatever its arguments).
fn conditional(kind: ThreadKind, known: &Known) -> Vec<(libc::c_long, Vec<Arg>, &'static str)> {
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
            v.push((
                libc::SYS_poll,
                // poll(fds, nfds = 1, timeout): the exit eventfd alone.
                vec![(1, Qword, Eq, 1)],
                "waiting on the exit eventfd",
            ));
            v.push((
                libc::SYS_ppoll,
                vec![(1, Qword, Eq, 1)],
                "the same, where libc's poll is ppoll",
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

/// The ioctls that serve virtio-iommu requests: the device thread's, and
/// the vCPUs' too with `--viommu-kicks vcpu` ([`Known::vcpu_serves_iommu`]).
fn dma_ioctls() -> Vec<(u64, &'static str)> {
    use ioctl::*;
    vec![
        (VFIO_IOMMU_MAP_DMA(), "a guest MAP"),
        (
            VFIO_IOMMU_UNMAP_DMA(),
            "a guest UNMAP, DETACH, FLUSH or reset (and unmap-all)",
        ),
        (VFIO_IOMMU_GET_INFO(), "the container's DMA-available count"),
        (IOMMU_IOAS_MAP(), "a guest MAP (--vfio-backend iommufd)"),
        (
            IOMMU_IOAS_COPY(),
            "a guest MAP with --pin-guest-ram (iommufd)",
        ),
        (
            IOMMU_IOAS_UNMAP(),
            "a guest UNMAP, DETACH, FLUSH or reset, and unmap-all (iommufd)",
        ),
    ]
}

/// The ioctls of one kind of thread, with why. Any other ioctl is denied.
fn ioctls(kind: ThreadKind) -> Vec<(u64, &'static str)> {
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
        ],
        ThreadKind::Device => dma_ioctls(),
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
                VFIO_IOMMU_UNMAP_DMA(),
                "removing every DMA mapping (unmap-all, or run by run)",
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
                IOMMU_IOAS_UNMAP(),
                "removing every DMA mapping of an iommufd IOAS (unmap-all)",
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

/// The filter of `kind`, its descriptor conditions on `known`: the lists
/// above allowed, anything else trapped.
pub fn build(kind: ThreadKind, known: &Known) -> Result<Filter, SeccompError> {
    let err = |source| SeccompError::Build {
        kind: kind.name(),
        source,
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _why) in COMMON.iter().chain(extra(kind)) {
        rules.insert(*nr, Vec::new());
    }
    let mut allowed = ioctls(kind);
    if kind == ThreadKind::Vcpu && known.vcpu_serves_iommu {
        allowed.extend(dma_ioctls());
    }
    let ioctl_rules = allowed
        .into_iter()
        .map(|(req, _why)| {
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req)
                .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    // An ioctl allowed only for some requests; `extra` may not allow all.
    if !ioctl_rules.is_empty() {
        rules.insert(libc::SYS_ioctl, ioctl_rules);
    }
    for (nr, args, _why) in conditional(kind, known) {
        let conds = args
            .into_iter()
            .map(|(i, len, op, v)| SeccompCondition::new(i, len, op, v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let rule = SeccompRule::new(conds).map_err(err)?;
        rules.entry(nr).or_default().push(rule);
    }
    // The open calls pass this filter and fail in the next one.
    for (nr, _why) in FAIL_WITH_EACCES {
        rules.insert(nr, Vec::new());
    }
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let main: seccompiler::BpfProgram =
        SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, arch)
            .and_then(TryInto::try_into)
            .map_err(err)?;
    let opens = FAIL_WITH_EACCES
        .iter()
        .map(|(nr, _)| (*nr, Vec::new()))
        .collect();
    let eacces = libc::EACCES.unsigned_abs();
    let no_files: seccompiler::BpfProgram = SeccompFilter::new(
        opens,
        SeccompAction::Allow,
        SeccompAction::Errno(eacces),
        arch,
    )
    .and_then(TryInto::try_into)
    .map_err(err)?;
    // In this order: installing a filter takes prctl and seccomp calls,
    // which the main filter would trap.
    Ok(vec![no_files, main])
}

// ---- threads and the report -----------------------------------------------

thread_local! {
    /// The thread's name, for the SIGSYS report: const-initialised, no
    /// destructor, so a signal handler may read it.
    static NAME: Cell<[u8; 16]> = const { Cell::new([0; 16]) };
}

/// Names the calling thread `name` for the SIGSYS report and installs
/// `filter`, if any.
fn apply(name: &str, filter: Option<&Filter>) -> Result<(), String> {
    let mut n = [0u8; 16];
    let len = name.len().min(15);
    n[..len].copy_from_slice(&name.as_bytes()[..len]);
    NAME.with(|c| c.set(n));
    for p in filter.into_iter().flatten() {
        seccompiler::apply_filter(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Installs `filter` (if any) on the calling thread, named `name` in the
/// SIGSYS report: the main thread's, once the setup is done (it started
/// no filtered thread's way, [`spawn`]). Credentials are the caller's to
/// drop first: the filter forbids the calls.
pub fn install_here(name: &str, filter: Option<Filter>) -> std::io::Result<()> {
    apply(name, filter.as_ref()).map_err(|e| {
        std::io::Error::other(format!(
            "cannot install the seccomp filter of thread {name}: {e}"
        ))
    })
}

/// Spawn a thread named `name` that installs `filter` (if any) before it
/// runs `f`. Returns once the filter is in place, or the error that kept
/// it out (then `f` never ran).
pub fn spawn<F>(name: &str, filter: Option<Filter>, f: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    let (tx, rx) = sync_channel::<Result<(), String>>(1);
    let owned = name.to_owned();
    let handle = std::thread::Builder::new()
        .name(owned.clone())
        .spawn(move || {
            // Credentials belong to the thread: it gives up root itself
            // (`--user`), before its filter forbids the calls.
            if let Err(e) = crate::privileges::drop_this_thread() {
                let _ = tx.send(Err(format!("cannot drop to --user: {e}")));
                return;
            }
            if let Err(e) = apply(&owned, filter.as_ref()) {
                let _ = tx.send(Err(e));
                return;
            }
            let _ = tx.send(Ok(()));
            drop(tx);
            f();
        })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(std::io::Error::other(format!(
                "cannot install the seccomp filter of thread {name}: {e}"
            )))
        }
        Err(_) => {
            let _ = handle.join();
            Err(std::io::Error::other(format!(
                "thread {name} died at start"
            )))
        }
    }
}

/// Where the syscall number is in a `siginfo_t` for SIGSYS on x86_64:
/// after `si_signo`, `si_errno`, `si_code` and padding (16 bytes) comes
/// `_sigsys { void *_call_addr; int _syscall; unsigned _arch; }`.
const SI_SYSCALL_OFFSET: usize = 24;

extern "C" fn sigsys_handler(_: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Only async-signal-safe work: stack buffers, write(2), _exit(2).
    let nr = if info.is_null() {
        -1
    } else {
        // SAFETY: the kernel passes a valid siginfo_t of SIGSYS, in which
        // `_sigsys._syscall` is an int at this offset.
        unsafe { std::ptr::read_unaligned(info.cast::<u8>().add(SI_SYSCALL_OFFSET).cast::<i32>()) }
    };
    let name = NAME.try_with(Cell::get).unwrap_or([0; 16]);
    let name_len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let mut line = [0u8; 160];
    let mut n = 0;
    let mut put = |s: &[u8]| {
        for &b in s {
            if n < line.len() {
                line[n] = b;
                n += 1;
            }
        }
    };
    put(b"vmm: seccomp: thread ");
    put(if name_len == 0 {
        b"(unnamed)"
    } else {
        &name[..name_len]
    });
    put(b" made a denied system call (number ");
    let mut digits = [0u8; 12];
    let mut d = digits.len();
    let mut v = i64::from(nr).unsigned_abs();
    loop {
        d -= 1;
        digits[d] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if nr < 0 {
        put(b"-");
    }
    put(&digits[d..]);
    let hex = |v: u64| {
        let mut h = [0u8; 16];
        for (i, b) in h.iter_mut().enumerate() {
            *b = b"0123456789abcdef"[((v >> ((15 - i) * 4)) & 0xf) as usize];
        }
        h
    };
    // An ioctl: which request (the uapi number names the device call).
    if i64::from(nr) == libc::SYS_ioctl {
        put(b", ioctl request 0x");
        put(&hex(register(ctx, libc::REG_RSI)));
    }
    put(b")");
    // Where the call was made (for addr2line against the binary, with the
    // load address from a rerun under --seccomp=false): which code path
    // wants the call.
    let rip = register(ctx, libc::REG_RIP);
    if rip != 0 {
        put(b" at 0x");
        put(&hex(rip));
    }
    put(b"; exiting; --seccomp=false turns the filters off\n");
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `line[..n]` is
    // initialised. Both are allowed in every filter.
    unsafe {
        libc::write(2, line.as_ptr().cast(), n);
        libc::_exit(DENIED_EXIT_CODE);
    }
}

/// A register of the interrupted thread (`libc::REG_*`), from the signal's
/// context; 0 without one.
fn register(ctx: *mut libc::c_void, reg: libc::c_int) -> u64 {
    if ctx.is_null() {
        return 0;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid
    // ucontext_t as the third argument; only its registers are read.
    let g = unsafe { &(*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    usize::try_from(reg)
        .ok()
        .and_then(|i| g.get(i))
        .map_or(0, |r| *r as u64)
}

/// Install the SIGSYS handler that reports a denied system call (once per
/// process; later calls do nothing).
pub fn install_handler() -> Result<(), SeccompError> {
    static INSTALLED: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler only does
        // async-signal-safe work; `sa` lives across the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = sigsys_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    });
    r.map_err(|e| SeccompError::Handler(std::io::Error::from_raw_os_error(e)))
}

/// The ioctl request the vCPU self-test makes (KVM's type, a number KVM
/// does not use).
pub const SELFTEST_IOCTL: u64 = 0xaeff;

/// The `--seccomp-selftest` hook: a thread of `kind`, with its filter,
/// makes a system call no list allows (getppid; a vCPU thread an ioctl
/// request none allows, [`SELFTEST_IOCTL`]), so that the report can
/// be seen. Does not return: the handler ends the process (or, with
/// seccomp off, this returns an error saying nothing was denied).
pub fn selftest(kind: ThreadKind, policy: Policy) -> Result<(), std::io::Error> {
    let filter = policy.filter(kind).map_err(std::io::Error::other)?;
    let name = match kind {
        ThreadKind::Vcpu => "vcpu0",
        ThreadKind::Device => "viommu",
        ThreadKind::Api => "api",
        ThreadKind::Signals => "signals",
        ThreadKind::Serial => "serial-in",
        ThreadKind::Main => "main",
    };
    let h = spawn(name, filter, move || {
        if kind == ThreadKind::Vcpu {
            // An ioctl request no list allows, on no file: the report
            // names the request.
            // SAFETY: an ioctl on an invalid fd has no effect.
            unsafe { libc::ioctl(-1, SELFTEST_IOCTL as _) };
        } else {
            // SAFETY: getppid has no arguments and no side effect.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
    })?;
    let _ = h.join();
    Err(std::io::Error::other(
        "seccomp self-test: the denied call ran (seccomp off?)",
    ))
}

#[cfg(test)]
mod tests;
