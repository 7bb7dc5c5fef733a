//! Command line: what the user asks for, checked before anything is built.
//!
//! Every error names the flag, the bad value and what to do about it.

use std::path::{Path, PathBuf};

use clap::Parser;

/// Most vCPUs we describe: xAPIC ids in the MADT are one byte and 0xff is broadcast.
pub const MAX_CPUS: u8 = 254;
/// Smallest guest we start: room for the boot structures, kernel and initramfs.
pub const MIN_MEMORY: u64 = 64 << 20;

/// A KVM VMM whose virtio-iommu batches guest DMA map/unmap requests.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    /// Linux bzImage to boot directly (64-bit boot protocol).
    #[arg(long, value_name = "PATH")]
    pub kernel: PathBuf,
    /// Initramfs to load next to the kernel.
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, default_value = "console=ttyS0 panic=-1")]
    pub cmdline: String,
    /// Guest RAM: bytes, or with a K/M/G suffix (e.g. 512M, 2G).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub memory: u64,
    /// Back guest RAM with 2 MiB huge pages (needs free pages in
    /// /proc/sys/vm/nr_hugepages).
    #[arg(long)]
    pub hugepages: bool,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=MAX_CPUS as i64))]
    pub cpus: u8,
    /// PCI device to pass through: its sysfs directory,
    /// /sys/bus/pci/devices/DDDD:BB:DD.F, bound to vfio-pci. Repeatable.
    #[arg(long, value_name = "SYSFS_PATH")]
    pub vfio: Vec<PathBuf>,
    /// Serve the control plane (info, metrics, shutdown; one JSON object
    /// per line) on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub api_socket: Option<PathBuf>,
    /// Put the passed-through devices behind a virtio-iommu (without
    /// --vfio: a virtio-iommu with no endpoints).
    #[arg(long)]
    pub viommu: bool,
    /// Do not offer the lazy-unmap extension (docs/lazy-unmap-contract.md):
    /// every UNMAP is then removed from the host before it completes, as
    /// with stock QEMU. Needs --viommu.
    #[arg(long)]
    pub no_lazy_unmap: bool,
    /// DMA size up to which the guest is told to copy through its bounce
    /// pool (the POOL_HINT probe property); 0 offers no hint. Needs
    /// --viommu. [default: 64K]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub pool_threshold: Option<u64>,
    /// Bytes of bounce-pool buffers per domain the pool hint suggests.
    /// Needs --viommu. [default: 64M]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub pool_max: Option<u64>,
    /// An IOVA range the guest must not use, FIRST-LAST inclusive (hex with
    /// 0x, or decimal): reported to the guest as a RESV_MEM reserved region.
    /// Repeatable. Needs --viommu.
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_range)]
    pub reserve_iova: Vec<(u64, u64)>,
    /// For debugging only: do not reserve the host's PCI windows and the
    /// passed-through devices' BARs in the guest's IOVA space. A guest IOVA
    /// equal to a host MMIO address can then be taken for peer-to-peer
    /// traffic or refused by the device. Needs --viommu.
    #[arg(long)]
    pub no_host_pci_reserve: bool,
}

/// Parses `FIRST-LAST` (each hex with 0x, or decimal), FIRST <= LAST.
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let num = |x: &str| {
        let x = x.trim();
        match x.strip_prefix("0x").or_else(|| x.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => x.parse(),
        }
        .map_err(|_| format!("{x:?} in {s:?} is not a number (examples: 0xfebf0000-0xfebf3fff)"))
    };
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?} is not FIRST-LAST (example: 0xfebf0000-0xfebf3fff)"))?;
    let (a, b) = (num(a)?, num(b)?);
    if a > b {
        return Err(format!("{s:?}: FIRST is above LAST"));
    }
    Ok((a, b))
}

/// Default of `--pool-threshold`.
pub const DEFAULT_POOL_THRESHOLD: u64 = 64 << 10;
/// Default of `--pool-max`.
pub const DEFAULT_POOL_MAX: u64 = 64 << 20;

