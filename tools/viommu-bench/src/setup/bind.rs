//! Binding the drive to vfio-pci and giving it back: `driver_override` +
//! `drivers_probe` (as in the lab), undone by a guard when it is dropped,
//! on success, on error, on a panic, and after Ctrl-C/SIGTERM/SIGHUP (main
//! turns those into an orderly return). A state file
//! (`/run/viommu-bench/BDF.json`) says what was bound while it is, so a
//! drive left on vfio-pci by a killed run is recognised and given back
//! by `viommu-bench --restore BDF` ([`restore_left`]).

mod state;

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::setup::sysfs::{pci_dev, Root};

pub use state::{holders, left_on_vfio, restore_left, State};

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
    /// The state file could not be written: nothing was bound.
    #[error("cannot record the binding in {}: {source}; nothing was bound (is /run writable? are you root?)", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
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
    timeout: Duration,
}

/// How long giving the drive back may take before the tool stops waiting
/// (an unbind from vfio-pci blocks while a process still holds the device).
pub const RESTORE_TIMEOUT: Duration = Duration::from_secs(60);

/// The drive could not be given back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The unbind from vfio-pci did not return in time.
    #[error("giving {bdf} back: the unbind from vfio-pci did not return within {secs} s: {holders}; the drive stays on vfio-pci: once that process is gone (or after a reboot), give it back with `viommu-bench --restore {bdf}`")]
    Timeout {
        /// The drive.
        bdf: String,
        /// How long we waited.
        secs: u64,
        /// Who holds the device, as a phrase.
        holders: String,
    },
    /// The writes returned but the original driver did not take it.
    #[error("{0}; to restore by hand: echo {1} > /sys/bus/pci/drivers/vfio-pci/unbind; echo > /sys/bus/pci/devices/{1}/driver_override; echo {1} > /sys/bus/pci/drivers_probe")]
    NotBack(BindError, String),
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
            timeout: RESTORE_TIMEOUT,
        };
        if original == Some("vfio-pci") {
            info!("{bdf} is already bound to vfio-pci; it stays so");
            return Ok(g);
        }
        info!(
            "binding {bdf} to vfio-pci (from {})",
            original.unwrap_or("no driver")
        );
        // Recorded before the first write: a run killed from here on
        // leaves the state file for --restore.
        State::new(root, bdf, original)
            .save(root)
            .map_err(|(path, source)| BindError::State { path, source })?;
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

    /// How long [`BindGuard::restore`] waits for the unbind.
    pub fn with_timeout(mut self, timeout: Duration) -> BindGuard {
        self.timeout = timeout;
        self
    }

    /// Give the drive back now (also what Drop does, logging the error),
    /// waiting at most the guard's timeout: the unbind runs on a thread of
    /// its own, which a process still holding the device blocks.
    pub fn restore(&mut self) -> Result<(), RestoreError> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        info!(
            "giving {} back to {}",
            self.bdf,
            self.original.as_deref().unwrap_or("no driver")
        );
        give_back(
            &self.root,
            &self.bdf,
            self.original.as_deref(),
            self.timeout,
        )?;
        State::remove(&self.root, &self.bdf);
        Ok(())
    }
}

/// Unbinds `bdf` from vfio-pci, clears its override and reprobes (binding
/// `original` directly if the probe picks another), on a thread; waits
/// at most `timeout` for it.
pub fn give_back(
    root: &Root,
    bdf: &str,
    original: Option<&str>,
    timeout: Duration,
) -> Result<(), RestoreError> {
    let (tx, rx) = mpsc::channel();
    let (r, b, o) = (root.clone(), bdf.to_string(), original.map(String::from));
    let spawned = std::thread::Builder::new()
        .name("give-back".into())
        .spawn(move || {
            let _ = tx.send(give_back_now(&r, &b, o.as_deref()));
        });
    if let Err(e) = spawned {
        warn!("cannot start a thread to give {bdf} back ({e}); giving it back unbounded");
        return give_back_now(root, bdf, original);
    }
    match rx.recv_timeout(timeout) {
        Ok(done) => done,
        Err(_) => Err(RestoreError::Timeout {
            bdf: bdf.into(),
            secs: timeout.as_secs_f64().ceil() as u64,
            holders: holders_phrase(&holders(root, bdf)),
        }),
    }
}

/// Who holds the device, as a phrase for [`RestoreError::Timeout`].
fn holders_phrase(h: &[(u32, String)]) -> String {
    if h.is_empty() {
        return "no process holds its VFIO group open any more (the kernel may still be releasing it; dmesg says)".into();
    }
    let list: Vec<String> = h
        .iter()
        .map(|(pid, comm)| format!("{comm} (pid {pid})"))
        .collect();
    format!(
        "{} still hold(s) its VFIO device open (stuck in the kernel if SIGKILL did not end it: cat /proc/PID/stack)",
        list.join(", ")
    )
}

/// [`give_back`]'s work, unbounded.
fn give_back_now(root: &Root, bdf: &str, original: Option<&str>) -> Result<(), RestoreError> {
    let _ = apply(root, &restore_writes(bdf, original), true);
    let Err(e) = wait_for_driver(root, bdf, original, WAIT) else {
        return Ok(());
    };
    // drivers_probe may pick another driver; bind the original directly.
    if let Some(d) = original {
        let bind = [w(format!("/sys/bus/pci/drivers/{d}/bind"), bdf)];
        if apply(root, &bind, false).is_ok() && wait_for_driver(root, bdf, original, WAIT).is_ok() {
            return Ok(());
        }
    }
    Err(RestoreError::NotBack(e, bdf.into()))
}

impl Drop for BindGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests;
