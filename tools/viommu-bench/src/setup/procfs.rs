//! What the processes of the host hold, read from `/proc` under a
//! [`Root`]: every mount namespace's mounts (`/proc/PID/mountinfo`, one
//! process per namespace by its `/proc/PID/ns/mnt` inode) and every open
//! file descriptor's target (`/proc/PID/fd/N`).

use std::collections::BTreeMap;

use crate::setup::sysfs::Root;

/// A process: its pid and `comm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// `/proc/PID/comm` (`?` when unreadable).
    pub comm: String,
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.comm)
    }
}

/// One line of a mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// `MAJOR:MINOR` of the mounted device (`0:N` for btrfs and the like).
    pub dev: String,
    /// Where it is mounted (escapes decoded).
    pub at: String,
    /// The filesystem type.
    pub fstype: String,
    /// The mount source (`/dev/nvme0n1p1`, ...).
    pub source: String,
}

/// The mounts of a `/proc/PID/mountinfo` text.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split_whitespace().collect();
            let mut post = post.split_whitespace();
            Some(Mount {
                dev: pre.get(2)?.to_string(),
                at: unescape(pre.get(4)?),
                fstype: post.next()?.to_string(),
                source: unescape(post.next().unwrap_or("")),
            })
        })
        .collect()
}

/// A mountinfo field with its octal escapes (`\040`) decoded.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |a, c| a.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The numeric entries of `/proc`, ascending.
pub fn pids(r: &Root) -> Vec<u32> {
    let mut v: Vec<u32> = r
        .list("/proc")
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The process `pid`.
pub fn proc_of(r: &Root, pid: u32) -> Proc {
    Proc {
        pid,
        comm: r
            .read_trim(format!("/proc/{pid}/comm"))
            .unwrap_or_else(|_| "?".into()),
    }
}

/// Mount namespaces (`mnt:[INODE]`) with one process of each and its mounts.
pub type Namespaces = BTreeMap<String, (Proc, Vec<Mount>)>;

/// The mount namespaces of the host: one process of each (the lowest
/// pid), keyed by the namespace (`mnt:[INODE]`, the link's target), and
/// their mounts. The own namespace is `/proc/self`'s key.
pub fn mount_namespaces(r: &Root) -> (Option<String>, Namespaces) {
    let own = std::fs::read_link(r.path("/proc/self/ns/mnt"))
        .ok()
        .map(|l| l.to_string_lossy().into_owned());
    let mut seen = BTreeMap::new();
    for pid in pids(r) {
        let Ok(ns) = std::fs::read_link(r.path(format!("/proc/{pid}/ns/mnt"))) else {
            continue;
        };
        let ns = ns.to_string_lossy().into_owned();
        if seen.contains_key(&ns) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(r.path(format!("/proc/{pid}/mountinfo"))) else {
            continue;
        };
        seen.insert(ns, (proc_of(r, pid), parse_mountinfo(&text)));
    }
    (own, seen)
}

/// Every process holding a file under `/dev` open, per target (e.g.
/// `/dev/nvme0n1p1`), by reading each `/proc/PID/fd/N`.
pub fn dev_fds(r: &Root) -> BTreeMap<String, Vec<Proc>> {
    let mut found: BTreeMap<String, Vec<Proc>> = BTreeMap::new();
    for pid in pids(r) {
        for fd in r.list(format!("/proc/{pid}/fd")) {
            let Ok(t) = std::fs::read_link(r.path(format!("/proc/{pid}/fd/{fd}"))) else {
                continue;
            };
            let t = t.to_string_lossy().into_owned();
            if !t.starts_with("/dev/") {
                continue;
            }
            let list = found.entry(t).or_default();
            if !list.iter().any(|p| p.pid == pid) {
                list.push(proc_of(r, pid));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
