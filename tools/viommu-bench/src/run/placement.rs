//! `--pin-vcpus`: every guest vCPU thread on a CPU of its own, the VMM's
//! other threads and the drive's interrupts on the CPUs the vCPUs leave,
//! the same layout for every column ([`Layout`]). Without it the host's
//! scheduler places a VMM's threads afresh in every boot, so two boots
//! of one column can differ in which threads share a CPU.
//!
//! The threads are found by name: our VMM calls its vCPU threads `vcpuN`,
//! stock QEMU `CPU N/KVM` (it is started with `-name ...,debug-threads=on`
//! for this). The drive's interrupts are its `vfio-msi*` lines in
//! `/proc/interrupts`. [`Placer::apply`] runs about once a second while a
//! VMM runs, so threads and vectors that appear later (QEMU's workers,
//! the vectors the guest's driver enables) are placed too, long before
//! the first timed phase.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use tracing::warn;

/// Where each kind of thread goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// vCPU `n`'s CPU is `vcpus[n]`.
    pub vcpus: Vec<usize>,
    /// Every other thread's CPUs, and the drive's interrupts' (never empty).
    pub rest: Vec<usize>,
    /// The drive's PCI address, as its interrupts' names carry it.
    pub bdf: String,
}

impl Layout {
    /// The layout over `cpus` (the CPUs the run may use, in order) for
    /// guests of `guest_cpus` vCPUs: the first CPU and any the vCPUs do
    /// not take for the rest, the next `guest_cpus` for the vCPUs.
    pub fn new(cpus: &[usize], guest_cpus: u32, bdf: &str) -> Result<Layout, String> {
        let n = guest_cpus as usize;
        if cpus.len() < n + 1 {
            return Err(format!(
                "--pin-vcpus: --guest-cpus {n} needs {} CPUs (one per vCPU, one for the VMM's other threads), \
                 the run may use {} ({}); lower --guest-cpus, or drop --pin-vcpus",
                n + 1,
                cpus.len(),
                cpulist(cpus)
            ));
        }
        let mut rest = vec![cpus[0]];
        rest.extend_from_slice(&cpus[n + 1..]);
        Ok(Layout {
            vcpus: cpus[1..=n].to_vec(),
            rest,
            bdf: bdf.to_string(),
        })
    }

    /// One line for the report, e.g. `vCPU 0 on CPU 1; the VMM's other
    /// threads and the drive's interrupts on CPUs 0`.
    pub fn describe(&self) -> String {
        let v: Vec<String> = self
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, c)| format!("vCPU {i} on CPU {c}"))
            .collect();
        format!(
            "{}; the VMM's other threads and the drive's interrupts on CPUs {}",
            v.join(", "),
            cpulist(&self.rest)
        )
    }

    /// The vCPU of this layout a thread called `comm` runs, if any.
    fn vcpu_of(&self, comm: &str) -> Option<usize> {
        vcpu_index(comm).filter(|&i| i < self.vcpus.len())
    }

    /// The CPUs of a thread called `comm`.
    fn cpus_of(&self, comm: &str) -> &[usize] {
        match self.vcpu_of(comm) {
            Some(i) => std::slice::from_ref(&self.vcpus[i]),
            None => &self.rest,
        }
    }
}

/// The vCPU a thread name says the thread runs: our VMM's `vcpuN`, QEMU's
/// `CPU N/KVM`.
pub fn vcpu_index(comm: &str) -> Option<usize> {
    let comm = comm.trim();
    let digits = comm.strip_prefix("vcpu").or_else(|| {
        comm.strip_prefix("CPU ")
            .and_then(|r| r.strip_suffix("/KVM"))
    })?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The drive's interrupts in `/proc/interrupts`' text: the numbers of the
/// lines named `vfio-msi...(BDF)` (vfio-pci's names for the vectors it
/// requested for the drive on a VMM's behalf).
pub fn drive_irqs(interrupts: &str, bdf: &str) -> Vec<u32> {
    let tag = format!("({bdf})");
    interrupts
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let name = rest.split_whitespace().last()?;
            (name.starts_with("vfio-msi") && name.ends_with(&tag))
                .then(|| num.trim().parse().ok())
                .flatten()
        })
        .collect()
}

