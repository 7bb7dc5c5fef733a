//! From cells to the table: per measured phase (block size, numjobs) and
//! column, median IOPS with min-max over rounds, the ratio to the ceiling
//! (the no-vIOMMU column), requests and VFIO calls per I/O, the bounce
//! pool's hit rate, and which differences are beyond the noise.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::columns::{Column, Iommu};
use crate::cpu_time::{self, CpuRow};
use crate::guest::{count_phase_name, is_untimed_phase, FioRecord};
use crate::guest_time::{self, GuestTimeRow};
use crate::headline;
use crate::metrics::DeviceCounters;
use crate::order;
use crate::paired;
use crate::plan::Phase;
use crate::results::{CellResult, CellStatus, Counting, PhaseResult};
use crate::stats::Spread;

/// One column against the baseline column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Versus {
    /// Median IOPS difference, percent.
    pub pct: f64,
    /// Whether the min-max ranges are disjoint (and both have 2+ rounds).
    pub significant: bool,
    /// The difference round by round, percent: this column's IOPS against
    /// the baseline's of the same round (same host, same drive), over the
    /// rounds both measured. Host-to-host drift cancels out of it, so it is
    /// narrower than the two columns' own spreads.
    #[serde(default)]
    pub paired: Option<Spread>,
}

/// One column at one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Column tag.
    pub column: String,
    /// IOPS over the rounds.
    pub iops: Option<Spread>,
    /// IOPS / the ceiling's IOPS of the same round.
    pub ratio: Option<Spread>,
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
    /// Against the baseline column.
    pub vs_baseline: Option<Versus>,
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

/// What one cell says about requests and VFIO calls per I/O in a phase.
enum CellCount {
    /// Device counters over this many I/Os, taken this way.
    Device(DeviceCounters, f64, Counted),
    /// Only the guest's own count of requests per I/O.
    Guest(f64),
    /// No count, for this reason.
    Missing(Counted),
    /// Nothing to count.
    Nothing,
}

/// The counts of `cell` for the timed phase `ph` (its result `p`, fio's
/// record `f`): our VMM's counters over the phase itself, stock QEMU's from
/// the phase's untimed counting run, or from the phase itself in results
/// from before the counting pass (QEMU traced during the timed phase).
fn cell_count(cell: &CellResult, p: &PhaseResult, f: &FioRecord, ph: &Phase) -> CellCount {
    let ios = ios_of(f, ph);
    let guest = || {
        let g = f.counter_sum("/map") + f.counter_sum("/unmap") + f.counter_sum("/flush");
        if g > 0 {
            CellCount::Guest(g as f64 / ios)
        } else {
            CellCount::Nothing
        }
    };
    match &cell.counting {
        Some(Counting::Exact) => match p.device {
            Some(d) => CellCount::Device(d, ios, Counted::Exact),
            None => guest(),
        },
        Some(Counting::Pass) => {
            let run = cell.phases.get(&count_phase_name(&ph.name));
            let counted = run.and_then(|r| {
                let cf = r.fio.as_ref().filter(|cf| cf.error == 0)?;
                Some((r.device?, ios_of(cf, ph)))
            });
            match counted {
                Some((d, n)) if n > 0.0 => CellCount::Device(d, n, Counted::Untimed),
                _ => CellCount::Missing(Counted::NotCounted),
            }
        }
        Some(Counting::NoTrace { .. }) => CellCount::Missing(Counted::NoTrace),
        Some(Counting::NotCounted { .. }) => CellCount::Missing(Counted::NotCounted),
        Some(Counting::None) => CellCount::Nothing,
        // Before the counting pass: whatever was counted in the phase.
        None => match p.device.filter(|d| d.requests() > 0 || d.vfio_calls > 0) {
            Some(d) if cell.lower_bound => CellCount::Device(d, ios, Counted::Traced),
            Some(d) => CellCount::Device(d, ios, Counted::Exact),
            None => guest(),
        },
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
    pub breakdown: Vec<crate::breakdown::BreakdownRow>,
    /// Each column against the baseline by which ran first on its host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<crate::order::OrderRow>,
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

fn median(v: &[f64]) -> Option<f64> {
    Spread::of(v).map(|s| s.median)
}

/// The I/Os of a phase: the bytes fio moved over the block size.
pub(crate) fn ios_of(f: &crate::guest::FioRecord, ph: &Phase) -> f64 {
    (f.read_kib + f.write_kib) as f64 * 1024.0 / ph.bs_bytes as f64
}

/// Whether `cell` hung in (or right after) an untimed counting run, after
/// its timed phases were over.
fn hung_counting(cell: &CellResult) -> bool {
    matches!(&cell.status, CellStatus::Hung { phase, .. }
        if is_untimed_phase(phase.strip_prefix("after ").unwrap_or(phase)))
}

/// Whether `cell` measured `phase` usably: not hung (but in an untimed
/// counting run, after the timed phases), no failed verify, and fio
/// reported the phase without error.
pub(crate) fn usable<'a>(
    cell: &'a CellResult,
    phase: &str,
) -> Option<&'a crate::results::PhaseResult> {
    match &cell.status {
        CellStatus::Hung { .. } if !hung_counting(cell) => return None,
        CellStatus::Failed {
            verify_failed: true,
            ..
        } => return None,
        _ => {}
    }
    cell.phases
        .get(phase)
        .filter(|p| p.fio.as_ref().is_some_and(|f| f.error == 0 && f.iops() > 0))
}

