//! Command line: what the user asks for, checked before anything is built.
//!
//! Every error names the flag, the bad value and what to do about it
//! ([`ConfigError`]). The flags and [`Cli::validate`] are here; the value
//! parsers are in `parse.rs`, the checks of files and `--vfio` devices on
//! the host in `checks.rs`.

mod backend;
mod error;
mod host_checks;
mod parse;

use std::path::PathBuf;

use clap::Parser;

pub use backend::{BackendChoice, HostDevices, VfioBackend};
pub use error::ConfigError;
pub use host_checks::{check_vfio_device, VfioDeviceSpec};
pub use parse::{parse_range, parse_size};

use host_checks::check_file;

/// Most vCPUs we describe: xAPIC ids in the MADT are one byte and 0xff is broadcast.
pub const MAX_CPUS: u8 = 254;
/// Smallest guest we start: room for the boot structures, kernel and initramfs.
pub const MIN_MEMORY: u64 = 64 << 20;

/// A KVM VMM whose virtio-iommu batches guest DMA map/unmap requests.
#[derive(Debug, Parser)]
#[command(version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("VMM_GIT_REVISION"), ")"), about)]
pub struct Cli {
    /// Linux bzImage to boot directly (64-bit boot protocol).
    #[arg(long, value_name = "PATH")]
    pub kernel: PathBuf,
    /// Initramfs to load next to the kernel.
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, default_value = "console=ttyS0 panic=-1")]
    pub cmdline: String,
    /// Guest RAM: bytes, or with a K/M/G suffix (e.g. 512M, 2G).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub memory: u64,
    /// Back guest RAM with 2 MiB huge pages (needs free pages in
    /// /proc/sys/vm/nr_hugepages).
    #[arg(long)]
    pub hugepages: bool,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=MAX_CPUS as i64))]
    pub cpus: u8,
    /// PCI device to pass through: its sysfs directory,
    /// /sys/bus/pci/devices/DDDD:BB:DD.F, bound to vfio-pci. Repeatable.
    #[arg(long, value_name = "SYSFS_PATH")]
    pub vfio: Vec<PathBuf>,
    /// How the --vfio devices' DMA is mapped on the host: `iommufd`
    /// (/dev/iommu and the device's VFIO cdev; needs a host kernel with
    /// CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV), `container` (the VFIO
    /// type1 container, /dev/vfio/vfio), or `auto`: iommufd where the host
    /// has it, else the container.
    #[arg(long, value_name = "BACKEND", value_enum, default_value_t = BackendChoice::Auto)]
    pub vfio_backend: BackendChoice,
    /// With the iommufd backend: pin all guest RAM once at startup (a
    /// second IO address space) and serve each guest MAP as a copy from it
    /// (IOMMU_IOAS_COPY), so no MAP pins pages. The price: all guest RAM
    /// stays pinned, and counted against RLIMIT_MEMLOCK, for the VM's
    /// life. Off by default.
    #[arg(long)]
    pub pin_guest_ram: bool,
    /// Serve the control plane (HTTP: GET /metrics, GET /api/v1/vm.info,
    /// PUT /api/v1/vm.shutdown) on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub api_socket: Option<PathBuf>,
    /// Put the passed-through devices behind a virtio-iommu (without
    /// --vfio: a virtio-iommu with no endpoints).
    #[arg(long)]
    pub viommu: bool,
    /// Do not offer the lazy-unmap extension (docs/lazy-unmap-contract.md):
    /// every UNMAP is then removed from the host before it completes, as
    /// with stock QEMU. Needs --viommu.
    #[arg(long)]
    pub no_lazy_unmap: bool,
    /// DMA size up to which the guest is told to copy through its bounce
    /// pool (the POOL_HINT probe property); 0 offers no hint. Needs
    /// --viommu. [default: 64K]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub pool_threshold: Option<u64>,
    /// Bytes of bounce-pool buffers per domain the pool hint suggests.
    /// Needs --viommu. [default: 64M]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub pool_max: Option<u64>,
    /// An IOVA range the guest must not use, FIRST-LAST inclusive (hex with
    /// 0x, or decimal): reported to the guest as a RESV_MEM reserved region.
    /// Repeatable. Needs --viommu.
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_range)]
    pub reserve_iova: Vec<(u64, u64)>,
    /// Longest the virtio-iommu's device thread keeps polling its request
    /// queue after serving requests, in microseconds (0: never poll, wait
    /// for the guest's notification each time). While it polls, the guest
    /// is asked not to notify and its requests are taken without a notify
    /// exit or a thread wake-up; the price is a host core busy up to this
    /// long after each burst of requests. The thread adapts the window to
    /// the gaps between requests (down to no polling when they are longer
    /// than this) and yields the core to any other runnable task. It polls
    /// only while no runnable task on the host waits for a CPU (the
    /// runnable count in /proc/loadavg, read at most every 10 ms, against
    /// the online CPUs), so a busy host pays next to nothing. At most
    /// 1000; 0 turns it off. Needs --viommu. With --viommu-kicks vcpu
    /// (the default) a vCPU that served a kick wakes the thread to poll
    /// for the next request when a host CPU is free for it; with `thread`
    /// the thread polls after each notification it served.
    /// [default: 1000]
    #[arg(long, value_name = "MICROSECONDS")]
    pub viommu_poll_us: Option<u64>,
    /// Who serves the guest's notifications of the virtio-iommu request
    /// queue: `thread`, the device thread woken through an ioeventfd (the
    /// vCPU goes back to the guest at once); or `vcpu`, the vCPU that made
    /// the notification, when the device thread is idle (the notify write
    /// comes out to the VMM, and that vCPU makes the VFIO calls: no
    /// wake-up of another thread per request; a guest that waits for each
    /// request, as a stock Linux guest does for every map, waits no
    /// longer). With --viommu-poll-us, `vcpu` hands over to the device
    /// thread's polling after a kick it served, when a host CPU is free
    /// for the thread. Needs --viommu. [default: vcpu]
    #[arg(long, value_enum, value_name = "WHO")]
    pub viommu_kicks: Option<crate::devices::viommu::KickServing>,
    /// What a guest reboot (ACPI reset register, i8042 0xfe, `vmmctl
    /// reboot`) does: `restart` the guest in this process (see README
    /// "Reboot"), or `exit` with code 3 (the caller restarts the VMM, or
    /// wants to see the reboot).
    #[arg(long, value_enum, value_name = "WHAT", default_value = "restart")]
    pub on_reboot: crate::reboot::OnReset,
    /// What a triple fault does: `exit` with code 4, or `restart` the
    /// guest as for a reboot.
    #[arg(long, value_enum, value_name = "WHAT", default_value = "exit")]
    pub on_triple_fault: crate::reboot::OnReset,
    /// A guest that restarts more than N times within SECS seconds ends
    /// the VMM (exit code 1) instead of rebooting in a loop.
    #[arg(long, value_name = "N/SECS", default_value = "10/60", value_parser = parse::parse_reboot_limit)]
    pub reboot_limit: (u32, u64),
    /// Where the virtio-iommu offers the guest its notify registers:
    /// `port`, port I/O registers first and the MMIO ones second (a
    /// driver takes the first it can use; Linux takes the port); or
    /// `mmio`, MMIO only. KVM emulates the guest's instruction for an MMIO
    /// notify (save Intel's fast path for an ioeventfd, not taken when the
    /// vCPU serves the kick, --viommu-kicks vcpu), and not for a port
    /// write. Needs --viommu. [default: port]
    #[arg(long, value_enum, value_name = "WHERE")]
    pub viommu_notify: Option<crate::devices::virtio::pci::NotifyRegister>,
    /// For debugging only: do not reserve the host's PCI windows and the
    /// passed-through devices' BARs in the guest's IOVA space. A guest IOVA
    /// equal to a host MMIO address can then be taken for peer-to-peer
    /// traffic or refused by the device. Needs --viommu.
    #[arg(long)]
    pub no_host_pci_reserve: bool,
    /// Install a seccomp filter on every thread the VMM starts (vCPUs, the
    /// virtio-iommu device thread, the API, signal and serial threads);
    /// `--seccomp=false` turns them off, for debugging. A denied system
    /// call ends the VMM with a line on stderr naming the thread and the
    /// call's number (exit code 159).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub seccomp: bool,
    /// Give up root once the VM is set up (devices open, memory mapped,
    /// API socket bound): every thread runs as this numeric user (and
    /// group, default the same number), with no supplementary groups and
    /// no capabilities; RLIMIT_MEMLOCK is lifted first, for VFIO's pinning.
    /// The API socket is handed to that user. Needs the VMM to start as root.
    #[arg(long, value_name = "UID[:GID]")]
    pub user: Option<crate::privileges::Ids>,
    /// For tests: start one thread of this kind with its seccomp filter,
    /// make it call a denied system call (getppid) and exit through the
    /// report. Nothing else runs.
    #[arg(long, value_name = "THREAD", hide = true, value_enum)]
    pub seccomp_selftest: Option<crate::seccomp::ThreadKind>,
}

