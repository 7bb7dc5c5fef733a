//! The KVM exits per I/O section (`--kvm-exits`): its rows, and its tables
//! for the renderers.

use std::collections::BTreeMap;

use crate::columns::Column;
use crate::plan::Phase;
use crate::report::cells::{ios_of, median, usable};
use crate::report::summary::{ExitRow, Summary};
use crate::run::results::CellResult;

/// The KVM exits per I/O of `col` in `ph`, if any of its cells counted them.
pub(crate) fn exit_row(col: &Column, ph: &Phase, cells: &[CellResult]) -> Option<ExitRow> {
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
pub(crate) fn exit_tables(s: &Summary) -> Vec<(String, Vec<String>, Vec<Vec<String>>)> {
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

pub(crate) const EXITS_NOTE: &str = "KVM exits per I/O (host tracepoints kvm_exit by reason, kvm_msr by MSR, kvm_mmio by address, kvm_pio by port, kvm_userspace_exit by reason, counted over the phase; medians over rounds); iommu.map and iommu.unmap: the host IOMMU driver's calls per I/O (tracepoints iommu:map and iommu:unmap, each call one physically contiguous run; under an emulated host IOMMU each is a trip to the emulator), iommu.map_kib and iommu.unmap_kib: the KiB they covered per I/O";