/// The IOPS `cell` measured in `phase`, if it measured it usably
/// (`usable` already holds it above 0).
pub(crate) fn cell_iops(cell: &CellResult, phase: &str) -> Option<f64> {
    usable(cell, phase)
        .and_then(|p| p.fio.as_ref())
        .map(|f| f.iops() as f64)
}

/// The IOPS column `tag` measured in `phase` in round `round`, if usable.
pub(crate) fn round_iops(cells: &[CellResult], tag: &str, round: u32, phase: &str) -> Option<f64> {
    cells
        .iter()
        .find(|c| c.column == tag && c.round == round)
        .and_then(|c| cell_iops(c, phase))
}

/// For each phase and column (phases outer, in order): the medians over
/// the usable rounds of the `N` values `sample` draws from a cell's phase
/// (its result, its fio record, its I/O count; `None` for a value the cell
/// does not have), `None` where no round had one. Columns with no value at
/// all in a phase are left out.
pub(crate) fn phase_medians<const N: usize>(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    sample: impl Fn(&crate::results::PhaseResult, &crate::guest::FioRecord, f64) -> [Option<f64>; N],
) -> Vec<(String, String, [Option<f64>; N])> {
    let mut out = Vec::new();
    for ph in phases {
        for col in columns {
            let mut per: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
            for c in cells.iter().filter(|c| c.column == col.tag) {
                let Some((p, f)) = usable(c, &ph.name).and_then(|p| Some((p, p.fio.as_ref()?)))
                else {
                    continue;
                };
                let ios = ios_of(f, ph);
                if ios <= 0.0 {
                    continue;
                }
                for (v, x) in per.iter_mut().zip(sample(p, f, ios)) {
                    v.extend(x);
                }
            }
            if per.iter().all(Vec::is_empty) {
                continue;
            }
            let m = per.map(|v| median(&v));
            out.push((ph.name.clone(), col.tag.clone(), m));
        }
    }
    out
}

