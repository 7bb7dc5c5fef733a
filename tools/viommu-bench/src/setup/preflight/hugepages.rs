//! `--hugepages`: the host's pool of 2 MiB huge pages, and whether one
//! guest's RAM fits in what is free of it (the VMs run one at a time).
use serde::{Deserialize, Serialize};

use super::{problem, Checks, Problem};
use crate::cli::HUGE_PAGE_BYTES;
use crate::setup::sysfs::Root;

/// The 2 MiB pool's counters (all NUMA nodes together).
pub const POOL_DIR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// The 2 MiB huge page pool as the host's counters give it, in pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePool {
    /// Pages in the pool (`nr_hugepages`, `/proc/sys/vm/nr_hugepages`).
    pub total: u64,
    /// Pages not in use (`free_hugepages`), reserved ones included.
    pub free: u64,
    /// Free pages already promised to a mapping (`resv_hugepages`).
    pub reserved: u64,
    /// Pages the kernel may add beyond the pool when a mapping needs them
    /// (`nr_overcommit_hugepages`; 0 unless set).
    #[serde(default)]
    pub overcommit: u64,
    /// Of those, pages added and in use now (`surplus_hugepages`).
    #[serde(default)]
    pub surplus: u64,
}

impl HugePool {
    /// The pool under `root`; None when the kernel has no 2 MiB huge
    /// pages (no hugetlbfs) or its counters do not read.
    pub fn read(root: &Root) -> Option<HugePool> {
        let read = |f: &str| -> Option<u64> {
            root.read_trim(format!("{POOL_DIR}/{f}")).ok()?.parse().ok()
        };
        Some(HugePool {
            total: read("nr_hugepages")?,
            free: read("free_hugepages")?,
            reserved: read("resv_hugepages").unwrap_or(0),
            overcommit: read("nr_overcommit_hugepages").unwrap_or(0),
            surplus: read("surplus_hugepages").unwrap_or(0),
        })
    }

    /// Pages a new mapping can still reserve: the pool's unpromised free
    /// pages, then what overcommit still allows the kernel to add (if it
    /// finds the memory then; the VMM says so when it does not).
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved) + self.overcommit.saturating_sub(self.surplus)
    }
}

impl Checks {
    /// One guest's RAM in free 2 MiB pages: the pool exists and has them.
    pub(super) fn check_hugepages(&self, p: &mut Vec<Problem>) {
        let need = self.guest_memory.div_ceil(HUGE_PAGE_BYTES);
        let Some(pool) = HugePool::read(&self.root) else {
            p.push(problem(
                format!("--hugepages: this host has no 2 MiB huge pages ({POOL_DIR} is missing)"),
                "boot a kernel with CONFIG_HUGETLBFS=y (Debian's, Fedora's and Ubuntu's have it), or drop --hugepages",
            ));
            return;
        };
        let have = pool.available();
        if have >= need {
            return;
        }
        let want = pool.total + (need - have);
        p.push(problem(
            format!(
                "--hugepages: one {} MiB guest at a time needs {need} free 2 MiB huge pages, the host has {have} (nr_hugepages {}, free {}, reserved {}, overcommit {}, surplus {})",
                self.guest_memory >> 20,
                pool.total,
                pool.free,
                pool.reserved,
                pool.overcommit,
                pool.surplus
            ),
            format!(
                "reserve them as root: echo {want} > /proc/sys/vm/nr_hugepages (HugePages_Total in /proc/meminfo shows what the kernel found; on a fragmented host boot with hugepages={want}), or drop --hugepages"
            ),
        ));
    }
}

#[cfg(test)]
mod tests;