/// `--pin-guest-ram` needs `--vfio` devices, all on the iommufd backend.
fn check_pin_guest_ram(vfio: &[VfioDeviceSpec]) -> Result<(), ConfigError> {
    if vfio.is_empty() {
        return Err(ConfigError::PinNeedsIommufd {
            why: "no --vfio device to map for".into(),
        });
    }
    match vfio.iter().find(|d| d.backend != VfioBackend::Iommufd) {
        Some(d) => Err(ConfigError::PinNeedsIommufd {
            why: format!(
                "{} uses the {} backend ({})",
                d.bdf,
                d.backend.name(),
                d.backend_why
            ),
        }),
        None => Ok(()),
    }
}

/// Default of `--pool-threshold`.
pub const DEFAULT_POOL_THRESHOLD: u64 = 64 << 10;
/// Default of `--pool-max`.
pub const DEFAULT_POOL_MAX: u64 = 64 << 20;

/// What the VMM builds, from a checked command line.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// bzImage path.
    pub kernel: PathBuf,
    /// Initramfs path.
    pub initrd: Option<PathBuf>,
    /// Kernel command line.
    pub cmdline: String,
    /// Guest RAM in bytes.
    pub memory: u64,
    /// Back RAM with huge pages.
    pub hugepages: bool,
    /// vCPU count.
    pub cpus: u8,
    /// Devices to pass through.
    pub vfio: Vec<VfioDeviceSpec>,
    /// Serve their iommufd maps as copies from guest RAM pinned once
    /// (`--pin-guest-ram`).
    pub pin_guest_ram: bool,
    /// Put them behind a virtio-iommu.
    pub viommu: bool,
    /// Control plane socket.
    pub api_socket: Option<PathBuf>,
    /// Offer the lazy-unmap extension.
    pub lazy_unmap: bool,
    /// The bounce-pool hint to offer as (threshold, pool_max) bytes; `None`:
    /// no hint.
    pub pool_hint: Option<(u32, u64)>,
    /// IOVA ranges the guest must not use (`--reserve-iova`), inclusive.
    pub reserve_iova: Vec<(u64, u64)>,
    /// Keep the guest's IOVAs off the host's PCI windows and BARs.
    pub host_pci_reserve: bool,
    /// The bound of the virtio-iommu's request-queue poll window
    /// (`--viommu-poll-us`; zero: no polling).
    pub viommu_poll: std::time::Duration,
    /// Who serves request-queue notifications (`--viommu-kicks`).
    pub viommu_kicks: crate::devices::viommu::KickServing,
    /// Where the virtio-iommu's notify registers are (`--viommu-notify`).
    pub viommu_notify: crate::devices::virtio::pci::NotifyRegister,
    /// What reboots and triple faults do, and the reboot-loop bound.
    pub reboot: crate::reboot::RebootPolicy,
    /// Whether threads get seccomp filters.
    pub seccomp: crate::seccomp::Policy,
    /// Who to run as after the setup (`--user`).
    pub user: Option<crate::privileges::Ids>,
}

