//! Binding the drive to vfio-pci and giving it back: `driver_override` +
//! `drivers_probe` (as in the lab), undone by a guard when it is dropped,
//! on success, on error, on a panic, and after Ctrl-C/SIGTERM (main turns
//! those into an orderly return).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::setup::sysfs::{pci_dev, Root};

/// One sysfs write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Absolute sysfs path.
    pub path: PathBuf,
    /// The value written.
    pub value: String,
}

/// How long the kernel may take to (re)bind the drive.
const WAIT: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(10)
};

fn w(path: impl Into<PathBuf>, value: &str) -> Write {
    Write {
        path: path.into(),
        value: value.into(),
    }
}

/// Binding failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A sysfs write failed.
    #[error("writing {value:?} to {}: {source} (are you root? is vfio-pci loaded: modprobe vfio-pci?)", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The value.
        value: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The drive did not end up on the expected driver.
    #[error("{bdf} is bound to {found} after {secs} s, not {want}; check dmesg, then bind it by hand (see tools/viommu-bench/README.md)")]
    NotBound {
        /// The drive.
        bdf: String,
        /// What it is bound to.
        found: String,
        /// What it should be bound to.
        want: String,
        /// How long we waited.
        secs: u64,
    },
    /// vfio-pci took the drive but its group's device node did not appear.
    #[error("{bdf} is on vfio-pci but /dev/vfio/{group} did not appear within {secs} s: VFIO did not take IOMMU group {group} (check dmesg for vfio errors: another device of the group on a host driver, or no interrupt remapping); the drive was given back")]
    NoGroupNode {
        /// The drive.
        bdf: String,
        /// Its IOMMU group.
        group: String,
        /// How long we waited.
        secs: u64,
    },
}

/// The writes that move `bdf` from its driver (if any) to vfio-pci.
pub fn bind_writes(bdf: &str, current: Option<&str>) -> Vec<Write> {
    let dev = pci_dev(bdf);
    let mut v = vec![w(dev.join("driver_override"), "vfio-pci")];
    if let Some(d) = current {
        v.push(w(format!("/sys/bus/pci/drivers/{d}/unbind"), bdf));
    }
    v.push(w("/sys/bus/pci/drivers_probe", bdf));
    v
}

/// The writes that give `bdf` back to `original` (or no driver).
pub fn restore_writes(bdf: &str, original: Option<&str>) -> Vec<Write> {
    let dev = pci_dev(bdf);
    let mut v = vec![
        w("/sys/bus/pci/drivers/vfio-pci/unbind", bdf),
        // An empty line clears the override.
        w(dev.join("driver_override"), "\n"),
    ];
    if original.is_some() {
        v.push(w("/sys/bus/pci/drivers_probe", bdf));
    }
    v
}

fn apply(root: &Root, writes: &[Write], tolerate: bool) -> Result<(), BindError> {
    for x in writes {
        tracing::debug!(path = %x.path.display(), value = x.value.trim(), "sysfs write");
        if let Err(source) = root.write(&x.path, &x.value) {
            if tolerate {
                warn!(
                    "writing {:?} to {}: {source}",
                    x.value.trim(),
                    x.path.display()
                );
                continue;
            }
            return Err(BindError::Write {
                path: x.path.clone(),
                value: x.value.trim().into(),
                source,
            });
        }
    }
    Ok(())
}

fn wait_for_driver(
    root: &Root,
    bdf: &str,
    want: Option<&str>,
    limit: Duration,
) -> Result<(), BindError> {
    let start = Instant::now();
    loop {
        let found = root.link_name(pci_dev(bdf).join("driver"));
        if found.as_deref() == want {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(BindError::NotBound {
                bdf: bdf.into(),
                found: found.unwrap_or_else(|| "no driver".into()),
                want: want.unwrap_or("no driver").into(),
                secs: limit.as_secs().max(1),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The drive on vfio-pci for as long as this lives; dropping it gives the
/// drive back to its original driver.
#[derive(Debug)]
pub struct BindGuard {
    root: Root,
    bdf: String,
    original: Option<String>,
    active: bool,
}

impl BindGuard {
    /// Bind `bdf` (now on `original`) to vfio-pci. Nothing to do, and
    /// nothing to restore, when it is on vfio-pci already.
    pub fn bind(root: &Root, bdf: &str, original: Option<&str>) -> Result<BindGuard, BindError> {
        let mut g = BindGuard {
            root: root.clone(),
            bdf: bdf.into(),
            original: original.map(String::from),
            active: false,
        };
        if original == Some("vfio-pci") {
            info!("{bdf} is already bound to vfio-pci; it stays so");
            return Ok(g);
        }
        info!(
            "binding {bdf} to vfio-pci (from {})",
            original.unwrap_or("no driver")
        );
        // From the first write on, the guard owes a restore.
        g.active = true;
        apply(root, &bind_writes(bdf, original), false)?;
        wait_for_driver(root, bdf, Some("vfio-pci"), WAIT)?;
        // The VMMs open the group's node: no node, no run.
        if let Some(group) = root.link_name(pci_dev(bdf).join("iommu_group")) {
            let node = format!("/dev/vfio/{group}");
            let start = Instant::now();
            while !root.exists(&node) {
                if start.elapsed() >= WAIT {
                    return Err(BindError::NoGroupNode {
                        bdf: bdf.into(),
                        group,
                        secs: WAIT.as_secs().max(1),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(g)
    }

    /// Give the drive back now (also what Drop does); errors are logged.
    pub fn restore(&mut self) {
        if !self.active {
            return;
        }
        self.active = false;
        let orig = self.original.as_deref();
        info!(
            "giving {} back to {}",
            self.bdf,
            orig.unwrap_or("no driver")
        );
        let _ = apply(&self.root, &restore_writes(&self.bdf, orig), true);
        if let Err(e) = wait_for_driver(&self.root, &self.bdf, orig, WAIT) {
            // drivers_probe may pick another driver; bind the original directly.
            if let Some(d) = orig {
                let bind = [w(format!("/sys/bus/pci/drivers/{d}/bind"), &self.bdf)];
                if apply(&self.root, &bind, false).is_ok()
                    && wait_for_driver(&self.root, &self.bdf, orig, WAIT).is_ok()
                {
                    return;
                }
            }
            warn!("{e}; to restore by hand: echo {bdf} > /sys/bus/pci/drivers/vfio-pci/unbind; echo > /sys/bus/pci/devices/{bdf}/driver_override; echo {bdf} > /sys/bus/pci/drivers_probe", bdf = self.bdf);
        }
    }
}

impl Drop for BindGuard {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests;
