//! Host checks, all before anything is changed. Each failing prerequisite
//! is one [`Problem`]: one line saying what is wrong and how to fix it.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{Pkg, PkgManager};
use crate::sysfs::{pci_dev, Root};

/// PCI class of an NVMe controller (mass storage, NVM, NVMe).
pub const NVME_CLASS: &str = "0x010802";
/// Linux capability number of CAP_IPC_LOCK (exempts from RLIMIT_MEMLOCK).
const CAP_IPC_LOCK: u32 = 14;
/// Memory VFIO pins beyond guest RAM (ROMs, rings, QEMU's own): margin.
const MEMLOCK_MARGIN: u64 = 64 << 20;
/// Where the kernel's tracefs is (or is mounted by the tool).
const TRACEFS: &str = "/sys/kernel/tracing";

/// One failing prerequisite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong.
    pub what: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.fix)
    }
}

fn problem(what: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem {
        what: what.into(),
        fix: fix.into(),
    }
}

/// What preflight learned about the drive.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// The driver bound now (`nvme`, `vfio-pci`), if any.
    pub driver: Option<String>,
    /// Its IOMMU group number.
    pub iommu_group: Option<String>,
    /// Serial number (from the nvme driver's sysfs).
    pub serial: Option<String>,
    /// Model (from the nvme driver's sysfs).
    pub model: Option<String>,
    /// Its block devices (namespaces), e.g. `nvme0n1`.
    pub namespaces: Vec<String>,
    /// BAR0 in the host's physical space, `0xSTART-0xEND` (sysfs `resource`).
    #[serde(default)]
    pub bar0: Option<String>,
    /// The namespaces' logical block size in bytes, the largest if they
    /// differ (`/sys/block/NS/queue/logical_block_size`; absent when the
    /// host sees no namespace, e.g. the drive is on vfio-pci already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_block_size: Option<u64>,
    /// The largest namespace's size in bytes (`/sys/block/NS/size` x 512;
    /// absent when the host sees no namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_bytes: Option<u64>,
}

/// What to check.
#[derive(Debug, Clone)]
pub struct Checks {
    /// sysfs/procfs root.
    pub root: Root,
    /// The drive.
    pub bdf: String,
    /// --destroy-data, if given.
    pub consent: Option<String>,
    /// --no-bind.
    pub no_bind: bool,
    /// Stock QEMU, when a column runs it.
    pub qemu: Option<PathBuf>,
    /// Our VMM, when a column runs it.
    pub vmm: Option<PathBuf>,
    /// Whether the guest initramfs is built here (needs fio, busybox, ldd).
    pub build_image: bool,
    /// Guest kernels (flag, path) the columns boot.
    pub kernels: Vec<(&'static str, PathBuf)>,
    /// Guest RAM in bytes (VFIO pins it).
    pub guest_memory: u64,
    /// PATH to search programs in.
    pub path_env: Option<OsString>,
    /// --kvm-exits (needs root and ftrace hist triggers on the KVM events).
    pub kvm_exits: bool,
    /// --breakdown (needs root, tracefs instances, the scheduler and
    /// syscall tracepoints).
    pub breakdown: bool,
    /// The measured block sizes (label, bytes): each a multiple of the
    /// namespaces' logical block size, or O_DIRECT fails.
    pub block_sizes: Vec<(String, u64)>,
}

/// Programs found on the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    /// Stock QEMU.
    pub qemu: Option<PathBuf>,
    /// Our VMM.
    pub vmm: Option<PathBuf>,
    /// fio (for the guest image).
    pub fio: Option<PathBuf>,
    /// busybox (for the guest image).
    pub busybox: Option<PathBuf>,
}

/// Preflight's answer.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every failing prerequisite, one line each.
    pub problems: Vec<Problem>,
    /// The drive as found.
    pub facts: DeviceFacts,
    /// Programs as found.
    pub tools: Tools,
}

/// `prog` as an executable file: a path if it has a `/`, else looked up in `path_env`.
pub fn find_program(prog: &Path, path_env: Option<&OsStr>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.components().count() > 1 || prog.is_absolute() {
        return executable(prog).then(|| prog.to_path_buf());
    }
    std::env::split_paths(path_env?)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
}

/// BAR0 from a sysfs `resource` file (first line: `start end flags`, hex).
pub fn bar0_of(resource: &str) -> Option<String> {
    let mut f = resource.lines().next()?.split_whitespace();
    let (start, end) = (f.next()?, f.next()?);
    let n = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok();
    (n(start)? != 0 || n(end)? != 0).then(|| format!("{start}-{end}"))
}

