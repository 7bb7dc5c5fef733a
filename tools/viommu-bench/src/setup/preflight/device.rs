//! The drive of `--device`: what it is (an NVMe controller, its driver,
//! IOMMU group, BAR0, serial, namespaces) and whether the run can take it
//! (the consent, the group, the binding, mounts and holders, block sizes).
use super::{problem, Checks, DeviceFacts, Outcome, Problem, NVME_CLASS};
use std::path::PathBuf;

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

impl Checks {
    /// The drive of `--device`: its facts, then whether it can be taken
    /// and erased.
    pub(super) fn check_device(&self, out: &mut Outcome) {
        if !self.device_is_nvme(&mut out.problems) {
            return;
        }
        self.read_facts(&mut out.facts);
        let facts = out.facts.clone();
        let p = &mut out.problems;
        self.check_consent(&facts, p);
        self.check_group(&facts, p);
        self.check_binding(&facts, p);
        self.check_namespaces(&facts.namespaces, p);
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
        true
    }

    /// The drive's driver, group, BAR0, serial, model and namespaces.
    fn read_facts(&self, f: &mut DeviceFacts) {
        let r = &self.root;
        let dev = pci_dev(&self.bdf);
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

    /// The drive's IOMMU group: there, and VFIO can take it.
    fn check_group(&self, facts: &DeviceFacts, p: &mut Vec<Problem>) {
        let r = &self.root;
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

    /// No namespace of the drive is mounted, swapped on or held.
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
}