/// Aggregate `cells` into the table.
pub fn summarize(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    baseline: usize,
    rounds: u32,
) -> Summary {
    let ceiling = columns.iter().find(|c| c.iommu == Iommu::None);
    let mut groups = Vec::new();
    let mut lazy = Vec::new();
    let mut time = Vec::new();
    let mut exits = Vec::new();
    for ph in phases {
        // A column's IOPS in one round, if it measured this phase.
        let iops_in = |tag: &str, round: u32| round_iops(cells, tag, round, &ph.name);
        let base_tag = columns.get(baseline).map(|c| c.tag.as_str());
        let mut rows = Vec::new();
        // Each row's differences to the baseline round by round, percent.
        let mut paired_pcts: Vec<Vec<f64>> = Vec::new();
        for col in columns {
            let mine: Vec<&CellResult> = cells.iter().filter(|c| c.column == col.tag).collect();
            let mut paired = vec![];
            let (mut iops, mut ratio, mut req, mut vfio) = (vec![], vec![], vec![], vec![]);
            let (mut pool_hit, mut reuse_hit) = (vec![], vec![]);
            let (mut dfr, mut fl, mut dpf, mut vpf, mut mpc) =
                (vec![], vec![], vec![], vec![], vec![]);
            let (mut busy, mut vshare, mut vob, mut upc, mut rpm) =
                (vec![], vec![], vec![], vec![], vec![]);
            // How the shown counts were taken, and why rounds have none.
            let (mut shown, mut missing) = (vec![], vec![]);
            for c in &mine {
                let Some(p) = usable(c, &ph.name) else {
                    continue;
                };
                let Some(f) = p.fio.as_ref() else { continue };
                let i = f.iops() as f64;
                iops.push(i);
                if let Some(base) = ceiling.and_then(|ceil| iops_in(&ceil.tag, c.round)) {
                    ratio.push(i / base);
                }
                if let Some(base) = base_tag.and_then(|t| iops_in(t, c.round)) {
                    paired.push((i / base - 1.0) * 100.0);
                }
                let ios = ios_of(f, ph);
                if col.iommu == Iommu::Viommu && ios > 0.0 {
                    match cell_count(c, p, f, ph) {
                        CellCount::Device(d, n, how) => {
                            req.push(d.requests() as f64 / n);
                            vfio.push(d.vfio_calls as f64 / n);
                            shown.push(how);
                            // Our VMM's own figures, of the timed phase.
                            if how == Counted::Exact {
                                let wall_ns = f.read_ms.max(f.write_ms) as f64 * 1e6;
                                if d.busy_ns > 0 && wall_ns > 0.0 {
                                    busy.push(d.busy_ns as f64 / wall_ns);
                                    vshare.push(d.vfio_ns as f64 / wall_ns);
                                    vob.push(d.vfio_ns as f64 / d.busy_ns as f64);
                                    rpm.push(d.requests() as f64 / (d.busy_ns as f64 / 1e6));
                                    if d.vfio_calls > 0 {
                                        upc.push(d.vfio_ns as f64 / 1e3 / d.vfio_calls as f64);
                                    }
                                }
                                if d.deferred_unmaps > 0 {
                                    dfr.push(d.deferred_unmaps as f64);
                                    fl.push(d.flush_requests as f64);
                                    if d.flush_requests > 0 {
                                        dpf.push(
                                            d.deferred_unmaps as f64 / d.flush_requests as f64,
                                        );
                                        vpf.push(
                                            d.flush_vfio_calls as f64 / d.flush_requests as f64,
                                        );
                                    }
                                    if d.flush_vfio_calls > 0 {
                                        mpc.push(
                                            d.merged_ranges as f64 / d.flush_vfio_calls as f64,
                                        );
                                    }
                                }
                            }
                        }
                        CellCount::Guest(r) => {
                            req.push(r);
                            shown.push(Counted::Guest);
                        }
                        CellCount::Missing(how) => missing.push(how),
                        CellCount::Nothing => {}
                    }
                }
                pool_hit.extend(f.hit_rate("iommu-dma-pool"));
                reuse_hit.extend(f.hit_rate("iommu-dma-reuse"));
            }
            if !dfr.is_empty() {
                lazy.push(LazyRow {
                    phase: ph.name.clone(),
                    column: col.tag.clone(),
                    deferred_unmaps: median(&dfr).unwrap_or(0.0),
                    flushes: median(&fl).unwrap_or(0.0),
                    deferred_per_flush: median(&dpf),
                    vfio_per_flush: median(&vpf),
                    merged_per_call: median(&mpc),
                });
            }
            if let (Some(b), Some(v)) = (median(&busy), median(&vshare)) {
                time.push(TimeRow {
                    phase: ph.name.clone(),
                    column: col.tag.clone(),
                    busy_share: b,
                    vfio_share: v,
                    vfio_of_busy: median(&vob),
                    us_per_vfio_call: median(&upc),
                    requests_per_busy_ms: median(&rpm),
                });
            }
            let hung = mine
                .iter()
                .filter(|c| matches!(c.status, CellStatus::Hung { .. }) && !hung_counting(c))
                .count() as u32;
            rows.push(Row {
                column: col.tag.clone(),
                iops: Spread::of(&iops),
                ratio: Spread::of(&ratio),
                requests_per_io: median(&req),
                vfio_per_io: median(&vfio),
                lower_bound: shown.iter().any(|h| h.lower_bound()),
                counted: shown.iter().max().or(missing.iter().max()).copied(),
                pool_hit_rate: median(&pool_hit),
                reuse_hit_rate: median(&reuse_hit),
                rounds_ok: iops.len() as u32,
                hung,
                failed: (mine.len() as u32).saturating_sub(hung + iops.len() as u32),
                vs_baseline: None,
            });
            paired_pcts.push(paired);
        }
        let base = rows.get(baseline).and_then(|r| r.iops);
        for (i, r) in rows.iter_mut().enumerate() {
            if let (Some(b), Some(me)) = (base, r.iops) {
                if i != baseline && b.median > 0.0 {
                    r.vs_baseline = Some(Versus {
                        pct: (me.median / b.median - 1.0) * 100.0,
                        significant: me.significantly_differs(&b),
                        paired: Spread::of(&paired_pcts[i]).filter(|p| p.n >= 2),
                    });
                }
            }
        }
        for col in columns {
            if let Some(e) = exit_row(col, ph, cells) {
                exits.push(e);
            }
        }
        let verdict = verdict(&rows, ceiling.map(|c| c.tag.as_str()), rounds);
        groups.push(Group {
            phase: ph.name.clone(),
            bs: ph.bs.clone(),
            numjobs: ph.numjobs,
            rows,
            verdict,
        });
    }
    let mut findings = Vec::new();
    for col in columns {
        let mine: Vec<&CellResult> = cells.iter().filter(|c| c.column == col.tag).collect();
        let open = mine
            .iter()
            .filter(|c| c.bar0_reserved == Some(false))
            .count();
        if open > 0 {
            findings.push(format!(
                "{}: the guest's reserved IOVA regions left the drive's host BAR0 usable as a DMA address in {open} of {} VM(s){}",
                col.tag,
                mine.len(),
                if col.vmm == crate::columns::Vmm::Ours { " (a failure: our VMM must reserve it)" } else { "" }
            ));
        }
        let no_trace = mine
            .iter()
            .filter(|c| matches!(c.counting, Some(Counting::NoTrace { .. })))
            .count();
        if no_trace > 0 {
            findings.push(format!(
                "{}: QEMU wrote no trace in {no_trace} of {} VM(s): this QEMU has no `log` trace backend (Fedora's and RHEL's builds have only dtrace), so its requests and VFIO calls per I/O are unknown (`no trace`); a QEMU built with --enable-trace-backends=log counts them",
                col.tag,
                mine.len()
            ));
        }
        let mut why_not: Vec<&str> = mine
            .iter()
            .filter(|c| c.status == CellStatus::Ok)
            .filter_map(|c| match &c.counting {
                Some(Counting::NotCounted { why }) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        let not_counted = why_not.len();
        why_not.sort_unstable();
        why_not.dedup();
        if not_counted > 0 {
            findings.push(format!(
                "{}: requests and VFIO calls per I/O not counted in {not_counted} of {} VM(s) (`not counted`): {}",
                col.tag,
                mine.len(),
                why_not.join("; ")
            ));
        }
        let in_breakdown = |c: &&&CellResult| matches!(&c.status, CellStatus::Hung { phase, .. } if crate::guest::is_breakdown_phase(phase.strip_prefix("after ").unwrap_or(phase)));
        let hung_breakdown = mine.iter().filter(in_breakdown).count();
        if hung_breakdown > 0 {
            findings.push(format!(
                "{}: the guest hung in its untimed breakdown run (the host's tracefs on) in {hung_breakdown} of {} VM(s) and was killed; their timed phases count",
                col.tag,
                mine.len()
            ));
        }
        let hung_counting = mine.iter().filter(|c| hung_counting(c)).count() - hung_breakdown;
        if hung_counting > 0 {
            findings.push(format!(
                "{}: the guest hung in its untimed counting run (QEMU's trace on) in {hung_counting} of {} VM(s) and was killed; their timed phases count",
                col.tag,
                mine.len()
            ));
        }
        let traced = mine
            .iter()
            .filter(|c| c.counting.is_none() && c.lower_bound)
            .count();
        if traced > 0 {
            findings.push(format!(
                "{}: {traced} of {} VM(s) ran with QEMU's trace on during the timed phases (results from before the untimed counting run): their IOPS paid for the trace, their counts are marked `traced`",
                col.tag,
                mine.len()
            ));
        }
        let retried: Vec<&str> = mine
            .iter()
            .flat_map(|c| c.warnings.iter())
            .filter(|w| is_retry_warning(w))
            .map(String::as_str)
            .collect();
        let vms = mine
            .iter()
            .filter(|c| c.warnings.iter().any(|w| is_retry_warning(w)))
            .count();
        if !retried.is_empty() {
            findings.push(format!(
                "{}: {} failed attempt(s) in {vms} of {} VM(s), each run again after a guest crash, reset or hang ({})",
                col.tag,
                retried.len(),
                mine.len(),
                retried.join("; ")
            ));
        }
    }
    Summary {
        findings,
        baseline: columns
            .get(baseline)
            .map(|c| c.tag.clone())
            .unwrap_or_default(),
        ceiling: ceiling.map(|c| c.tag.clone()),
        rounds,
        groups,
        lazy,
        time,
        guest_time: crate::guest_time::rows(columns, phases, cells),
        cpu: crate::cpu_time::rows(columns, phases, cells),
        exits,
        breakdown: crate::breakdown::rows(columns, phases, cells),
        order: crate::order::rows(columns, phases, cells, baseline),
        paired: paired::rows(columns, phases, cells, baseline),
        lead: None,
    }
}

/// The KVM exits per I/O of `col` in `ph`, if any of its cells counted them.
fn exit_row(col: &Column, ph: &Phase, cells: &[CellResult]) -> Option<ExitRow> {
    let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut totals = Vec::new();
    for c in cells.iter().filter(|c| c.column == col.tag) {
        let Some(p) = usable(c, &ph.name) else {
            continue;
        };
        let (Some(f), Some(k)) = (p.fio.as_ref(), p.kvm_exits.as_ref()) else {
            continue;
        };
        let ios = ios_of(f, ph);
        if ios <= 0.0 {
            continue;
        }
        totals.push(
            k.iter()
                .filter(|(r, _)| r.starts_with("exit."))
                .map(|(_, n)| *n as f64)
                .sum::<f64>()
                / ios,
        );
        for (r, n) in k {
            per.entry(r.clone()).or_default().push(*n as f64 / ios);
        }
    }
    let total = median(&totals)?;
    let rounds = totals.len();
    let per_io = per
        .into_iter()
        .map(|(r, mut v)| {
            v.resize(rounds, 0.0); // a reason missing in a round counted 0
            (r, median(&v).unwrap_or(0.0))
        })
        .collect();
    Some(ExitRow {
        phase: ph.name.clone(),
        column: col.tag.clone(),
        total,
        per_io,
    })
}

/// Per phase: the header (reason, then the columns) and one row per reason
/// that reaches 0.01 per I/O in some column, the biggest first (at most 12).
fn exit_tables(s: &Summary) -> Vec<(String, Vec<String>, Vec<Vec<String>>)> {
    let mut out = Vec::new();
    let mut phases: Vec<&str> = s.exits.iter().map(|e| e.phase.as_str()).collect();
    phases.dedup();
    for ph in phases {
        let rows: Vec<&ExitRow> = s.exits.iter().filter(|e| e.phase == ph).collect();
        let mut head = vec!["per I/O".to_string()];
        head.extend(rows.iter().map(|e| e.column.clone()));
        let mut reasons: Vec<(String, f64)> = Vec::new();
        for e in &rows {
            for (r, v) in &e.per_io {
                match reasons.iter_mut().find(|(n, _)| n == r) {
                    Some(x) => x.1 = x.1.max(*v),
                    None => reasons.push((r.clone(), *v)),
                }
            }
        }
        reasons.retain(|(_, v)| *v >= 0.01);
        reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
        reasons.truncate(12);
        let mut body = vec![{
            let mut r = vec!["all exits".to_string()];
            r.extend(rows.iter().map(|e| format!("{:.3}", e.total)));
            r
        }];
        for (r, _) in reasons {
            let mut line = vec![r.clone()];
            line.extend(
                rows.iter()
                    .map(|e| format!("{:.3}", e.per_io.get(&r).copied().unwrap_or(0.0))),
            );
            body.push(line);
        }
        out.push((ph.to_string(), head, body));
    }
    out
}

const EXITS_NOTE: &str = "KVM exits per I/O (host tracepoints kvm_exit by reason, kvm_msr by MSR, kvm_mmio by address, kvm_pio by port, kvm_userspace_exit by reason, counted over the phase; medians over rounds)";

/// The best column (by median IOPS, the ceiling aside) and which others
/// it beats beyond the noise.
fn verdict(rows: &[Row], ceiling: Option<&str>, rounds: u32) -> String {
    let cands: Vec<(&Row, Spread)> = rows
        .iter()
        .filter(|r| Some(r.column.as_str()) != ceiling)
        .filter_map(|r| r.iops.map(|s| (r, s)))
        .collect();
    let Some((best, bs)) = cands
        .iter()
        .max_by(|a, b| a.1.median.total_cmp(&b.1.median))
    else {
        return "no column measured this phase".into();
    };
    if rounds < 2 {
        return format!(
            "highest median: {} (one round: no noise estimate, run --rounds 3 or more)",
            best.column
        );
    }
    let (mut ahead, mut noise) = (vec![], vec![]);
    for (r, s) in &cands {
        if r.column == best.column {
            continue;
        }
        if bs.significantly_differs(s) {
            ahead.push(r.column.as_str());
        } else {
            noise.push(r.column.as_str());
        }
    }
    let mut v = format!("highest median: {}", best.column);
    if !ahead.is_empty() {
        v += &format!("; ahead beyond the noise of {}", ahead.join(", "));
    }
    if !noise.is_empty() {
        v += &format!("; within the noise of {}", noise.join(", "));
    }
    v
}

fn spread_cell(s: Option<Spread>, prec: usize) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{:.*}", prec, s.median),
        Some(s) => format!(
            "{:.*} [{:.*}-{:.*}]",
            prec, s.median, prec, s.min, prec, s.max
        ),
    }
}

