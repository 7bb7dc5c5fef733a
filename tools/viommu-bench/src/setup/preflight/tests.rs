use super::*;
use std::os::unix::fs::PermissionsExt;

use super::device::*;
use super::guest_kernel::*;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;

pub(super) const BDF: &str = "0000:01:00.0";

/// An opener that says `EBUSY` for the named block devices, yes to the rest.
#[derive(Debug, Default)]
pub(super) struct Busy(pub Vec<&'static str>);

impl ExclusiveOpen for Busy {
    fn open_excl(&self, path: &Path) -> std::io::Result<()> {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if self.0.iter().any(|b| *b == name) {
            return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
        }
        Ok(())
    }
}

pub(super) struct Fake {
    pub dir: tempfile::TempDir,
}

impl Fake {
    /// A host where every check passes.
    pub(super) fn healthy() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let f = Fake { dir };
        f.file("dev/kvm", "");
        f.mkdir("sys/bus/pci/drivers/vfio-pci");
        f.mkdir("sys/bus/pci/drivers/nvme");
        f.file("dev/vfio/vfio", "");
        f.file(
            "etc/os-release",
            "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\n",
        );
        // VT-d with interrupt remapping (ECAP bit 3).
        f.file("sys/class/iommu/dmar0/intel-iommu/ecap", "f050da\n");
        f.file("sys/class/iommu/dmar1/intel-iommu/ecap", "f050da\n");
        f.file(
            "proc/cmdline",
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n",
        );
        f.mkdir(&format!("sys/kernel/iommu_groups/7/devices/{BDF}"));
        let dev = format!("sys/bus/pci/devices/{BDF}");
        f.file(&format!("{dev}/class"), "0x010802\n");
        symlink(
            "../../../../bus/pci/drivers/nvme",
            f.p(&format!("{dev}/driver")),
        )
        .unwrap();
        symlink(
            "../../../../kernel/iommu_groups/7",
            f.p(&format!("{dev}/iommu_group")),
        )
        .unwrap();
        f.file(&format!("{dev}/nvme/nvme0/serial"), "S5GXNX0T123456   \n");
        f.file(&format!("{dev}/nvme/nvme0/model"), "Samsung SSD 980\n");
        f.mkdir(&format!("{dev}/nvme/nvme0/nvme0n1"));
        f.mkdir("sys/block/nvme0n1/holders");
        f.file("sys/block/nvme0n1/queue/logical_block_size", "512\n");
        f.mkdir("sys/block/nvme0n1/nvme0n1p1/holders");
        f.file("proc/mounts", "/dev/sda1 / ext4 rw 0 0\n");
        f.file("proc/swaps", "Filename Type Size Used Priority\n");
        f.file("proc/self/limits", "Max cpu time              unlimited            unlimited            seconds\nMax locked memory         8388608              8388608              bytes\n");
        f.file(
            "proc/self/status",
            "Name:\tviommu-bench\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
        );
        for b in ["qemu-system-x86_64", "vmm", "fio", "busybox", "ldd"] {
            f.exe(&format!("bin/{b}"));
        }
        f.file("k/stock", "bzImage");
        f.file("k/patched", "bzImage");
        f
    }
    pub(super) fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub(super) fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.p(rel)).unwrap();
    }
    pub(super) fn file(&self, rel: &str, body: &str) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    pub(super) fn exe(&self, rel: &str) {
        self.file(rel, "#!/bin/sh\n");
        std::fs::set_permissions(self.p(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    pub(super) fn rm(&self, rel: &str) {
        let p = self.p(rel);
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    pub(super) fn checks(&self) -> Checks {
        Checks {
            root: Root::new(self.dir.path()),
            bdf: BDF.into(),
            consent: Some(BDF.into()),
            no_bind: false,
            qemu: Some("qemu-system-x86_64".into()),
            qemu_counts: false,
            vmm: Some(self.p("bin/vmm")),
            build_image: true,
            kernels: vec![
                ("--kernel-stock", self.p("k/stock")),
                ("--kernel-patched", self.p("k/patched")),
            ],
            guest_memory: 1 << 30,
            hugepages: false,
            path_env: Some(self.p("bin").into_os_string()),
            kvm_exits: false,
            breakdown: false,
            block_sizes: vec![("4k".into(), 4096), ("128k".into(), 128 << 10)],
            opener: Arc::new(Busy::default()),
            guest: Default::default(),
        }
    }
    /// The one problem the checks find; fails unless there is exactly one.
    pub(super) fn only_problem(&self, c: &Checks) -> String {
        let out = c.run();
        assert_eq!(out.problems.len(), 1, "{:#?}", out.problems);
        out.problems[0].to_string()
    }
}

#[test]
fn a_healthy_host_passes_and_facts_are_read() {
    let f = Fake::healthy();
    let out = f.checks().run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    assert_eq!(out.facts.driver.as_deref(), Some("nvme"));
    assert_eq!(out.facts.iommu_group.as_deref(), Some("7"));
    assert_eq!(out.facts.serial.as_deref(), Some("S5GXNX0T123456"));
    assert_eq!(out.facts.namespaces, vec!["nvme0n1"]);
    assert_eq!(out.tools.qemu, Some(f.p("bin/qemu-system-x86_64")));
}

#[test]
fn each_missing_prerequisite_names_its_fix() {
    let cases: &[(&str, &str)] = &[
        ("dev/kvm", "modprobe kvm_intel"),
        ("sys/kernel/iommu_groups/7", "no amd_iommu=on"),
        ("sys/bus/pci/drivers/vfio-pci", "modprobe vfio-pci"),
        ("bin/qemu-system-x86_64", "apt-get install qemu-system-x86"),
        ("bin/vmm", "cargo build --release -p vmm"),
        ("bin/fio", "apt-get install fio"),
        ("bin/busybox", "apt-get install busybox-static"),
        ("k/patched", "guest-patches/linux-6.12/build.sh"),
    ];
    for (rm, fix) in cases {
        let f = Fake::healthy();
        f.rm(rm);
        let c = f.checks();
        // A group dir gone also means the device has no group: two lines.
        if rm.starts_with("sys/kernel") {
            let out = c.run();
            assert!(
                out.problems.iter().any(|p| p.to_string().contains(fix)),
                "{rm}: {:#?}",
                out.problems
            );
            continue;
        }
        let line = f.only_problem(&c);
        assert!(line.contains(fix), "{rm}: {line}");
        assert!(!line.contains('\n'));
    }
}

#[test]
fn hints_fit_the_hosts_package_manager() {
    for (os, want) in [
        ("ID=fedora\n", "dnf install qemu-system-x86-core"),
        (
            "ID=ubuntu\nID_LIKE=debian\n",
            "apt-get install qemu-system-x86",
        ),
        (
            "ID=opensuse-leap\nID_LIKE=\"suse opensuse\"\n",
            "zypper install qemu-x86",
        ),
        ("ID=arch\n", "pacman -S qemu-system-x86"),
    ] {
        let f = Fake::healthy();
        f.file("etc/os-release", os);
        f.rm("bin/qemu-system-x86_64");
        let line = f.only_problem(&f.checks());
        assert!(line.contains(want), "{os}: {line}");
    }
    let f = Fake::healthy();
    f.file("etc/os-release", "ID=fedora\n");
    f.rm("bin/busybox");
    assert!(f.only_problem(&f.checks()).contains("dnf install busybox"));
}

#[test]
fn a_fio_without_libaio_is_named() {
    let f = Fake::healthy();
    f.file("etc/os-release", "ID=fedora\n");
    f.file(
        "bin/fio",
        "#!/bin/sh\n[ \"$1\" = --enghelp=libaio ] && echo 'fio: engine libaio not loadable' >&2 && exit 1\nexit 0\n",
    );
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("no libaio engine")
            && line.contains("engine libaio not loadable")
            && line.contains("dnf install fio-engine-libaio"),
        "{line}"
    );
}

#[test]
fn a_guest_kernel_with_modules_is_refused_by_its_config() {
    let good = config_with_guest_options();
    assert!(missing_guest_options(&good).is_empty());
    // A distribution's /boot: vmlinuz-VER and config-VER.
    let f = Fake::healthy();
    f.file("boot/vmlinuz-6.12.48+deb13-amd64", "bzImage");
    f.file(
        "boot/config-6.12.48+deb13-amd64",
        &good
            .replace("CONFIG_BLK_DEV_NVME=y", "CONFIG_BLK_DEV_NVME=m")
            .replace(
                "CONFIG_VIRTIO_IOMMU=y\n",
                "# CONFIG_VIRTIO_IOMMU is not set\n",
            ),
    );
    let mut c = f.checks();
    c.kernels[0].1 = f.p("boot/vmlinuz-6.12.48+deb13-amd64");
    let line = f.only_problem(&c);
    assert!(
        line.contains("--kernel-stock")
            && line.contains("does not build in CONFIG_VIRTIO_IOMMU, CONFIG_BLK_DEV_NVME (=m)")
            && line.contains("pass its modules directory with --modules DIR"),
        "{line}"
    );
    // guest-patches' cache keeps .config beside the bzImage; a tree has
    // it three levels up from arch/x86/boot/bzImage.
    f.file("k/.config", &good);
    assert!(f.checks().run().problems.is_empty());
    f.file("k/.config", "CONFIG_PCI=y\n");
    // Both kernels sit beside it: each is named.
    let out = f.checks().run();
    assert_eq!(out.problems.len(), 2, "{:#?}", out.problems);
    assert!(out
        .problems
        .iter()
        .all(|p| p.what.contains("CONFIG_VIRTIO_PCI")));
    f.rm("k/.config");
    f.file("linux/arch/x86/boot/bzImage", "bzImage");
    f.file("linux/.config", &good.replace("CONFIG_ACPI_VIOT=y", ""));
    let mut c = f.checks();
    c.kernels[1].1 = f.p("linux/arch/x86/boot/bzImage");
    let line = f.only_problem(&c);
    assert!(
        line.contains("--kernel-patched") && line.contains("CONFIG_ACPI_VIOT"),
        "{line}"
    );
}

#[test]
fn a_guest_kernel_is_checked_by_its_embedded_config() {
    use std::io::Write;
    let good = config_with_guest_options();
    // An uncompressed kernel image (the bzImage payloads are the
    // ikconfig module's tests) with the config between its markers.
    let image = |config: &str| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(config.as_bytes()).unwrap();
        let mut v = b"\x7fELF kernel data ".to_vec();
        v.extend_from_slice(b"IKCFG_ST");
        v.extend(gz.finish().unwrap());
        v.extend_from_slice(b"IKCFG_ED more kernel data");
        v
    };
    let f = Fake::healthy();
    // No config file goes with it: the embedded one is read.
    std::fs::write(
        f.p("k/stock"),
        image(&good.replace("CONFIG_BLK_DEV_NVME=y", "CONFIG_BLK_DEV_NVME=m")),
    )
    .unwrap();
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("--kernel-stock")
            && line.contains(
                "its embedded config (CONFIG_IKCONFIG) does not build in CONFIG_BLK_DEV_NVME (=m)"
            ),
        "{line}"
    );
    // It wins over a config file beside it, which may be stale.
    f.file("k/.config", &good);
    let line = f.only_problem(&f.checks());
    assert!(line.contains("its embedded config"), "{line}");
    std::fs::write(f.p("k/stock"), image(&good)).unwrap();
    f.file("k/.config", "CONFIG_PCI=y\n");
    // Now only --kernel-patched (no embedded config) is refused, by the file.
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("--kernel-patched") && line.contains("its config"),
        "{line}"
    );
    // A kernel whose payload cannot be read falls back to the file.
    let mut bz = vec![0u8; 4 * 512];
    bz[0x1f1] = 3;
    bz[0x202..0x206].copy_from_slice(b"HdrS");
    bz[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    bz[0x24c..0x250].copy_from_slice(&16u32.to_le_bytes());
    bz.extend(b"BZh91AY&SY......");
    std::fs::write(f.p("k/stock"), &bz).unwrap();
    f.file("k/.config", &good);
    assert!(f.checks().run().problems.is_empty());
}