/// What a guest kernel must have built in (`=y`): the guest image loads
/// no modules, so a distribution kernel with these as modules boots and
/// never sees the NVMe. Each is there for something the image does:
/// the uncompressed cpio initramfs (BLK_DEV_INITRD), its `/init` shell
/// script and the busybox and fio ELF binaries (BINFMT_SCRIPT, BINFMT_ELF),
/// the mounts of /proc, /sys and /dev (PROC_FS, SYSFS, DEVTMPFS), the
/// console=ttyS0 the host reads the results from (SERIAL_8250,
/// SERIAL_8250_CONSOLE), the virtio-iommu found through ACPI's VIOT table
/// on virtio-pci (PCI, PCI_MSI, VIRTIO, VIRTIO_PCI, VIRTIO_IOMMU,
/// ACPI_VIOT, which needs ACPI, also the power-off path), the drive
/// (BLK_DEV_NVME), and fio: its libaio engine (AIO), its SysV shared
/// memory between job processes (SYSVIPC) and its threads (FUTEX).
pub const GUEST_KERNEL_OPTIONS: &[&str] = &[
    "CONFIG_BLK_DEV_INITRD",
    "CONFIG_BINFMT_ELF",
    "CONFIG_BINFMT_SCRIPT",
    "CONFIG_PROC_FS",
    "CONFIG_SYSFS",
    "CONFIG_DEVTMPFS",
    "CONFIG_SERIAL_8250",
    "CONFIG_SERIAL_8250_CONSOLE",
    "CONFIG_PCI",
    "CONFIG_PCI_MSI",
    "CONFIG_VIRTIO",
    "CONFIG_VIRTIO_PCI",
    "CONFIG_VIRTIO_IOMMU",
    "CONFIG_ACPI_VIOT",
    "CONFIG_BLK_DEV_NVME",
    "CONFIG_AIO",
    "CONFIG_SYSVIPC",
    "CONFIG_FUTEX",
];

/// The kernel config that goes with the bzImage `kernel`, if one is found:
/// `.config` beside it (guest-patches' cache), `config-VER` beside a
/// `vmlinuz-VER` (a distribution's /boot), or the tree's `.config` for
/// `arch/x86/boot/bzImage`.
pub fn kernel_config(kernel: &Path) -> Option<PathBuf> {
    let dir = kernel.parent()?;
    let name = kernel.file_name()?.to_string_lossy();
    let mut c = vec![dir.join(".config")];
    if let Some(ver) = name.strip_prefix("vmlinuz-") {
        c.push(dir.join(format!("config-{ver}")));
    }
    if kernel.ends_with("arch/x86/boot/bzImage") {
        c.push(dir.parent()?.parent()?.parent()?.join(".config"));
    }
    c.into_iter().find(|p| p.is_file())
}

/// The options of [`GUEST_KERNEL_OPTIONS`] a kernel config does not build in.
pub fn missing_guest_options(config: &str) -> Vec<String> {
    GUEST_KERNEL_OPTIONS
        .iter()
        .filter(|o| !config.lines().any(|l| l.trim() == format!("{o}=y")))
        .map(|o| {
            let module = config.lines().any(|l| l.trim() == format!("{o}=m"));
            format!("{o}{}", if module { " (=m)" } else { "" })
        })
        .collect()
}

/// Whether a drive bound to `driver` shows its namespaces to the host
/// (every driver but none, vfio-pci and pci-stub: nvme, or one we do not know).
fn drives_namespaces(driver: Option<&str>) -> bool {
    !matches!(driver, None | Some("vfio-pci") | Some("pci-stub"))
}

/// `name` as `(subsystem or controller instance, controller, nsid)` if it is
/// a namespace's block device: `nvmeXnY` (no controller) or a native
/// multipath path device `nvmeXcYnZ`. Partitions (`nvme0n1p1`) are not.
fn parse_ns_name(name: &str) -> Option<(u32, Option<u32>, u32)> {
    let rest = name.strip_prefix("nvme")?;
    let digits = |s: &str| -> Option<(u32, usize)> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then(|| s[..n].parse().ok().map(|v| (v, n)))?
    };
    let (x, n) = digits(rest)?;
    let mut rest = &rest[n..];
    let mut ctrl = None;
    if let Some(r) = rest.strip_prefix('c') {
        let (y, n) = digits(r)?;
        ctrl = Some(y);
        rest = &r[n..];
    }
    let r = rest.strip_prefix('n')?;
    let (z, n) = digits(r)?;
    (n == r.len()).then_some((x, ctrl, z))
}