/// One per-I/O count as the table shows it: plain (exact), `>=N untimed`
/// (stock QEMU's counting run), `>=N traced` (QEMU traced in the timed
/// phase, old results), or why there is none: never blank or zero for a
/// count that was not taken.
fn per_io(v: Option<f64>, how: Option<Counted>) -> String {
    match (v, how) {
        (Some(x), Some(Counted::Untimed)) => format!(">={x:.2} untimed"),
        (Some(x), Some(Counted::Traced)) => format!(">={x:.2} traced"),
        (Some(x), _) => format!("{x:.2}"),
        (None, Some(Counted::NoTrace)) => "no trace".into(),
        (None, Some(Counted::NotCounted | Counted::Untimed)) => "not counted".into(),
        (None, _) => "-".into(),
    }
}

/// The cells of one row, in [`HEADER`] order (after the group's bs/numjobs).
fn row_cells(r: &Row, baseline: &str) -> Vec<String> {
    let iops = if r.rounds_ok == 0 {
        if r.hung > 0 {
            "hung".to_string()
        } else {
            "failed".to_string()
        }
    } else {
        let mut s = spread_cell(r.iops, 0);
        if r.hung > 0 {
            s += &format!(" ({} hung)", r.hung);
        }
        if r.failed > 0 {
            s += &format!(" ({} failed)", r.failed);
        }
        s
    };
    let vs = if r.column == baseline {
        "(baseline)".to_string()
    } else {
        r.vs_baseline.map_or("-".into(), |v| {
            let paired = v.paired.map_or(String::new(), |p| {
                format!(" [{:+.0}..{:+.0}]", p.min, p.max)
            });
            format!(
                "{:+.0}%{}{paired}",
                v.pct,
                if v.significant { " *" } else { "" }
            )
        })
    };
    vec![
        r.column.clone(),
        iops,
        spread_cell(r.ratio, 2),
        vs,
        per_io(r.requests_per_io, r.counted),
        per_io(r.vfio_per_io, r.counted),
        format!(
            "{} / {}",
            percent(r.pool_hit_rate),
            percent(r.reuse_hit_rate)
        ),
    ]
}