#[test]
fn wrong_device() {
    let f = Fake::healthy();
    f.mkdir("sys/bus/pci/devices/0000:02:00.0");
    f.file("sys/bus/pci/devices/0000:02:00.0/class", "0x020000\n");
    let mut c = f.checks();
    c.bdf = "0000:03:00.0".into();
    c.consent = Some("0000:03:00.0".into());
    let line = f.only_problem(&c);
    assert!(
        line.contains("no such PCI device")
            && line.contains("NVMe drives on this host: 0000:01:00.0"),
        "{line}"
    );
    c.bdf = "0000:02:00.0".into();
    c.consent = Some("0000:02:00.0".into());
    let line = f.only_problem(&c);
    assert!(
        line.contains("PCI class 0x020000, not an NVMe drive"),
        "{line}"
    );
}

#[test]
fn crowded_iommu_group() {
    let f = Fake::healthy();
    let member = |bdf: &str, class: &str, driver: Option<&str>| {
        f.mkdir(&format!("sys/kernel/iommu_groups/7/devices/{bdf}"));
        f.file(&format!("sys/bus/pci/devices/{bdf}/class"), class);
        let link = f.p(&format!("sys/bus/pci/devices/{bdf}/driver"));
        let _ = std::fs::remove_file(&link);
        if let Some(d) = driver {
            symlink(format!("../../../../bus/pci/drivers/{d}"), link).unwrap();
        }
    };
    // What VFIO accepts: a bridge, unbound devices, vfio-pci, pci-stub.
    member("0000:00:1c.0", "0x060400\n", Some("pcieport"));
    member("0000:01:00.1", "0x0c0330\n", None);
    member("0000:01:00.2", "0x0c0330\n", Some("vfio-pci"));
    member("0000:01:00.3", "0x0c0330\n", Some("pci-stub"));
    assert!(f.checks().run().problems.is_empty());
    // A member on a host driver: VFIO would refuse the group.
    member("0000:01:00.1", "0x0c0330\n", Some("xhci_hcd"));
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("also holds 0000:01:00.1 (on xhci_hcd)")
            && !line.contains("01:00.2")
            && line.contains("echo 0000:01:00.1 > /sys/bus/pci/devices/0000:01:00.1/driver/unbind")
            && line.contains("own group"),
        "{line}"
    );
}

