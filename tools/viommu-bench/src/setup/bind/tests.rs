use super::*;
use std::os::unix::fs::OpenOptionsExt;

#[test]
fn bind_and_restore_sequences() {
    let b = bind_writes("0000:01:00.0", Some("nvme"));
    let s: Vec<String> = b
        .iter()
        .map(|x| format!("{} < {}", x.path.display(), x.value))
        .collect();
    assert_eq!(
        s,
        [
            "/sys/bus/pci/devices/0000:01:00.0/driver_override < vfio-pci",
            "/sys/bus/pci/drivers/nvme/unbind < 0000:01:00.0",
            "/sys/bus/pci/drivers_probe < 0000:01:00.0",
        ]
    );
    assert_eq!(bind_writes("0000:01:00.0", None).len(), 2);
    let r = restore_writes("0000:01:00.0", Some("nvme"));
    assert_eq!(
        r[0].path,
        PathBuf::from("/sys/bus/pci/drivers/vfio-pci/unbind")
    );
    assert_eq!(r[1].value, "\n");
    assert_eq!(r[2].path, PathBuf::from("/sys/bus/pci/drivers_probe"));
    assert_eq!(restore_writes("0000:01:00.0", None).len(), 2);
}

/// A fake sysfs where writes land in plain files; the driver link is
/// flipped by hand, as the kernel would.
fn fake() -> (tempfile::TempDir, Root) {
    let d = tempfile::tempdir().unwrap();
    for p in [
        "sys/bus/pci/devices/0000:01:00.0",
        "sys/bus/pci/drivers/nvme",
        "sys/bus/pci/drivers/vfio-pci",
    ] {
        std::fs::create_dir_all(d.path().join(p)).unwrap();
    }
    let root = Root::new(d.path());
    (d, root)
}

fn set_driver(root: &Root, drv: &str) {
    let link = root.path("/sys/bus/pci/devices/0000:01:00.0/driver");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("../../drivers/{drv}"), link).unwrap();
}

#[test]
fn guard_restores_on_drop() {
    let (_d, root) = fake();
    set_driver(&root, "vfio-pci");
    // Already on vfio-pci: nothing written, nothing restored.
    drop(BindGuard::bind(&root, "0000:01:00.0", Some("vfio-pci")).unwrap());
    assert!(!root.exists("/sys/bus/pci/drivers/vfio-pci/unbind"));
    // From nvme (the fake kernel "binds" at once: the link says vfio-pci).
    let g = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap();
    assert_eq!(
        root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override")
            .unwrap(),
        "vfio-pci"
    );
    assert_eq!(
        root.read_trim("/sys/bus/pci/drivers/nvme/unbind").unwrap(),
        "0000:01:00.0"
    );
    set_driver(&root, "nvme");
    drop(g);
    assert_eq!(
        root.read_trim("/sys/bus/pci/drivers/vfio-pci/unbind")
            .unwrap(),
        "0000:01:00.0"
    );
    assert_eq!(
        root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override")
            .unwrap(),
        ""
    );
}

#[test]
fn a_bind_without_the_group_node_is_an_error_and_restored() {
    let (_d, root) = fake();
    std::fs::create_dir_all(root.path("/sys/kernel/iommu_groups/7")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../kernel/iommu_groups/7",
        root.path("/sys/bus/pci/devices/0000:01:00.0/iommu_group"),
    )
    .unwrap();
    set_driver(&root, "vfio-pci");
    let e = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap_err();
    assert!(
        e.to_string()
            .contains("/dev/vfio/7 did not appear within 1 s: VFIO did not take IOMMU group 7"),
        "{e}"
    );
    // Given back: the override cleared, vfio-pci unbound.
    assert_eq!(
        root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override")
            .unwrap(),
        ""
    );
    assert_eq!(
        root.read_trim("/sys/bus/pci/drivers/vfio-pci/unbind")
            .unwrap(),
        "0000:01:00.0"
    );
    // With the node there, the bind holds.
    std::fs::create_dir_all(root.path("/dev/vfio")).unwrap();
    std::fs::write(root.path("/dev/vfio/7"), "").unwrap();
    set_driver(&root, "vfio-pci");
    let g = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap();
    set_driver(&root, "nvme");
    drop(g);
}