/// The block devices of the namespaces of the NVMe drive `bdf`, found
/// through each of its controllers (`/sys/bus/pci/devices/BDF/nvme/nvmeN/`:
/// `nvmeNnY` without native multipath, the hidden path devices `nvmeXcNnY`
/// with it, which stand for the subsystem's `nvmeXnY`) and through the
/// controller's NVMe subsystem (`/sys/class/nvme-subsystem/nvme-subsysX/`,
/// which links its controllers and holds the multipath block devices
/// `nvmeXnY`, shared by every controller of a dual-port drive). Sorted,
/// without duplicates.
pub fn namespaces_of(r: &Root, bdf: &str) -> Vec<String> {
    let dev = pci_dev(bdf);
    let ctrls = r.list(dev.join("nvme"));
    let mut found = std::collections::BTreeSet::new();
    for ctrl in &ctrls {
        for n in r.list(dev.join("nvme").join(ctrl)) {
            match parse_ns_name(&n) {
                Some((x, Some(_), z)) => {
                    found.insert(format!("nvme{x}n{z}"));
                }
                Some((_, None, _)) => {
                    found.insert(n);
                }
                None => {}
            }
        }
    }
    for subsys in r.list("/sys/class/nvme-subsystem") {
        let dir = PathBuf::from("/sys/class/nvme-subsystem").join(&subsys);
        let entries = r.list(&dir);
        if !entries.iter().any(|e| ctrls.contains(e)) {
            continue;
        }
        found.extend(
            entries
                .into_iter()
                .filter(|e| matches!(parse_ns_name(e), Some((_, None, _)))),
        );
    }
    found.into_iter().collect()
}

/// Why `fio --enghelp=libaio` says `fio` has no libaio engine; `None` when it has.
fn libaio_missing(fio: &Path) -> Option<String> {
    let out = crate::exec::output(
        std::process::Command::new(fio)
            .arg("--enghelp=libaio")
            .stdin(std::process::Stdio::null()),
    );
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().next().unwrap_or("").trim();
            Some(format!(
                "fio --enghelp=libaio exited {}{}",
                o.status.code().unwrap_or(-1),
                if first.is_empty() {
                    String::new()
                } else {
                    format!(": {first}")
                }
            ))
        }
        Err(e) => Some(format!("fio --enghelp=libaio: {e}")),
    }
}

impl Checks {
    /// Run every check.
    pub fn run(&self) -> Outcome {
        let mut out = Outcome::default();
        let p = &mut out.problems;
        let r = &self.root;
        if !r.exists("/dev/kvm") {
            p.push(problem(
                "no /dev/kvm",
                "enable VT-x/AMD-V in the firmware and load KVM (modprobe kvm_intel or modprobe kvm_amd)",
            ));
        }
        if r.list("/sys/kernel/iommu_groups").is_empty() {
            p.push(problem(
                "the IOMMU is off (/sys/kernel/iommu_groups is empty)",
                "enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware; on Intel boot with intel_iommu=on (iommu=pt keeps the host's own DMA fast); on AMD the kernel turns the IOMMU on by itself: check that neither amd_iommu=off nor iommu=off is on the kernel command line (there is no amd_iommu=on)",
            ));
        }
        if !r.exists("/sys/bus/pci/drivers/vfio-pci") {
            p.push(problem("vfio-pci is not loaded", "modprobe vfio-pci"));
        } else if !r.exists("/dev/vfio/vfio") {
            p.push(problem(
                "no /dev/vfio/vfio: both VMMs open the drive through VFIO's container API",
                "modprobe vfio (it makes /dev/vfio/vfio); a kernel built with iommufd and without CONFIG_VFIO_CONTAINER needs CONFIG_IOMMUFD_VFIO_CONTAINER=y",
            ));
        }
        if let Some(x) = self.interrupt_remapping() {
            p.push(x);
        }
        self.check_device(&mut out);
        if self.breakdown {
            self.check_breakdown(&mut out.problems);
        }
        if self.kvm_exits {
            self.check_kvm_exits(&mut out.problems);
        }
        self.check_memlock(&mut out.problems);
        if !self.no_bind && self.euid() != Some(0) {
            out.problems.push(problem(
                "not running as root",
                "run it with sudo: binding the drive to vfio-pci writes to sysfs (or bind it yourself and pass --no-bind)",
            ));
        }
        self.check_programs(&mut out);
        for (flag, k) in &self.kernels {
            if !k.is_file() {
                out.problems.push(problem(
                    format!("{flag} {}: no such file", k.display()),
                    "build it with guest-patches/linux-6.12/build.sh baseline|patched, or fix the path",
                ));
                continue;
            }
            if *flag == "--initramfs" {
                continue;
            }
            // The kernel's own embedded config first (it cannot be stale),
            // then a config file that goes with it.
            let (text, source) = match crate::ikconfig::read_embedded_config(k) {
                Ok(Some(text)) => (text, "its embedded config (CONFIG_IKCONFIG)".to_string()),
                found => {
                    let cfg = kernel_config(k);
                    let text = cfg.as_ref().and_then(|c| std::fs::read_to_string(c).ok());
                    match (found, cfg, text) {
                        (_, Some(cfg), Some(text)) => {
                            (text, format!("its config {}", cfg.display()))
                        }
                        (found, _, _) => {
                            let why = match found {
                                Err(e) => format!("its embedded config cannot be read ({e})"),
                                _ => "it has no embedded config (CONFIG_IKCONFIG)".into(),
                            };
                            tracing::warn!(
                                "{flag} {}: {why} and no config file goes with it (.config beside it, config-VER beside vmlinuz-VER, a tree's .config): its built-in options ({}) are checked only when the first guest boots",
                                k.display(),
                                GUEST_KERNEL_OPTIONS.join(", ")
                            );
                            continue;
                        }
                    }
                }
            };
            let missing = missing_guest_options(&text);
            if missing.is_empty() {
                tracing::info!(
                    "{flag} {}: {source} builds in every option the guest needs",
                    k.display()
                );
            } else {
                out.problems.push(problem(
                    format!(
                        "{flag} {}: {source} does not build in {}; the guest image loads no modules, so the guest would never see the NVMe",
                        k.display(),
                        missing.join(", ")
                    ),
                    "use a kernel with them =y: guest-patches/linux-6.12/build.sh baseline|patched builds one (guest-patches/config-fragment lists what it needs)",
                ));
            }
        }
        out
    }

