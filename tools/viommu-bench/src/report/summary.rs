//! The summary the table is drawn from: per measured phase, a group of
//! rows, one per column, and the sections beside it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::report::sections::cpu_time::CpuRow;
use crate::report::sections::guest_time::GuestTimeRow;
use crate::report::sections::{headline, paired};
use crate::report::stats::{Family, RatioTest, Spread};

/// One column at one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Column tag.
    pub column: String,
    /// IOPS over the rounds.
    pub iops: Option<Spread>,
    /// IOPS / the ceiling's IOPS of the same round (median and min-max,
    /// for the chart).
    pub ratio: Option<Spread>,
    /// Against the ceiling, paired by round: the ratio, its interval and
    /// the test (None for the ceiling itself).
    #[serde(default)]
    pub vs_ceiling: Option<RatioTest>,
    /// Median virtio-iommu requests (MAP+UNMAP+FLUSH) per I/O.
    pub requests_per_io: Option<f64>,
    /// Median VFIO calls per I/O.
    pub vfio_per_io: Option<f64>,
    /// The counts are lower bounds (stock QEMU's trace).
    pub lower_bound: bool,
    /// How the counts were taken (of the rounds with counts, the least
    /// exact way; with none, why); None: no vIOMMU.
    #[serde(default)]
    pub counted: Option<Counted>,
    /// Median bounce-pool hit rate (0-1), from the guest's counters.
    pub pool_hit_rate: Option<f64>,
    /// Median reuse-cache hit rate (0-1), from the guest's counters.
    pub reuse_hit_rate: Option<f64>,
    /// Rounds that measured this phase.
    pub rounds_ok: u32,
    /// Rounds whose guest hung.
    pub hung: u32,
    /// Rounds that failed otherwise.
    pub failed: u32,
    /// Against the baseline column, paired by round: the ratio, its
    /// interval and the test (None for the baseline itself).
    pub vs_baseline: Option<RatioTest>,
}

/// How a row's requests and VFIO calls per I/O were taken, from the most
/// exact way to no count at all (a row shows the least exact way among
/// its rounds with counts; with none, the last reason among them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Counted {
    /// Our VMM's device counters over the timed phase itself: exact.
    Exact,
    /// The guest's own virtio-iommu counters over the timed phase (its
    /// requests: exact; no VFIO count), where the device gave none.
    Guest,
    /// Stock QEMU's trace over the phase's untimed counting run (the same
    /// fio job, `--count-runtime` s): lower bounds of a sample.
    Untimed,
    /// Stock QEMU's trace during the timed phase itself (results from
    /// before the counting pass): lower bounds, and the IOPS paid for it.
    Traced,
    /// Not counted (`--count-runtime 0`, or the counting runs failed).
    NotCounted,
    /// Stock QEMU wrote no trace (no `log` backend): unknown.
    NoTrace,
}

impl Counted {
    /// Whether its counts are lower bounds.
    pub fn lower_bound(self) -> bool {
        matches!(self, Counted::Untimed | Counted::Traced)
    }
}

/// One measured phase, all columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// Phase name, e.g. `randread-4k`.
    pub phase: String,
    /// Block size label.
    pub bs: String,
    /// fio jobs.
    pub numjobs: u32,
    /// One row per column.
    pub rows: Vec<Row>,
    /// One sentence: the best column and what its lead means.
    pub verdict: String,
}

/// The lazy-unmap contract at work in one column and phase (medians).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LazyRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// UNMAPs deferred to a FLUSH.
    pub deferred_unmaps: f64,
    /// FLUSH requests.
    pub flushes: f64,
    /// Deferred UNMAPs per FLUSH.
    pub deferred_per_flush: Option<f64>,
    /// VFIO calls per FLUSH.
    pub vfio_per_flush: Option<f64>,
    /// Mappings merged per VFIO call of a FLUSH.
    pub merged_per_call: Option<f64>,
}

