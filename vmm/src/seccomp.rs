//! seccomp filters, one per kind of thread, and the report of a denied
//! system call.
//!
//! Every thread the VMM starts after setup installs the filter of its
//! kind before it runs ([`spawn`]): vCPUs, the virtio-iommu device thread,
//! the API server, the signal waiter and the serial threads. The main
//! thread installs its own once the setup is done ([`install_here`]): it
//! opens /dev/kvm and the VFIO devices and maps memory first, unfiltered;
//! after that it only waits for the VM's exit, stops the vCPUs and
//! releases the devices, and its list allows just that. The vCPU threads
//! wait at a start gate ([`crate::vcpu::StartGate`]) until then: no guest
//! instruction runs while the main thread is unfiltered.
//!
//! Some calls are allowed only on descriptors known when the filter is
//! built ([`Known`]): a vCPU reads and writes (`pread64`/`pwrite64`) the
//! passed-through devices' files only, the main thread unlinks in the API
//! socket's directory only, and the DMA map/unmap ioctls go to the
//! passed-through devices' VFIO containers or iommufds only.
//!
//! A system call outside its thread's list (or an `ioctl` outside the
//! listed requests) is not run: the kernel sends `SIGSYS`
//! (`SECCOMP_RET_TRAP`), and the handler installed by [`install_handler`]
//! writes one line to stderr, with the thread's name, the syscall
//! number and name, the workaround (`--seccomp=false`) and what to report,
//! then ends the process with exit code 159 (128 + SIGSYS):
//!
//! ```text
//! vmm: seccomp: thread viommu made a denied system call (number 110, getppid) at 0x...; exiting. The VMM's seccomp allow list lacks this call (...). Workaround: run with --seccomp=false (no filters). Please report this line, ...
//! ```
//!
//! `open` and `openat` are the exception: they fail with `EACCES` (see
//! `FAIL_WITH_EACCES` for why) instead of trapping.
//!
//! `--seccomp=false` installs no filter (for debugging with strace, gdb or
//! extra logging). The lists are in `allow_lists.rs`, one line each with why;
//! the thread spawner in `thread_filter.rs`, the SIGSYS report in `denied_report.rs`.

use std::collections::BTreeMap;
use std::os::fd::RawFd;

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
    /// The VFIO containers and iommufds of the passed-through devices:
    /// the only descriptors the DMA map/unmap ioctls may go to.
    pub dma_fds: Vec<RawFd>,
    /// The KVM VM: a vCPU may remove and restore the passed-through
    /// devices' BAR memory slots on it (the guest's Memory Space bit).
    pub vm: Option<RawFd>,
    /// `--pin-guest-ram`: a guest MAP is an `IOMMU_IOAS_COPY` (allowed
    /// only then).
    pub pinned_ram: bool,
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

/// The filter of `kind`, its descriptor conditions on `known`: the lists
/// above allowed, anything else trapped.
pub fn build(kind: ThreadKind, known: &Known) -> Result<Filter, SeccompError> {
    let err = |source| SeccompError::Build {
        kind: kind.name(),
        source,
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _why) in COMMON.iter().chain(kind_syscalls(kind)) {
        rules.insert(*nr, Vec::new());
    }
    let request = |req| SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req);
    let mut ioctl_rules = ioctls(kind)
        .into_iter()
        .map(|(req, _why)| request(req).and_then(|c| SeccompRule::new(vec![c])))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    // The DMA ioctls on the known containers and iommufds only, and the
    // others that go to one known descriptor.
    for (fd, req, _why) in fd_ioctls(kind, known) {
        let fd = u64::try_from(fd).unwrap_or(u64::MAX);
        let on_fd = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, fd);
        let rule = on_fd
            .and_then(|f| request(req).map(|r| vec![f, r]))
            .and_then(SeccompRule::new)
            .map_err(err)?;
        ioctl_rules.push(rule);
    }
    // An ioctl allowed only for some requests; `kind_syscalls` may not allow all.
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

mod allow_lists;
mod denied_report;
mod syscall_names;
mod thread_filter;

#[cfg(test)]
use allow_lists::ioctl;
use allow_lists::{conditional, fd_ioctls, ioctls, kind_syscalls, COMMON};
pub use denied_report::{install_handler, selftest, SELFTEST_IOCTL};
pub use thread_filter::{install_here, spawn};

#[cfg(test)]
mod tests;
