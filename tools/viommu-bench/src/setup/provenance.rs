//! What else tells two runs' numbers apart: the code (the tool's and the
//! VMM's git revisions) and the host's tuning (kernel command line, THP,
//! the CPU frequency governor and turbo, SMT, huge pages), the drive's model,
//! firmware and PCIe link, and the namespace measured. Every file is
//! read through a [`Root`], so tests use a fake tree.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::setup::preflight::hugepages::HugePool;
use crate::setup::sysfs::{pci_dev, Root};

/// The run's provenance, for results.json and the report's header.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The tool's `git describe --always --dirty` at build time.
    pub tool_revision: String,
    /// `vmm --version` (when a column runs our VMM).
    pub vmm_version: Option<String>,
    /// /proc/cmdline.
    pub kernel_cmdline: Option<String>,
    /// /sys/kernel/mm/transparent_hugepage/enabled's chosen value.
    pub thp_enabled: Option<String>,
    /// .../transparent_hugepage/defrag's chosen value.
    pub thp_defrag: Option<String>,
    /// The CPU frequency governors of the cpufreq policies, distinct, sorted.
    pub cpufreq_governor: Option<String>,
    /// Turbo/boost: `on` or `off` (intel_pstate/no_turbo, else cpufreq/boost).
    pub turbo: Option<String>,
    /// SMT active (/sys/devices/system/cpu/smt/active).
    pub smt_active: Option<bool>,
    /// Every column's guest RAM in 2 MiB hugetlbfs pages (`--hugepages`);
    /// else the VMMs' anonymous memory (transparent huge pages where the
    /// kernel finds them). Results from before the flag: off.
    #[serde(default)]
    pub hugepages: bool,
    /// fio's buffers inside each guest in 2 MiB huge pages
    /// (`--guest-hugepages`, the pages each guest reserved); absent:
    /// the guest's ordinary pages. Results from before the flag: absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_hugepages: Option<u64>,
    /// The host's 2 MiB huge page pool when the run started (absent: no
    /// hugetlbfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepages_2m: Option<HugePool>,
    /// Where `--pin-vcpus` put the VMMs' threads (absent: the host's
    /// scheduler placed them). The run's to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_pinning: Option<String>,
    /// The drive's model (its NVMe controller's `model`).
    pub drive_model: Option<String>,
    /// Its firmware revision (`firmware_rev`).
    pub drive_firmware: Option<String>,
    /// The first 12 hex digits of the SHA-256 of its serial: tells drives
    /// apart without publishing the serial.
    pub drive_serial_sha256: Option<String>,
    /// PCIe link now: `SPEED xWIDTH`.
    pub pcie_link: Option<String>,
    /// PCIe link at most: `SPEED xWIDTH`.
    pub pcie_link_max: Option<String>,
    /// The namespace the guests measured.
    pub namespace: String,
}

impl Provenance {
    /// Reads it under `root` for the drive `bdf`; `vmm`: our VMM, to ask
    /// its version; `host_namespace`: the drive's first namespace on the
    /// host, when it had one before binding. `hugepages` and
    /// `vcpu_pinning` are the run's to set.
    pub fn gather(
        root: &Root,
        bdf: &str,
        vmm: Option<&Path>,
        host_namespace: Option<&str>,
    ) -> Provenance {
        let read = |p: &str| root.read_trim(p).ok().filter(|s| !s.is_empty());
        let thp =
            |f: &str| read(&format!("/sys/kernel/mm/transparent_hugepage/{f}")).map(|s| chosen(&s));
        let ctrl = root.list(pci_dev(bdf).join("nvme")).into_iter().next();
        let ctrl_file = |f: &str| {
            let c = ctrl.as_ref()?;
            read(&format!("/sys/class/nvme/{c}/{f}"))
                .or_else(|| read(&format!("{}/nvme/{c}/{f}", pci_dev(bdf).display())))
        };
        let dev = |f: &str| read(&format!("{}/{f}", pci_dev(bdf).display()));
        let link = |speed: &str, width: &str| Some(format!("{} x{}", dev(speed)?, dev(width)?));
        Provenance {
            tool_revision: env!("VIOMMU_BENCH_GIT_REVISION").to_string(),
            vmm_version: vmm.and_then(crate::setup::host::version_line),
            kernel_cmdline: read("/proc/cmdline"),
            thp_enabled: thp("enabled"),
            thp_defrag: thp("defrag"),
            cpufreq_governor: governors(root),
            turbo: read("/sys/devices/system/cpu/intel_pstate/no_turbo")
                .map(|v| if v == "0" { "on" } else { "off" }.to_string())
                .or_else(|| {
                    read("/sys/devices/system/cpu/cpufreq/boost")
                        .map(|v| if v == "1" { "on" } else { "off" }.to_string())
                }),
            smt_active: read("/sys/devices/system/cpu/smt/active").map(|v| v == "1"),
            hugepages: false,
            guest_hugepages: None,
            hugepages_2m: HugePool::read(root),
            vcpu_pinning: None,
            drive_model: ctrl_file("model"),
            drive_firmware: ctrl_file("firmware_rev"),
            drive_serial_sha256: ctrl_file("serial").map(|s| {
                let h = Sha256::digest(s.as_bytes());
                h.iter().take(6).map(|b| format!("{b:02x}")).collect()
            }),
            pcie_link: link("current_link_speed", "current_link_width"),
            pcie_link_max: link("max_link_speed", "max_link_width"),
            namespace: match host_namespace {
                Some(ns) => format!("nsid 1 (the guest's nvme0n1; {ns} on the host)"),
                None => "nsid 1 (the guest's nvme0n1)".into(),
            },
        }
    }

