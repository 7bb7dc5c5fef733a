//! The in-use checks, the group hint, dual-port drives, VMD and the
//! measured namespace, on fake sysfs/procfs trees.
use std::os::unix::fs::symlink;
use std::sync::Arc;

use super::super::tests::{Busy, Fake, BDF};

/// The fake drive's namespace nvme0n1 (259:0) with its partition
/// nvme0n1p1 (259:1), and this process in mount namespace 1.
fn numbered(f: &Fake) {
    f.file("sys/block/nvme0n1/dev", "259:0\n");
    f.file("sys/block/nvme0n1/size", "2097152\n");
    f.file("sys/block/nvme0n1/nvme0n1p1/dev", "259:1\n");
    f.file("sys/block/nvme0n1/nvme0n1p1/size", "1048576\n");
    f.mkdir("proc/self/ns");
    symlink("mnt:[1]", f.p("proc/self/ns/mnt")).unwrap();
}

/// Process `pid` named `comm` in mount namespace `ns` with `mountinfo`.
fn process(f: &Fake, pid: u32, comm: &str, ns: &str, mountinfo: &str) {
    f.file(&format!("proc/{pid}/comm"), &format!("{comm}\n"));
    f.file(&format!("proc/{pid}/mountinfo"), mountinfo);
    f.mkdir(&format!("proc/{pid}/ns"));
    symlink(ns, f.p(&format!("proc/{pid}/ns/mnt"))).unwrap();
}

#[test]
fn an_exclusive_open_refused_with_ebusy_is_in_use() {
    let f = Fake::healthy();
    numbered(&f);
    let mut c = f.checks();
    c.opener = Arc::new(Busy(vec!["nvme0n1p1"]));
    let line = f.only_problem(&c);
    assert!(
        line.contains("/dev/nvme0n1p1 is in use")
            && line.contains("EBUSY")
            && line.contains("259:1")
            && line.contains("pick another drive"),
        "{line}"
    );
    // The kernel says both the namespace and its partition are busy
    // (a claimed partition claims its disk): one line, the partition's.
    c.opener = Arc::new(Busy(vec!["nvme0n1", "nvme0n1p1"]));
    let line = f.only_problem(&c);
    assert!(line.contains("/dev/nvme0n1p1 is in use"), "{line}");
    // Busy because its partition is mounted: the mount is the one line.
    f.file("proc/mounts", "/dev/nvme0n1p1 /data ext4 rw 0 0\n");
    c.opener = Arc::new(Busy(vec!["nvme0n1", "nvme0n1p1"]));
    let line = f.only_problem(&c);
    assert!(
        line.contains("/dev/nvme0n1p1 is mounted on /data"),
        "{line}"
    );
    // The real opener on a missing node cannot tell: said, not skipped.
    let mut c = f.checks();
    c.opener = Arc::new(crate::setup::blockdev::SysOpen);
    f.file("proc/mounts", "");
    let out = c.run();
    assert!(
        out.problems.iter().any(|p| p
            .what
            .contains("cannot check whether /dev/nvme0n1 is in use")),
        "{:#?}",
        out.problems
    );
}

#[test]
fn a_process_holding_the_drive_open_is_named() {
    let f = Fake::healthy();
    f.mkdir("proc/4242/fd");
    f.file("proc/4242/comm", "qemu-system-x86\n");
    symlink("/dev/nvme0n1", f.p("proc/4242/fd/12")).unwrap();
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("/dev/nvme0n1 is open in pid 4242 (qemu-system-x86)")
            && line.contains("stop it"),
        "{line}"
    );
    // The namespace's generic character device too.
    let f = Fake::healthy();
    f.mkdir("proc/77/fd");
    f.file("proc/77/comm", "spdk_tgt\n");
    symlink("/dev/ng0n1", f.p("proc/77/fd/3")).unwrap();
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("/dev/ng0n1 is open in pid 77 (spdk_tgt)"),
        "{line}"
    );
}

#[test]
fn a_mount_in_another_namespace_is_found_by_major_minor() {
    let f = Fake::healthy();
    numbered(&f);
    process(
        &f,
        1,
        "systemd",
        "mnt:[1]",
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n",
    );
    // A container's mount of the partition, under a name of its own.
    let inside = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 259:1 / /var/lib/kubelet/pv1 rw - xfs /dev/disk/by-id/x rw\n";
    process(&f, 900, "containerd-shim", "mnt:[2]", inside);
    process(&f, 901, "pause", "mnt:[2]", inside);
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("/dev/nvme0n1p1 (259:1) is mounted in another mount namespace")
            && line.contains(
                "/var/lib/kubelet/pv1 in the mount namespace of pid 900 (containerd-shim)"
            )
            && !line.contains("pid 901")
            && line.contains("nsenter -t 900 -m umount"),
        "{line}"
    );
    // In this namespace, by number, whatever the source says: one line.
    let f = Fake::healthy();
    numbered(&f);
    process(
        &f,
        1,
        "systemd",
        "mnt:[1]",
        "2 1 259:0 / /srv rw - ext4 /dev/root rw\n",
    );
    process(
        &f,
        700,
        "sshd",
        "mnt:[3]",
        "2 1 259:0 / /srv rw - ext4 /dev/root rw\n",
    );
    let line = f.only_problem(&f.checks());
    assert!(line.contains("/dev/nvme0n1 is mounted on /srv"), "{line}");
}