/// Where our VMM's virtio-iommu time goes in one column and phase
/// (medians over rounds): the device's busy time and the part of it in
/// VFIO calls, against the phase's wall time. Requests are served by the
/// VMM's one virtio-iommu device thread, so a busy share near 100% is the
/// ceiling of that serialised path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// Device busy time / the phase's wall time (0-1; may pass 1 with
    /// several vCPUs notifying at once).
    pub busy_share: f64,
    /// Time in VFIO map/unmap calls / the phase's wall time.
    pub vfio_share: f64,
    /// Time in VFIO calls / device busy time.
    pub vfio_of_busy: Option<f64>,
    /// Mean microseconds of one VFIO call.
    pub us_per_vfio_call: Option<f64>,
    /// virtio-iommu requests served per millisecond of device busy time.
    pub requests_per_busy_ms: Option<f64>,
}

/// KVM exits per I/O in one phase (`--kvm-exits`): per column, the median
/// over rounds of each reason's count divided by the phase's I/Os.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// All exits per I/O.
    pub total: f64,
    /// Per reason (`exit.NPF`, `msr.6e0.w`, `mmio.fee000b0`, ...).
    pub per_io: BTreeMap<String, f64>,
}

/// Everything the table shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The column others are compared with.
    pub baseline: String,
    /// The no-vIOMMU column, if selected.
    pub ceiling: Option<String>,
    /// Rounds.
    pub rounds: u32,
    /// Per phase.
    pub groups: Vec<Group>,
    /// What the marks mean: the test, alpha and how many comparisons
    /// were corrected together.
    #[serde(default)]
    pub significance: Option<Family>,
    /// Completion latency per phase and column (fio's JSON output).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<crate::report::sections::latency::LatencyRow>,
    /// Lazy-unmap rows.
    pub lazy: Vec<LazyRow>,
    /// Where the time goes (our VMM's columns, device busy and VFIO time).
    #[serde(default)]
    pub time: Vec<TimeRow>,
    /// Where the guest's mapping time goes (patched 6.12 guests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_time: Vec<GuestTimeRow>,
    /// Where the CPU time goes per I/O (guest and host /proc/stat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu: Vec<CpuRow>,
    /// KVM exits per I/O (`--kvm-exits` runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exits: Vec<ExitRow>,
    /// Where a request's time goes in the VMM (`--breakdown` runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breakdown: Vec<crate::report::sections::breakdown::BreakdownRow>,
    /// Each column against the baseline by which ran first on its host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<crate::report::sections::order::OrderRow>,
    /// Each guest's IOPS over its column's usual, by its place on its host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub places: Vec<crate::report::sections::places::PlaceRow>,
    /// The run's noise: between hosts, a guest's own, a phase's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<crate::report::sections::places::Noise>,
    /// Each column against the ceiling and the baseline, round by round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paired: Vec<paired::PairedRow>,
    /// Per column, what else the cells showed: the drive's BAR0 left
    /// usable as an IOVA, retried guest crashes.
    #[serde(default)]
    pub findings: Vec<String>,
    /// The column the headline leads with (`--lead`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead: Option<String>,
}

impl Summary {
    /// The headline section's title (`--lead` runs).
    pub fn headline_title(&self) -> String {
        headline::title(
            self.lead.as_deref().unwrap_or("-"),
            &self.baseline,
            self.ceiling.as_deref(),
            &self.rounds_text(),
        )
    }

    /// "N round(s)", or "N of M rounds" when fewer than the M asked for
    /// measured anything (a lab host lost, every guest of a round hung).
    pub fn rounds_text(&self) -> String {
        let finished = self
            .groups
            .iter()
            .flat_map(|g| g.rows.iter().map(|r| r.rounds_ok))
            .max()
            .unwrap_or(0);
        if finished < self.rounds {
            format!("{finished} of {} rounds", self.rounds)
        } else {
            format!("{} round(s)", self.rounds)
        }
    }
}
