//! Checks of flag values against the host: files that must be readable,
//! `--vfio` devices that must be PCI functions bound to vfio-pci with a
//! usable IOMMU group.

use std::path::{Path, PathBuf};

use super::backend::{choose, BackendChoice, HostDevices, VfioBackend};
use super::ConfigError;

/// A validated VFIO device to pass through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioDeviceSpec {
    /// Its sysfs directory.
    pub sysfs: PathBuf,
    /// Its PCI address, `DDDD:BB:DD.F`.
    pub bdf: String,
    /// Its IOMMU group number.
    pub group: u32,
    /// The host interface its DMA goes through (`--vfio-backend`).
    pub backend: VfioBackend,
    /// Why that one, for the log.
    pub backend_why: String,
    /// `--vfio-backend auto` chose iommufd and the device's group node is
    /// there: if iommufd refuses the device at VM setup (e.g. EPERM without
    /// interrupt remapping), the type1 container is tried instead.
    pub container_fallback: bool,
}

/// Check a `--vfio` value: a PCI device with an IOMMU group whose
/// `/dev/vfio/N` exists (`host` is `/dev/vfio` and `/dev/iommu` outside
/// tests), and the backend `choice` gives it. On the iommufd backend the
/// group node may be missing (a kernel without `CONFIG_VFIO_GROUP`): the
/// device is opened through its cdev.
pub fn check_vfio_device(
    path: &Path,
    host: &HostDevices,
    choice: BackendChoice,
) -> Result<VfioDeviceSpec, ConfigError> {
    let dev_vfio = host.vfio.as_path();
    let not_pci = || ConfigError::NotPciDevice {
        path: path.to_path_buf(),
    };
    let canon = path.canonicalize().map_err(|_| not_pci())?;
    let bdf = canon
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_bdf(n))
        .ok_or_else(not_pci)?
        .to_string();
    if !canon.join("config").exists() {
        return Err(not_pci());
    }
    let group = std::fs::read_link(canon.join("iommu_group"))
        .ok()
        .and_then(|g| g.file_name()?.to_str()?.parse::<u32>().ok())
        .ok_or_else(|| ConfigError::NoIommuGroup {
            path: path.to_path_buf(),
        })?;
    let (backend, backend_why) = choose(choice, &canon, path, host)?;
    let dev = dev_vfio.join(group.to_string());
    if !dev.exists() && backend == VfioBackend::Iommufd {
        return Ok(VfioDeviceSpec {
            sysfs: canon,
            bdf,
            group,
            backend,
            backend_why,
            container_fallback: false,
        });
    }
    if !dev.exists() {
        return Err(ConfigError::NotBoundToVfio {
            path: path.to_path_buf(),
            bdf,
            dev,
        });
    }
    // Open the group once now, so that a busy or forbidden device is one
    // clear line here, not an ioctl error deep in VM setup. The file closes
    // again at once; VM setup opens it for real.
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev)
    {
        if let Some(err) = group_open_error(path, &dev, group, &e) {
            return Err(err);
        }
    }
    Ok(VfioDeviceSpec {
        sysfs: canon,
        bdf,
        group,
        backend,
        backend_why,
        container_fallback: choice == BackendChoice::Auto && backend == VfioBackend::Iommufd,
    })
}

/// The one-line error for a failed open of a group's `/dev/vfio/N`, where
/// the cause is one a user can fix; `None` leaves the error to VM setup.
fn group_open_error(
    path: &Path,
    dev: &Path,
    group: u32,
    e: &std::io::Error,
) -> Option<ConfigError> {
    match e.raw_os_error() {
        Some(libc::EBUSY) => Some(ConfigError::VfioBusy {
            path: path.to_path_buf(),
            dev: dev.to_path_buf(),
            group,
        }),
        Some(libc::EACCES | libc::EPERM) => Some(ConfigError::VfioDenied {
            path: path.to_path_buf(),
            dev: dev.to_path_buf(),
        }),
        _ => None,
    }
}

/// `DDDD:BB:DD.F` in hex.
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// Check that `path` (the value of `--flag`) is a regular file this user
/// may read; `what` says what the flag wants, for the error.
pub(super) fn check_file(
    flag: &'static str,
    path: &Path,
    what: &'static str,
) -> Result<(), ConfigError> {
    let meta = std::fs::metadata(path).map_err(|source| ConfigError::File {
        flag,
        path: path.to_path_buf(),
        what,
        source,
    })?;
    if !meta.is_file() {
        return Err(ConfigError::NotAFile {
            flag,
            path: path.to_path_buf(),
            what,
        });
    }
    // Opening catches permission problems now rather than mid-boot.
    std::fs::File::open(path).map_err(|source| ConfigError::File {
        flag,
        path: path.to_path_buf(),
        what,
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests;
