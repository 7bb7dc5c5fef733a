//! The drive's block devices as the host sees them: whether one can be
//! opened exclusively (the kernel's own answer to "is it in use": mounted,
//! swap, held by md/dm/ZFS/btrfs), and what is on each (size, filesystem
//! type and label), as `wipefs -n` would show before the data goes.

use std::fmt;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::setup::sysfs::Root;

/// Opens a block device exclusively, to ask the kernel whether anything
/// holds it. Injectable so tests can play a busy device.
pub trait ExclusiveOpen: fmt::Debug + Send + Sync {
    /// `open(path, O_RDONLY|O_EXCL)`, closed at once; `EBUSY`: in use.
    fn open_excl(&self, path: &Path) -> io::Result<()>;
}

/// The real one: the system call.
#[derive(Debug, Clone, Copy, Default)]
pub struct SysOpen;

impl ExclusiveOpen for SysOpen {
    fn open_excl(&self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(path)
            .map(drop)
    }
}

/// One block device of the drive: a namespace or a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDev {
    /// Its name, e.g. `nvme0n1p2`.
    pub name: String,
    /// `MAJOR:MINOR` (sysfs `dev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Its size in bytes (sysfs `size` x 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The signature found on it (`ext4`, `zfs_member`, ...); `None`: none
    /// found; `Some("unknown")`: it could not be probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fstype: Option<String>,
    /// The filesystem's (or pool's) label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The namespace it is a partition of (`None`: it is a namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// The block devices of `namespaces`: each, then its partitions, with
/// their sysfs facts (probed later, see [`probe`]).
pub fn block_devs(r: &Root, namespaces: &[String]) -> Vec<BlockDev> {
    let mut v = Vec::new();
    for ns in namespaces {
        let sys = format!("/sys/block/{ns}");
        v.push(sys_facts(r, ns, &sys, None));
        for part in r.list(&sys) {
            if part.starts_with(ns.as_str()) {
                v.push(sys_facts(r, &part, &format!("{sys}/{part}"), Some(ns)));
            }
        }
    }
    v
}

fn sys_facts(r: &Root, name: &str, sys: &str, parent: Option<&String>) -> BlockDev {
    BlockDev {
        name: name.to_string(),
        dev: r.read_trim(format!("{sys}/dev")).ok(),
        bytes: r
            .read_trim(format!("{sys}/size"))
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(|s| s * 512),
        fstype: None,
        label: None,
        parent: parent.cloned(),
    }
}

/// Fill in `d`'s signature: `blkid -p -o export` when `blkid` is given,
/// else the tool's own look at its first 256 KiB (a few common
/// signatures, ZFS's label among them); "unknown" when neither can read it.
pub fn probe(r: &Root, d: &mut BlockDev, blkid: Option<&Path>) {
    let node = r.path(format!("/dev/{}", d.name));
    if let Some(b) = blkid {
        let out = crate::setup::exec::output(
            std::process::Command::new(b)
                .args(["-p", "-o", "export"])
                .arg(&node)
                .stdin(std::process::Stdio::null()),
        );
        match out {
            Ok(o) if o.status.success() => {
                let (t, l) = parse_blkid_export(&String::from_utf8_lossy(&o.stdout));
                d.fstype = t;
                d.label = l;
                return;
            }
            // 2: blkid found no signature.
            Ok(o) if o.status.code() == Some(2) => return,
            _ => {}
        }
    }
    let mut head = Vec::new();
    let read =
        std::fs::File::open(&node).and_then(|f| f.take(256 << 10).read_to_end(&mut head).map(drop));
    match read {
        Ok(()) => {
            if let Some((t, l)) = own_probe(&head) {
                d.fstype = Some(t);
                d.label = l;
            } else if head.len() < 256 << 10 || blkid.is_none() {
                d.fstype = Some("unknown".into());
            }
        }
        Err(e) => {
            tracing::debug!("probing {}: {e}", node.display());
            d.fstype = Some("unknown".into());
        }
    }
}

