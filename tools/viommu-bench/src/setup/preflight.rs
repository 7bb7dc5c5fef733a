//! Host checks, all before anything is changed. Each failing prerequisite
//! is one [`Problem`]: one line saying what is wrong and how to fix it.

mod device;
mod group;
pub mod guest_kernel;
pub mod hugepages;
mod in_use;
mod iommu;
pub mod iova_width;
mod privileges;
mod programs;
mod qemu_iommu;
pub mod qemu_trace;
mod tracefs;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::setup::blockdev::SysOpen;
use crate::setup::blockdev::{BlockDev, ExclusiveOpen};
use crate::setup::sysfs::Root;

/// PCI class of an NVMe controller (mass storage, NVM, NVMe).
pub const NVME_CLASS: &str = "0x010802";
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
    /// The measured namespace's logical block size in bytes
    /// (`/sys/block/NS/queue/logical_block_size`; absent when the host
    /// sees no namespace, e.g. the drive is on vfio-pci already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_block_size: Option<u64>,
    /// The measured namespace's size in bytes (`/sys/block/NS/size` x
    /// 512; absent when the host sees no namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_bytes: Option<u64>,
    /// The host's name of the namespace the guests measure (their
    /// `/dev/nvme0n1`: the lowest NSID), whose size and block size these are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_namespace: Option<String>,
    /// Every namespace and partition on the drive, with its size and
    /// signature, as found before anything was bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contents: Vec<BlockDev>,
    /// How many bits of IOVA the host's IOMMU translates for the drive
    /// (see [`iova_width::iova_bits`]), where the host says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iova_bits: Option<u32>,
}

impl DeviceFacts {
    /// What the plan says about the drive's contents and the measured
    /// namespace: `on it now: nvme0n1 1G ..., nvme0n1p1 512M ext4 "data";
    /// the guests measure nvme0n1 (their /dev/nvme0n1)`.
    pub fn contents_note(&self) -> String {
        let on_it = if self.contents.is_empty() {
            "on it now: nothing the host can see (not on nvme)".to_string()
        } else {
            format!(
                "on it now: {}",
                crate::setup::blockdev::describe_all(&self.contents)
            )
        };
        match &self.measured_namespace {
            Some(ns) => format!("{on_it}; the guests measure {ns} (their /dev/nvme0n1)"),
            None => format!("{on_it}; the guests measure their /dev/nvme0n1"),
        }
    }
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
    /// Stock QEMU's counting runs are planned (a stock-QEMU column behind
    /// a virtio-iommu, `--count-runtime` above 0): its trace backend is
    /// asked for.
    pub qemu_counts: bool,
    /// Our VMM, when a column runs it.
    pub vmm: Option<PathBuf>,
    /// Whether the guest initramfs is built here (needs fio, busybox, ldd).
    pub build_image: bool,
    /// Guest kernels (flag, path) the columns boot.
    pub kernels: Vec<(&'static str, PathBuf)>,
    /// What the guest kernels are booted for, and `--modules`.
    pub guest: guest_kernel::GuestUse,
    /// Guest RAM in bytes (VFIO pins it).
    pub guest_memory: u64,
    /// --hugepages: guest RAM from 2 MiB huge pages, which must be free.
    pub hugepages: bool,
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
    /// Opens block devices exclusively to ask whether they are in use
    /// ([`SysOpen`] on a real host).
    pub opener: Arc<dyn ExclusiveOpen>,
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
    /// Why stock QEMU's counting runs cannot count (no `log` trace
    /// backend): one line, said before any VM starts; the runs are then
    /// skipped. Not a problem: the measured runs are unaffected.
    pub qemu_no_trace: Option<String>,
}

impl Checks {
    /// Run every check.
    pub fn run(&self) -> Outcome {
        let mut out = Outcome::default();
        self.check_virtualization(&mut out.problems);
        if let Some(x) = self.interrupt_remapping() {
            out.problems.push(x);
        }
        self.check_device(&mut out);
        if self.breakdown {
            self.check_breakdown(&mut out.problems);
        }
        if self.kvm_exits {
            self.check_kvm_exits(&mut out.problems);
        }
        self.check_memlock(&mut out.problems);
        if self.hugepages {
            self.check_hugepages(&mut out.problems);
        }
        if !self.no_bind && self.euid() != Some(0) {
            out.problems.push(problem(
                "not running as root",
                "run it with sudo: binding the drive to vfio-pci writes to sysfs (or bind it yourself and pass --no-bind)",
            ));
        }
        self.check_programs(&mut out);
        self.check_qemu_trace(&mut out);
        self.check_kernels(&mut out.problems);
        self.check_qemu_iommu(&mut out.problems);
        out
    }
}

#[cfg(test)]
mod tests;
