//! `--vfio-backend`: which host interface maps a passed-through device's
//! DMA, the type1 container (`/dev/vfio/vfio`) or iommufd (`/dev/iommu`
//! with the device's VFIO cdev), and why.

use std::path::{Path, PathBuf};

use super::ConfigError;

/// The value of `--vfio-backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// iommufd where the host has it (`/dev/iommu` and the device's VFIO
    /// cdev), else the type1 container.
    #[default]
    Auto,
    /// iommufd, or an error naming what the host lacks.
    Iommufd,
    /// The VFIO type1 container.
    Container,
}

/// The host interface a device's DMA goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfioBackend {
    /// A VFIO type1 container: the device opened through its group.
    Container,
    /// An iommufd IOAS: the device opened through its cdev.
    Iommufd,
}

impl VfioBackend {
    /// Its name, as `--vfio-backend` spells it.
    pub fn name(self) -> &'static str {
        match self {
            VfioBackend::Container => "container",
            VfioBackend::Iommufd => "iommufd",
        }
    }
}

/// The host's device nodes the VFIO checks look at (other directories in
/// tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDevices {
    /// `/dev/vfio`: the groups' nodes, and `devices/` with the cdevs.
    pub vfio: PathBuf,
    /// `/dev/iommu`: the iommufd.
    pub iommu: PathBuf,
}

impl Default for HostDevices {
    fn default() -> Self {
        HostDevices {
            vfio: PathBuf::from("/dev/vfio"),
            iommu: PathBuf::from("/dev/iommu"),
        }
    }
}

/// What iommufd needs and this host lacks, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No `/dev/iommu`.
    DevIommu(PathBuf),
    /// The device's sysfs directory has no `vfio-dev/vfioN`.
    SysfsCdev(PathBuf),
    /// `vfio-dev/vfioN` is in sysfs but its `/dev/vfio/devices/vfioN` node is not.
    CdevNode(PathBuf),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::DevIommu(p) => write!(
                f,
                "no {}: the host kernel needs CONFIG_IOMMUFD (modprobe iommufd)",
                p.display()
            ),
            Missing::SysfsCdev(p) => write!(
                f,
                "no {}/vfioN: the host kernel needs CONFIG_VFIO_DEVICE_CDEV, and the device bound to vfio-pci",
                p.display()
            ),
            Missing::CdevNode(p) => write!(
                f,
                "no {} (is devtmpfs mounted, or did udev not create it?)",
                p.display()
            ),
        }
    }
}

/// The device's VFIO cdev, `/dev/vfio/devices/vfioN`, from the one
/// `vfioN` entry of its sysfs `vfio-dev` directory.
pub fn vfio_cdev(sysfs: &Path, host: &HostDevices) -> Result<PathBuf, Missing> {
    let dir = sysfs.join("vfio-dev");
    let mut names = std::fs::read_dir(&dir)
        .map_err(|_| Missing::SysfsCdev(dir.clone()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("vfio") && n[4..].parse::<u32>().is_ok());
    let (Some(name), None) = (names.next(), names.next()) else {
        return Err(Missing::SysfsCdev(dir));
    };
    let node = host.vfio.join("devices").join(name);
    if !node.exists() {
        return Err(Missing::CdevNode(node));
    }
    Ok(node)
}

/// What iommufd needs for the device at `sysfs`: its cdev, or the first
/// piece the host lacks.
pub fn iommufd_available(sysfs: &Path, host: &HostDevices) -> Result<PathBuf, Missing> {
    if !host.iommu.exists() {
        return Err(Missing::DevIommu(host.iommu.clone()));
    }
    vfio_cdev(sysfs, host)
}

/// The backend `choice` gives the device at `sysfs` (`flag_value` is the
/// `--vfio` value, for the error), and why: one line for the log.
pub fn choose(
    choice: BackendChoice,
    sysfs: &Path,
    flag_value: &Path,
    host: &HostDevices,
) -> Result<(VfioBackend, String), ConfigError> {
    match (choice, iommufd_available(sysfs, host)) {
        (BackendChoice::Container, _) => Ok((
            VfioBackend::Container,
            "--vfio-backend container".to_string(),
        )),
        (BackendChoice::Iommufd | BackendChoice::Auto, Ok(cdev)) => Ok((
            VfioBackend::Iommufd,
            format!(
                "{}{} and {} present",
                if choice == BackendChoice::Auto {
                    "auto: "
                } else {
                    "--vfio-backend iommufd: "
                },
                host.iommu.display(),
                cdev.display()
            ),
        )),
        (BackendChoice::Auto, Err(missing)) => Ok((
            VfioBackend::Container,
            format!("auto: iommufd unavailable ({missing})"),
        )),
        (BackendChoice::Iommufd, Err(missing)) => Err(ConfigError::IommufdUnavailable {
            path: flag_value.to_path_buf(),
            missing: missing.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests;
