//! One column's figures in one phase, round by round, before the medians.

use crate::columns::{Column, Counting, Iommu};
use crate::plan::{count_phase_name, Phase};
use crate::report::cells::{hung_counting, ios_of, median, round_iops, usable};
use crate::report::stats::Spread;
use crate::report::summary::{Counted, LazyRow, Row, TimeRow};
use crate::run::guest::FioRecord;
use crate::run::metrics::DeviceCounters;
use crate::run::results::{CellResult, CellStatus, PhaseResult};

/// One column's samples in one phase, one entry per round that has it.
#[derive(Default)]
pub(super) struct Samples<'a> {
    /// The column's cells.
    mine: Vec<&'a CellResult>,
    /// IOPS / the baseline's of the same round.
    pub(super) vs_baseline: Vec<f64>,
    iops: Vec<f64>,
    /// IOPS / the ceiling's of the same round.
    pub(super) vs_ceiling: Vec<f64>,
    req: Vec<f64>,
    vfio: Vec<f64>,
    pool_hit: Vec<f64>,
    reuse_hit: Vec<f64>,
    // Lazy flushes: deferred unmaps, flushes, unmaps per flush, VFIO calls
    // per flush, ranges merged per call.
    dfr: Vec<f64>,
    fl: Vec<f64>,
    dpf: Vec<f64>,
    vpf: Vec<f64>,
    mpc: Vec<f64>,
    // Our VMM's time: busy share, VFIO share, VFIO of busy, us per VFIO
    // call, requests per busy ms.
    busy: Vec<f64>,
    vshare: Vec<f64>,
    vob: Vec<f64>,
    upc: Vec<f64>,
    rpm: Vec<f64>,
    /// How the shown counts were taken.
    shown: Vec<Counted>,
    /// Why rounds have none.
    missing: Vec<Counted>,
}

impl<'a> Samples<'a> {
    /// The samples of `col` in `ph`, against the ceiling column and the
    /// baseline column's tag.
    pub(super) fn of(
        col: &Column,
        ph: &Phase,
        cells: &'a [CellResult],
        ceiling: Option<&Column>,
        base_tag: Option<&str>,
    ) -> Self {
        // A column's IOPS in one round, if it measured this phase.
        let iops_in = |tag: &str, round: u32| round_iops(cells, tag, round, &ph.name);
        let mut s = Samples {
            mine: cells.iter().filter(|c| c.column == col.tag).collect(),
            ..Samples::default()
        };
        for c in s.mine.clone() {
            let Some(p) = usable(c, &ph.name) else {
                continue;
            };
            let Some(f) = p.fio.as_ref() else { continue };
            let i = f.iops() as f64;
            s.iops.push(i);
            if let Some(base) = ceiling.and_then(|ceil| iops_in(&ceil.tag, c.round)) {
                s.vs_ceiling.push(i / base);
            }
            if let Some(base) = base_tag.and_then(|t| iops_in(t, c.round)) {
                s.vs_baseline.push(i / base);
            }
            let ios = ios_of(f, ph);
            if col.iommu == Iommu::Viommu && ios > 0.0 {
                s.add_count(cell_count(c, p, f, ph), f);
            }
            s.pool_hit.extend(f.hit_rate("iommu-dma-pool"));
            s.reuse_hit.extend(f.hit_rate("iommu-dma-reuse"));
        }
        s
    }

    /// One cell's counts of requests and VFIO calls per I/O.
    fn add_count(&mut self, count: CellCount, f: &FioRecord) {
        match count {
            CellCount::Device(d, n, how) => {
                self.req.push(d.requests() as f64 / n);
                self.vfio.push(d.vfio_calls as f64 / n);
                self.shown.push(how);
                // Our VMM's own figures, of the timed phase.
                if how == Counted::Exact {
                    self.add_exact(&d, f);
                }
            }
            CellCount::Guest(r) => {
                self.req.push(r);
                self.shown.push(Counted::Guest);
            }
            CellCount::Missing(how) => self.missing.push(how),
            CellCount::Nothing => {}
        }
    }

