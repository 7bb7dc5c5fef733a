//! From cells to the summary: per measured phase (block size, numjobs) and
//! column, median IOPS with min-max over rounds, the ratios to the ceiling
//! (the no-vIOMMU column) and to the baseline paired by round with their
//! tests, requests and VFIO calls per I/O, the bounce pool's hit rate;
//! then the tests' correction over the table, the verdicts, the findings
//! and the sections.

mod findings;
mod samples;

pub use findings::retry_warning_head;

use crate::columns::{Column, Iommu};
use crate::plan::Phase;
use crate::report::exits::exit_row;
use crate::report::sections::{breakdown, cpu_time, guest_time, latency, order, paired, places};
use crate::report::significance;
use crate::report::stats::RatioTest;
use crate::report::summary::{Group, Summary};
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
        for (i, col) in columns.iter().enumerate() {
            let s = Samples::of(col, ph, cells, ceiling, base_tag);
            lazy.extend(s.lazy_row(ph, col));
            time.extend(s.time_row(ph, col));
            let mut row = s.row(col);
            // Paired by round: only the rounds both columns measured.
            if ceiling.is_some_and(|c| c.tag != col.tag) {
                row.vs_ceiling = RatioTest::of(&s.vs_ceiling);
            }
            if i != baseline {
                row.vs_baseline = RatioTest::of(&s.vs_baseline);
            }
            rows.push(row);
        }
        exits.extend(columns.iter().filter_map(|col| exit_row(col, ph, cells)));
        groups.push(Group {
            phase: ph.name.clone(),
            bs: ph.bs.clone(),
            numjobs: ph.numjobs,
            rows,
            verdict: String::new(),
        });
    }
    let ceiling_tag = ceiling.map(|c| c.tag.as_str());
    let family = significance::correct(&mut groups, base_tag.unwrap_or_default(), ceiling_tag);
    for g in &mut groups {
        g.verdict = verdict(&g.rows, ceiling_tag, base_tag.unwrap_or_default());
    }
    let paired = groups
        .iter()
        .flat_map(|g| {
            g.rows
                .iter()
                .filter_map(|r| paired::row(&g.phase, &r.column, r.vs_ceiling, r.vs_baseline))
        })
        .collect();
    let (places, noise) = places::analyse(phases, cells);
    Summary {
        findings: findings::findings(columns, cells),
        baseline: columns
            .get(baseline)
            .map(|c| c.tag.clone())
            .unwrap_or_default(),
        ceiling: ceiling.map(|c| c.tag.clone()),
        rounds,
        groups,
        significance: Some(family),
        latency: latency::rows(columns, phases, cells, ceiling),
        lazy,
        time,
        guest_time: guest_time::rows(columns, phases, cells),
        cpu: cpu_time::rows(columns, phases, cells),
        exits,
        breakdown: breakdown::rows(columns, phases, cells),
        order: order::rows(columns, phases, cells, baseline),
        places,
        noise,
        paired,
        lead: None,
    }
}
