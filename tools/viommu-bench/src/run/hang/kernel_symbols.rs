//! A guest kernel's text symbols (its System.map), to name the addresses
//! of a hung guest's vCPUs (our VMM's `GET /api/v1/vm.vcpus`: `rip` and
//! the kernel words on the stack) and to tell whether a vCPU is waiting
//! in the virtio-iommu driver for the device.

use std::path::{Path, PathBuf};

/// Text symbols sorted by address.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    syms: Vec<(u64, String)>,
}

/// The farthest an address is named from its symbol (beyond it, the
/// address is in no function the map knows).
const MAX_OFFSET: u64 = 0x10000;

impl Symbols {
    /// Parses a System.map text (`ADDR TYPE NAME` lines; text symbols
    /// only).
    pub fn parse(text: &str) -> Symbols {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (a, t, n) = (f.next()?, f.next()?, f.next()?);
                matches!(t, "t" | "T" | "w" | "W")
                    .then(|| u64::from_str_radix(a, 16).ok().map(|a| (a, n.to_string())))
                    .flatten()
            })
            .collect();
        syms.sort();
        Symbols { syms }
    }

    /// The System.map of the kernel at `kernel`, if one lies beside it:
    /// `NAME.System.map` for `NAME.bzImage` (the lab's), `System.map-V`
    /// for `vmlinuz-V` (distributions'), or `System.map` (a build tree's).
    pub fn beside(kernel: &Path) -> Option<Symbols> {
        let dir = kernel.parent()?;
        let name = kernel.file_name()?.to_string_lossy().into_owned();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(stem) = name.strip_suffix(".bzImage") {
            candidates.push(dir.join(format!("{stem}.System.map")));
        }
        if let Some(v) = name.strip_prefix("vmlinuz-") {
            candidates.push(dir.join(format!("System.map-{v}")));
        }
        candidates.push(dir.join("System.map"));
        candidates
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|t| Symbols::parse(&t))
            .filter(|s| !s.syms.is_empty())
    }

    /// `(name, offset)` of the function holding `addr`.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self
            .syms
            .partition_point(|(a, _)| *a <= addr)
            .checked_sub(1)?;
        let (a, n) = &self.syms[i];
        (addr - a <= MAX_OFFSET).then_some((n.as_str(), addr - a))
    }

    /// `addr` as `name+0xoff`, or its hex value.
    pub fn name(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((n, off)) => format!("{n}+{off:#x}"),
            None => format!("{addr:#x}"),
        }
    }
}

/// Whether a function is where the virtio-iommu driver waits for the
/// device to complete its requests: its request paths, and the virtio
/// ring's used-ring reads it spins on (with interrupts off, holding its
/// request lock).
pub fn waits_for_viommu(function: &str) -> bool {
    function.starts_with("viommu_")
        || function.starts_with("__viommu_")
        || function.starts_with("virtqueue_get_buf")
        || function == "more_used_split"
        || function == "detach_buf_split"
        || function == "virtqueue_is_broken"
}

#[cfg(test)]
mod tests;