fn percent(rate: Option<f64>) -> String {
    rate.map_or("-".into(), |h| format!("{:.0}%", h * 100.0))
}

/// Column headings of the main table.
pub const HEADER: [&str; 7] = [
    "column",
    "IOPS median [min-max]",
    "x ceiling [min-max]",
    "vs baseline",
    "requests/IO",
    "VFIO calls/IO",
    "hit rate pool / reuse",
];

fn aligned(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let w: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = w[i]))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn lazy_cells(l: &LazyRow) -> Vec<String> {
    let o = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.*}", p));
    vec![
        l.phase.clone(),
        l.column.clone(),
        format!("{:.0}", l.deferred_unmaps),
        format!("{:.0}", l.flushes),
        o(l.deferred_per_flush, 1),
        o(l.vfio_per_flush, 2),
        o(l.merged_per_call, 2),
    ]
}

const LAZY_HEADER: [&str; 7] = [
    "phase",
    "column",
    "deferred UNMAPs",
    "FLUSHes",
    "deferred/FLUSH",
    "VFIO calls/FLUSH",
    "mappings merged/VFIO call",
];

fn time_cells(t: &TimeRow) -> Vec<String> {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let o = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.*}", p));
    vec![
        t.phase.clone(),
        t.column.clone(),
        pct(t.busy_share),
        pct(t.vfio_share),
        t.vfio_of_busy.map_or("-".into(), pct),
        o(t.us_per_vfio_call, 1),
        o(t.requests_per_busy_ms, 1),
    ]
}

