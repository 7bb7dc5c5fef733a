//! Judgements on a finished cell that need more than its marker lines:
//! whether the guest's reserved IOVA regions keep it off the drive's own
//! BAR0 on the host, and whether a failed cell may be run again (a guest
//! kernel that crashed or reset itself, not a failed verify).

use crate::columns::{Column, Iommu, Vmm};
use crate::results::{CellResult, CellStatus};

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
/// with -no-reboot, ours exits 3 on a reset and 4 on a triple fault), or
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
mod tests {
    use super::*;
    use crate::columns::builtin;
    use crate::guest::BootInfo;

    fn cell(status: CellStatus, resv: Option<&str>) -> CellResult {
        CellResult {
            status,
            boot: Some(BootInfo {
                nvme: true,
                resv: resv.map(String::from),
                ..Default::default()
            }),
            guest_rc: None,
            vmm_rc: None,
            ..CellResult::test_ok("c", 0)
        }
    }

    const BAR0: &str = "0xfebf8000-0xfebfbfff";

    #[test]
    fn bar0_must_be_inside_a_reserved_region() {
        let msi = "0x00000000fee00000 0x00000000feefffff msi\n".replace('\n', ";");
        assert!(bar0_problem(BAR0, &msi, 0).unwrap().contains("BAR0"));
        assert!(bar0_problem(BAR0, "", 0).unwrap().contains("none"));
        let both = format!("{msi}0x00000000c0000000 0x00000000febfffff reserved;");
        assert_eq!(bar0_problem(BAR0, &both, 0), None);
        // Partly covered is not covered.
        assert!(bar0_problem(BAR0, "0xfebf8000 0xfebf8fff reserved;", 0).is_some());
        // A BAR0 above the guest's input range cannot be an IOVA (QEMU
        // 11.1 as the outer emulator puts the lab's NVMe at 768 GiB; the
        // host IOMMU, and so our device, offers 39 bits).
        let high = "0xc000000000-0xc000003fff";
        assert!(bar0_problem(high, &msi, 0).is_some(), "input range unknown");
        assert!(
            bar0_problem(high, &msi, 40).is_some(),
            "inside a 40-bit space"
        );
        assert_eq!(bar0_problem(high, &msi, 39), None);
        assert!(bar0_problem(high, &msi, 64).is_some());
    }

    #[test]
    fn bar0_fails_ours_and_warns_for_stock_qemu() {
        let ours = builtin("ours+stock").unwrap();
        let mut c = cell(CellStatus::Ok, Some("0xfee00000 0xfeefffff msi;"));
        apply_bar0(&mut c, &ours, Some(BAR0));
        assert!(
            matches!(&c.status, CellStatus::Failed { reason, verify_failed: false } if reason.contains("BAR0"))
        );
        assert_eq!(c.bar0_reserved, Some(false));
        let mut c = cell(CellStatus::Ok, Some("0xfee00000 0xfeefffff msi;"));
        apply_bar0(&mut c, &builtin("qemu+stock").unwrap(), Some(BAR0));
        assert_eq!(c.status, CellStatus::Ok);
        assert_eq!(c.warnings.len(), 1);
        // Covered, no report, no BAR0 known, no vIOMMU: nothing happens.
        let mut c = cell(CellStatus::Ok, Some("0xc0000000 0xfebfffff reserved;"));
        apply_bar0(&mut c, &ours, Some(BAR0));
        assert_eq!(
            (c.status.clone(), c.bar0_reserved),
            (CellStatus::Ok, Some(true))
        );
        for (resv, bar0, col) in [
            (None, Some(BAR0), "ours+stock"),
            (Some(""), None, "ours+stock"),
            (Some(""), Some(BAR0), "no-viommu"),
        ] {
            let mut c = cell(CellStatus::Ok, resv);
            apply_bar0(&mut c, &builtin(col).unwrap(), bar0);
            assert_eq!((c.status, c.bar0_reserved), (CellStatus::Ok, None));
        }
    }

