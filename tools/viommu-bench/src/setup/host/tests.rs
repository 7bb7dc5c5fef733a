use super::*;
use std::os::unix::fs::MetadataExt;

fn fake(files: &[(&str, &str)]) -> (tempfile::TempDir, Root) {
    let d = tempfile::tempdir().unwrap();
    for (rel, body) in files {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let r = Root::new(d.path());
    (d, r)
}

const BDF: &str = "0000:41:00.0";

#[test]
fn host_info_is_read() {
    let (d, r) = fake(&[
        ("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9354 32-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9354 32-Core Processor\n"),
        ("sys/class/iommu/ivhd0/amd-iommu/cap", "0\n"),
        ("sys/class/iommu/ivhd1/amd-iommu/cap", "0\n"),
        (&format!("sys/bus/pci/devices/{BDF}/numa_node"), "1\n"),
    ]);
    let qemu = d.path().join("qemu");
    std::fs::write(&qemu, "#!/bin/sh\necho 'QEMU emulator version 9.2.1 (Debian 1:9.2.1+ds-1)'\necho 'Copyright (c) 2003-2024'\n").unwrap();
    std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let h = HostInfo::gather(&r, BDF, Some(&qemu));
    assert_eq!(
        h,
        HostInfo {
            qemu_version: Some("QEMU emulator version 9.2.1 (Debian 1:9.2.1+ds-1)".into()),
            cpu_model: Some("AMD EPYC 9354 32-Core Processor".into()),
            iommu: Some("amd".into()),
            numa_node: Some(1),
            pinned_cpus: None,
        }
    );
    let (_d, r) = fake(&[("sys/class/iommu/dmar0/intel-iommu/ecap", "0")]);
    assert_eq!(iommu_kind(&r), "intel");
    let (_d, r) = fake(&[("sys/class/iommu/virtio0/x", "")]);
    assert_eq!(iommu_kind(&r), "virtio");
    let (_d, r) = fake(&[]);
    assert_eq!(iommu_kind(&r), "none");
    assert_eq!(HostInfo::gather(&r, BDF, None).numa_node, None);
}

#[test]
fn pinning_takes_the_drives_node() {
    assert_eq!(
        parse_cpulist("0-3,8,10-11"),
        Some(vec![0, 1, 2, 3, 8, 10, 11])
    );
    assert_eq!(parse_cpulist(""), None);
    assert_eq!(parse_cpulist("3-1"), None);
    let (_d, r) = fake(&[
        (&format!("sys/bus/pci/devices/{BDF}/numa_node"), "1\n"),
        ("sys/devices/system/node/node0/cpulist", "0-15,32-47\n"),
        ("sys/devices/system/node/node1/cpulist", "16-31,48-63\n"),
        ("sys/devices/system/cpu/online", "0-63\n"),
    ]);
    let (list, cpus) = pin_cpus(&r, BDF).unwrap();
    assert_eq!(list, "16-31,48-63");
    assert_eq!(cpus.len(), 32);
    assert_eq!((cpus[0], cpus[31]), (16, 63));
    // No NUMA node for the drive: every online CPU.
    std::fs::write(
        r.path(format!("/sys/bus/pci/devices/{BDF}/numa_node")),
        "-1\n",
    )
    .unwrap();
    assert_eq!(pin_cpus(&r, BDF).unwrap().0, "0-63");
    // A hybrid Intel without a node: its P cores.
    for (f, v) in [("cpu_core", "0-15\n"), ("cpu_atom", "16-63\n")] {
        std::fs::create_dir_all(r.path(format!("/sys/devices/{f}"))).unwrap();
        std::fs::write(r.path(format!("/sys/devices/{f}/cpus")), v).unwrap();
    }
    assert_eq!(pin_cpus(&r, BDF).unwrap().0, "0-15");
    let (_d, r) = fake(&[(&format!("sys/bus/pci/devices/{BDF}/numa_node"), "2\n")]);
    let e = pin_cpus(&r, BDF).unwrap_err();
    assert!(
        e.contains("node2/cpulist") && e.contains("drop --pin"),
        "{e}"
    );
}

#[test]
fn pinning_a_thread_is_seen_by_it() {
    // In a thread of its own, so the test harness's threads stay as they were.
    std::thread::spawn(|| {
        let all = affinity().unwrap();
        let one = [all[all.len() - 1]];
        pin_to(&one).unwrap();
        assert_eq!(affinity().unwrap(), one);
    })
    .join()
    .unwrap();
}

#[test]
fn package_manager_from_os_release() {
    let cases = [
        ("ID=debian\nVERSION_ID=\"13\"\n", PkgManager::Apt),
        ("ID=ubuntu\nID_LIKE=debian\n", PkgManager::Apt),
        ("NAME=\"Fedora Linux\"\nID=fedora\n", PkgManager::Dnf),
        (
            "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n",
            PkgManager::Dnf,
        ),
        (
            "ID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n",
            PkgManager::Zypper,
        ),
        ("ID=arch\n", PkgManager::Pacman),
        // An unknown ID decided by what it is like.
        ("ID=mydistro\nID_LIKE=\"ubuntu debian\"\n", PkgManager::Apt),
        ("ID=nixos\n", PkgManager::Unknown),
        ("", PkgManager::Unknown),
    ];
    for (text, want) in cases {
        assert_eq!(PkgManager::from_os_release(text), want, "{text:?}");
    }
    assert_eq!(
        PkgManager::Dnf.install(Pkg::Qemu),
        "dnf install qemu-system-x86-core"
    );
    assert_eq!(
        PkgManager::Apt.install(Pkg::Busybox),
        "apt-get install busybox-static"
    );
    assert_eq!(PkgManager::Pacman.install(Pkg::Fio), "pacman -S fio");
    assert_eq!(
        PkgManager::Zypper.install(Pkg::Qemu),
        "zypper install qemu-x86"
    );
    let any = PkgManager::Unknown.install(Pkg::Qemu);
    assert!(
        any.contains("apt-get install qemu-system-x86") && any.contains("dnf install"),
        "{any}"
    );
}

#[test]
fn sudo_user_and_cache() {
    let s = |v: &str| Some(OsStr::new(v).to_owned());
    let (u, g) = (s("1000"), s("1001"));
    assert_eq!(
        invoking_user(0, u.as_deref(), g.as_deref()),
        Some((1000, 1001))
    );
    // Not root: files are the user's already. sudo from root: nothing to do.
    assert_eq!(invoking_user(1000, u.as_deref(), g.as_deref()), None);
    assert_eq!(invoking_user(0, s("0").as_deref(), s("0").as_deref()), None);
    assert_eq!(invoking_user(0, None, g.as_deref()), None);
    // Root (HOME is root's under sudo): the system cache, not /root/.cache.
    assert_eq!(
        default_cache_for(0, None, Some(OsStr::new("/root"))),
        PathBuf::from("/var/cache/viommu-bench")
    );
    assert_eq!(
        default_cache_for(1000, None, Some(OsStr::new("/home/u"))),
        PathBuf::from("/home/u/.cache/viommu-bench")
    );
    assert_eq!(
        default_cache_for(1000, Some(OsStr::new("/x")), Some(OsStr::new("/home/u"))),
        PathBuf::from("/x/viommu-bench")
    );
}

#[test]
fn a_new_results_tree_is_handed_over_whole() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("viommu-bench-results/20261126-000000");
    assert_eq!(
        first_missing(&out),
        Some(d.path().join("viommu-bench-results"))
    );
    std::fs::create_dir_all(out.join("logs")).unwrap();
    std::fs::write(out.join("logs/a.log"), "x").unwrap();
    std::fs::write(out.join("results.json"), "{}").unwrap();
    assert_eq!(first_missing(&out), None);
    // As root, give it to another user and see every file change hands;
    // otherwise only to ourselves (what an unprivileged chown can do).
    // SAFETY: no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let (uid, gid) = if euid == 0 {
        (4321, 4322)
    } else {
        (euid, egid)
    };
    chown_tree(&d.path().join("viommu-bench-results"), uid, gid).unwrap();
    for p in [
        "viommu-bench-results",
        "viommu-bench-results/20261126-000000/logs/a.log",
        "viommu-bench-results/20261126-000000/results.json",
    ] {
        let m = std::fs::metadata(d.path().join(p)).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{p}");
    }
}