impl Cli {
    /// Check every flag; the first problem found is returned.
    pub fn validate(self, host: &HostDevices) -> Result<VmConfig, ConfigError> {
        check_file("kernel", &self.kernel, "a Linux bzImage")?;
        if let Some(initrd) = &self.initrd {
            check_file("initrd", initrd, "an initramfs (cpio archive)")?;
        }
        if self.memory < MIN_MEMORY {
            return Err(ConfigError::MemoryTooSmall { got: self.memory });
        }
        let (align, hint) = if self.hugepages {
            (2 << 20, " with --hugepages (2 MiB pages)")
        } else {
            (4096, "")
        };
        if !self.memory.is_multiple_of(align) {
            return Err(ConfigError::MemoryUnaligned {
                got: self.memory,
                align,
                hint,
            });
        }
        let pool_hint = self.check_viommu_options()?;
        // The vCPUs serve kicks unless told otherwise, polling or not
        // (with --viommu-poll-us they hand over to the thread's polling).
        let viommu_kicks = self
            .viommu_kicks
            .unwrap_or(crate::devices::viommu::KickServing::Vcpu);
        let viommu_poll = self.check_viommu_poll()?;
        let vfio = self
            .vfio
            .iter()
            .map(|p| check_vfio_device(p, host, self.vfio_backend))
            .collect::<Result<Vec<_>, _>>()?;
        if self.pin_guest_ram {
            check_pin_guest_ram(&vfio)?;
        }
        Ok(VmConfig {
            kernel: self.kernel,
            initrd: self.initrd,
            cmdline: self.cmdline,
            memory: self.memory,
            hugepages: self.hugepages,
            cpus: self.cpus,
            vfio,
            pin_guest_ram: self.pin_guest_ram,
            viommu: self.viommu,
            api_socket: self.api_socket,
            lazy_unmap: !self.no_lazy_unmap,
            pool_hint,
            reserve_iova: self.reserve_iova,
            host_pci_reserve: !self.no_host_pci_reserve,
            viommu_poll,
            viommu_kicks,
            viommu_notify: self
                .viommu_notify
                .unwrap_or(crate::devices::virtio::pci::NotifyRegister::Port),
            reboot: crate::reboot::RebootPolicy {
                on_reboot: self.on_reboot,
                on_triple_fault: self.on_triple_fault,
                max: self.reboot_limit.0,
                window: std::time::Duration::from_secs(self.reboot_limit.1),
            },
            seccomp: crate::seccomp::Policy {
                enabled: self.seccomp,
            },
            user: self.user,
        })
    }

