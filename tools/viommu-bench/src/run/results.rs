//! What the cells produced: every cell's raw data, phase by phase, and
//! how it ended.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::run::footprint::Footprint;
use crate::run::guest::{AttackRecord, BootInfo, FioRecord};
use crate::run::metrics::DeviceCounters;

/// How one cell ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CellStatus {
    /// The guest ran every phase and powered off.
    Ok,
    /// The guest stopped completing I/O and was killed: a result about that VMM.
    Hung {
        /// The phase it hung in (`boot` before the first).
        phase: String,
        /// Seconds without progress before it was killed.
        after_s: u64,
        /// The device owed the driver a request when it was killed: a vCPU
        /// waits in the virtio-iommu driver for requests the device has
        /// not taken or not completed. A bug of the VMM or the guest's
        /// driver, never the lab's emulation: the cell is not run again.
        #[serde(default)]
        device_owes: bool,
    },
    /// Something else went wrong; the reason says what.
    Failed {
        /// What.
        reason: String,
        /// Whether a write+verify pass failed (data corruption or I/O errors).
        verify_failed: bool,
    },
}

/// One phase of one cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    /// fio's result, as the guest reported it.
    pub fio: Option<FioRecord>,
    /// What the device did during the phase (our VMM's metrics, or QEMU's trace).
    pub device: Option<DeviceCounters>,
    /// KVM exits by reason during the phase (`--kvm-exits`; host-wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_exits: Option<BTreeMap<String, u64>>,
    /// The host's CPU time from the phase's begin to its end marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<crate::run::cpu_time::CpuTimes>,
    /// An untimed breakdown phase's record of the VMM's threads
    /// (`--breakdown`, phases `breakdown-RUN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<crate::run::breakdown::Breakdown>,
}

/// Where a guest ran: which boot of which host, and in what order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// The host's boot id (`/proc/sys/kernel/random/boot_id`): the lab runs
    /// each round in a lab host of its own, and a round's unfinished guests
    /// in a fresh one when a lab host fails.
    pub boot: String,
    /// How many guests this run of the tool had started on the host before
    /// this one (0: the first).
    pub index: u32,
}

/// One VM boot: a column in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// Column tag.
    pub column: String,
    /// Round, from 0.
    pub round: u32,
    /// How it ended.
    pub status: CellStatus,
    /// The guest's boot record.
    pub boot: Option<BootInfo>,
    /// Phases by name.
    pub phases: BTreeMap<String, PhaseResult>,
    /// Errors the guest reported.
    pub errors: Vec<String>,
    /// Things that did not spoil the measurements (e.g. a slow VMM exit).
    pub warnings: Vec<String>,
    /// The guest's `@@LAB-GUEST-DONE@@ rc`.
    pub guest_rc: Option<i32>,
    /// The VMM's exit status (None: killed by a signal).
    pub vmm_rc: Option<i32>,
    /// The first crash message on the guest's console (panic, BUG, double fault).
    #[serde(default)]
    pub guest_crash: Option<String>,
    /// A stall the guest kernel reported before its init ran (an RCU stall
    /// or soft lockup on a vCPU during boot).
    #[serde(default)]
    pub boot_stall: Option<String>,
    /// Behind a virtio-iommu: whether the guest's reserved IOVA regions
    /// cover the drive's host BAR0 (see [`crate::run::faults::bar0_problem`]).
    #[serde(default)]
    pub bar0_reserved: Option<bool>,
    /// Whether the device counts are lower bounds (QEMU's trace).
    pub lower_bound: bool,
    /// How the device counts were taken; absent in results from before
    /// the untimed counting pass, whose stock QEMU columns were
    /// traced during the timed phases themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counting: Option<crate::columns::Counting>,
    /// Where it ran (see [`crate::report::sections::order`]); older results lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<Place>,
    /// What the attackers of a hostile guest (`lab.hostile=1`) did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attacks: Vec<AttackRecord>,
    /// The VMM's log lines and memory over the cell (see
    /// [`crate::run::footprint`]); older results lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<Footprint>,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// The command.
    pub command: String,
    /// The full console and VMM log.
    pub log: PathBuf,
}

#[cfg(test)]
impl CellResult {
    /// A finished cell of COLUMN in ROUND for tests: status ok, guest and
    /// VMM exit 0, no phase; tests set what they look at with `..`.
    pub(crate) fn test_ok(column: &str, round: u32) -> Self {
        CellResult {
            column: column.into(),
            round,
            status: CellStatus::Ok,
            boot: None,
            phases: BTreeMap::new(),
            errors: vec![],
            warnings: vec![],
            guest_rc: Some(0),
            vmm_rc: Some(0),
            guest_crash: None,
            boot_stall: None,
            bar0_reserved: None,
            lower_bound: false,
            counting: None,
            place: None,
            attacks: vec![],
            footprint: None,
            wall_s: 1.0,
            command: String::new(),
            log: "x.log".into(),
        }
    }
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_timestamp(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