    fn check_device(&self, out: &mut Outcome) {
        let r = &self.root;
        let dev = pci_dev(&self.bdf);
        if !r.exists(&dev) {
            let nvmes: Vec<String> = r
                .list("/sys/bus/pci/devices")
                .into_iter()
                .filter(|b| {
                    r.read_trim(pci_dev(b).join("class")).ok().as_deref() == Some(NVME_CLASS)
                })
                .collect();
            let hint = if nvmes.is_empty() {
                "this host shows no NVMe drive (lspci -D -d ::0108)".to_string()
            } else {
                format!("NVMe drives on this host: {}", nvmes.join(", "))
            };
            out.problems.push(problem(
                format!("--device {}: no such PCI device", self.bdf),
                hint,
            ));
            return;
        }
        let class = r.read_trim(dev.join("class")).unwrap_or_default();
        if class != NVME_CLASS {
            out.problems.push(problem(
                format!(
                    "--device {}: PCI class {class}, not an NVMe drive ({NVME_CLASS})",
                    self.bdf
                ),
                "pick the NVMe drive's address (lspci -D -d ::0108)",
            ));
            return;
        }
        let f = &mut out.facts;
        f.driver = r.link_name(dev.join("driver"));
        f.iommu_group = r.link_name(dev.join("iommu_group"));
        f.bar0 = r
            .read_trim(dev.join("resource"))
            .ok()
            .and_then(|t| bar0_of(&t));
        for ctrl in r.list(dev.join("nvme")) {
            let c = dev.join("nvme").join(&ctrl);
            f.serial = f
                .serial
                .take()
                .or_else(|| r.read_trim(c.join("serial")).ok());
            f.model = f.model.take().or_else(|| r.read_trim(c.join("model")).ok());
        }
        f.namespaces = namespaces_of(r, &self.bdf);
        // The largest value of a namespace's sysfs file, over the drive's
        // namespaces.
        let most = |file: &str| {
            f.namespaces
                .iter()
                .filter_map(|ns| {
                    r.read_trim(format!("/sys/block/{ns}/{file}"))
                        .ok()?
                        .parse::<u64>()
                        .ok()
                })
                .max()
        };
        let (lbs, sectors) = (most("queue/logical_block_size"), most("size"));
        f.logical_block_size = lbs;
        f.namespace_bytes = sectors.map(|sectors| sectors * 512);
        let facts = f.clone();
        let p = &mut out.problems;
        if let Some(c) = &self.consent {
            let matches_bdf = crate::cli::normalize_bdf(c).as_deref() == Some(self.bdf.as_str());
            let matches_serial = facts
                .serial
                .as_deref()
                .is_some_and(|s| !s.is_empty() && s == c.trim());
            if !matches_bdf && !matches_serial {
                p.push(problem(
                    format!(
                        "--destroy-data {c}: names neither {} nor its serial",
                        self.bdf
                    ),
                    format!(
                        "repeat the drive you mean to erase: --destroy-data {}{}",
                        self.bdf,
                        facts
                            .serial
                            .as_deref()
                            .map(|s| format!(" (or its serial {s})"))
                            .unwrap_or_default()
                    ),
                ));
            }
        }
        if let Some(g) = &facts.iommu_group {
            // VFIO takes a group when every other device in it is unbound
            // or on a driver that leaves DMA to VFIO (vfio-pci, pci-stub,
            // pcieport for bridges); bridges have always been let through.
            let others: Vec<String> = r
                .list(format!("/sys/kernel/iommu_groups/{g}/devices"))
                .into_iter()
                .filter(|o| o != &self.bdf)
                .filter_map(|o| {
                    let bridge = r
                        .read_trim(pci_dev(&o).join("class"))
                        .unwrap_or_default()
                        .starts_with("0x0604");
                    let driver = r.link_name(pci_dev(&o).join("driver"));
                    let ok = bridge
                        || matches!(
                            driver.as_deref(),
                            None | Some("vfio-pci") | Some("pci-stub") | Some("pcieport")
                        );
                    (!ok).then(|| format!("{o} (on {})", driver.unwrap_or_default()))
                })
                .collect();
            if !others.is_empty() {
                let bdfs: Vec<&str> = others
                    .iter()
                    .filter_map(|o| o.split_whitespace().next())
                    .collect();
                p.push(problem(
                    format!(
                        "IOMMU group {g} of {} also holds {}, bound to host drivers: VFIO takes a group only when its other devices are unbound or on vfio-pci or pci-stub",
                        self.bdf,
                        others.join(", ")
                    ),
                    format!(
                        "unbind them ({}) if the host can do without them, or move the drive to a slot with its own group (or enable ACS in the firmware)",
                        bdfs.iter()
                            .map(|b| format!("echo {b} > /sys/bus/pci/devices/{b}/driver/unbind"))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                ));
            }
            if facts.driver.as_deref() == Some("vfio-pci") && !r.exists(format!("/dev/vfio/{g}")) {
                p.push(problem(
                    format!(
                        "{} is on vfio-pci but its group node /dev/vfio/{g} is missing",
                        self.bdf
                    ),
                    "check dmesg for vfio errors; rebind it (echo {bdf} > /sys/bus/pci/drivers/vfio-pci/unbind; echo {bdf} > /sys/bus/pci/drivers_probe) or let the tool bind it (drop --no-bind)"
                        .replace("{bdf}", &self.bdf),
                ));
            }
        } else {
            p.push(problem(
                format!("{} has no IOMMU group", self.bdf),
                "enable the IOMMU (firmware: VT-d or AMD-Vi; Intel: intel_iommu=on on the kernel command line; AMD: on by default, no amd_iommu=off) and make sure it covers this slot",
            ));
        }
        if self.no_bind && facts.driver.as_deref() != Some("vfio-pci") {
            p.push(problem(
                format!(
                    "--no-bind: {} is bound to {}, not vfio-pci",
                    self.bdf,
                    facts.driver.as_deref().unwrap_or("no driver")
                ),
                "drop --no-bind and let the tool bind it (restored at the end), or bind it yourself first",
            ));
        }
        if facts.namespaces.is_empty() && drives_namespaces(facts.driver.as_deref()) {
            p.push(problem(
                format!(
                    "{bdf} is bound to {} but none of its namespaces was found (looked for nvmeXnY and nvmeXcYnZ in /sys/bus/pci/devices/{bdf}/nvme/*/ and for the block devices of its subsystem in /sys/class/nvme-subsystem/*/): nothing could be checked for mounts, swap or LVM/md/dm",
                    facts.driver.as_deref().unwrap_or("no driver"),
                    bdf = self.bdf
                ),
                format!(
                    "see what uses it (nvme list-subsys; lsblk), stop it, then bind {bdf} to vfio-pci yourself (echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override; echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind; echo {bdf} > /sys/bus/pci/drivers_probe) and run again with --no-bind",
                    bdf = self.bdf
                ),
            ));
        }
        self.check_namespaces(&facts.namespaces, p);
        if let Some(lbs) = facts.logical_block_size.filter(|l| *l > 0) {
            let bad: Vec<&str> = self
                .block_sizes
                .iter()
                .filter(|(_, b)| b % lbs != 0)
                .map(|(l, _)| l.as_str())
                .collect();
            if !bad.is_empty() {
                p.push(problem(
                    format!(
                        "--bs {}: not a multiple of the drive's logical block size, {lbs} bytes (O_DIRECT I/O of that size fails)",
                        bad.join(",")
                    ),
                    format!("use block sizes that are multiples of {lbs}, e.g. --bs 4k,16k,64k,128k,256k"),
                ));
            }
        }
    }

    fn check_namespaces(&self, namespaces: &[String], p: &mut Vec<Problem>) {
        let r = &self.root;
        let mounts = r.read_trim("/proc/mounts").unwrap_or_default();
        let swaps = r.read_trim("/proc/swaps").unwrap_or_default();
        for ns in namespaces {
            let mut devs = vec![(ns.clone(), format!("/sys/block/{ns}"))];
            devs.extend(
                r.list(format!("/sys/block/{ns}"))
                    .into_iter()
                    .filter(|n| n.starts_with(ns.as_str()))
                    .map(|part| (part.clone(), format!("/sys/block/{ns}/{part}"))),
            );
            for (name, sys) in devs {
                let node = format!("/dev/{name}");
                for line in mounts.lines() {
                    let mut f = line.split_whitespace();
                    if f.next() == Some(node.as_str()) {
                        let at = f.next().unwrap_or("?");
                        p.push(problem(
                            format!("{node} is mounted on {at}"),
                            format!(
                                "umount {at} (and keep it out of /etc/fstab while benchmarking)"
                            ),
                        ));
                    }
                }
                if swaps
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(node.as_str()))
                {
                    p.push(problem(
                        format!("{node} is in use as swap"),
                        format!("swapoff {node}"),
                    ));
                }
                let holders = r.list(format!("{sys}/holders"));
                if !holders.is_empty() {
                    p.push(problem(
                        format!("{node} is held by {}", holders.join(", ")),
                        "stop what sits on it (LVM: vgchange -an; md: mdadm --stop; dm-crypt: cryptsetup close)",
                    ));
                }
            }
        }
    }

