//! What the tool needs to know about the host beyond the drive: its
//! package manager (for fix hints that fit it), who invoked it under sudo
//! (results and cache end up theirs, not root's), and where the guest
//! image cache goes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::sysfs::Root;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

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
