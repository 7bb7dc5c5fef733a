//! Whether anything on the host uses a block device the run would take:
//! mounted (in any mount namespace, matched by `MAJOR:MINOR` and by
//! name), swap, held (LVM/md/dm), a member of a mounted btrfs or of an
//! imported ZFS pool, open in a process (a VM's disk, an NVMe-oF/LIO
//! target, a raw OSD), and the kernel's own answer: an `O_EXCL` open
//! that fails with `EBUSY`. Each finding is one [`Problem`] naming the
//! holder and the fix.

use std::collections::BTreeMap;
use std::path::Path;

use super::{problem, Checks, Problem};
use crate::setup::blockdev::BlockDev;
use crate::setup::procfs::{self, Mount, Proc};
use crate::setup::sysfs::Root;

/// What the host's processes and filesystems hold, read once.
#[derive(Debug, Default)]
pub(super) struct HostUse {
    /// `/proc/mounts` (this process's namespace).
    mounts: String,
    /// `/proc/swaps`.
    swaps: String,
    /// This process's mount namespace (`mnt:[INODE]`).
    own_ns: Option<String>,
    /// Every mount namespace: one process of it, and its mounts.
    namespaces: procfs::Namespaces,
    /// Processes holding `/dev` nodes open, per node.
    fds: BTreeMap<String, Vec<Proc>>,
    /// Mounted btrfs filesystems: UUID, member device names.
    btrfs: Vec<(String, Vec<String>)>,
    /// Imported ZFS pools (`/proc/spl/kstat/zfs/POOL/`).
    zfs_pools: Vec<String>,
}

impl HostUse {
    /// Read it all under `r`.
    pub(super) fn read(r: &Root) -> HostUse {
        let (own_ns, namespaces) = procfs::mount_namespaces(r);
        let btrfs = r
            .list("/sys/fs/btrfs")
            .into_iter()
            .filter(|u| r.exists(format!("/sys/fs/btrfs/{u}/devices")))
            .map(|u| {
                let members = r.list(format!("/sys/fs/btrfs/{u}/devices"));
                (u, members)
            })
            .collect();
        let zfs_pools = r
            .list("/proc/spl/kstat/zfs")
            .into_iter()
            .filter(|p| r.path(format!("/proc/spl/kstat/zfs/{p}")).is_dir())
            .collect();
        HostUse {
            mounts: r.read_trim("/proc/mounts").unwrap_or_default(),
            swaps: r.read_trim("/proc/swaps").unwrap_or_default(),
            own_ns,
            namespaces,
            fds: procfs::dev_fds(r),
            btrfs,
            zfs_pools,
        }
    }

    /// Where a btrfs whose members are `members` is mounted (any namespace).
    fn btrfs_mounted_at(&self, members: &[String]) -> Vec<String> {
        let mut at: Vec<String> = self
            .namespaces
            .values()
            .flat_map(|(_, m)| m.iter())
            .chain(own_mounts(&self.mounts).iter())
            .filter(|m| m.fstype == "btrfs")
            .filter(|m| {
                let src = m.source.rsplit('/').next().unwrap_or("");
                members.iter().any(|x| x == src)
            })
            .map(|m| m.at.clone())
            .collect();
        at.sort();
        at.dedup();
        at
    }
}

/// `/proc/mounts` as mounts (no `MAJOR:MINOR` there).
fn own_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (source, at, fstype) = (f.next()?, f.next()?, f.next()?);
            Some(Mount {
                dev: String::new(),
                at: at.replace("\\040", " "),
                fstype: fstype.into(),
                source: source.into(),
            })
        })
        .collect()
}