#[test]
fn failed_bind_still_restores() {
    let (_d, root) = fake();
    // drivers_probe cannot be written (a directory is in the way).
    std::fs::create_dir_all(root.path("/sys/bus/pci/drivers_probe")).unwrap();
    let e = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap_err();
    assert!(e.to_string().contains("drivers_probe"), "{e}");
    // The override was cleared again by the guard's drop.
    assert_eq!(
        root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override")
            .unwrap(),
        ""
    );
}

#[test]
fn only_the_drive_is_unbound_and_it_is_given_back() {
    // Another function of its group, on a host driver: never touched.
    let (_d, root) = fake();
    std::fs::create_dir_all(root.path("/sys/bus/pci/devices/0000:01:00.1")).unwrap();
    std::fs::create_dir_all(root.path("/sys/bus/pci/drivers/xhci_hcd")).unwrap();
    set_driver(&root, "vfio-pci");
    let g = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap();
    let writes: Vec<PathBuf> = bind_writes("0000:01:00.0", Some("nvme"))
        .into_iter()
        .chain(restore_writes("0000:01:00.0", Some("nvme")))
        .map(|w| w.path)
        .collect();
    assert!(
        writes
            .iter()
            .all(|p| !p.to_string_lossy().contains("01:00.1")
                && !p.to_string_lossy().contains("xhci"))
    );
    assert!(!root.exists("/sys/bus/pci/drivers/xhci_hcd/unbind"));
    assert!(!root.exists("/sys/bus/pci/devices/0000:01:00.1/driver_override"));
    set_driver(&root, "nvme");
    drop(g);
    assert_eq!(
        root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override")
            .unwrap(),
        ""
    );
}

