//! What the tool bound, on disk while it is bound (`/run/viommu-bench/
//! BDF.json`), and what to do with a drive a killed run left on vfio-pci:
//! say so before a rerun takes it, and give it back (`--restore`).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{give_back, restore_writes, RestoreError};
use crate::setup::sysfs::{pci_dev, Root};

/// Where the state files live (under the tool's `--root`).
pub const STATE_DIR: &str = "/run/viommu-bench";

/// The driver a drive goes back to when no state file names one.
const DEFAULT_DRIVER: &str = "nvme";

/// One binding by the tool, as recorded before its first sysfs write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The drive.
    pub bdf: String,
    /// Its driver before (`None`: no driver).
    pub original_driver: Option<String>,
    /// Its `driver_override` before (`None`: none set).
    pub driver_override: Option<String>,
    /// When it was bound, seconds since the epoch.
    pub bound_at_unix: u64,
    /// The tool's process id.
    pub pid: u32,
}

impl State {
    /// The state of binding `bdf` (now on `original`) from this process, now.
    pub fn new(root: &Root, bdf: &str, original: Option<&str>) -> State {
        let over = root
            .read_trim(pci_dev(bdf).join("driver_override"))
            .ok()
            .filter(|o| !o.is_empty() && o != "(null)");
        State {
            bdf: bdf.into(),
            original_driver: original.map(String::from),
            driver_override: over,
            bound_at_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            pid: std::process::id(),
        }
    }

    /// The state file of `bdf` (an absolute path, under the root).
    pub fn path(bdf: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{bdf}.json"))
    }

    /// Writes it (synced); the error names the file.
    pub fn save(&self, root: &Root) -> Result<(), (PathBuf, std::io::Error)> {
        let file = root.path(Self::path(&self.bdf));
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(root.path(STATE_DIR))?;
            let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
            let mut f = std::fs::File::create(&file)?;
            std::io::Write::write_all(&mut f, json.as_bytes())?;
            f.sync_all()
        };
        write().map_err(|e| (file.clone(), e))
    }

    /// The state file of `bdf`, if there is a readable one.
    pub fn load(root: &Root, bdf: &str) -> Option<State> {
        let text = std::fs::read_to_string(root.path(Self::path(bdf))).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Removes the state file of `bdf` (nothing bound any more).
    pub fn remove(root: &Root, bdf: &str) {
        let _ = std::fs::remove_file(root.path(Self::path(bdf)));
    }

    /// Whether the process that bound it still runs (and is not this one).
    fn binder_alive(&self, root: &Root) -> bool {
        self.pid != std::process::id() && root.exists(format!("/proc/{}", self.pid))
    }

    /// "viommu-bench (pid N, bound at SECONDS since the epoch, from DRIVER)".
    fn describe(&self) -> String {
        format!(
            "viommu-bench (pid {}, bound at {} s since the epoch, from {})",
            self.pid,
            self.bound_at_unix,
            self.original_driver.as_deref().unwrap_or("no driver")
        )
    }
}

/// The processes holding `bdf`'s VFIO group (or a VFIO device cdev) open:
/// pid and command name, from `/proc/PID/fd`.
pub fn holders(root: &Root, bdf: &str) -> Vec<(u32, String)> {
    let group = root.link_name(pci_dev(bdf).join("iommu_group"));
    let group_node = group.map(|g| PathBuf::from(format!("/dev/vfio/{g}")));
    let mut found = Vec::new();
    for pid in root.list("/proc") {
        let Ok(n) = pid.parse::<u32>() else {
            continue;
        };
        let fds = root.path(format!("/proc/{pid}/fd"));
        let holds = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_link(e.path()).is_ok_and(|t| {
                    Some(&t) == group_node.as_ref() || t.starts_with("/dev/vfio/devices")
                })
            });
        if holds {
            let comm = root
                .read_trim(format!("/proc/{pid}/comm"))
                .unwrap_or_else(|_| "?".into());
            found.push((n, comm));
        }
    }
    found
}