#[test]
fn logical_block_size_is_read_and_block_sizes_checked() {
    let f = Fake::healthy();
    assert_eq!(f.checks().run().facts.logical_block_size, Some(512));
    f.file("sys/block/nvme0n1/size", "1953525168\n");
    assert_eq!(
        f.checks().run().facts.namespace_bytes,
        Some(1953525168 * 512)
    );
    f.file("sys/block/nvme0n1/queue/logical_block_size", "4096\n");
    let mut c = f.checks();
    assert_eq!(c.run().facts.logical_block_size, Some(4096));
    assert!(c.run().problems.is_empty());
    c.block_sizes.push(("512".into(), 512));
    let line = f.only_problem(&c);
    assert!(
        line.contains("--bs 512: not a multiple of the drive's logical block size, 4096"),
        "{line}"
    );
    // Through the subsystem too (native multipath).
    let f = Fake::healthy();
    multipath(&f);
    f.file(
        "sys/class/nvme-subsystem/nvme-subsys0/nvme0n1/queue/logical_block_size",
        "4096\n",
    );
    assert_eq!(f.checks().run().facts.logical_block_size, Some(4096));
}

#[test]
fn vfio_nodes() {
    let f = Fake::healthy();
    f.rm("dev/vfio/vfio");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("no /dev/vfio/vfio") && line.contains("modprobe vfio"),
        "{line}"
    );
    // On vfio-pci already: its group's node must be there.
    let f = Fake::healthy();
    let dev = format!("sys/bus/pci/devices/{BDF}");
    f.rm(&format!("{dev}/driver"));
    f.rm(&format!("{dev}/nvme"));
    symlink(
        "../../../../bus/pci/drivers/vfio-pci",
        f.p(&format!("{dev}/driver")),
    )
    .unwrap();
    let line = f.only_problem(&f.checks());
    assert!(line.contains("/dev/vfio/7 is missing"), "{line}");
    f.file("dev/vfio/7", "");
    assert!(f.checks().run().problems.is_empty());
}