const TIME_HEADER: [&str; 7] = [
    "phase",
    "column",
    "device busy (of wall)",
    "in VFIO calls (of wall)",
    "VFIO share of busy",
    "us per VFIO call",
    "requests per busy ms",
];

const TIME_NOTE: &str = "Where our VMM's virtio-iommu time goes (device counters viommu_busy_ns_total and viommu_backend_{map,unmap}_ns_total over the phase, medians; wall = the fio phase's runtime; requests are served by the VMM's one virtio-iommu device thread, so a busy share near 100% is that path's ceiling)";

fn notes(s: &Summary) -> String {
    let mut n = format!(
        "Medians over {}, [min-max] across rounds. vs baseline: median IOPS against {}; * = the min-max ranges do not overlap (significant), no * = within the noise; [a..b] = the lowest and highest difference in percent round by round, each against the baseline's IOPS in the same round (same host and drive).",
        s.rounds_text(), s.baseline
    );
    match &s.ceiling {
        Some(c) => n += &format!(" x ceiling: IOPS / {c}'s IOPS of the same round."),
        None => n += " No no-viommu column ran, so there is no ceiling ratio.",
    }
    n += " requests/IO and VFIO calls/IO: plain = exact, our VMM's always-on device counters over the timed phase itself; `>=N untimed` = stock QEMU's trace events over an untimed counting run of the same fio job after the timed phases (its events are off in every timed phase), lower bounds of a sample; `>=N traced` = QEMU traced during the timed phase (results from before the counting run: its IOPS paid for the trace); `no trace` = that QEMU wrote no trace (no `log` trace backend); `not counted` = no counting run gave a count. hung: the guest stopped completing I/O and was killed.";
    for f in &s.findings {
        n += &format!("\n- {f}");
    }
    n
}