/// A CPU list as sysfs and `smp_affinity_list` write it (`0,2,3`).
pub fn cpulist(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// What one VMM's placement has done: the threads placed (by tid, under
/// the name they had: a thread renamed since is placed again) and the
/// interrupts. One warning per VMM at most, whatever failed.
#[derive(Debug, Default)]
pub struct Placer {
    threads: HashMap<u32, String>,
    irqs: BTreeSet<u32>,
    /// The vCPUs whose thread is on its own CPU now.
    vcpus: BTreeSet<usize>,
    warned: bool,
}

impl Placer {
    /// Places the threads of process `pid` and the drive's interrupts
    /// that are not placed yet; `proc` is procfs' mount (`/proc`).
    pub fn apply(&mut self, layout: &Layout, pid: u32, proc: &Path) {
        let mut failed = Vec::new();
        let tasks = proc.join(pid.to_string()).join("task");
        if let Ok(dir) = std::fs::read_dir(&tasks) {
            for e in dir.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
                    continue;
                };
                let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
                    continue; // it ended
                };
                let comm = comm.trim().to_string();
                if self.threads.get(&tid) == Some(&comm) {
                    continue;
                }
                let cpus = layout.cpus_of(&comm);
                let vcpu = layout.vcpu_of(&comm);
                let pinned = crate::setup::host::pin_thread(tid, cpus);
                if let (Some(i), Ok(())) = (vcpu, &pinned) {
                    self.vcpus.insert(i);
                }
                if let Err(err) = pinned {
                    // ESRCH: it ended between the listing and now.
                    if err.raw_os_error() != Some(libc::ESRCH) {
                        failed.push(format!(
                            "thread {tid} ({comm}) to CPUs {}: {err}",
                            cpulist(cpus)
                        ));
                    }
                }
                self.threads.insert(tid, comm);
            }
        }
        if let Ok(text) = std::fs::read_to_string(proc.join("interrupts")) {
            for irq in drive_irqs(&text, &layout.bdf) {
                if !self.irqs.insert(irq) {
                    continue;
                }
                let f = proc
                    .join("irq")
                    .join(irq.to_string())
                    .join("smp_affinity_list");
                if let Err(err) = std::fs::write(&f, cpulist(&layout.rest)) {
                    // Tried again on the next call; warned about once.
                    self.irqs.remove(&irq);
                    failed.push(format!(
                        "interrupt {irq} to CPUs {}: {err}",
                        cpulist(&layout.rest)
                    ));
                }
            }
        }
        if !failed.is_empty() && !self.warned {
            self.warned = true;
            warn!(
                "--pin-vcpus: could not place {} (more failures of this VMM are not logged); \
                 its columns' threads may share CPUs differently",
                failed.join("; ")
            );
        }
    }

    /// What the placement missed, for the cell's warnings: vCPUs whose
    /// thread was never found by name (or never placed), or none of the
    /// drive's interrupts placed. `None` when everything was placed.
    pub fn shortfall(&self, layout: &Layout) -> Option<String> {
        let missing: Vec<String> = (0..layout.vcpus.len())
            .filter(|i| !self.vcpus.contains(i))
            .map(|i| i.to_string())
            .collect();
        let mut lacks = Vec::new();
        if !missing.is_empty() {
            lacks.push(format!(
                "no thread of vCPU {} (named vcpuN or \"CPU N/KVM\") was placed",
                missing.join(", ")
            ));
        }
        if self.irqs.is_empty() {
            lacks.push(format!(
                "no vfio-msi interrupt of {} was placed",
                layout.bdf
            ));
        }
        (!lacks.is_empty()).then(|| {
            format!(
                "--pin-vcpus: {}; this VM's threads ran where the host's scheduler put them",
                lacks.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests;