    #[test]
    fn crashes_and_resets_are_retried_verify_failures_never() {
        let failed = |verify_failed| CellStatus::Failed {
            reason: "x".into(),
            verify_failed,
        };
        assert_eq!(
            crash_in("[  42.6] traps: PANIC: double fault, error_code: 0x0").as_deref(),
            Some("PANIC: double fault, error_code: 0x0")
        );
        assert_eq!(crash_in("fio: 4k ok"), None);
        let mut c = cell(failed(false), None);
        c.guest_crash = Some("PANIC: double fault".into());
        assert!(retry_reason(&c, Vmm::Ours).unwrap().contains("crashed"));
        c.errors.push("fio verify-4k exited 1".into());
        assert_eq!(retry_reason(&c, Vmm::Ours), None);
        let mut c = cell(failed(false), None);
        c.vmm_rc = Some(0);
        assert!(retry_reason(&c, Vmm::Qemu).unwrap().contains("reset"));
        assert_eq!(retry_reason(&c, Vmm::Ours), None);
        c.vmm_rc = Some(4);
        assert!(retry_reason(&c, Vmm::Ours)
            .unwrap()
            .contains("triple fault"));
        c.vmm_rc = Some(2);
        assert_eq!(retry_reason(&c, Vmm::Ours), None);
        let hung = cell(
            CellStatus::Hung {
                phase: "randread-64k".into(),
                after_s: 60,
                device_owes: false,
            },
            None,
        );
        assert_eq!(retry_reason(&hung, Vmm::Qemu), None);
        assert_eq!(retry_reason(&cell(CellStatus::Ok, None), Vmm::Qemu), None);
    }

    #[test]
    fn a_fault_out_of_attempts_keeps_its_retries_words() {
        let status = |reason: &str| CellStatus::Failed {
            reason: reason.into(),
            verify_failed: false,
        };
        let mut c = cell(status("the VMM exited 4 before the guest finished"), None);
        c.vmm_rc = Some(4);
        name_unretried_fault(&mut c, Vmm::Ours);
        assert_eq!(
            c.status,
            status("the guest reset itself mid-run (our VMM exited 4: triple fault)")
        );
        let mut c = cell(status("the VMM exited 1 before the guest finished"), None);
        c.vmm_rc = Some(1);
        c.guest_crash = Some("Kernel panic - not syncing: fake".into());
        name_unretried_fault(&mut c, Vmm::Ours);
        assert_eq!(
            c.status,
            status("guest kernel crashed: Kernel panic - not syncing: fake; the VMM exited 1 before the guest finished")
        );
        // Anything a retry is not for keeps its reason.
        let mut c = cell(status("the VMM exited 2 before the guest finished"), None);
        c.vmm_rc = Some(2);
        name_unretried_fault(&mut c, Vmm::Ours);
        assert_eq!(
            c.status,
            status("the VMM exited 2 before the guest finished")
        );
        let mut c = cell(status("fio verify-4k exited 1"), None);
        c.vmm_rc = Some(4);
        c.errors.push("fio verify-4k exited 1".into());
        name_unretried_fault(&mut c, Vmm::Ours);
        assert_eq!(c.status, status("fio verify-4k exited 1"));
    }

    #[test]
    fn a_stall_before_init_is_retried_a_hang_after_boot_never() {
        assert!(
            stall_in("[   21.0] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:")
                .unwrap()
                .starts_with("rcu: INFO")
        );
        assert_eq!(stall_in("fio: randread-4k"), None);
        let hung = CellStatus::Hung {
            phase: "boot".into(),
            after_s: 120,
            device_owes: false,
        };
        let mut c = cell(hung.clone(), None);
        c.boot = None;
        c.boot_stall = Some("rcu: INFO: rcu_sched detected stalls".into());
        assert!(retry_reason(&c, Vmm::Ours)
            .unwrap()
            .contains("stalled before its init"));
        // After the boot record, a hang is a result.
        let mut c = cell(hung, None);
        c.boot_stall = Some("rcu: INFO: rcu_sched detected stalls".into());
        assert_eq!(retry_reason(&c, Vmm::Ours), None);
    }
}