/// The kernel's part, in a thread: a write to vfio-pci's `unbind` leaves
/// the drive without a driver, a probe with no override gives it to nvme.
fn fake_kernel(root: &Root) -> std::thread::JoinHandle<()> {
    let root = root.clone();
    std::thread::spawn(move || {
        for _ in 0..200 {
            if root.exists("/sys/bus/pci/drivers/vfio-pci/unbind") {
                let _ = std::fs::remove_file(root.path("/sys/bus/pci/drivers/vfio-pci/unbind"));
                let _ = std::fs::remove_file(root.path("/sys/bus/pci/devices/0000:01:00.0/driver"));
            }
            let over = root.read_trim("/sys/bus/pci/devices/0000:01:00.0/driver_override");
            if root.exists("/sys/bus/pci/drivers_probe") && over.is_ok_and(|o| o.is_empty()) {
                set_driver(&root, "nvme");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

#[test]
fn the_state_file_lives_while_the_drive_is_bound() {
    let (_d, root) = fake();
    set_driver(&root, "vfio-pci");
    let g = BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap();
    let s = State::load(&root, "0000:01:00.0").expect("a state file while bound");
    assert_eq!(s.original_driver.as_deref(), Some("nvme"));
    assert_eq!(s.pid, std::process::id());
    set_driver(&root, "nvme");
    drop(g);
    assert!(!root.exists(State::path("0000:01:00.0")));
}

#[test]
fn a_killed_run_is_named_on_rerun_and_given_back_by_restore() {
    let (_d, root) = fake();
    set_driver(&root, "vfio-pci");
    // SIGKILL: the guard never runs its restore.
    std::mem::forget(BindGuard::bind(&root, "0000:01:00.0", Some("nvme")).unwrap());
    let (what, fix) = left_on_vfio(&root, "0000:01:00.0", Some("vfio-pci")).unwrap();
    assert!(what.contains("left there by viommu-bench (pid"), "{what}");
    assert!(fix.contains("viommu-bench --restore 0000:01:00.0"), "{fix}");
    let k = fake_kernel(&root);
    let said = restore_left(&root, "0000:01:00.0", Duration::from_secs(5)).unwrap();
    k.join().unwrap();
    assert_eq!(
        root.link_name("/sys/bus/pci/devices/0000:01:00.0/driver")
            .as_deref(),
        Some("nvme")
    );
    assert!(said.last().unwrap().contains("back on nvme"), "{said:?}");
    assert!(!root.exists(State::path("0000:01:00.0")));
    assert_eq!(left_on_vfio(&root, "0000:01:00.0", Some("nvme")), None);
}

#[test]
fn a_drive_on_vfio_pci_without_a_state_file_goes_to_nvme() {
    let (_d, root) = fake();
    set_driver(&root, "vfio-pci");
    let (what, _) = left_on_vfio(&root, "0000:01:00.0", Some("vfio-pci")).unwrap();
    assert!(
        what.contains("no state file in /run/viommu-bench"),
        "{what}"
    );
    let k = fake_kernel(&root);
    let said = restore_left(&root, "0000:01:00.0", Duration::from_secs(5)).unwrap();
    k.join().unwrap();
    assert!(said[0].contains("no state file"), "{said:?}");
    assert_eq!(
        root.link_name("/sys/bus/pci/devices/0000:01:00.0/driver")
            .as_deref(),
        Some("nvme")
    );
}

#[test]
fn a_stuck_unbind_times_out_naming_who_holds_the_device() {
    let (_d, root) = fake();
    std::fs::create_dir_all(root.path("/sys/kernel/iommu_groups/7")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../kernel/iommu_groups/7",
        root.path("/sys/bus/pci/devices/0000:01:00.0/iommu_group"),
    )
    .unwrap();
    // A VMM stuck in the kernel holds the group; the unbind blocks (a
    // FIFO nobody reads blocks its writer's open).
    std::fs::create_dir_all(root.path("/proc/4242/fd")).unwrap();
    std::fs::write(root.path("/proc/4242/comm"), "vmm\n").unwrap();
    std::os::unix::fs::symlink("/dev/vfio/7", root.path("/proc/4242/fd/9")).unwrap();
    let fifo = root.path("/sys/bus/pci/drivers/vfio-pci/unbind");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    set_driver(&root, "vfio-pci");
    State::new(&root, "0000:01:00.0", Some("nvme"))
        .save(&root)
        .unwrap();
    let start = Instant::now();
    let e = give_back(
        &root,
        "0000:01:00.0",
        Some("nvme"),
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let msg = e.to_string();
    assert!(
        msg.contains("vmm (pid 4242) still hold(s) its VFIO device open"),
        "{msg}"
    );
    assert!(
        msg.contains("`viommu-bench --restore 0000:01:00.0`"),
        "{msg}"
    );
    // The state file stays for --restore.
    assert!(root.exists(State::path("0000:01:00.0")));
    // Let the blocked writers go.
    for _ in 0..2 {
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
    }
}

/// `--restore` while a process (a VMM a killed run left) still holds the
/// drive's VFIO group: it names the process and writes nothing, instead
/// of blocking in the unbind; once the process is gone it gives the
/// drive back.
#[test]
fn restore_names_a_process_that_still_holds_the_device() {
    let (_d, root) = fake();
    std::fs::create_dir_all(root.path("/sys/kernel/iommu_groups/7")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../kernel/iommu_groups/7",
        root.path("/sys/bus/pci/devices/0000:01:00.0/iommu_group"),
    )
    .unwrap();
    std::fs::create_dir_all(root.path("/proc/4242/fd")).unwrap();
    std::fs::write(root.path("/proc/4242/comm"), "vmm\n").unwrap();
    std::os::unix::fs::symlink("/dev/vfio/7", root.path("/proc/4242/fd/9")).unwrap();
    set_driver(&root, "vfio-pci");
    let e = restore_left(&root, "0000:01:00.0", Duration::from_secs(5)).unwrap_err();
    assert!(
        e.contains("in use through VFIO by vmm (pid 4242)") && e.contains("kill 4242"),
        "{e}"
    );
    assert!(
        !root.exists("/sys/bus/pci/drivers/vfio-pci/unbind"),
        "written"
    );
    std::fs::remove_dir_all(root.path("/proc/4242")).unwrap();
    let k = fake_kernel(&root);
    let said = restore_left(&root, "0000:01:00.0", Duration::from_secs(5)).unwrap();
    k.join().unwrap();
    assert!(said.last().unwrap().contains("back on nvme"), "{said:?}");
}