#[test]
fn interrupt_remapping() {
    // One VT-d unit without ECAP.IR: the kernel remaps on all or none.
    let f = Fake::healthy();
    f.file("sys/class/iommu/dmar1/intel-iommu/ecap", "f050d2\n");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("no interrupt remapping")
            && line.contains("dmar1")
            && !line.contains("dmar0")
            && line.contains("allow_unsafe_interrupts=1"),
        "{line}"
    );
    // VFIO told to take unremapped interrupts: fine (module or cmdline).
    f.file(
        "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts",
        "Y\n",
    );
    assert!(f.checks().run().problems.is_empty());
    f.rm("sys/module/vfio_iommu_type1");
    f.file(
        "proc/cmdline",
        "ro vfio_iommu_type1.allow_unsafe_interrupts=1\n",
    );
    assert!(f.checks().run().problems.is_empty());
    // Turned off on the command line.
    let f = Fake::healthy();
    f.file("proc/cmdline", "ro intel_iommu=on intremap=off\n");
    assert!(f.only_problem(&f.checks()).contains("remove intremap=off"));
    // AMD-Vi remaps interrupts; a virtio-iommu does not.
    let f = Fake::healthy();
    f.rm("sys/class/iommu/dmar0");
    f.rm("sys/class/iommu/dmar1");
    f.mkdir("sys/class/iommu/ivhd0/amd-iommu");
    assert!(f.checks().run().problems.is_empty());
    f.rm("sys/class/iommu/ivhd0");
    f.mkdir("sys/class/iommu/virtio0");
    assert!(f.only_problem(&f.checks()).contains("virtio0"));
}