/// `TYPE` and `LABEL` of `blkid -o export` output.
pub fn parse_blkid_export(text: &str) -> (Option<String>, Option<String>) {
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(|v| v.trim().replace("\\ ", " "))
            .filter(|v| !v.is_empty())
    };
    (get("TYPE"), get("LABEL"))
}

/// ZFS's uberblock magic.
const ZFS_UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;

/// A signature the tool knows in a device's first 256 KiB: ZFS's label
/// (with its pool name), ext2/3/4, XFS, btrfs, swap, LUKS, an LVM PV.
pub fn own_probe(head: &[u8]) -> Option<(String, Option<String>)> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    // ZFS label 0: the uberblock ring at 128 KiB, its pool's nvlist at 16 KiB.
    let zfs = (128usize << 10..256 << 10).step_by(1024).any(|off| {
        head.get(off..off + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .is_some_and(|m| m == ZFS_UBERBLOCK_MAGIC || m.swap_bytes() == ZFS_UBERBLOCK_MAGIC)
    });
    if zfs {
        return Some(("zfs_member".into(), zfs_pool_name(head)));
    }
    let str_at = |off: usize, len: usize| {
        let b = head.get(off..off + len)?;
        let s = String::from_utf8_lossy(b.split(|c| *c == 0).next()?)
            .trim()
            .to_string();
        (!s.is_empty()).then_some(s)
    };
    if at(1080, &[0x53, 0xef]) {
        return Some(("ext4".into(), str_at(1024 + 120, 16)));
    }
    if at(0, b"XFSB") {
        return Some(("xfs".into(), str_at(108, 12)));
    }
    if at((64 << 10) + 64, b"_BHRfS_M") {
        return Some(("btrfs".into(), str_at((64 << 10) + 0x12b, 256)));
    }
    if at(4096 - 10, b"SWAPSPACE2") || at(65536 - 10, b"SWAPSPACE2") {
        return Some(("swap".into(), str_at(1024 + 28, 16)));
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some(("crypto_LUKS".into(), None));
    }
    if at(512 + 24, b"LVM2 001") {
        return Some(("LVM2_member".into(), None));
    }
    None
}

/// The pool name in a ZFS label's nvlist (XDR: the pair `name`, a string).
fn zfs_pool_name(head: &[u8]) -> Option<String> {
    let key: &[u8] = b"\0\0\0\x04name\0\0\0\x09\0\0\0\x01";
    let nv = head.get(16 << 10..128 << 10)?;
    let i = nv.windows(key.len()).position(|w| w == key)? + key.len();
    let len = u32::from_be_bytes(nv.get(i..i + 4)?.try_into().ok()?) as usize;
    let name = nv.get(i + 4..i + 4 + len.min(256))?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// `bytes` as lsblk shows sizes: `512B`, `4K`, `931.5G`.
pub fn human_bytes(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0}{}", units[u])
    } else {
        format!("{v:.1}{}", units[u])
    }
}

/// One device as the plan shows it: `nvme0n1p2 500 GiB ext4 "root"`.
pub fn describe(d: &BlockDev) -> String {
    let size = d
        .bytes
        .map(human_bytes)
        .unwrap_or_else(|| "size unknown".into());
    let what = match (&d.fstype, &d.label) {
        (None, _) => "no filesystem signature".to_string(),
        (Some(t), Some(l)) => format!("{t} \"{l}\""),
        (Some(t), None) => t.clone(),
    };
    format!("{} {size} {what}", d.name)
}

/// Everything on the drive, one clause: what `--dry-run` and the
/// confirmation say is about to be erased.
pub fn describe_all(devs: &[BlockDev]) -> String {
    if devs.is_empty() {
        return "no block device seen by the host".into();
    }
    devs.iter().map(describe).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
pub(crate) mod tests;