/// A `--` flag whose value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file flag names something unreadable.
    #[error("--{flag} {}: cannot open ({source}); pass the path of {what}", path.display())]
    File {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
        /// What the flag wants.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file flag names a directory or other non-file.
    #[error("--{flag} {}: not a regular file; pass the path of {what}", path.display())]
    NotAFile {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
        /// What the flag wants.
        what: &'static str,
    },
    /// Too little memory.
    #[error("--memory {got}: at least {} MiB needed", MIN_MEMORY >> 20)]
    MemoryTooSmall {
        /// Requested bytes.
        got: u64,
    },
    /// Memory not a multiple of the page size in use.
    #[error("--memory {got}: must be a multiple of {align} bytes{hint}")]
    MemoryUnaligned {
        /// Requested bytes.
        got: u64,
        /// Required multiple.
        align: u64,
        /// Extra advice.
        hint: &'static str,
    },
    /// Not a PCI device directory.
    #[error("--vfio {}: not a PCI device; pass /sys/bus/pci/devices/DDDD:BB:DD.F", path.display())]
    NotPciDevice {
        /// The value.
        path: PathBuf,
    },
    /// The device has no IOMMU group.
    #[error("--vfio {}: device has no IOMMU group; enable the host IOMMU (intel_iommu=on or amd_iommu=on on the host kernel command line)", path.display())]
    NoIommuGroup {
        /// The value.
        path: PathBuf,
    },
    /// The group's VFIO node is missing.
    #[error("--vfio {}: no {}: bind {bdf} to vfio-pci (echo vfio-pci > {}/driver_override; echo {bdf} > /sys/bus/pci/drivers_probe)", path.display(), dev.display(), path.display())]
    NotBoundToVfio {
        /// The value.
        path: PathBuf,
        /// The PCI address.
        bdf: String,
        /// The missing /dev/vfio/N.
        dev: PathBuf,
    },
    /// Another process has the group open.
    #[error("--vfio {}: {} is busy: another process (another VMM?) has IOMMU group {group} open; stop it or pass another device", path.display(), dev.display())]
    VfioBusy {
        /// The value.
        path: PathBuf,
        /// The group's /dev/vfio/N.
        dev: PathBuf,
        /// The IOMMU group.
        group: u32,
    },
    /// A virtio-iommu option without `--viommu`.
    #[error("--{flag}: only applies to the virtio-iommu; add --viommu or drop --{flag}")]
    NeedsViommu {
        /// The flag.
        flag: &'static str,
    },
    /// A bounce-pool hint value out of range.
    #[error("--{flag} {got}: {why}")]
    PoolHint {
        /// The flag.
        flag: &'static str,
        /// Its value in bytes.
        got: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The group's node cannot be opened for lack of permission.
    #[error("--vfio {}: cannot open {}: permission denied (run as root, or give this user read-write access to it)", path.display(), dev.display())]
    VfioDenied {
        /// The value.
        path: PathBuf,
        /// The group's /dev/vfio/N.
        dev: PathBuf,
    },
}

/// The one-line error for a failed open of a group's `/dev/vfio/N`, where
/// the cause is one a user can fix; `None` leaves the error to VM setup.
fn group_open_error(
    path: &Path,
    dev: &Path,
    group: u32,
    e: &std::io::Error,
) -> Option<ConfigError> {
    match e.raw_os_error() {
        Some(libc::EBUSY) => Some(ConfigError::VfioBusy {
            path: path.to_path_buf(),
            dev: dev.to_path_buf(),
            group,
        }),
        Some(libc::EACCES | libc::EPERM) => Some(ConfigError::VfioDenied {
            path: path.to_path_buf(),
            dev: dev.to_path_buf(),
        }),
        _ => None,
    }
}

/// Parse `512M`, `2G`, `4096K`, `1073741824` (binary units; `MiB`/`GiB`
/// spellings accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        Some((i, 'T' | 't')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 512M, 2G, 1073741824)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A validated VFIO device to pass through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioDeviceSpec {
    /// Its sysfs directory.
    pub sysfs: PathBuf,
    /// Its PCI address, `DDDD:BB:DD.F`.
    pub bdf: String,
    /// Its IOMMU group number.
    pub group: u32,
}

/// Check a `--vfio` value: a PCI device with an IOMMU group whose
/// `/dev/vfio/N` exists (`dev_vfio` is `/dev/vfio` outside tests).
pub fn check_vfio_device(path: &Path, dev_vfio: &Path) -> Result<VfioDeviceSpec, ConfigError> {
    let not_pci = || ConfigError::NotPciDevice {
        path: path.to_path_buf(),
    };
    let canon = path.canonicalize().map_err(|_| not_pci())?;
    let bdf = canon
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_bdf(n))
        .ok_or_else(not_pci)?
        .to_string();
    if !canon.join("config").exists() {
        return Err(not_pci());
    }
    let group = std::fs::read_link(canon.join("iommu_group"))
        .ok()
        .and_then(|g| g.file_name()?.to_str()?.parse::<u32>().ok())
        .ok_or_else(|| ConfigError::NoIommuGroup {
            path: path.to_path_buf(),
        })?;
    let dev = dev_vfio.join(group.to_string());
    if !dev.exists() {
        return Err(ConfigError::NotBoundToVfio {
            path: path.to_path_buf(),
            bdf,
            dev,
        });
    }
    // Open the group once now, so that a busy or forbidden device is one
    // clear line here, not an ioctl error deep in VM setup. The file closes
    // again at once; VM setup opens it for real.
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev)
    {
        if let Some(err) = group_open_error(path, &dev, group, &e) {
            return Err(err);
        }
    }
    Ok(VfioDeviceSpec {
        sysfs: canon,
        bdf,
        group,
    })
}