    /// Whether VFIO will take the drive's interrupts: with interrupt
    /// remapping (Intel VT-d's ECAP.IR on every unit, AMD-Vi always), or
    /// with vfio_iommu_type1's `allow_unsafe_interrupts`. Without either
    /// VFIO refuses to attach the group and the run would fail after the
    /// drive was bound. `None` when fine or when no IOMMU shows at all
    /// (reported on its own).
    fn interrupt_remapping(&self) -> Option<Problem> {
        let r = &self.root;
        let cmdline = r.read_trim("/proc/cmdline").unwrap_or_default();
        let unsafe_ok = ["vfio_iommu_type1", "iommufd"].iter().any(|m| {
            matches!(
                r.read_trim(format!(
                    "/sys/module/{m}/parameters/allow_unsafe_interrupts"
                ))
                .as_deref(),
                Ok("Y" | "y" | "1")
            )
        }) || cmdline.split_whitespace().any(|a| {
            matches!(
                a,
                "vfio_iommu_type1.allow_unsafe_interrupts=1"
                    | "vfio_iommu_type1.allow_unsafe_interrupts=Y"
                    | "vfio_iommu_type1.allow_unsafe_interrupts=y"
            )
        });
        if unsafe_ok {
            return None;
        }
        const FIX_UNSAFE: &str = "or, on a host no one else uses, let VFIO take unremapped interrupts: modprobe vfio_iommu_type1 allow_unsafe_interrupts=1 (or vfio_iommu_type1.allow_unsafe_interrupts=1 on the kernel command line)";
        if cmdline.split_whitespace().any(|a| a == "intremap=off") {
            return Some(problem(
                "interrupt remapping is off (intremap=off on the kernel command line): VFIO will not take the drive's interrupts",
                format!("remove intremap=off from the kernel command line and reboot, {FIX_UNSAFE}"),
            ));
        }
        let units = r.list("/sys/class/iommu");
        if units.is_empty() {
            return None;
        }
        let ir = |u: &String| -> bool {
            if u.starts_with("ivhd") {
                return true;
            }
            r.read_trim(format!("/sys/class/iommu/{u}/intel-iommu/ecap"))
                .ok()
                .and_then(|e| u64::from_str_radix(e.trim_start_matches("0x"), 16).ok())
                .is_some_and(|e| e & (1 << 3) != 0)
        };
        let without: Vec<&String> = units.iter().filter(|u| !ir(u)).collect();
        if without.is_empty() {
            return None;
        }
        Some(problem(
            format!(
                "no interrupt remapping: IOMMU unit(s) {} of /sys/class/iommu cannot remap interrupts, and VFIO will not take the drive's interrupts without it",
                without.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
            format!("enable interrupt remapping in the firmware (VT-d / AMD-Vi with interrupt remapping, x2APIC), {FIX_UNSAFE}"),
        ))
    }

    /// What `--kvm-exits` needs: root, tracefs with the KVM events, and
    /// hist triggers (CONFIG_HIST_TRIGGERS: each event has a `hist` file).
    /// An unmounted tracefs is mounted later, then checked again.
    fn check_kvm_exits(&self, p: &mut Vec<Problem>) {
        let r = &self.root;
        let t = TRACEFS;
        if !self.check_tracefs("--kvm-exits", "ftrace triggers", "CONFIG_HIST_TRIGGERS", p) {
            return;
        }
        if !r.exists(format!("{t}/events/kvm/kvm_exit")) {
            p.push(problem(
                format!("--kvm-exits: no KVM trace events in {t}/events/kvm"),
                "load KVM (modprobe kvm_intel or kvm_amd), or drop --kvm-exits",
            ));
        } else if !r.exists(format!("{t}/events/kvm/kvm_exit/hist")) {
            p.push(problem(
                "--kvm-exits: the kernel has no hist triggers (no events/kvm/kvm_exit/hist)",
                "boot a kernel with CONFIG_HIST_TRIGGERS, or drop --kvm-exits",
            ));
        }
    }

    /// What `--breakdown` needs: root, tracefs with instances, the
    /// scheduler's and the system calls' trace events. An unmounted
    /// tracefs is mounted later, then checked again.
    fn check_breakdown(&self, p: &mut Vec<Problem>) {
        let r = &self.root;
        let t = TRACEFS;
        if !self.check_tracefs(
            "--breakdown",
            "tracefs instances",
            "CONFIG_FTRACE_SYSCALLS",
            p,
        ) {
            return;
        }
        for (ev, config) in [
            (
                "sched/sched_switch",
                "CONFIG_FTRACE (the scheduler's tracepoints)",
            ),
            ("raw_syscalls/sys_enter", "CONFIG_FTRACE_SYSCALLS"),
        ] {
            if !r.exists(format!("{t}/events/{ev}")) {
                p.push(problem(
                    format!("--breakdown: no trace event {ev} in {t}/events"),
                    format!("boot a kernel with {config}, or drop --breakdown"),
                ));
            }
        }
        if !r.exists(format!("{t}/instances")) {
            p.push(problem(
                format!("--breakdown: no {t}/instances (tracefs instances)"),
                "boot a kernel whose tracefs has instances (Linux 3.x on), or drop --breakdown",
            ));
        }
    }

    /// What every tracefs option (`FLAG`) needs first: root (for `what`,
    /// which are root's) and a tracefs (a kernel with CONFIG_FTRACE and
    /// `config`). Whether the tracefs is mounted, so that its events can
    /// be checked (an unmounted one is mounted later by the tool, then
    /// checked again).
    fn check_tracefs(&self, flag: &str, what: &str, config: &str, p: &mut Vec<Problem>) -> bool {
        if self.euid() != Some(0) {
            p.push(problem(
                format!("{flag}: not running as root"),
                format!("run it with sudo ({what} are root's), or drop {flag}"),
            ));
        }
        if !self.root.exists(TRACEFS) {
            p.push(problem(
                format!("{flag}: this kernel has no tracefs ({TRACEFS})"),
                format!("boot a kernel with CONFIG_FTRACE and {config} (Debian's, Ubuntu's and Fedora's have both), or drop {flag}"),
            ));
            return false;
        }
        self.root.exists(format!("{TRACEFS}/events"))
    }

    /// Effective uid from /proc/self/status.
    fn euid(&self) -> Option<u32> {
        let s = self.root.read_trim("/proc/self/status").ok()?;
        let line = s.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(2)?.parse().ok()
    }

    fn has_ipc_lock(&self) -> bool {
        let Ok(s) = self.root.read_trim("/proc/self/status") else {
            return false;
        };
        s.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
    }

    fn check_memlock(&self, p: &mut Vec<Problem>) {
        if self.has_ipc_lock() {
            return;
        }
        let limits = self.root.read_trim("/proc/self/limits").unwrap_or_default();
        let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
            return;
        };
        let soft = line["Max locked memory".len()..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        if soft == "unlimited" {
            return;
        }
        let need = self.guest_memory + MEMLOCK_MARGIN;
        if let Ok(have) = soft.parse::<u64>() {
            if have < need {
                p.push(problem(
                    format!(
                        "memlock limit {} MiB is below the {} MiB VFIO pins for the guest's RAM",
                        have >> 20,
                        need >> 20
                    ),
                    "raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf) or run as root",
                ));
            }
        }
    }

    fn check_programs(&self, out: &mut Outcome) {
        let path = self.path_env.as_deref();
        let pm = PkgManager::detect(&self.root);
        if let Some(q) = &self.qemu {
            out.tools.qemu = find_program(q, path);
            if out.tools.qemu.is_none() {
                out.problems.push(problem(
                    format!("stock QEMU {}: not found", q.display()),
                    format!("{} (or pass --qemu PATH)", pm.install(Pkg::Qemu)),
                ));
            }
        }
        if let Some(v) = &self.vmm {
            out.tools.vmm = find_program(v, path);
            if out.tools.vmm.is_none() {
                out.problems.push(problem(
                    format!("our VMM {}: not found", v.display()),
                    "cargo build --release -p vmm and pass --vmm target/release/vmm",
                ));
            }
        }
        if self.build_image {
            out.tools.fio = find_program(Path::new("fio"), path);
            match &out.tools.fio {
                None => out.problems.push(problem(
                    "fio: not found (the guest image is built from the host's fio)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Fio)),
                )),
                // The guest runs fio's libaio engine; a fio with run-time
                // loaded engines may lack it (Fedora packages each apart).
                Some(fio) => {
                    if let Some(why) = libaio_missing(fio) {
                        out.problems.push(problem(
                            format!(
                                "{}: no libaio engine ({why}); every guest's fio would fail",
                                fio.display()
                            ),
                            format!("{} (or pass --initramfs PATH)", pm.install(Pkg::FioLibaio)),
                        ));
                    }
                }
            }
            out.tools.busybox = find_program(Path::new("busybox"), path);
            if out.tools.busybox.is_none() {
                out.problems.push(problem(
                    "busybox: not found (the guest image is built from the host's busybox)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Busybox)),
                ));
            }
            if find_program(Path::new("ldd"), path).is_none() {
                out.problems.push(problem(
                    "ldd: not found (it lists fio's libraries for the guest image)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Ldd)),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const BDF: &str = "0000:01:00.0";

    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        /// A host where every check passes.
        fn healthy() -> Fake {
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
        fn p(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }
        fn mkdir(&self, rel: &str) {
            std::fs::create_dir_all(self.p(rel)).unwrap();
        }
        fn file(&self, rel: &str, body: &str) {
            let p = self.p(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        fn exe(&self, rel: &str) {
            self.file(rel, "#!/bin/sh\n");
            std::fs::set_permissions(self.p(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fn rm(&self, rel: &str) {
            let p = self.p(rel);
            if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
        fn checks(&self) -> Checks {
            Checks {
                root: Root::new(self.dir.path()),
                bdf: BDF.into(),
                consent: Some(BDF.into()),
                no_bind: false,
                qemu: Some("qemu-system-x86_64".into()),
                vmm: Some(self.p("bin/vmm")),
                build_image: true,
                kernels: vec![
                    ("--kernel-stock", self.p("k/stock")),
                    ("--kernel-patched", self.p("k/patched")),
                ],
                guest_memory: 1 << 30,
                path_env: Some(self.p("bin").into_os_string()),
                kvm_exits: false,
                breakdown: false,
                block_sizes: vec![("4k".into(), 4096), ("128k".into(), 128 << 10)],
            }
        }
        /// The one problem the checks find; fails unless there is exactly one.
        fn only_problem(&self, c: &Checks) -> String {
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
        let good: String = GUEST_KERNEL_OPTIONS
            .iter()
            .map(|o| format!("{o}=y\n"))
            .collect();
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
                && line.contains("loads no modules"),
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
        let good: String = GUEST_KERNEL_OPTIONS
            .iter()
            .map(|o| format!("{o}=y\n"))
            .collect();
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
                && line.contains(
                    "echo 0000:01:00.1 > /sys/bus/pci/devices/0000:01:00.1/driver/unbind"
                )
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
}