#[test]
fn a_member_of_a_multi_device_btrfs_is_refused() {
    let f = Fake::healthy();
    // / is btrfs on sda2 and the drive's partition.
    f.file("proc/mounts", "/dev/sda2 / btrfs rw 0 0\n");
    let uuid = "5f1c2d3e-0000-4000-8000-00000000abcd";
    f.mkdir(&format!("sys/fs/btrfs/{uuid}/devices"));
    f.mkdir("sys/fs/btrfs/features");
    for m in ["sda2", "nvme0n1p1"] {
        symlink(
            "../../../../devices/x",
            f.p(&format!("sys/fs/btrfs/{uuid}/devices/{m}")),
        )
        .unwrap();
    }
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains(&format!(
            "nvme0n1p1 is a member of btrfs filesystem {uuid} mounted at /"
        )) && line.contains(&format!("/sys/fs/btrfs/{uuid}/devices/nvme0n1p1"))
            && line.contains("pick another drive"),
        "{line}"
    );
}

#[test]
fn a_vdev_of_an_imported_zfs_pool_is_refused() {
    let f = Fake::healthy();
    std::fs::create_dir_all(f.p("dev")).unwrap();
    std::fs::write(
        f.p("dev/nvme0n1p1"),
        crate::setup::blockdev::tests::zfs_label("rpool"),
    )
    .unwrap();
    f.mkdir("proc/spl/kstat/zfs/rpool");
    f.file("proc/spl/kstat/zfs/arcstats", "");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("nvme0n1p1 is a vdev of the imported ZFS pool rpool")
            && line.contains("zpool status -P rpool"),
        "{line}"
    );
    // Exported: not in use, but the plan shows what is there.
    f.rm("proc/spl/kstat/zfs/rpool");
    let out = f.checks().run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    let p1 = out
        .facts
        .contents
        .iter()
        .find(|d| d.name == "nvme0n1p1")
        .unwrap();
    assert_eq!(
        (p1.fstype.as_deref(), p1.label.as_deref()),
        (Some("zfs_member"), Some("rpool"))
    );
}

#[test]
fn the_facts_list_what_is_on_the_drive() {
    let f = Fake::healthy();
    numbered(&f);
    f.exe("bin/blkid");
    f.file(
        "bin/blkid",
        "#!/bin/sh\ncase \"$4\" in */nvme0n1p1) printf 'TYPE=ext4\\nLABEL=data\\n';; *) exit 2;; esac\n",
    );
    let out = f.checks().run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    assert_eq!(
        crate::setup::blockdev::describe_all(&out.facts.contents),
        "nvme0n1 1G no filesystem signature, nvme0n1p1 512M ext4 \"data\""
    );
    assert_eq!(
        out.facts.contents_note(),
        "on it now: nvme0n1 1G no filesystem signature, nvme0n1p1 512M ext4 \"data\"; the guests measure nvme0n1 (their /dev/nvme0n1)"
    );
}

/// A dual-port drive under nvme_core.multipath=N: the drive's controller
/// nvme0 (nvme0n1) and the other port's nvme1 (nvme1n1, the same
/// namespace) in subsystem 0, which holds no block device of its own.
fn dual_port(f: &Fake) {
    f.mkdir("sys/class/nvme/nvme1/nvme1n1");
    f.mkdir("sys/block/nvme1n1/nvme1n1p1/holders");
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys0");
    for c in ["nvme0", "nvme1"] {
        symlink(
            format!("../../nvme/{c}"),
            f.p(&format!("sys/class/nvme-subsystem/nvme-subsys0/{c}")),
        )
        .unwrap();
    }
}

#[test]
fn a_dual_port_drive_without_multipath_is_checked_through_both_ports() {
    let f = Fake::healthy();
    dual_port(&f);
    let out = f.checks().run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    assert_eq!(out.facts.namespaces, vec!["nvme0n1", "nvme1n1"]);
    assert_eq!(out.facts.measured_namespace.as_deref(), Some("nvme0n1"));
    // Mounted through port B.
    f.file("proc/mounts", "/dev/nvme1n1p1 /srv ext4 rw 0 0\n");
    let line = f.only_problem(&f.checks());
    assert!(line.contains("/dev/nvme1n1p1 is mounted on /srv"), "{line}");
    // Held open through port B, or busy there.
    f.file("proc/mounts", "");
    let mut c = f.checks();
    c.opener = Arc::new(Busy(vec!["nvme1n1"]));
    assert!(f.only_problem(&c).contains("/dev/nvme1n1 is in use"));
}

