use super::*;

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