    /// The virtio-iommu flags need `--viommu`; the pool hint's values must
    /// fit the POOL_HINT property. Returns the hint to offer.
    fn check_viommu_options(&self) -> Result<Option<(u32, u64)>, ConfigError> {
        if !self.viommu {
            let given = [
                ("no-lazy-unmap", self.no_lazy_unmap),
                ("pool-threshold", self.pool_threshold.is_some()),
                ("pool-max", self.pool_max.is_some()),
                ("reserve-iova", !self.reserve_iova.is_empty()),
                ("no-host-pci-reserve", self.no_host_pci_reserve),
                ("viommu-poll-us", self.viommu_poll_us.is_some()),
                ("viommu-kicks", self.viommu_kicks.is_some()),
                ("viommu-notify", self.viommu_notify.is_some()),
            ];
            if let Some((flag, _)) = given.into_iter().find(|(_, set)| *set) {
                return Err(ConfigError::NeedsViommu { flag });
            }
        }
        let threshold = self.pool_threshold.unwrap_or(DEFAULT_POOL_THRESHOLD);
        let pool_max = self.pool_max.unwrap_or(DEFAULT_POOL_MAX);
        if threshold == 0 {
            return Ok(None);
        }
        let bad = |flag, got, why| Err(ConfigError::PoolHint { flag, got, why });
        let Ok(threshold32) = u32::try_from(threshold) else {
            return bad("pool-threshold", threshold, "must be below 4G");
        };
        if !pool_max.is_multiple_of(4096) || pool_max == 0 {
            return bad("pool-max", pool_max, "must be a non-zero multiple of 4K");
        }
        if pool_max < threshold {
            return bad(
                "pool-max",
                pool_max,
                "must be at least --pool-threshold (one buffer must fit)",
            );
        }
        Ok(Some((threshold32, pool_max)))
    }

    /// `--viommu-poll-us`, within its limit, or the default.
    fn check_viommu_poll(&self) -> Result<std::time::Duration, ConfigError> {
        use crate::devices::viommu::{DEFAULT_POLL_MAX, POLL_MAX_LIMIT};
        let Some(us) = self.viommu_poll_us else {
            return Ok(DEFAULT_POLL_MAX);
        };
        let d = std::time::Duration::from_micros(us);
        if d > POLL_MAX_LIMIT {
            return Err(ConfigError::PollWindow {
                got: us,
                limit: POLL_MAX_LIMIT.as_micros(),
            });
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests;