    /// One or two lines for the report's header.
    pub fn header_lines(&self) -> Vec<String> {
        let o = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        if self.tool_revision.is_empty() {
            // Drawn with --report-from from cells that carry no provenance.
            return vec![format!(
                "code and host: not recorded with these cells; guest RAM: {}",
                self.guest_ram()
            )];
        }
        vec![
            format!(
                "code: viommu-bench {}, vmm {}; host: THP {}/{} (enabled/defrag), governor {}, turbo {}, SMT {}; guest RAM: {}{}; cmdline: {}",
                self.tool_revision,
                o(&self.vmm_version),
                o(&self.thp_enabled),
                o(&self.thp_defrag),
                o(&self.cpufreq_governor),
                o(&self.turbo),
                self.smt_active.map(|s| if s { "on" } else { "off" }).unwrap_or("?"),
                self.guest_ram(),
                self.vcpu_pinning
                    .as_ref()
                    .map_or(String::new(), |l| format!("; threads placed (--pin-vcpus): {l}")),
                o(&self.kernel_cmdline),
            ),
            format!(
                "drive: {} firmware {} (serial sha256 {}), PCIe {} (max {}), {}",
                o(&self.drive_model),
                o(&self.drive_firmware),
                o(&self.drive_serial_sha256),
                o(&self.pcie_link),
                o(&self.pcie_link_max),
                self.namespace
            ),
        ]
    }
}

impl Provenance {
    /// How guest RAM was backed, with the pool at the start.
    fn guest_ram(&self) -> String {
        let pool = self.hugepages_2m.map_or(String::new(), |p| {
            format!(" (2 MiB pool: {} pages, {} free)", p.total, p.free)
        });
        let ram = if self.hugepages {
            format!("2 MiB huge pages, --hugepages{pool}")
        } else {
            format!("anonymous memory{pool}")
        };
        match self.guest_hugepages {
            Some(n) => {
                format!("{ram}; fio's buffers in {n} 2 MiB guest huge pages (--guest-hugepages)")
            }
            None => ram,
        }
    }
}

/// The bracketed choice of a sysfs option list (`always [madvise] never`).
pub fn chosen(list: &str) -> String {
    list.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or(list)
        .to_string()
}

/// The distinct `scaling_governor`s of the cpufreq policies, sorted.
fn governors(root: &Root) -> Option<String> {
    let mut g: Vec<String> = root
        .list("/sys/devices/system/cpu/cpufreq")
        .into_iter()
        .filter(|p| p.starts_with("policy"))
        .filter_map(|p| {
            root.read_trim(format!(
                "/sys/devices/system/cpu/cpufreq/{p}/scaling_governor"
            ))
            .ok()
        })
        .collect();
    g.sort();
    g.dedup();
    (!g.is_empty()).then(|| g.join(","))
}

#[cfg(test)]
mod tests;