#[test]
fn kvm_exits_needs_are_checked_before_binding() {
    let f = Fake::healthy();
    let mut c = f.checks();
    c.kvm_exits = true;
    let line = f.only_problem(&c);
    assert!(line.contains("no tracefs"), "{line}");
    // Not mounted yet: mounted at run time, nothing to say now.
    f.mkdir("sys/kernel/tracing");
    assert!(c.run().problems.is_empty());
    f.mkdir("sys/kernel/tracing/events/sched");
    assert!(f.only_problem(&c).contains("modprobe kvm_intel"));
    f.file("sys/kernel/tracing/events/kvm/kvm_exit/trigger", "");
    assert!(f.only_problem(&c).contains("CONFIG_HIST_TRIGGERS"));
    f.file("sys/kernel/tracing/events/kvm/kvm_exit/hist", "");
    assert!(c.run().problems.is_empty());
    // Root even with --no-bind (drive on vfio-pci).
    f.file(
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
    );
    f.file(
        "proc/self/limits",
        "Max locked memory unlimited unlimited bytes\n",
    );
    c.no_bind = true;
    let dev = format!("sys/bus/pci/devices/{BDF}");
    f.rm(&format!("{dev}/driver"));
    f.rm(&format!("{dev}/nvme"));
    symlink(
        "../../../../bus/pci/drivers/vfio-pci",
        f.p(&format!("{dev}/driver")),
    )
    .unwrap();
    f.file("dev/vfio/7", "");
    let line = f.only_problem(&c);
    assert!(line.contains("--kvm-exits: not running as root"), "{line}");
}

