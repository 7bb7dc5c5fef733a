use super::*;

fn file(root: &Root, abs: &str, body: &str) {
    let p = root.path(abs);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

#[test]
fn read_from_a_fake_tree() {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path());
    let dev = "/sys/bus/pci/devices/0000:01:00.0";
    file(
        &root,
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz intel_iommu=on\n",
    );
    file(
        &root,
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    );
    file(
        &root,
        "/sys/kernel/mm/transparent_hugepage/defrag",
        "always defer [madvise] never\n",
    );
    for (p, g) in [
        ("policy0", "performance"),
        ("policy1", "powersave"),
        ("policy2", "performance"),
    ] {
        file(
            &root,
            &format!("/sys/devices/system/cpu/cpufreq/{p}/scaling_governor"),
            g,
        );
    }
    file(
        &root,
        "/sys/devices/system/cpu/intel_pstate/no_turbo",
        "1\n",
    );
    file(&root, "/sys/devices/system/cpu/smt/active", "1\n");
    std::fs::create_dir_all(root.path(format!("{dev}/nvme/nvme2"))).unwrap();
    file(&root, "/sys/class/nvme/nvme2/model", "Fake SSD 980\n");
    file(&root, "/sys/class/nvme/nvme2/firmware_rev", "1B2QJXD7\n");
    file(&root, "/sys/class/nvme/nvme2/serial", "S123\n");
    file(
        &root,
        &format!("{dev}/current_link_speed"),
        "8.0 GT/s PCIe\n",
    );
    file(&root, &format!("{dev}/current_link_width"), "4\n");
    file(&root, &format!("{dev}/max_link_speed"), "16.0 GT/s PCIe\n");
    file(&root, &format!("{dev}/max_link_width"), "4\n");
    for (f, v) in [
        ("nr_hugepages", "600"),
        ("free_hugepages", "88"),
        ("resv_hugepages", "0"),
    ] {
        file(
            &root,
            &format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{f}"),
            v,
        );
    }
    let mut p = Provenance::gather(&root, "0000:01:00.0", None, Some("nvme2n1"));
    assert_eq!(
        p.kernel_cmdline.as_deref(),
        Some("BOOT_IMAGE=/vmlinuz intel_iommu=on")
    );
    assert_eq!(
        (p.thp_enabled.as_deref(), p.thp_defrag.as_deref()),
        (Some("madvise"), Some("madvise"))
    );
    assert_eq!(p.cpufreq_governor.as_deref(), Some("performance,powersave"));
    assert_eq!(p.turbo.as_deref(), Some("off"));
    assert_eq!(p.smt_active, Some(true));
    assert_eq!(p.drive_model.as_deref(), Some("Fake SSD 980"));
    assert_eq!(p.drive_firmware.as_deref(), Some("1B2QJXD7"));
    let h = p.drive_serial_sha256.clone().unwrap();
    assert_eq!(h.len(), 12);
    assert!(!serde_json::to_string(&p).unwrap().contains("S123"));
    assert_eq!(p.pcie_link.as_deref(), Some("8.0 GT/s PCIe x4"));
    assert_eq!(p.pcie_link_max.as_deref(), Some("16.0 GT/s PCIe x4"));
    assert!(p.namespace.contains("nvme2n1"), "{}", p.namespace);
    assert!(!p.tool_revision.is_empty());
    let lines = p.header_lines();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].contains("THP madvise/madvise") && lines[0].contains("turbo off"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("PCIe 8.0 GT/s PCIe x4 (max 16.0 GT/s PCIe x4)"),
        "{}",
        lines[1]
    );
    // AMD: boost instead of no_turbo; nothing else there.
    let d2 = tempfile::tempdir().unwrap();
    let r2 = Root::new(d2.path());
    file(&r2, "/sys/devices/system/cpu/cpufreq/boost", "1\n");
    let p2 = Provenance::gather(&r2, "0000:01:00.0", None, None);
    assert_eq!(p2.turbo.as_deref(), Some("on"));
    assert_eq!(p2.drive_model, None);
    assert_eq!(p2.hugepages_2m, None);
    assert!(p2.header_lines()[0].contains("guest RAM: anonymous memory;"));
    // --hugepages is the run's: recorded, and in the header with the pool.
    assert!(lines[0].contains("guest RAM: anonymous memory (2 MiB pool: 600 pages, 88 free)"));
    p.hugepages = true;
    assert!(
        p.header_lines()[0]
            .contains("guest RAM: 2 MiB huge pages, --hugepages (2 MiB pool: 600 pages, 88 free)"),
        "{}",
        p.header_lines()[0]
    );
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["hugepages"], true);
    assert_eq!(json["hugepages_2m"]["free"], 88);
    // Results from before the flag read as off.
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("hugepages");
    old.as_object_mut().unwrap().remove("hugepages_2m");
    let back: Provenance = serde_json::from_value(old).unwrap();
    assert!(!back.hugepages && back.hugepages_2m.is_none());
    // --pin-vcpus is the run's too: absent unless set, then in the header.
    assert!(json.get("vcpu_pinning").is_none());
    assert!(!p.header_lines()[0].contains("--pin-vcpus"));
    p.vcpu_pinning = Some("vCPU 0 on CPU 1; the VMM's other threads on CPUs 0".into());
    assert!(
        p.header_lines()[0].contains(
            "guest RAM: 2 MiB huge pages, --hugepages (2 MiB pool: 600 pages, 88 free); \
             threads placed (--pin-vcpus): vCPU 0 on CPU 1;"
        ),
        "{}",
        p.header_lines()[0]
    );
    assert_eq!(
        serde_json::to_value(&p).unwrap()["vcpu_pinning"],
        "vCPU 0 on CPU 1; the VMM's other threads on CPUs 0"
    );
    // --guest-hugepages: absent unless set, then the pages each guest
    // reserved, in the JSON and the header.
    assert!(json.get("guest_hugepages").is_none());
    p.guest_hugepages = Some(18);
    assert_eq!(serde_json::to_value(&p).unwrap()["guest_hugepages"], 18);
    assert!(
        p.header_lines()[0]
            .contains("; fio's buffers in 18 2 MiB guest huge pages (--guest-hugepages)"),
        "{}",
        p.header_lines()[0]
    );
}