/// `DDDD:BB:DD.F` in hex.
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

fn check_file(flag: &'static str, path: &Path, what: &'static str) -> Result<(), ConfigError> {
    let meta = std::fs::metadata(path).map_err(|source| ConfigError::File {
        flag,
        path: path.to_path_buf(),
        what,
        source,
    })?;
    if !meta.is_file() {
        return Err(ConfigError::NotAFile {
            flag,
            path: path.to_path_buf(),
            what,
        });
    }
    // Opening catches permission problems now rather than mid-boot.
    std::fs::File::open(path).map_err(|source| ConfigError::File {
        flag,
        path: path.to_path_buf(),
        what,
        source,
    })?;
    Ok(())
}

/// What the VMM builds, from a checked command line.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// bzImage path.
    pub kernel: PathBuf,
    /// Initramfs path.
    pub initrd: Option<PathBuf>,
    /// Kernel command line.
    pub cmdline: String,
    /// Guest RAM in bytes.
    pub memory: u64,
    /// Back RAM with huge pages.
    pub hugepages: bool,
    /// vCPU count.
    pub cpus: u8,
    /// Devices to pass through.
    pub vfio: Vec<VfioDeviceSpec>,
    /// Put them behind a virtio-iommu.
    pub viommu: bool,
    /// Control plane socket.
    pub api_socket: Option<PathBuf>,
    /// Offer the lazy-unmap extension.
    pub lazy_unmap: bool,
    /// The bounce-pool hint to offer as (threshold, pool_max) bytes; `None`:
    /// no hint.
    pub pool_hint: Option<(u32, u64)>,
    /// IOVA ranges the guest must not use (`--reserve-iova`), inclusive.
    pub reserve_iova: Vec<(u64, u64)>,
    /// Keep the guest's IOVAs off the host's PCI windows and BARs.
    pub host_pci_reserve: bool,
}