impl Checks {
    /// One problem per use of any of `devs` (namespaces and their
    /// partitions); `namespaces` also name the NVMe generic character
    /// devices (`/dev/ngXnY`) a process may hold.
    pub(super) fn in_use(&self, u: &HostUse, devs: &[BlockDev]) -> Vec<Problem> {
        let mut p = Vec::new();
        let mut busy_unexplained = Vec::new();
        for d in devs {
            let before = p.len();
            self.mounts_of(u, d, &mut p);
            self.held(u, d, &mut p);
            self.members(u, d, &mut p);
            open_by(u, d, &mut p);
            if p.len() == before {
                busy_unexplained.push(d);
            }
        }
        // The kernel's answer covers what the rest cannot see; a namespace
        // whose partition is in use is busy for that reason, so the
        // partitions are asked first.
        busy_unexplained.sort_by_key(|d| d.parent.is_none());
        for d in busy_unexplained {
            let explained = devs.iter().any(|x| {
                x.parent.as_deref() == Some(d.name.as_str())
                    && p.iter().any(|q| names_dev(q, &x.name))
            });
            if explained {
                continue;
            }
            if let Some(q) = self.excl_open(u, d) {
                p.push(q);
            }
        }
        p
    }

    /// Mounted: here (`/proc/mounts`, by name), or in another mount
    /// namespace (by `MAJOR:MINOR` or name).
    fn mounts_of(&self, u: &HostUse, d: &BlockDev, p: &mut Vec<Problem>) {
        let node = format!("/dev/{}", d.name);
        let is_it = |m: &Mount| m.source == node || (d.dev.as_deref() == Some(m.dev.as_str()));
        let mut here: Vec<String> = own_mounts(&u.mounts)
            .iter()
            .filter(|m| m.source == node)
            .map(|m| m.at.clone())
            .collect();
        if let Some((_, mounts)) = u.own_ns.as_ref().and_then(|o| u.namespaces.get(o)) {
            here.extend(mounts.iter().filter(|m| is_it(m)).map(|m| m.at.clone()));
        }
        here.dedup();
        let mut seen = std::collections::BTreeSet::new();
        for at in here {
            if seen.insert(at.clone()) {
                p.push(problem(
                    format!("{node} is mounted on {at}"),
                    format!("umount {at} (and keep it out of /etc/fstab while benchmarking)"),
                ));
            }
        }
        if !seen.is_empty() {
            return;
        }
        let elsewhere: Vec<String> = u
            .namespaces
            .iter()
            .filter(|(ns, _)| Some(*ns) != u.own_ns.as_ref())
            .flat_map(|(_, (proc, mounts))| {
                mounts
                    .iter()
                    .filter(|m| is_it(m))
                    .map(move |m| format!("{} in the mount namespace of {proc}", m.at))
            })
            .collect();
        if let Some(first) = elsewhere.first() {
            let pid = first
                .rsplit("pid ")
                .next()
                .and_then(|s| s.split(' ').next())
                .unwrap_or("PID");
            p.push(problem(
                format!(
                    "{node} ({}) is mounted in another mount namespace (a container, a service, a k8s local volume): on {}",
                    d.dev.as_deref().unwrap_or("?"),
                    elsewhere.join("; ")
                ),
                format!("stop what runs there, or unmount it there (nsenter -t {pid} -m umount PATH); or pick another drive"),
            ));
        }
    }

    /// Swap, and holders (LVM, md, dm-crypt).
    fn held(&self, u: &HostUse, d: &BlockDev, p: &mut Vec<Problem>) {
        let node = format!("/dev/{}", d.name);
        if u.swaps
            .lines()
            .any(|l| l.split_whitespace().next() == Some(node.as_str()))
        {
            p.push(problem(
                format!("{node} is in use as swap"),
                format!("swapoff {node}"),
            ));
        }
        let sys = match &d.parent {
            Some(ns) => format!("/sys/block/{ns}/{}", d.name),
            None => format!("/sys/block/{}", d.name),
        };
        let holders = self.root.list(format!("{sys}/holders"));
        if !holders.is_empty() {
            p.push(problem(
                format!("{node} is held by {}", holders.join(", ")),
                "stop what sits on it (LVM: vgchange -an; md: mdadm --stop; dm-crypt: cryptsetup close)",
            ));
        }
    }

