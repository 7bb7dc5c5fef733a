//! From cells to the summary: per measured phase (block size, numjobs) and
//! column, median IOPS with min-max over rounds, the ratio to the ceiling
//! (the no-vIOMMU column), requests and VFIO calls per I/O, the bounce
//! pool's hit rate, and which differences are beyond the noise; then the
//! findings and the sections.

mod findings;
mod samples;

#[cfg(test)]
pub(crate) use findings::is_retry_warning as is_retry_warning_for_tests;
pub use findings::retry_warning_head;

use crate::columns::{Column, Iommu};
use crate::plan::Phase;
use crate::report::exits::exit_row;
use crate::report::sections::{breakdown, cpu_time, guest_time, latency, order, paired};
use crate::report::stats::Spread;
use crate::report::summary::{Group, Row, Summary, Versus};
use crate::report::verdict::verdict;
use crate::run::results::CellResult;
use samples::Samples;

/// The summary of `cells`, run over `columns` and `phases` for `rounds`
/// rounds, each column against the one at `baseline`.
pub fn summarize(
    columns: &[Column],
    phases: &[Phase],
    cells: &[CellResult],
    baseline: usize,
    rounds: u32,
) -> Summary {
    let ceiling = columns.iter().find(|c| c.iommu == Iommu::None);
    let base_tag = columns.get(baseline).map(|c| c.tag.as_str());
    let mut groups = Vec::new();
    let mut lazy = Vec::new();
    let mut time = Vec::new();
    let mut exits = Vec::new();
    for ph in phases {
        let mut rows = Vec::new();
        // Each row's differences to the baseline round by round, percent.
        let mut paired_pcts: Vec<Vec<f64>> = Vec::new();
        for col in columns {
            let s = Samples::of(col, ph, cells, ceiling, base_tag);
            lazy.extend(s.lazy_row(ph, col));
            time.extend(s.time_row(ph, col));
            rows.push(s.row(col));
            paired_pcts.push(s.paired);
        }
        versus_baseline(&mut rows, baseline, &paired_pcts);
        exits.extend(columns.iter().filter_map(|col| exit_row(col, ph, cells)));
        let verdict = verdict(&rows, ceiling.map(|c| c.tag.as_str()), rounds);
        groups.push(Group {
            phase: ph.name.clone(),
            bs: ph.bs.clone(),
            numjobs: ph.numjobs,
            rows,
            verdict,
        });
    }
    Summary {
        findings: findings::findings(columns, cells),
        baseline: columns
            .get(baseline)
            .map(|c| c.tag.clone())
            .unwrap_or_default(),
        ceiling: ceiling.map(|c| c.tag.clone()),
        rounds,
        groups,
        latency: latency::rows(columns, phases, cells, ceiling),
        lazy,
        time,
        guest_time: guest_time::rows(columns, phases, cells),
        cpu: cpu_time::rows(columns, phases, cells),
        exits,
        breakdown: breakdown::rows(columns, phases, cells),
        order: order::rows(columns, phases, cells, baseline),
        paired: paired::rows(columns, phases, cells, baseline),
        lead: None,
    }
}

/// Each row's difference to the baseline row's median, whether it is
/// beyond the noise, and the spread of its round-by-round differences.
fn versus_baseline(rows: &mut [Row], baseline: usize, paired_pcts: &[Vec<f64>]) {
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
}