impl Cli {
    /// Check every flag; the first problem found is returned.
    pub fn validate(self, dev_vfio: &Path) -> Result<VmConfig, ConfigError> {
        check_file("kernel", &self.kernel, "a Linux bzImage")?;
        if let Some(initrd) = &self.initrd {
            check_file("initrd", initrd, "an initramfs (cpio archive)")?;
        }
        if self.memory < MIN_MEMORY {
            return Err(ConfigError::MemoryTooSmall { got: self.memory });
        }
        let (align, hint) = if self.hugepages {
            (2 << 20, " with --hugepages (2 MiB pages)")
        } else {
            (4096, "")
        };
        if !self.memory.is_multiple_of(align) {
            return Err(ConfigError::MemoryUnaligned {
                got: self.memory,
                align,
                hint,
            });
        }
        let pool_hint = self.check_viommu_options()?;
        let vfio = self
            .vfio
            .iter()
            .map(|p| check_vfio_device(p, dev_vfio))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VmConfig {
            kernel: self.kernel,
            initrd: self.initrd,
            cmdline: self.cmdline,
            memory: self.memory,
            hugepages: self.hugepages,
            cpus: self.cpus,
            vfio,
            viommu: self.viommu,
            api_socket: self.api_socket,
            lazy_unmap: !self.no_lazy_unmap,
            pool_hint,
            reserve_iova: self.reserve_iova,
            host_pci_reserve: !self.no_host_pci_reserve,
        })
    }

    /// The virtio-iommu flags need `--viommu`; the pool hint's values must
    /// fit the POOL_HINT property. Returns the hint to offer.
    fn check_viommu_options(&self) -> Result<Option<(u32, u64)>, ConfigError> {
        if !self.viommu {
            let given = [
                ("no-lazy-unmap", self.no_lazy_unmap),
                ("pool-threshold", self.pool_threshold.is_some()),
                ("pool-max", self.pool_max.is_some()),
                ("reserve-iova", !self.reserve_iova.is_empty()),
                ("no-host-pci-reserve", self.no_host_pci_reserve),
            ];
            if let Some((flag, _)) = given.into_iter().find(|(_, set)| *set) {
                return Err(ConfigError::NeedsViommu { flag });
            }
        }
        let threshold = self.pool_threshold.unwrap_or(DEFAULT_POOL_THRESHOLD);
        let pool_max = self.pool_max.unwrap_or(DEFAULT_POOL_MAX);
        if threshold == 0 {
            return Ok(None);
        }
        let bad = |flag, got, why| Err(ConfigError::PoolHint { flag, got, why });
        let Ok(threshold32) = u32::try_from(threshold) else {
            return bad("pool-threshold", threshold, "must be below 4G");
        };
        if !pool_max.is_multiple_of(4096) || pool_max == 0 {
            return bad("pool-max", pool_max, "must be a non-zero multiple of 4K");
        }
        if pool_max < threshold {
            return bad(
                "pool-max",
                pool_max,
                "must be at least --pool-threshold (one buffer must fit)",
            );
        }
        Ok(Some((threshold32, pool_max)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vmm-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn parses_the_issue_command_line() {
        let cli = Cli::try_parse_from([
            "vmm",
            "--kernel",
            "bzImage",
            "--initrd",
            "initrd.cpio.gz",
            "--cmdline",
            "console=ttyS0",
            "--memory",
            "1G",
            "--cpus",
            "2",
            "--vfio",
            "/sys/bus/pci/devices/0000:00:04.0",
            "--viommu",
        ])
        .unwrap();
        assert_eq!(cli.memory, 1 << 30);
        assert_eq!(cli.cpus, 2);
        assert_eq!(cli.vfio.len(), 1);
        assert!(cli.viommu);
        assert!(Cli::try_parse_from(["vmm", "--kernel", "k", "--cpus", "0"]).is_err());
        assert!(Cli::try_parse_from(["vmm", "--kernel", "k", "--cpus", "255"]).is_err());
        assert!(Cli::try_parse_from(["vmm", "--initrd", "i"]).is_err());
    }

    #[test]
    fn missing_kernel_names_the_flag_and_path() {
        let cli = Cli::try_parse_from(["vmm", "--kernel", "/nonexistent/bzImage"]).unwrap();
        let err = cli.validate(Path::new("/dev/vfio")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("--kernel /nonexistent/bzImage: cannot open"),
            "{msg}"
        );
        assert!(msg.contains("bzImage"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn memory_checks() {
        let d = tmpdir("mem");
        let k = d.join("bzImage");
        std::fs::write(&k, b"x").unwrap();
        let ks = k.to_str().unwrap();
        let v = |args: &[&str]| {
            let mut all = vec!["vmm", "--kernel", ks];
            all.extend_from_slice(args);
            Cli::try_parse_from(all).unwrap().validate(&d)
        };
        assert!(matches!(
            v(&["--memory", "1M"]),
            Err(ConfigError::MemoryTooSmall { .. })
        ));
        assert!(matches!(
            v(&["--memory", "65M", "--hugepages"]),
            Err(ConfigError::MemoryUnaligned {
                align: 0x20_0000,
                ..
            })
        ));
        let cfg = v(&["--memory", "66M", "--cpus", "2"]).unwrap();
        assert_eq!((cfg.memory, cfg.cpus), (66 << 20, 2));
        assert!(matches!(
            v(&["--initrd", d.to_str().unwrap()]),
            Err(ConfigError::NotAFile { flag: "initrd", .. })
        ));
        assert!(v(&["--viommu"]).unwrap().viommu);
    }

    #[test]
    fn viommu_options() {
        let d = tmpdir("viommu-opts");
        let k = d.join("bzImage");
        std::fs::write(&k, b"x").unwrap();
        let ks = k.to_str().unwrap();
        let v = |args: &[&str]| {
            let mut all = vec!["vmm", "--kernel", ks];
            all.extend_from_slice(args);
            Cli::try_parse_from(all).unwrap().validate(&d)
        };
        let cfg = v(&["--viommu"]).unwrap();
        assert!(cfg.lazy_unmap);
        assert_eq!(
            cfg.pool_hint,
            Some((DEFAULT_POOL_THRESHOLD as u32, DEFAULT_POOL_MAX))
        );
        let cfg = v(&["--viommu", "--no-lazy-unmap", "--pool-threshold", "0"]).unwrap();
        assert!(!cfg.lazy_unmap);
        assert_eq!(cfg.pool_hint, None);
        let cfg = v(&["--viommu", "--pool-threshold", "16K", "--pool-max", "1M"]).unwrap();
        assert_eq!(cfg.pool_hint, Some((16 << 10, 1 << 20)));
        let msg = v(&["--pool-max", "1M"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "--pool-max: only applies to the virtio-iommu; add --viommu or drop --pool-max"
        );
        assert!(matches!(
            v(&["--reserve-iova", "0x1000-0x1fff"]),
            Err(ConfigError::NeedsViommu {
                flag: "reserve-iova"
            })
        ));
        assert_eq!(parse_range("0x1000-0x1fff"), Ok((0x1000, 0x1fff)));
        assert_eq!(parse_range("4096 - 8191"), Ok((4096, 8191)));
        assert!(parse_range("0x2000-0x1000")
            .unwrap_err()
            .contains("FIRST is above LAST"));
        assert!(parse_range("12").unwrap_err().contains("FIRST-LAST"));
        assert!(parse_range("0xzz-1").unwrap_err().contains("not a number"));
        assert!(matches!(
            v(&["--no-lazy-unmap"]),
            Err(ConfigError::NeedsViommu {
                flag: "no-lazy-unmap"
            })
        ));
        let msg = v(&["--viommu", "--pool-threshold", "8G"])
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "--pool-threshold 8589934592: must be below 4G");
        let msg = v(&["--viommu", "--pool-max", "5000"])
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "--pool-max 5000: must be a non-zero multiple of 4K");
        assert!(matches!(
            v(&["--viommu", "--pool-threshold", "1M", "--pool-max", "64K"]),
            Err(ConfigError::PoolHint {
                flag: "pool-max",
                ..
            })
        ));
    }

    #[test]
    fn vfio_checks_name_the_fix() {
        let d = tmpdir("vfio");
        let dev = d.join("0000:00:04.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("config"), [0u8; 64]).unwrap();
        let groups = d.join("groups/7");
        std::fs::create_dir_all(&groups).unwrap();
        let dev_vfio = d.join("dev-vfio");
        std::fs::create_dir_all(&dev_vfio).unwrap();

        assert!(matches!(
            check_vfio_device(&d.join("nope"), &dev_vfio),
            Err(ConfigError::NotPciDevice { .. })
        ));
        assert!(matches!(
            check_vfio_device(&d, &dev_vfio),
            Err(ConfigError::NotPciDevice { .. })
        ));
        assert!(matches!(
            check_vfio_device(&dev, &dev_vfio),
            Err(ConfigError::NoIommuGroup { .. })
        ));
        std::os::unix::fs::symlink(&groups, dev.join("iommu_group")).unwrap();
        let err = check_vfio_device(&dev, &dev_vfio).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("dev-vfio/7: bind 0000:00:04.0 to vfio-pci"),
            "{msg}"
        );
        std::fs::write(dev_vfio.join("7"), b"").unwrap();
        let spec = check_vfio_device(&dev, &dev_vfio).unwrap();
        assert_eq!(spec.bdf, "0000:00:04.0");
        assert_eq!(spec.group, 7);
    }

    #[test]
    fn busy_or_forbidden_group_is_one_line_with_the_fix() {
        let (path, dev) = (
            Path::new("/sys/bus/pci/devices/0000:00:04.0"),
            Path::new("/dev/vfio/7"),
        );
        let busy = group_open_error(
            path,
            dev,
            7,
            &std::io::Error::from_raw_os_error(libc::EBUSY),
        )
        .expect("EBUSY is reported")
        .to_string();
        assert!(
            busy.starts_with("--vfio /sys/bus/pci/devices/0000:00:04.0: /dev/vfio/7 is busy"),
            "{busy}"
        );
        assert!(
            busy.contains("IOMMU group 7 open") && !busy.contains('\n'),
            "{busy}"
        );
        let denied = group_open_error(
            path,
            dev,
            7,
            &std::io::Error::from_raw_os_error(libc::EACCES),
        )
        .expect("EACCES is reported")
        .to_string();
        assert!(
            denied.contains("permission denied (run as root"),
            "{denied}"
        );
        // Anything else is left to VM setup, which names the device too.
        assert!(
            group_open_error(path, dev, 7, &std::io::Error::from_raw_os_error(libc::EIO)).is_none()
        );
    }

    #[test]
    fn bdf_syntax() {
        assert!(is_bdf("0000:00:04.0"));
        assert!(is_bdf("0000:af:1f.7"));
        assert!(!is_bdf("0000:00:04.8"));
        assert!(!is_bdf("00:04.0"));
        assert!(!is_bdf("0000:00:04:0"));
    }
}
