//! What one cell measured in one phase, read the way every table and
//! section reads it: which cells count, their I/Os, their IOPS, and the
//! median over rounds of a figure per I/O.

use crate::columns::Column;
use crate::plan::{is_untimed_phase, Phase};
use crate::report::stats::Spread;
use crate::run::results::{CellResult, CellStatus};

pub(crate) fn median(v: &[f64]) -> Option<f64> {
    Spread::of(v).map(|s| s.median)
}

/// The guest's counter of the drive's 512-byte sectors read and written
/// over a phase's counter window (guest/init's `counters_snapshot`).
pub(crate) const WINDOW_SECTORS: &str = "block/sectors";

/// The I/Os of a phase's counter window, which every figure per I/O
/// divides by: the drive's sectors the guest's block layer moved between
/// the counter snapshots, over the block size. So counts and I/Os come
/// from one window: with `--ramp` the counters start a little before fio
/// measures (fio starts its ramp clock after its own start-up), and the
/// I/Os of that edge are in the counts but not in fio's totals. Records
/// from guests that did not count sectors: the bytes fio moved over the
/// block size.
pub(crate) fn ios_of(f: &crate::run::guest::FioRecord, ph: &Phase) -> f64 {
    match f.counters.get(WINDOW_SECTORS) {
        Some(&sectors) if sectors > 0 => sectors as f64 * 512.0 / ph.bs_bytes as f64,
        _ => (f.read_kib + f.write_kib) as f64 * 1024.0 / ph.bs_bytes as f64,
    }
}

/// Whether `cell` hung in (or right after) an untimed counting run, after
/// its timed phases were over.
pub(crate) fn hung_counting(cell: &CellResult) -> bool {
    matches!(&cell.status, CellStatus::Hung { phase, .. }
        if is_untimed_phase(phase.strip_prefix("after ").unwrap_or(phase)))
}

/// Whether `cell` measured `phase` usably: not hung (but in an untimed
/// counting run, after the timed phases), no failed verify, and fio
/// reported the phase without error.
pub(crate) fn usable<'a>(
    cell: &'a CellResult,
    phase: &str,
) -> Option<&'a crate::run::results::PhaseResult> {
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
    sample: impl Fn(
        &crate::run::results::PhaseResult,
        &crate::run::guest::FioRecord,
        f64,
    ) -> [Option<f64>; N],
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
