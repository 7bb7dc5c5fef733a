//! The drive's IOMMU group: VFIO takes it only when every other member
//! is unbound or on a driver that leaves DMA alone. The hint names the
//! command that unbinds a member only when the host can spare it: never
//! a NIC carrying the default route, a route or an address (maybe this
//! SSH session), a controller whose disks are mounted or in use, or a
//! display controller.

use std::path::Path;

use super::device::namespaces_of;
use super::in_use::{block_devs_below, HostUse};
use super::{problem, Checks, DeviceFacts, Problem};
use crate::setup::blockdev::block_devs;
use crate::setup::sysfs::{pci_dev, Root};

/// Why the network interface `iface` carries traffic the host needs, if
/// it does: the default route, another route, an IPv6 address, or being up.
pub fn iface_in_use(r: &Root, iface: &str) -> Option<String> {
    let v4 = r.read_trim("/proc/net/route").unwrap_or_default();
    let v4_routes: Vec<(&str, &str)> = v4
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?))
        })
        .filter(|(i, _)| *i == iface)
        .collect();
    let v6 = r.read_trim("/proc/net/ipv6_route").unwrap_or_default();
    let v6_default = v6.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] == iface
    });
    if v4_routes.iter().any(|(_, dest)| *dest == "00000000") || v6_default {
        return Some(format!("its interface {iface} carries the default route"));
    }
    if !v4_routes.is_empty() {
        return Some(format!(
            "its interface {iface} carries routes (an IPv4 address)"
        ));
    }
    let v6_addr = r
        .read_trim("/proc/net/if_inet6")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some(iface));
    if v6_addr {
        return Some(format!("its interface {iface} has an IPv6 address"));
    }
    let state = r
        .read_trim(format!("/sys/class/net/{iface}/operstate"))
        .unwrap_or_default();
    (state == "up").then(|| format!("its interface {iface} is up"))
}

impl Checks {
    /// Why the group member `bdf` must stay on its driver, if it must.
    fn keep_bound(&self, u: &HostUse, bdf: &str) -> Option<String> {
        let r = &self.root;
        let dev = pci_dev(bdf);
        for iface in r.list(dev.join("net")) {
            if let Some(why) = iface_in_use(r, &iface) {
                return Some(why);
            }
        }
        if r.read_trim(dev.join("class"))
            .unwrap_or_default()
            .starts_with("0x03")
        {
            return Some("it is a display controller (the host's console?)".into());
        }
        let mut disks = namespaces_of(r, bdf);
        disks.extend(
            block_devs_below(r, bdf)
                .into_iter()
                .filter(|b| r.exists(Path::new("/sys/block").join(b))),
        );
        disks.sort();
        disks.dedup();
        let devs = block_devs(r, &disks);
        self.in_use(u, &devs)
            .first()
            .map(|q| format!("it carries block devices in use ({})", q.what))
    }

    /// The drive's IOMMU group: there, and VFIO can take it.
    pub(super) fn check_group(&self, facts: &DeviceFacts, u: &HostUse, p: &mut Vec<Problem>) {
        let r = &self.root;
        let Some(g) = &facts.iommu_group else {
            p.push(problem(
                format!("{} has no IOMMU group", self.bdf),
                "enable the IOMMU (firmware: VT-d or AMD-Vi; Intel: intel_iommu=on on the kernel command line; AMD: on by default, no amd_iommu=off) and make sure it covers this slot",
            ));
            return;
        };
        // VFIO takes a group when every other device in it is unbound or
        // on a driver that leaves DMA to VFIO (vfio-pci, pci-stub,
        // pcieport for bridges); bridges have always been let through.
        let others: Vec<(String, String)> = r
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
                (!ok).then(|| (o, driver.unwrap_or_default()))
            })
            .collect();
        if !others.is_empty() {
            let (mut spare, mut keep) = (Vec::new(), Vec::new());
            for (o, _) in &others {
                match self.keep_bound(u, o) {
                    Some(why) => keep.push(format!("not {o}: {why}")),
                    None => {
                        spare.push(format!("echo {o} > /sys/bus/pci/devices/{o}/driver/unbind"))
                    }
                }
            }
            let unbind = if spare.is_empty() {
                String::new()
            } else {
                format!(
                    "unbind {} ({}) if the host can do without {}, ",
                    if spare.len() == 1 { "it" } else { "them" },
                    spare.join("; "),
                    if spare.len() == 1 { "it" } else { "them" },
                )
            };
            let keep = if keep.is_empty() {
                String::new()
            } else {
                format!(" (the tool will not suggest unbinding {})", keep.join("; "))
            };
            p.push(problem(
                format!(
                    "IOMMU group {g} of {} also holds {}, bound to host drivers: VFIO takes a group only when its other devices are unbound or on vfio-pci or pci-stub",
                    self.bdf,
                    others
                        .iter()
                        .map(|(o, d)| format!("{o} (on {d})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                format!(
                    "{unbind}or move the drive to a slot with its own group (or enable ACS in the firmware){keep}"
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
    }
}
