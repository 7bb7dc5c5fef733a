//! Every read of /sys and /proc goes through a [`Root`], so tests can point
//! the tool at a fake tree in a temporary directory.

use std::io;
use std::path::{Path, PathBuf};

/// The directory that stands for `/` when reading sysfs and procfs.
#[derive(Debug, Clone)]
pub struct Root(PathBuf);

impl Root {
    /// A root at `dir` (`/` on a real host).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root(dir.into())
    }

    /// The host path of the absolute path `abs` (e.g. `/sys/bus/pci`).
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.0.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    /// Whether `abs` exists under the root.
    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    /// The contents of `abs`, whitespace-trimmed.
    pub fn read_trim(&self, abs: impl AsRef<Path>) -> io::Result<String> {
        Ok(std::fs::read_to_string(self.path(abs))?.trim().to_string())
    }

    /// The last component of the symlink `abs` points to (e.g. a driver name).
    pub fn link_name(&self, abs: impl AsRef<Path>) -> Option<String> {
        let target = std::fs::read_link(self.path(abs)).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// The sorted entry names of the directory `abs`; empty when it is missing.
    pub fn list(&self, abs: impl AsRef<Path>) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(abs))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Write `value` to the sysfs file `abs`.
    pub fn write(&self, abs: impl AsRef<Path>, value: &str) -> io::Result<()> {
        std::fs::write(self.path(abs), value)
    }
}

/// The sysfs directory of PCI function `bdf`.
pub fn pci_dev(bdf: &str) -> PathBuf {
    PathBuf::from("/sys/bus/pci/devices").join(bdf)
}

#[cfg(test)]
mod tests;
