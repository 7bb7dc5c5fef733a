//! What the tool needs to know about the host beyond the drive: its
//! package manager (for fix hints that fit it), who invoked it under sudo
//! (results and cache end up theirs, not root's), and where the guest
//! image cache goes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::setup::sysfs::{pci_dev, Root};

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
            qemu_version: qemu.and_then(version_line),
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

/// The first line of `PROGRAM --version` (QEMU's, our VMM's).
pub fn version_line(program: &Path) -> Option<String> {
    let out = crate::setup::exec::output(
        std::process::Command::new(program)
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

/// `--pin`'s CPUs: the drive's NUMA node's (`node/nodeN/cpulist`), or when
/// the drive has no node (-1 or no `numa_node`: one node) a hybrid Intel's
/// P cores (`/sys/devices/cpu_core/cpus`), else every online CPU.
/// The cpulist as sysfs wrote it, and the CPUs.
pub fn pin_cpus(root: &Root, bdf: &str) -> Result<(String, Vec<usize>), String> {
    let node: i64 = root
        .read_trim(pci_dev(bdf).join("numa_node"))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1);
    // No node: every online CPU, or a hybrid Intel's P cores.
    let file = if node >= 0 {
        format!("/sys/devices/system/node/node{node}/cpulist")
    } else if root.exists("/sys/devices/cpu_core/cpus") && root.exists("/sys/devices/cpu_atom/cpus")
    {
        "/sys/devices/cpu_core/cpus".to_string()
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
    pin_thread(0, cpus)
}

/// Pin thread `tid` (0: the calling thread) to `cpus`.
pub fn pin_thread(tid: u32, cpus: &[usize]) -> std::io::Result<()> {
    let tid =
        libc::pid_t::try_from(tid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it
    // (CPU_SET ignores numbers beyond its size) and sched_setaffinity
    // reads size_of::<cpu_set_t>() bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPUs thread `tid` (0: the calling thread) may run on.
pub fn thread_affinity(tid: u32) -> std::io::Result<Vec<usize>> {
    let tid =
        libc::pid_t::try_from(tid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: as in pin_thread; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> std::io::Result<Vec<usize>> {
    thread_affinity(0)
}

#[cfg(test)]
mod tests;