/// The table for a terminal.
pub fn render_text(s: &Summary) -> String {
    let lead = headline::lines(s.lead.as_deref(), &s.paired);
    let mut out = if lead.is_empty() {
        String::new()
    } else {
        text_table(
            &s.headline_title(),
            headline::header(&s.baseline, s.ceiling.as_deref()),
            lead.iter().map(headline::cells),
        )
    };
    for g in &s.groups {
        out += &format!("\n== {} (bs {}, numjobs {}) ==\n", g.phase, g.bs, g.numjobs);
        let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
        rows.extend(g.rows.iter().map(|r| row_cells(r, &s.baseline)));
        out += &aligned(&rows);
        out += &format!("\n{}\n", g.verdict);
    }
    let heads = |h: &[&str]| h.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    out += &text_table(
        "lazy unmap (device counters, medians)",
        heads(&LAZY_HEADER),
        s.lazy.iter().map(lazy_cells),
    );
    out += &text_table(
        "where the time goes (our VMM's device, medians)",
        heads(&TIME_HEADER),
        s.time.iter().map(time_cells),
    );
    out += &text_table(
        "where the guest's mapping time goes (iommu-dma-time, medians)",
        heads(&guest_time::HEADER),
        s.guest_time.iter().map(guest_time::cells),
    );
    out += &text_table(
        "where the CPU time goes (/proc/stat, medians)",
        heads(&cpu_time::HEADER),
        s.cpu.iter().map(cpu_time::cells),
    );
    out += &text_table(
        "round by round (IOPS x ceiling and x baseline of the same round)",
        heads(&paired::HEADER),
        s.paired.iter().map(paired::cells),
    );
    out += &text_table(
        "by order on the host (IOPS x baseline of the same round)",
        heads(&order::HEADER),
        s.order.iter().map(order::cells),
    );
    for (ph, head, body) in exit_tables(s) {
        out += &text_table(&format!("KVM exits per I/O: {ph}"), head, body);
    }
    out += &text_table(
        "where a request's time goes (--breakdown: untimed pass, host tracefs, medians)",
        heads(&crate::breakdown::HEADER),
        s.breakdown.iter().map(crate::breakdown::cells),
    );
    out += &format!("\n{}\n", notes(s));
    out
}

/// A titled table for a terminal, or nothing when it has no rows.
fn text_table(
    title: &str,
    head: Vec<String>,
    body: impl IntoIterator<Item = Vec<String>>,
) -> String {
    let mut rows = vec![head];
    rows.extend(body);
    if rows.len() == 1 {
        return String::new();
    }
    format!("\n== {title} ==\n{}\n", aligned(&rows))
}

fn md_table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut o = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        o += &format!("| {} |\n", r.join(" | "));
    }
    o
}