#[test]
fn breakdown_needs_are_checked_before_binding() {
    let f = Fake::healthy();
    let mut c = f.checks();
    c.breakdown = true;
    assert!(f
        .only_problem(&c)
        .contains("--breakdown: this kernel has no tracefs"));
    f.mkdir("sys/kernel/tracing");
    assert!(
        c.run().problems.is_empty(),
        "not mounted yet: mounted at run time"
    );
    f.mkdir("sys/kernel/tracing/events/sched/sched_switch");
    f.mkdir("sys/kernel/tracing/instances");
    let line = f.only_problem(&c);
    assert!(
        line.contains("raw_syscalls/sys_enter") && line.contains("CONFIG_FTRACE_SYSCALLS"),
        "{line}"
    );
    f.mkdir("sys/kernel/tracing/events/raw_syscalls/sys_enter");
    assert!(c.run().problems.is_empty());
    f.rm("sys/kernel/tracing/instances");
    assert!(f.only_problem(&c).contains("instances"));
    f.mkdir("sys/kernel/tracing/instances");
    f.file(
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
    );
    let probs: Vec<String> = c.run().problems.iter().map(|p| p.to_string()).collect();
    assert!(
        probs
            .iter()
            .any(|p| p.contains("--breakdown: not running as root")),
        "{probs:?}"
    );
}

#[test]
fn busy_namespaces() {
    let f = Fake::healthy();
    f.file("proc/mounts", "/dev/nvme0n1p1 /data ext4 rw 0 0\n");
    assert!(f.only_problem(&f.checks()).contains("umount /data"));
    let f = Fake::healthy();
    f.file(
        "proc/swaps",
        "Filename Type\n/dev/nvme0n1 partition 1 0 -2\n",
    );
    assert!(f.only_problem(&f.checks()).contains("swapoff /dev/nvme0n1"));
    let f = Fake::healthy();
    f.mkdir("sys/block/nvme0n1/nvme0n1p1/holders/dm-0");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("held by dm-0") && line.contains("vgchange -an"),
        "{line}"
    );
}

#[test]
fn namespace_names() {
    assert_eq!(parse_ns_name("nvme0n1"), Some((0, None, 1)));
    assert_eq!(parse_ns_name("nvme12c3n45"), Some((12, Some(3), 45)));
    for not in [
        "nvme0",
        "nvme0n1p1",
        "nvme0c0",
        "nvmen1",
        "nvme0n",
        "sda",
        "nvme-subsys0",
    ] {
        assert_eq!(parse_ns_name(not), None, "{not}");
    }
}

/// The drive's controller nvme1 in subsystem 0 with native multipath:
/// its directory holds the path device nvme0c1n1; the namespace's block
/// device is the subsystem's nvme0n1 (a dual-port drive: nvme0, the
/// other port, is in the same subsystem).
fn multipath(f: &Fake) {
    let dev = format!("sys/bus/pci/devices/{BDF}");
    f.rm(&format!("{dev}/nvme/nvme0"));
    f.file(&format!("{dev}/nvme/nvme1/serial"), "S5GXNX0T123456\n");
    f.mkdir(&format!("{dev}/nvme/nvme1/nvme0c1n1"));
    f.rm("sys/block/nvme0n1");
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys0/nvme0n1/holders");
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys0/nvme0n1/nvme0n1p1/holders");
    symlink(
        "../class/nvme-subsystem/nvme-subsys0/nvme0n1",
        f.p("sys/block/nvme0n1"),
    )
    .unwrap();
    for c in ["nvme0", "nvme1"] {
        symlink(
            format!("../../nvme/{c}"),
            f.p(&format!("sys/class/nvme-subsystem/nvme-subsys0/{c}")),
        )
        .unwrap();
    }
    // Another drive's subsystem is not this drive's.
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys1/nvme1n1");
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys1/nvme2");
}

#[test]
fn multipath_namespaces_are_found_through_the_subsystem() {
    let f = Fake::healthy();
    multipath(&f);
    let out = f.checks().run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    assert_eq!(out.facts.namespaces, vec!["nvme0n1"]);
    // A mounted partition of the subsystem's namespace is seen.
    f.file("proc/mounts", "/dev/nvme0n1p1 /data xfs rw 0 0\n");
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("/dev/nvme0n1p1 is mounted on /data"),
        "{line}"
    );
    f.file("proc/mounts", "");
    f.mkdir("sys/class/nvme-subsystem/nvme-subsys0/nvme0n1/holders/dm-3");
    let line = f.only_problem(&f.checks());
    assert!(line.contains("/dev/nvme0n1 is held by dm-3"), "{line}");
}

