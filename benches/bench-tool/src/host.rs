//! What the tool needs to know about the host beyond the drive: its
//! package manager (for fix hints that fit it), who invoked it under sudo
//! (results and cache end up theirs, not root's), and where the guest
//! image cache goes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sysfs::{pci_dev, Root};

/// The host's package manager, from `/etc/os-release`'s `ID` and `ID_LIKE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PkgManager {
    /// Debian, Ubuntu and their kin.
    Apt,
    /// Fedora, RHEL, CentOS, Rocky, Alma.
    Dnf,
    /// openSUSE, SLES.
    Zypper,
    /// Arch and its kin.
    Pacman,
    /// None of these (or no /etc/os-release).
    Unknown,
}

/// A program the tool may need installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pkg {
    /// qemu-system-x86_64.
    Qemu,
    /// fio.
    Fio,
    /// fio's libaio engine (a package of its own where engines are plugins).
    FioLibaio,
    /// A busybox that runs in the guest (static, or with its libraries).
    Busybox,
    /// ldd.
    Ldd,
}

impl PkgManager {
    /// The package manager of the distribution `os_release` describes.
    pub fn from_os_release(os_release: &str) -> PkgManager {
        let mut ids = Vec::new();
        for line in os_release.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            if k.trim() == "ID" || k.trim() == "ID_LIKE" {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                ids.extend(v.split_whitespace().map(str::to_ascii_lowercase));
            }
        }
        // ID first: a distribution's own ID decides before what it is like.
        for id in &ids {
            let pm = match id.as_str() {
                "debian" | "ubuntu" | "linuxmint" | "pop" | "raspbian" | "kali" => PkgManager::Apt,
                "fedora" | "rhel" | "centos" | "rocky" | "almalinux" | "ol" | "amzn" => {
                    PkgManager::Dnf
                }
                "opensuse" | "suse" | "sles" | "opensuse-leap" | "opensuse-tumbleweed" => {
                    PkgManager::Zypper
                }
                "arch" | "manjaro" | "endeavouros" => PkgManager::Pacman,
                _ => continue,
            };
            return pm;
        }
        PkgManager::Unknown
    }

    /// The host's, read from `/etc/os-release` (or `/usr/lib/os-release`) under `root`.
    pub fn detect(root: &Root) -> PkgManager {
        root.read_trim("/etc/os-release")
            .or_else(|_| root.read_trim("/usr/lib/os-release"))
            .map(|t| PkgManager::from_os_release(&t))
            .unwrap_or(PkgManager::Unknown)
    }

    /// The command that installs `pkg` here.
    pub fn install(self, pkg: Pkg) -> String {
        let name = |apt, dnf, zypper, pacman| {
            match self {
            PkgManager::Apt => format!("apt-get install {apt}"),
            PkgManager::Dnf => format!("dnf install {dnf}"),
            PkgManager::Zypper => format!("zypper install {zypper}"),
            PkgManager::Pacman => format!("pacman -S {pacman}"),
            PkgManager::Unknown => format!(
                "install it with the distribution's package manager (Debian/Ubuntu: apt-get install {apt}; Fedora: dnf install {dnf}; openSUSE: zypper install {zypper}; Arch: pacman -S {pacman})"
            ),
        }
        };
        match pkg {
            Pkg::Qemu => name(
                "qemu-system-x86",
                "qemu-system-x86-core",
                "qemu-x86",
                "qemu-system-x86",
            ),
            Pkg::Fio => name("fio", "fio", "fio", "fio"),
            Pkg::FioLibaio => name("fio", "fio-engine-libaio", "fio", "fio"),
            Pkg::Busybox => name("busybox-static", "busybox", "busybox", "busybox"),
            Pkg::Ldd => name("libc-bin", "glibc-common", "glibc", "glibc"),
        }
    }
}

/// The user who ran the tool through sudo: `SUDO_UID` and `SUDO_GID`, when
/// the tool runs as root (`euid` 0) on their behalf.
pub fn invoking_user(
    euid: u32,
    sudo_uid: Option<&OsStr>,
    sudo_gid: Option<&OsStr>,
) -> Option<(u32, u32)> {
    if euid != 0 {
        return None;
    }
    let n = |v: Option<&OsStr>| v?.to_str()?.trim().parse::<u32>().ok();
    let (uid, gid) = (n(sudo_uid)?, n(sudo_gid)?);
    (uid != 0).then_some((uid, gid))
}

/// The invoking user of this process (see [`invoking_user`]).
pub fn sudo_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    invoking_user(
        euid,
        std::env::var_os("SUDO_UID").as_deref(),
        std::env::var_os("SUDO_GID").as_deref(),
    )
}

/// Where built guest images are cached by default: as root (sudo resets
/// HOME to root's on most distributions) the system's `/var/cache`, else
/// `$XDG_CACHE_HOME`, else `~/.cache`, each with `viommu-bench` appended.
pub fn default_cache_for(euid: u32, xdg_cache: Option<&OsStr>, home: Option<&OsStr>) -> PathBuf {
    let base = if euid == 0 {
        PathBuf::from("/var/cache")
    } else {
        xdg_cache
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| PathBuf::from("/var/cache"))
    };
    base.join("viommu-bench")
}