/// When `bdf` is on vfio-pci and the run is to bind it: what is found
/// and what to do instead (`None` when it is not on vfio-pci).
pub fn left_on_vfio(root: &Root, bdf: &str, driver: Option<&str>) -> Option<(String, String)> {
    if driver != Some("vfio-pci") {
        return None;
    }
    let fix = format!("give it back with `viommu-bench --restore {bdf}` and run again, or pass --no-bind to run on it as it is (it then stays on vfio-pci)");
    Some(match State::load(root, bdf) {
        Some(s) if s.binder_alive(root) => (
            format!("{bdf} is on vfio-pci, bound by a {} that still runs", s.describe()),
            format!("wait for it or stop it (kill {}): it gives the drive back itself", s.pid),
        ),
        Some(s) => (
            format!(
                "{bdf} is still on vfio-pci, left there by {} that did not give it back (killed, or out of memory)",
                s.describe()
            ),
            fix,
        ),
        None => (
            format!(
                "{bdf} is on vfio-pci already, and no state file in {STATE_DIR} says this tool bound it (bound by hand, by another program, or left by a run killed before it recorded it)"
            ),
            fix,
        ),
    })
}

/// `--restore BDF`: gives a drive left on vfio-pci back to the driver its
/// state file names (else `nvme`): unbind from vfio-pci, clear the
/// override, reprobe. The lines saying what it did, or why it did not.
/// A process that still holds the device through VFIO (a VMM the killed
/// run left, or one stuck in the kernel) is named and nothing is written:
/// the unbind would block until it lets go.
pub fn restore_left(root: &Root, bdf: &str, timeout: Duration) -> Result<Vec<String>, String> {
    let state = State::load(root, bdf);
    let driver = root.link_name(pci_dev(bdf).join("driver"));
    let mut said = Vec::new();
    if let Some(s) = &state {
        if s.binder_alive(root) {
            return Err(format!(
                "{bdf} was bound by a {} that still runs: stop it (kill {}) and it gives the drive back itself; run --restore again if it does not",
                s.describe(),
                s.pid
            ));
        }
        said.push(format!(
            "state file {}: bound by {}",
            State::path(bdf).display(),
            s.describe()
        ));
    } else {
        said.push(format!(
            "no state file for {bdf} in {STATE_DIR}: giving it to {DEFAULT_DRIVER}"
        ));
    }
    if driver.as_deref() != Some("vfio-pci") {
        State::remove(root, bdf);
        said.push(format!(
            "{bdf} is on {}, not vfio-pci: nothing to give back",
            driver.as_deref().unwrap_or("no driver")
        ));
        return Ok(said);
    }
    let held = holders(root, bdf);
    if !held.is_empty() {
        let list: Vec<String> = held
            .iter()
            .map(|(pid, comm)| format!("{comm} (pid {pid})"))
            .collect();
        let pids: Vec<String> = held.iter().map(|(pid, _)| pid.to_string()).collect();
        return Err(format!(
            "{bdf} is still in use through VFIO by {} (a VMM the killed run left?), and unbinding it from vfio-pci would block until that lets go: stop it (kill {}; one that SIGKILL does not end is stuck in the kernel: cat /proc/PID/stack) and run --restore again",
            list.join(", "),
            pids.join(" ")
        ));
    }
    let original = match &state {
        Some(s) => s.original_driver.clone(),
        None => Some(DEFAULT_DRIVER.to_string()),
    };
    for x in restore_writes(bdf, original.as_deref()) {
        said.push(format!("echo {:?} > {}", x.value.trim(), x.path.display()));
    }
    give_back(root, bdf, original.as_deref(), timeout).map_err(|e: RestoreError| e.to_string())?;
    State::remove(root, bdf);
    said.push(format!(
        "{bdf} is back on {}",
        original.as_deref().unwrap_or("no driver")
    ));
    Ok(said)
}