#[test]
fn a_subsystem_namespace_without_a_path_device_is_still_found() {
    // The controller's directory shows no namespace at all (a layout
    // this code does not know), but its subsystem lists nvme0n1.
    let f = Fake::healthy();
    multipath(&f);
    f.rm(&format!("sys/bus/pci/devices/{BDF}/nvme/nvme1/nvme0c1n1"));
    f.file(
        "proc/swaps",
        "Filename Type\n/dev/nvme0n1p1 partition 1 0 -2\n",
    );
    let line = f.only_problem(&f.checks());
    assert!(line.contains("swapoff /dev/nvme0n1p1"), "{line}");
}

#[test]
fn a_drive_on_nvme_whose_namespaces_cannot_be_found_is_refused() {
    let f = Fake::healthy();
    f.rm(&format!("sys/bus/pci/devices/{BDF}/nvme/nvme0/nvme0n1"));
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("is bound to nvme but none of its namespaces was found")
            && line.contains(&format!("/sys/bus/pci/devices/{BDF}/nvme/*/"))
            && line.contains("/sys/class/nvme-subsystem/")
            && line.contains("--no-bind"),
        "{line}"
    );
    // On vfio-pci (or no driver) the host sees no namespace: nothing to check.
    let f = Fake::healthy();
    f.rm(&format!("sys/bus/pci/devices/{BDF}/nvme"));
    f.rm(&format!("sys/bus/pci/devices/{BDF}/driver"));
    symlink(
        "../../../../bus/pci/drivers/vfio-pci",
        f.p(&format!("sys/bus/pci/devices/{BDF}/driver")),
    )
    .unwrap();
    f.file("dev/vfio/7", "");
    assert!(f.checks().run().problems.is_empty());
}

#[test]
fn memlock_and_root() {
    let f = Fake::healthy();
    f.file(
        "proc/self/status",
        "Uid:\t0\t0\t0\t0\nCapEff:\t0000000000000000\n",
    );
    let line = f.only_problem(&f.checks());
    assert!(
        line.contains("memlock limit 8 MiB") && line.contains("ulimit -l unlimited"),
        "{line}"
    );
    f.file(
        "proc/self/limits",
        "Max locked memory         unlimited            unlimited            bytes\n",
    );
    assert!(f.checks().run().problems.is_empty());
    f.file(
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
    );
    assert!(f.only_problem(&f.checks()).contains("sudo"));
    let mut c = f.checks();
    c.no_bind = true;
    // Not root is fine with --no-bind, but then the drive must be on vfio-pci.
    let line = f.only_problem(&c);
    assert!(
        line.contains("--no-bind") && line.contains("bound to nvme"),
        "{line}"
    );
}

#[test]
fn consent_by_bdf_or_serial() {
    let f = Fake::healthy();
    let mut c = f.checks();
    c.consent = Some("S5GXNX0T123456".into());
    assert!(c.run().problems.is_empty());
    c.consent = Some("01:00.0".into());
    assert!(c.run().problems.is_empty());
    c.consent = Some("0000:02:00.0".into());
    let line = f.only_problem(&c);
    assert!(
        line.contains("names neither") && line.contains("S5GXNX0T123456"),
        "{line}"
    );
}

#[test]
fn guest_hugepages_needs_hugetlbfs_in_every_guest_kernel() {
    let good = config_with_guest_options();
    let f = Fake::healthy();
    f.file("k/.config", &good);
    let mut c = f.checks();
    // Without the flag the option is not asked for.
    assert!(c.run().problems.is_empty());
    c.guest.huge_buffers = true;
    let out = c.run();
    // Both kernels share the config beside them: each is named.
    assert_eq!(out.problems.len(), 2, "{:#?}", out.problems);
    let line = out.problems[0].to_string();
    assert!(
        line.contains("no CONFIG_HUGETLBFS=y") && line.contains("drop --guest-hugepages"),
        "{line}"
    );
    f.file("k/.config", &format!("{good}CONFIG_HUGETLBFS=y\n"));
    assert!(c.run().problems.is_empty());
}
