//! The drive of `--device`: what it is (an NVMe controller, its driver,
//! IOMMU group, BAR0, serial, namespaces) and whether the run can take it
//! (the consent, the group, the binding, mounts and holders, block sizes).
use super::{problem, Checks, DeviceFacts, Outcome, Problem, NVME_CLASS};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::in_use::HostUse;
use super::programs::find_program;
use crate::setup::blockdev::{block_devs, probe};
use crate::setup::sysfs::{pci_dev, Root};

/// BAR0 from a sysfs `resource` file (first line: `start end flags`, hex).
pub fn bar0_of(resource: &str) -> Option<String> {
    let mut f = resource.lines().next()?.split_whitespace();
    let (start, end) = (f.next()?, f.next()?);
    let n = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok();
    (n(start)? != 0 || n(end)? != 0).then(|| format!("{start}-{end}"))
}

/// Whether a drive bound to `driver` shows its namespaces to the host
/// (every driver but none, vfio-pci and pci-stub: nvme, or one we do not know).
pub(super) fn drives_namespaces(driver: Option<&str>) -> bool {
    !matches!(driver, None | Some("vfio-pci") | Some("pci-stub"))
}

/// `name` as `(subsystem or controller instance, controller, nsid)` if it is
/// a namespace's block device: `nvmeXnY` (no controller) or a native
/// multipath path device `nvmeXcYnZ`. Partitions (`nvme0n1p1`) are not.
pub(super) fn parse_ns_name(name: &str) -> Option<(u32, Option<u32>, u32)> {
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

/// Whether `name` is an NVMe controller's (`nvme3`).
fn is_ctrl(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The namespaces' block devices in a controller's sysfs directory:
/// `nvmeNnY`, and for the hidden path devices `nvmeXcNnY` (native
/// multipath) the subsystem's `nvmeXnY` they stand for.
fn namespaces_in(r: &Root, ctrl_dir: &Path, found: &mut BTreeSet<String>) {
    for n in r.list(ctrl_dir) {
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

/// The namespaces the drive's own controllers show (see [`namespaces_of`]).
pub fn own_namespaces(r: &Root, bdf: &str) -> Vec<String> {
    let dev = pci_dev(bdf).join("nvme");
    let mut found = BTreeSet::new();
    for ctrl in r.list(&dev) {
        namespaces_in(r, &dev.join(ctrl), &mut found);
    }
    found.into_iter().collect()
}

/// The block devices of the namespaces of the NVMe drive `bdf`, found
/// through each of its controllers (`/sys/bus/pci/devices/BDF/nvme/nvmeN/`:
/// `nvmeNnY` without native multipath, the hidden path devices `nvmeXcNnY`
/// with it, which stand for the subsystem's `nvmeXnY`) and through the
/// controller's NVMe subsystem (`/sys/class/nvme-subsystem/nvme-subsysX/`,
/// which links its controllers and holds the multipath block devices
/// `nvmeXnY`, shared by every controller of a dual-port drive). Without
/// native multipath (`nvme_core.multipath=N`) each controller of the
/// subsystem (a dual-port drive's other port) has block devices of its
/// own for the same namespaces (`/sys/class/nvme/nvmeY/nvmeYnZ`): they
/// are listed too. Sorted, without duplicates.
pub fn namespaces_of(r: &Root, bdf: &str) -> Vec<String> {
    let ctrls = r.list(pci_dev(bdf).join("nvme"));
    let mut found: BTreeSet<String> = own_namespaces(r, bdf).into_iter().collect();
    for subsys in r.list("/sys/class/nvme-subsystem") {
        let dir = PathBuf::from("/sys/class/nvme-subsystem").join(&subsys);
        let entries = r.list(&dir);
        if !entries.iter().any(|e| ctrls.contains(e)) {
            continue;
        }
        for e in entries {
            if matches!(parse_ns_name(&e), Some((_, None, _))) {
                found.insert(e);
            } else if is_ctrl(&e) && !ctrls.contains(&e) {
                namespaces_in(r, &Path::new("/sys/class/nvme").join(&e), &mut found);
            }
        }
    }
    found.into_iter().collect()
}

/// The namespace the guest measures: its `/dev/nvme0n1` is the
/// controller's active namespace with the lowest NSID, so the host's
/// namespace with the lowest `nsid` (the drive's own controller's first
/// when a dual-port drive shows it twice; by name when sysfs has no nsid).
pub fn measured_namespace(r: &Root, bdf: &str, namespaces: &[String]) -> Option<String> {
    let own = own_namespaces(r, bdf);
    namespaces
        .iter()
        .min_by_key(|ns| {
            let nsid = r
                .read_trim(format!("/sys/block/{ns}/nsid"))
                .ok()
                .and_then(|n| n.parse::<u32>().ok())
                .or_else(|| parse_ns_name(ns).map(|(_, _, z)| z))
                .unwrap_or(u32::MAX);
            (
                nsid,
                !own.contains(ns),
                parse_ns_name(ns).map(|(x, _, _)| x),
            )
        })
        .cloned()
}

/// The Intel VMD controller the PCI function `bdf` sits behind, if any:
/// its sysfs path crosses a host bridge (`pciDDDD:BB`) below another PCI
/// function, the VMD (e.g. `.../0000:00:0e.0/pci10000:e0/...`).
pub fn behind_vmd(r: &Root, bdf: &str) -> Option<String> {
    let target = std::fs::read_link(r.path(pci_dev(bdf))).ok()?;
    let comps: Vec<String> = target
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    comps.windows(2).find_map(|w| {
        let bridge = w[1].strip_prefix("pci")?;
        bridge.contains(':').then_some(())?;
        crate::cli::normalize_bdf(&w[0]).map(|_| w[0].clone())
    })
}

impl Checks {
    /// The drive of `--device`: its facts, then whether it can be taken
    /// and erased.
    pub(super) fn check_device(&self, out: &mut Outcome) {
        if !self.device_is_nvme(&mut out.problems) {
            return;
        }
        self.read_facts(&mut out.facts);
        let facts = out.facts.clone();
        let host_use = HostUse::read(&self.root);
        let p = &mut out.problems;
        self.check_consent(&facts, p);
        self.check_group(&facts, &host_use, p);
        self.check_binding(&facts, p);
        p.extend(self.in_use(&host_use, &facts.contents));
        self.check_block_sizes(&facts, p);
    }

    /// Whether `--device` is there and is an NVMe drive.
    fn device_is_nvme(&self, p: &mut Vec<Problem>) -> bool {
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
            p.push(problem(
                format!("--device {}: no such PCI device", self.bdf),
                hint,
            ));
            return false;
        }
        let class = r.read_trim(dev.join("class")).unwrap_or_default();
        if class != NVME_CLASS {
            p.push(problem(
                format!(
                    "--device {}: PCI class {class}, not an NVMe drive ({NVME_CLASS})",
                    self.bdf
                ),
                "pick the NVMe drive's address (lspci -D -d ::0108)",
            ));
            return false;
        }
        if let Some(vmd) = behind_vmd(r, &self.bdf) {
            p.push(problem(
                format!(
                    "--device {}: the drive sits behind the Intel VMD controller {vmd} (Volume Management Device), which owns its DMA and interrupts: it has no PCI function and IOMMU group of its own to pass through",
                    self.bdf
                ),
                "Intel VMD / RST / 'VMD controller' in the BIOS: turn it off (set the SATA/NVMe mode to AHCI) so the drive gets its own PCI function and IOMMU group (a boot drive behind it needs its initramfs to have the nvme driver first)",
            ));
            return false;
        }
        true
    }

    /// The drive's driver, group, BAR0, serial, model and namespaces.
    fn read_facts(&self, f: &mut DeviceFacts) {
        let r = &self.root;
        let dev = pci_dev(&self.bdf);
        f.driver = r.link_name(dev.join("driver"));
        f.iommu_group = r.link_name(dev.join("iommu_group"));
        f.iova_bits = super::iova_width::iova_bits(r, &self.bdf, f.iommu_group.as_deref());
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
        // The guest's /dev/nvme0n1: its size and block size.
        f.measured_namespace = measured_namespace(r, &self.bdf, &f.namespaces);
        let read = |file: &str| {
            let ns = f.measured_namespace.as_ref()?;
            r.read_trim(format!("/sys/block/{ns}/{file}"))
                .ok()?
                .parse::<u64>()
                .ok()
        };
        f.logical_block_size = read("queue/logical_block_size");
        f.namespace_bytes = read("size").map(|sectors| sectors * 512);
        let blkid = find_program(Path::new("blkid"), self.path_env.as_deref());
        f.contents = block_devs(r, &f.namespaces);
        for d in &mut f.contents {
            probe(r, d, blkid.as_deref());
        }
    }

    /// `--destroy-data` names the drive, by address or serial.
    fn check_consent(&self, facts: &DeviceFacts, p: &mut Vec<Problem>) {
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
    }

    /// `--no-bind` on a drive not on vfio-pci, and a bound drive whose namespaces were not found.
    fn check_binding(&self, facts: &DeviceFacts, p: &mut Vec<Problem>) {
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
    }

    /// `--bs` against the drive's logical block size.
    fn check_block_sizes(&self, facts: &DeviceFacts, p: &mut Vec<Problem>) {
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
}