/// The table as Markdown (table.md), like benches/results/compare-*.md.
pub fn render_markdown(s: &Summary, title: &str) -> String {
    let mut head: Vec<String> = vec!["bs".into(), "numjobs".into()];
    head.extend(HEADER.iter().map(|h| h.to_string()));
    let mut rows = Vec::new();
    for g in &s.groups {
        for r in &g.rows {
            let mut cells = vec![g.bs.clone(), g.numjobs.to_string()];
            cells.extend(row_cells(r, &s.baseline));
            rows.push(cells);
        }
    }
    let mut out = format!("# {title}\n\n");
    let lead = headline::lines(s.lead.as_deref(), &s.paired);
    if !lead.is_empty() {
        let cells: Vec<Vec<String>> = lead.iter().map(headline::cells).collect();
        out += &format!(
            "Headline: {}\n\n{}\n",
            s.headline_title().trim_start_matches("headline: "),
            md_table(&headline::header(&s.baseline, s.ceiling.as_deref()), &cells)
        );
    }
    out += &format!("{}\n", md_table(&head, &rows));
    out += "\n";
    for g in &s.groups {
        out += &format!("- {}: {}\n", g.phase, g.verdict);
    }
    if !s.lazy.is_empty() {
        let lh: Vec<String> = LAZY_HEADER.iter().map(|h| h.to_string()).collect();
        let lr: Vec<Vec<String>> = s.lazy.iter().map(lazy_cells).collect();
        out += &format!(
            "\nLazy unmap (device counters of the same phases, medians):\n\n{}",
            md_table(&lh, &lr)
        );
    }
    if !s.time.is_empty() {
        let th: Vec<String> = TIME_HEADER.iter().map(|h| h.to_string()).collect();
        let tr: Vec<Vec<String>> = s.time.iter().map(time_cells).collect();
        out += &format!("\n{TIME_NOTE}:\n\n{}", md_table(&th, &tr));
    }
    if !s.guest_time.is_empty() {
        let gh = guest_time::HEADER.map(String::from).to_vec();
        let gr: Vec<Vec<String>> = s.guest_time.iter().map(guest_time::cells).collect();
        out += &format!("\n{}:\n\n{}", guest_time::NOTE, md_table(&gh, &gr));
    }
    if !s.cpu.is_empty() {
        let ch = cpu_time::HEADER.map(String::from).to_vec();
        let cr: Vec<Vec<String>> = s.cpu.iter().map(cpu_time::cells).collect();
        out += &format!("\n{}:\n\n{}", cpu_time::NOTE, md_table(&ch, &cr));
    }
    if !s.paired.is_empty() {
        let ph = paired::HEADER.map(String::from).to_vec();
        let pr: Vec<Vec<String>> = s.paired.iter().map(paired::cells).collect();
        out += &format!(
            "\n{}:\n\n{}",
            paired::note(s.ceiling.as_deref(), &s.baseline),
            md_table(&ph, &pr)
        );
    }
    if !s.order.is_empty() {
        let oh = order::HEADER.map(String::from).to_vec();
        let or: Vec<Vec<String>> = s.order.iter().map(order::cells).collect();
        out += &format!("\n{}:\n\n{}", order::note(&s.baseline), md_table(&oh, &or));
    }
    if !s.breakdown.is_empty() {
        let bh = crate::breakdown::HEADER.map(String::from).to_vec();
        let br: Vec<Vec<String>> = s.breakdown.iter().map(crate::breakdown::cells).collect();
        out += &format!("\n{}:\n\n{}", crate::breakdown::NOTE, md_table(&bh, &br));
    }
    let exit_tables = exit_tables(s);
    if !exit_tables.is_empty() {
        out += &format!("\n{EXITS_NOTE}:\n");
        for (ph, head, body) in exit_tables {
            out += &format!("\n{ph}:\n\n{}", md_table(&head, &body));
        }
    }
    out += &format!("\n{}\n", notes(s));
    out
}

/// The start of the warning a cell carries for its `n`th failed attempt
/// (1-based), which was run again.
pub fn retry_warning_head(n: usize) -> String {
    format!("attempt {n} failed")
}

/// Whether a cell's warning records a failed attempt that was run again
/// (results written before 2026-11-24 said "first attempt failed" for
/// every one of them).
fn is_retry_warning(w: &str) -> bool {
    w.starts_with("first attempt failed")
        || w.strip_prefix("attempt ")
            .and_then(|rest| rest.split_once(" failed ("))
            .is_some_and(|(n, _)| n.parse::<usize>().is_ok())
}

#[cfg(test)]
pub(crate) mod tests;