#[test]
fn the_measured_namespace_is_the_lowest_nsid_and_its_size_is_read() {
    let f = Fake::healthy();
    f.file("sys/block/nvme0n1/nsid", "1\n");
    f.file("sys/block/nvme0n1/size", "1000\n");
    f.mkdir(&format!("sys/bus/pci/devices/{BDF}/nvme/nvme0/nvme0n2"));
    f.file("sys/block/nvme0n2/nsid", "2\n");
    f.file("sys/block/nvme0n2/size", "9000\n");
    f.file("sys/block/nvme0n2/queue/logical_block_size", "4096\n");
    let out = f.checks().run();
    assert_eq!(out.facts.measured_namespace.as_deref(), Some("nvme0n1"));
    assert_eq!(out.facts.namespace_bytes, Some(1000 * 512));
    assert_eq!(out.facts.logical_block_size, Some(512));
}

/// Group 7 also holds `bdf` of `class` on `driver`.
fn member(f: &Fake, bdf: &str, class: &str, driver: &str) {
    f.mkdir(&format!("sys/kernel/iommu_groups/7/devices/{bdf}"));
    f.file(&format!("sys/bus/pci/devices/{bdf}/class"), class);
    symlink(
        format!("../../../../bus/pci/drivers/{driver}"),
        f.p(&format!("sys/bus/pci/devices/{bdf}/driver")),
    )
    .unwrap();
}

#[test]
fn the_group_hint_never_suggests_unbinding_what_the_host_needs() {
    let f = Fake::healthy();
    // A NIC with the default route (the SSH session?).
    member(&f, "0000:01:00.1", "0x020000\n", "e1000e");
    f.mkdir("sys/bus/pci/devices/0000:01:00.1/net/eno1");
    f.file(
        "proc/net/route",
        "Iface\tDestination\tGateway\tFlags\n eno1\t00000000\t0100A8C0\t0003\n",
    );
    // A SATA controller whose disk holds / (sda1, mounted in the fake).
    member(&f, "0000:01:00.2", "0x010601\n", "ahci");
    f.mkdir("sys/block/sda/sda1");
    f.mkdir("sys/class/block");
    symlink(
        "../../devices/pci0000:00/0000:01:00.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
        f.p("sys/class/block/sda"),
    )
    .unwrap();
    // An idle USB controller may go.
    member(&f, "0000:01:00.3", "0x0c0330\n", "xhci_hcd");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("not 0000:01:00.1: its interface eno1 carries the default route")
            && line.contains(
                "not 0000:01:00.2: it carries block devices in use (/dev/sda1 is mounted on /)"
            )
            && !line.contains("echo 0000:01:00.1")
            && !line.contains("echo 0000:01:00.2")
            && line.contains("echo 0000:01:00.3 > /sys/bus/pci/devices/0000:01:00.3/driver/unbind")
            && line.contains("own group"),
        "{line}"
    );
    // An interface with an address and no default route, or just up.
    f.file("proc/net/route", "Iface\tDestination\n eno1\t0000A8C0\n");
    assert!(f.only_problem(&f.checks()).contains("eno1 carries routes"));
    f.file("proc/net/route", "Iface\tDestination\n");
    f.file("sys/class/net/eno1/operstate", "up\n");
    assert!(f.only_problem(&f.checks()).contains("eno1 is up"));
    f.file("sys/class/net/eno1/operstate", "down\n");
    assert!(f
        .only_problem(&f.checks())
        .contains("echo 0000:01:00.1 > /sys/bus/pci/devices/0000:01:00.1/driver/unbind"));
}

#[test]
fn a_drive_behind_intel_vmd_is_refused_naming_the_firmware_setting() {
    let f = Fake::healthy();
    let vmd = "sys/devices/pci0000:00/0000:00:0e.0";
    let drive = format!("{vmd}/pci10000:e0/10000:e0:1d.0/10000:e1:00.0");
    f.file(&format!("{drive}/class"), "0x010802\n");
    symlink(
        "../../../devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0",
        f.p("sys/bus/pci/devices/10000:e1:00.0"),
    )
    .unwrap();
    let mut c = f.checks();
    c.bdf = "10000:e1:00.0".into();
    c.consent = Some("10000:e1:00.0".into());
    let line = f.only_problem(&c);
    assert!(
        line.contains("--device 10000:e1:00.0: the drive sits behind the Intel VMD controller 0000:00:0e.0")
            && line.contains("Intel VMD / RST / 'VMD controller' in the BIOS: turn it off (set the SATA/NVMe mode to AHCI)"),
        "{line}"
    );
}
