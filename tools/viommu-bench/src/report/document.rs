//! The results document (results.json): what ran, every cell's raw data,
//! and the summary the table is drawn from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::report::summary::Summary;
use crate::run::results::CellResult;
use crate::setup::preflight::DeviceFacts;

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// `viommu-bench VERSION`.
    pub tool: String,
    /// The command line.
    pub command: Vec<String>,
    /// Start, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started: String,
    /// Host kernel (`uname -r` equivalent).
    pub host_kernel: String,
    /// QEMU version, CPU model, IOMMU type, the drive's NUMA node, pinning.
    #[serde(default)]
    pub host: crate::setup::host::HostInfo,
    /// The code's revisions, the host's tuning, the drive's firmware and
    /// link, the namespace measured.
    #[serde(default)]
    pub provenance: crate::setup::provenance::Provenance,
    /// The drive.
    pub device: String,
    /// What preflight found about it.
    pub device_facts: DeviceFacts,
    /// Settings: rw, bs, iodepth, numjobs, runtime, rounds, guest cpus and memory.
    pub settings: BTreeMap<String, String>,
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// Every cell, in the order they ran.
    pub cells: Vec<CellResult>,
    /// The aggregated table.
    pub summary: Summary,
    /// Whole run, seconds.
    pub elapsed_s: f64,
    /// Whether it was interrupted (Ctrl-C/SIGTERM) before the end.
    pub interrupted: bool,
}