/// The topmost directory of `path` that does not exist yet (`None`: it all
/// exists): what creating `path` adds, so it can be handed over as a whole.
pub fn first_missing(path: &Path) -> Option<PathBuf> {
    let mut missing = None;
    let mut p = Some(path);
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
        if d.exists() {
            break;
        }
        missing = Some(d.to_path_buf());
        p = d.parent();
    }
    missing
}

/// `chown -R uid:gid path` (symlinks themselves, not their targets).
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if path.is_dir() && !path.is_symlink() {
        for e in std::fs::read_dir(path)? {
            chown_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The host as results.json records it: what a reader needs to compare
/// two runs (the QEMU, the CPU, the IOMMU, where the drive sits) and
/// whether the VMMs were pinned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// `qemu-system-x86_64 --version`, first line (when a column runs QEMU).
    #[serde(default)]
    pub qemu_version: Option<String>,
    /// /proc/cpuinfo's first `model name`.
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// The host IOMMU: `intel`, `amd`, `virtio`, `other:NAME` or `none`
    /// (from /sys/class/iommu).
    #[serde(default)]
    pub iommu: Option<String>,
    /// The drive's NUMA node (sysfs `numa_node`; -1: the host has no NUMA
    /// information for it).
    #[serde(default)]
    pub numa_node: Option<i64>,
    /// `--pin`: the CPUs every VMM ran on (a cpulist, e.g. `0-7,16-23`);
    /// absent: not pinned.
    #[serde(default)]
    pub pinned_cpus: Option<String>,
}

impl HostInfo {
    /// Read it from `root`; `qemu`: the QEMU binary to ask its version.
    pub fn gather(root: &Root, bdf: &str, qemu: Option<&Path>) -> HostInfo {
        HostInfo {
            qemu_version: qemu.and_then(qemu_version),
            cpu_model: root
                .read_trim("/proc/cpuinfo")
                .ok()
                .and_then(|t| cpu_model(&t)),
            iommu: Some(iommu_kind(root)),
            numa_node: root
                .read_trim(pci_dev(bdf).join("numa_node"))
                .ok()
                .and_then(|n| n.parse().ok()),
            pinned_cpus: None,
        }
    }
}

/// The first line of `qemu --version`.
pub fn qemu_version(qemu: &Path) -> Option<String> {
    let out = crate::exec::output(
        std::process::Command::new(qemu)
            .arg("--version")
            .stdin(std::process::Stdio::null()),
    )
    .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    (out.status.success() && !line.is_empty()).then(|| line.to_string())
}

/// The first `model name` of a /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

/// The kind of the host's IOMMU units (/sys/class/iommu): `intel`
/// (`dmar*`), `amd` (`ivhd*`), `virtio` (`virtio*`), `other:NAME`, `none`.
pub fn iommu_kind(root: &Root) -> String {
    let units = root.list("/sys/class/iommu");
    let kind = |u: &str| {
        if u.starts_with("dmar") {
            "intel".to_string()
        } else if u.starts_with("ivhd") {
            "amd".to_string()
        } else if u.starts_with("virtio") {
            "virtio".to_string()
        } else {
            format!("other:{u}")
        }
    };
    let mut kinds: Vec<String> = units.iter().map(|u| kind(u)).collect();
    kinds.dedup();
    if kinds.is_empty() {
        "none".into()
    } else {
        kinds.join(",")
    }
}

/// The CPU numbers of a sysfs cpulist (`0-3,8,10-11`).
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.trim().parse().ok()?),
        }
    }
    (!v.is_empty()).then_some(v)
}

/// `--pin`'s CPUs: the drive's NUMA node's (`node/nodeN/cpulist`), or every
/// online CPU when the drive has no node (-1 or no `numa_node`: one node).
/// The cpulist as sysfs wrote it, and the CPUs.
pub fn pin_cpus(root: &Root, bdf: &str) -> Result<(String, Vec<usize>), String> {
    let node: i64 = root
        .read_trim(pci_dev(bdf).join("numa_node"))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1);
    let file = if node >= 0 {
        format!("/sys/devices/system/node/node{node}/cpulist")
    } else {
        "/sys/devices/system/cpu/online".to_string()
    };
    let list = root
        .read_trim(&file)
        .map_err(|e| format!("--pin: reading {file}: {e}; drop --pin, or pin by hand (taskset)"))?;
    let cpus = parse_cpulist(&list).ok_or_else(|| {
        format!(
            "--pin: {file} holds {list:?}, not a CPU list; drop --pin, or pin by hand (taskset)"
        )
    })?;
    Ok((list, cpus))
}

/// Pin the calling thread (and so every process it starts from now on) to `cpus`.
pub fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it
    // (CPU_SET ignores numbers beyond its size) and sched_setaffinity
    // reads size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> std::io::Result<Vec<usize>> {
    // SAFETY: as in pin_to; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

#[cfg(test)]
mod tests {
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
        std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
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
}
