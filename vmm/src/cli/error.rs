//! The one error type of flag validation.

use std::path::PathBuf;

use super::MIN_MEMORY;

/// A `--` flag whose value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file flag names something unreadable.
    #[error("--{flag} {}: cannot open ({source}); pass the path of {what}", path.display())]
    File {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
        /// What the flag wants.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file flag names a directory or other non-file.
    #[error("--{flag} {}: not a regular file; pass the path of {what}", path.display())]
    NotAFile {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
        /// What the flag wants.
        what: &'static str,
    },
    /// Too little memory.
    #[error("--memory {got}: at least {} MiB needed", MIN_MEMORY >> 20)]
    MemoryTooSmall {
        /// Requested bytes.
        got: u64,
    },
    /// Memory not a multiple of the page size in use.
    #[error("--memory {got}: must be a multiple of {align} bytes{hint}")]
    MemoryUnaligned {
        /// Requested bytes.
        got: u64,
        /// Required multiple.
        align: u64,
        /// Extra advice.
        hint: &'static str,
    },
    /// Not a PCI device directory.
    #[error("--vfio {}: not a PCI device; pass /sys/bus/pci/devices/DDDD:BB:DD.F", path.display())]
    NotPciDevice {
        /// The value.
        path: PathBuf,
    },
    /// The device has no IOMMU group.
    #[error("--vfio {}: device has no IOMMU group; enable the host IOMMU (intel_iommu=on or amd_iommu=on on the host kernel command line)", path.display())]
    NoIommuGroup {
        /// The value.
        path: PathBuf,
    },
    /// The group's VFIO node is missing.
    #[error("--vfio {}: no {}: bind {bdf} to vfio-pci (echo vfio-pci > {}/driver_override; echo {bdf} > /sys/bus/pci/drivers_probe)", path.display(), dev.display(), path.display())]
    NotBoundToVfio {
        /// The value.
        path: PathBuf,
        /// The PCI address.
        bdf: String,
        /// The missing /dev/vfio/N.
        dev: PathBuf,
    },
    /// Another process has the group open.
    #[error("--vfio {}: {} is busy: another process (another VMM?) has IOMMU group {group} open; stop it or pass another device", path.display(), dev.display())]
    VfioBusy {
        /// The value.
        path: PathBuf,
        /// The group's /dev/vfio/N.
        dev: PathBuf,
        /// The IOMMU group.
        group: u32,
    },
    /// A virtio-iommu option without `--viommu`.
    #[error("--{flag}: only applies to the virtio-iommu; add --viommu or drop --{flag}")]
    NeedsViommu {
        /// The flag.
        flag: &'static str,
    },
    /// A bounce-pool hint value out of range.
    #[error("--{flag} {got}: {why}")]
    PoolHint {
        /// The flag.
        flag: &'static str,
        /// Its value in bytes.
        got: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `--viommu-poll-us` beyond its limit.
    #[error("--viommu-poll-us {got}: at most {limit} microseconds (polling longer costs more than the wake-up it saves)")]
    PollWindow {
        /// Its value.
        got: u64,
        /// The largest value accepted.
        limit: u128,
    },
    /// `--pin-guest-ram` without the iommufd backend.
    #[error("--pin-guest-ram: needs every --vfio device on the iommufd backend, but {why}; drop --pin-guest-ram or use --vfio-backend iommufd on a host with it")]
    PinNeedsIommufd {
        /// Which device does not, and why.
        why: String,
    },
    /// `--vfio-backend iommufd` on a host or device without it.
    #[error("--vfio {}: --vfio-backend iommufd: {missing}; or pass --vfio-backend container", path.display())]
    IommufdUnavailable {
        /// The `--vfio` value.
        path: PathBuf,
        /// What the host lacks, and the fix.
        missing: String,
    },
    /// The group's node cannot be opened for lack of permission.
    #[error("--vfio {}: cannot open {}: permission denied (run as root, or give this user read-write access to it)", path.display(), dev.display())]
    VfioDenied {
        /// The value.
        path: PathBuf,
        /// The group's /dev/vfio/N.
        dev: PathBuf,
    },
}
