//! Host checks, all before anything is changed. Each failing prerequisite
//! is one [`Problem`]: one line saying what is wrong and how to fix it.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::setup::host::{Pkg, PkgManager};
use crate::setup::sysfs::{pci_dev, Root};

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
    let out = crate::setup::exec::output(
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
            let (text, source) = match crate::setup::ikconfig::read_embedded_config(k) {
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
mod tests;