    /// A member of a mounted btrfs (whose mount names another member) or
    /// of an imported ZFS pool.
    fn members(&self, u: &HostUse, d: &BlockDev, p: &mut Vec<Problem>) {
        for (uuid, members) in &u.btrfs {
            if members.contains(&d.name) {
                let at = u.btrfs_mounted_at(members);
                p.push(problem(
                    format!(
                        "{} is a member of btrfs filesystem {uuid} mounted at {} (btrfs device on /sys/fs/btrfs/{uuid}/devices/{})",
                        d.name,
                        if at.is_empty() { "an unknown place".to_string() } else { at.join(", ") },
                        d.name
                    ),
                    "pick another drive (or remove it from that filesystem first: btrfs device remove)",
                ));
            }
        }
        if d.fstype.as_deref() == Some("zfs_member") {
            if let Some(pool) = d.label.as_ref().filter(|l| u.zfs_pools.contains(l)) {
                p.push(problem(
                    format!(
                        "{} is a vdev of the imported ZFS pool {pool} (zfs_member label; /proc/spl/kstat/zfs/{pool})",
                        d.name
                    ),
                    format!("pick another drive (zpool status -P {pool} lists its devices)"),
                ));
            }
        }
    }

    /// `open(O_RDONLY|O_EXCL)`: `EBUSY` is a holder the other checks did
    /// not name.
    fn excl_open(&self, u: &HostUse, d: &BlockDev) -> Option<Problem> {
        let node = format!("/dev/{}", d.name);
        let e = self.opener.open_excl(&self.root.path(&node)).err()?;
        if e.raw_os_error() == Some(libc::EBUSY) {
            let zfs = if d.fstype.as_deref() == Some("zfs_member") || !u.zfs_pools.is_empty() {
                format!(
                    "; ZFS pools imported: {} (zpool status -P)",
                    if u.zfs_pools.is_empty() {
                        "none".into()
                    } else {
                        u.zfs_pools.join(", ")
                    }
                )
            } else {
                String::new()
            };
            return Some(problem(
                format!("{node} is in use: the kernel refuses an exclusive open (EBUSY): something holds it (a mount, a pool, md/dm, a filesystem in another namespace){zfs}"),
                format!("find it (lsblk {node}; fuser -vm {node}; grep {} /proc/*/mountinfo), stop it, or pick another drive", d.dev.as_deref().unwrap_or(&d.name)),
            ));
        }
        if e.raw_os_error() == Some(libc::ENOENT) || self.euid() == Some(0) {
            return Some(problem(
                format!("cannot check whether {node} is in use: open(O_EXCL): {e}"),
                "check it yourself (lsblk; fuser -vm), or run as root on a host with devtmpfs",
            ));
        }
        // Not root: already refused for that, with its fix.
        None
    }
}

/// Whether problem `q` is about the device `name`.
fn names_dev(q: &Problem, name: &str) -> bool {
    q.what.starts_with(&format!("/dev/{name} ")) || q.what.starts_with(&format!("{name} "))
}

/// Open in a process: its block device node, or a namespace's generic
/// character device (`/dev/ngXnY`).
fn open_by(u: &HostUse, d: &BlockDev, p: &mut Vec<Problem>) {
    let mut nodes = vec![format!("/dev/{}", d.name)];
    if d.parent.is_none() {
        if let Some(rest) = d.name.strip_prefix("nvme") {
            nodes.push(format!("/dev/ng{rest}"));
        }
    }
    for node in nodes {
        if let Some(procs) = u.fds.get(&node) {
            let who: Vec<String> = procs.iter().map(|x| x.to_string()).collect();
            p.push(problem(
                format!(
                    "{node} is open in {} (a VM's disk, an NVMe-oF or iSCSI target, a raw OSD?)",
                    who.join(", ")
                ),
                format!(
                    "stop {} (or make it close {node}), or pick another drive",
                    if procs.len() == 1 { "it" } else { "them" }
                ),
            ));
        }
    }
}

/// The devices under `/sys/class/block` whose sysfs path goes through the
/// PCI function `bdf` (a SATA or USB controller's disks, an NVMe
/// controller's namespaces), with their partitions.
pub(super) fn block_devs_below(r: &Root, bdf: &str) -> Vec<String> {
    r.list("/sys/class/block")
        .into_iter()
        .filter(|b| {
            std::fs::read_link(r.path(Path::new("/sys/class/block").join(b)))
                .map(|t| t.to_string_lossy().contains(&format!("/{bdf}/")))
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests;
