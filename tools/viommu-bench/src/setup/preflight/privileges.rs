//! Who runs the tool: root, CAP_IPC_LOCK, and the memory it may lock
//! for the guest's RAM.
use super::{problem, Checks, Problem};

/// Linux capability number of CAP_IPC_LOCK (exempts from RLIMIT_MEMLOCK).
const CAP_IPC_LOCK: u32 = 14;
/// Memory VFIO pins beyond guest RAM (ROMs, rings, QEMU's own): margin.
const MEMLOCK_MARGIN: u64 = 64 << 20;

impl Checks {
    /// Effective uid from /proc/self/status.
    pub(super) fn euid(&self) -> Option<u32> {
        let s = self.root.read_trim("/proc/self/status").ok()?;
        let line = s.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(2)?.parse().ok()
    }

    fn has_ipc_lock(&self) -> bool {
        let Ok(s) = self.root.read_trim("/proc/self/status") else {
            return false;
        };
        s.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
    }

    pub(super) fn check_memlock(&self, p: &mut Vec<Problem>) {
        if self.has_ipc_lock() {
            return;
        }
        let limits = self.root.read_trim("/proc/self/limits").unwrap_or_default();
        let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
            return;
        };
        let soft = line["Max locked memory".len()..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        if soft == "unlimited" {
            return;
        }
        let need = self.guest_memory + MEMLOCK_MARGIN;
        if let Ok(have) = soft.parse::<u64>() {
            if have < need {
                p.push(problem(
                    format!(
                        "memlock limit {} MiB is below the {} MiB VFIO pins for the guest's RAM",
                        have >> 20,
                        need >> 20
                    ),
                    "raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf) or run as root",
                ));
            }
        }
    }
}
