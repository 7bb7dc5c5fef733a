use super::*;
use crate::columns::builtin;
use crate::run::guest::BootInfo;

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