    /// Our VMM's time and lazy-flush figures over a timed phase.
    fn add_exact(&mut self, d: &DeviceCounters, f: &FioRecord) {
        let wall_ns = f.read_ms.max(f.write_ms) as f64 * 1e6;
        if d.busy_ns > 0 && wall_ns > 0.0 {
            self.busy.push(d.busy_ns as f64 / wall_ns);
            self.vshare.push(d.vfio_ns as f64 / wall_ns);
            self.vob.push(d.vfio_ns as f64 / d.busy_ns as f64);
            self.rpm
                .push(d.requests() as f64 / (d.busy_ns as f64 / 1e6));
            if d.vfio_calls > 0 {
                self.upc.push(d.vfio_ns as f64 / 1e3 / d.vfio_calls as f64);
            }
        }
        if d.deferred_unmaps > 0 {
            self.dfr.push(d.deferred_unmaps as f64);
            self.fl.push(d.flush_requests as f64);
            if d.flush_requests > 0 {
                self.dpf
                    .push(d.deferred_unmaps as f64 / d.flush_requests as f64);
                self.vpf
                    .push(d.flush_vfio_calls as f64 / d.flush_requests as f64);
            }
            if d.flush_vfio_calls > 0 {
                self.mpc
                    .push(d.merged_ranges as f64 / d.flush_vfio_calls as f64);
            }
        }
    }

    /// The lazy-flush row, if the column deferred any unmap.
    pub(super) fn lazy_row(&self, ph: &Phase, col: &Column) -> Option<LazyRow> {
        if self.dfr.is_empty() {
            return None;
        }
        Some(LazyRow {
            phase: ph.name.clone(),
            column: col.tag.clone(),
            deferred_unmaps: median(&self.dfr).unwrap_or(0.0),
            flushes: median(&self.fl).unwrap_or(0.0),
            deferred_per_flush: median(&self.dpf),
            vfio_per_flush: median(&self.vpf),
            merged_per_call: median(&self.mpc),
        })
    }

    /// The device time row, if our VMM's counters timed the phase.
    pub(super) fn time_row(&self, ph: &Phase, col: &Column) -> Option<TimeRow> {
        let (b, v) = (median(&self.busy)?, median(&self.vshare)?);
        Some(TimeRow {
            phase: ph.name.clone(),
            column: col.tag.clone(),
            busy_share: b,
            vfio_share: v,
            vfio_of_busy: median(&self.vob),
            us_per_vfio_call: median(&self.upc),
            requests_per_busy_ms: median(&self.rpm),
        })
    }

    /// The column's row of the table, without its difference to the
    /// baseline.
    pub(super) fn row(&self, col: &Column) -> Row {
        let hung = self
            .mine
            .iter()
            .filter(|c| matches!(c.status, CellStatus::Hung { .. }) && !hung_counting(c))
            .count() as u32;
        Row {
            column: col.tag.clone(),
            iops: Spread::of(&self.iops),
            ratio: Spread::of(&self.vs_ceiling),
            vs_ceiling: None,
            requests_per_io: median(&self.req),
            vfio_per_io: median(&self.vfio),
            lower_bound: self.shown.iter().any(|h| h.lower_bound()),
            counted: self
                .shown
                .iter()
                .max()
                .or(self.missing.iter().max())
                .copied(),
            pool_hit_rate: median(&self.pool_hit),
            reuse_hit_rate: median(&self.reuse_hit),
            rounds_ok: self.iops.len() as u32,
            hung,
            failed: (self.mine.len() as u32).saturating_sub(hung + self.iops.len() as u32),
            vs_baseline: None,
        }
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
        Some(Counting::NoTrace { .. } | Counting::NoTraceBackend { .. }) => {
            CellCount::Missing(Counted::NoTrace)
        }
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
