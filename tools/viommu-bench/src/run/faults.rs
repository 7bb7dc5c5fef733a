//! Judgements on a finished cell that need more than its marker lines:
//! whether the guest's reserved IOVA regions keep it off the drive's own
//! BAR0 on the host, and whether a failed cell may be run again (a guest
//! kernel that crashed or reset itself, not a failed verify).

use crate::columns::{Column, Iommu, Vmm};
use crate::run::results::{CellResult, CellStatus};

/// Console text that means the guest kernel crashed.
const CRASH_PATTERNS: [&str; 4] = [
    "PANIC: double fault",
    "Kernel panic",
    "BUG: ",
    "general protection fault",
];

/// The crash message in a guest console line, if it is one (at most 100
/// characters).
pub fn crash_in(line: &str) -> Option<String> {
    CRASH_PATTERNS.iter().find_map(|p| {
        line.find(p)
            .map(|at| line[at..].chars().take(100).collect())
    })
}

/// Console text of a guest kernel stalled on a vCPU.
const STALL_PATTERNS: [&str; 2] = ["rcu: INFO: rcu_sched detected stall", "soft lockup"];

/// The stall message in a guest console line, if it is one (at most 100
/// characters).
pub fn stall_in(line: &str) -> Option<String> {
    STALL_PATTERNS.iter().find_map(|p| {
        line.find(p)
            .map(|at| line[at..].chars().take(100).collect())
    })
}

/// `first-last` (hex, as `0xfebf8000-0xfebfbfff`) → the two addresses.
fn range(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    let hex = |x: &str| u64::from_str_radix(x.trim().trim_start_matches("0x"), 16).ok();
    Some((hex(a)?, hex(b)?))
}

/// The drive's BAR0 in the host's physical space must lie inside one of
/// the guest's reserved IOVA regions (`resv`: the IOMMU group's
/// `reserved_regions`, lines `start end type` joined by `;`). Otherwise the
/// guest may hand the device a DMA address equal to the device's own
/// registers: on real hardware such a request can be routed peer-to-peer
/// instead of through the IOMMU, and QEMU's emulated NVMe refuses it
/// ("Data Transfer Error"). A BAR0 above the guest's IOVA space
/// (`iova_bits`, the driver's input range; 0: unknown) is out of its reach
/// too: our VMM clips its input range to the host IOMMU's, while stock
/// QEMU reserves what lies above it. Returns the problem, or `None` when
/// covered.
pub fn bar0_problem(bar0: &str, resv: &str, iova_bits: u32) -> Option<String> {
    let (first, last) = range(bar0)?;
    if (1..64).contains(&iova_bits) && first >> iova_bits != 0 {
        return None;
    }
    let covered = resv.split(';').any(|line| {
        let mut f = line.split_whitespace();
        let hex = |x: Option<&str>| {
            x.and_then(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok())
        };
        matches!((hex(f.next()), hex(f.next())), (Some(s), Some(e)) if s <= first && last <= e)
    });
    (!covered).then(|| {
        format!(
            "the guest may use IOVAs {bar0}, the drive's own BAR0 on the host (its reserved regions: {})",
            if resv.trim().is_empty() { "none" } else { resv.trim_end_matches(';') }
        )
    })
}

/// Applies the BAR0 check to a cell behind a virtio-iommu whose guest
/// reported its reserved regions: behind our VMM an uncovered BAR0 fails
/// the cell (our VMM reserves the host's PCI windows and BARs); behind
/// stock QEMU it is a warning (QEMU 7.2 reserves only the MSI window).
pub fn apply_bar0(cell: &mut CellResult, col: &Column, bar0: Option<&str>) {
    let (Some(bar0), Some(boot)) = (bar0, cell.boot.as_ref()) else {
        return;
    };
    if col.iommu != Iommu::Viommu || !boot.nvme {
        return;
    }
    let Some(resv) = boot.resv.as_deref() else {
        return;
    };
    let problem = bar0_problem(bar0, resv, boot.iova_bits);
    cell.bar0_reserved = Some(problem.is_none());
    let Some(p) = problem else { return };
    match col.vmm {
        Vmm::Ours => {
            let verify_failed = matches!(
                cell.status,
                CellStatus::Failed {
                    verify_failed: true,
                    ..
                }
            );
            cell.status = CellStatus::Failed {
                reason: match &cell.status {
                    CellStatus::Failed { reason, .. } => format!("{p}; {reason}"),
                    _ => p,
                },
                verify_failed,
            };
        }
        Vmm::Qemu => cell.warnings.push(p),
    }
}

/// Why the failed `cell` of a `vmm` column may be run again, or `None`:
/// the guest kernel crashed, reset itself mid-run (stock QEMU exits 0
/// with -no-reboot, ours exits 3 on a reset (run with --on-reboot exit)
/// and 4 on a triple fault), or
/// stalled on a vCPU before its init ran (an RCU stall or soft lockup in
/// early boot, which the nested emulation causes now and then; the cell
/// then hangs or fails before any I/O). Never after an error the guest
/// reported (a failed verify), never for a guest that hung after its boot
/// (a result), never when our VMM failed on its own.
pub fn retry_reason(cell: &CellResult, vmm: Vmm) -> Option<String> {
    retry_fault(cell, vmm).map(|f| f.words)
}

/// A fault a retry is for, in [`retry_reason`]'s words.
struct RetryFault {
    words: String,
    /// The words say how the VMM exited (a reset or triple fault), so the
    /// exit code needs no repeating beside them.
    names_exit: bool,
}

fn retry_fault(cell: &CellResult, vmm: Vmm) -> Option<RetryFault> {
    let other = |words: String| RetryFault {
        words,
        names_exit: false,
    };
    if cell.boot.is_none() && cell.errors.is_empty() {
        if let Some(s) = &cell.boot_stall {
            if !matches!(cell.status, CellStatus::Ok) {
                return Some(other(format!(
                    "the guest kernel stalled before its init ({s})"
                )));
            }
        }
    }
    if !matches!(cell.status, CellStatus::Failed { .. }) || !cell.errors.is_empty() {
        return None;
    }
    if let Some(c) = &cell.guest_crash {
        return Some(other(format!("guest kernel crashed: {c}")));
    }
    if cell.guest_rc.is_some() {
        return None;
    }
    let exit = match (vmm, cell.vmm_rc) {
        (Vmm::Qemu, Some(0)) => "stock QEMU exited 0 before the guest finished",
        (Vmm::Ours, Some(3)) => "our VMM exited 3: reset",
        (Vmm::Ours, Some(4)) => "our VMM exited 4: triple fault",
        _ => return None,
    };
    Some(RetryFault {
        words: format!("the guest reset itself mid-run ({exit})"),
        names_exit: true,
    })
}

/// A failed `cell` of a `vmm` column that is not run again (out of
/// attempts) though it failed of something a retry is for: its status
/// gives the retries' words ("the guest reset itself mid-run (our VMM
/// exited 4: triple fault)", "guest kernel crashed: ..."), not only the
/// VMM's exit code, so a reader and the lab see one wording for one
/// fault; the exit code stays where those words do not say it.
pub fn name_unretried_fault(cell: &mut CellResult, vmm: Vmm) {
    if let Some(fault) = retry_fault(cell, vmm) {
        if let CellStatus::Failed { reason, .. } = &mut cell.status {
            *reason = if fault.names_exit {
                fault.words
            } else {
                format!("{}; {reason}", fault.words)
            };
        }
    }
}

#[cfg(test)]
mod tests;
