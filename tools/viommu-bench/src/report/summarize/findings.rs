//! The findings under the table: per column, what its cells say beyond
//! their figures (an unreserved BAR0, counts not taken, hangs in untimed
//! runs, failed attempts run again).

use crate::columns::{Column, Counting, Vmm};
use crate::plan::is_breakdown_phase;
use crate::report::cells::hung_counting;
use crate::run::results::{CellResult, CellStatus};

/// Every column's findings, in column order.
pub(super) fn findings(columns: &[Column], cells: &[CellResult]) -> Vec<String> {
    let mut findings = Vec::new();
    for col in columns {
        let mine: Vec<&CellResult> = cells.iter().filter(|c| c.column == col.tag).collect();
        findings.extend(guest_iommu(col, &mine));
        findings.extend(bar0_and_counting(col, &mine));
        findings.extend(untimed_hangs(col, &mine));
        findings.extend(traced_and_retried(col, &mine));
    }
    findings
}

/// Which IOMMU the column's guests drove and how their NVMe's domain
/// unmapped, from their boot records (`dmar0: DMA (strict) in 3 of 3
/// VM(s)`), one line per column; nothing when no guest reported it.
pub(crate) fn guest_iommu(col: &Column, mine: &[&CellResult]) -> Option<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for b in mine.iter().filter_map(|c| c.boot.as_ref()) {
        let (Some(units), Some(domain)) = (&b.iommus, &b.nvme_domain) else {
            continue;
        };
        let mode = match domain.as_str() {
            "DMA" => "DMA (strict)",
            "DMA-FQ" => "DMA-FQ (lazy)",
            "identity" => "identity (no translation)",
            "" => "no IOMMU group",
            d => d,
        };
        let units = if units.is_empty() { "no IOMMU" } else { units };
        let what = format!("{units}: {mode}");
        match seen.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => seen.push((what, 1)),
        }
    }
    if seen.is_empty() {
        return None;
    }
    let parts: Vec<String> = seen
        .iter()
        .map(|(w, n)| format!("{w} in {n} of {} VM(s)", mine.len()))
        .collect();
    Some(format!(
        "{}: the guest's IOMMU and its NVMe's domain: {}",
        col.tag,
        parts.join("; ")
    ))
}

/// An unreserved host BAR0, and counts not taken.
fn bar0_and_counting(col: &Column, mine: &[&CellResult]) -> Vec<String> {
    let mut findings = Vec::new();
    let open = mine
        .iter()
        .filter(|c| c.bar0_reserved == Some(false))
        .count();
    if open > 0 {
        findings.push(format!(
            "{}: the guest's reserved IOVA regions left the drive's host BAR0 usable as a DMA address in {open} of {} VM(s){}",
            col.tag,
            mine.len(),
            if col.vmm == Vmm::Ours { " (a failure: our VMM must reserve it)" } else { "" }
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
    let mut no_backend: Vec<&str> = mine
        .iter()
        .filter_map(|c| match &c.counting {
            Some(Counting::NoTraceBackend { why }) => Some(why.as_str()),
            _ => None,
        })
        .collect();
    let skipped = no_backend.len();
    no_backend.sort_unstable();
    no_backend.dedup();
    if skipped > 0 {
        findings.push(format!(
            "{}: requests and VFIO calls per I/O unknown in {skipped} of {} VM(s) (`no trace`), found before the run: {}",
            col.tag,
            mine.len(),
            no_backend.join("; ")
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
    findings
}

/// Guests that hung in an untimed breakdown or counting run.
fn untimed_hangs(col: &Column, mine: &[&CellResult]) -> Vec<String> {
    let mut findings = Vec::new();
    let in_breakdown = |c: &&&CellResult| matches!(&c.status, CellStatus::Hung { phase, .. } if is_breakdown_phase(phase.strip_prefix("after ").unwrap_or(phase)));
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
    findings
}

/// Cells traced during their timed phases, and failed attempts run again.
fn traced_and_retried(col: &Column, mine: &[&CellResult]) -> Vec<String> {
    let mut findings = Vec::new();
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
    findings
}

/// The start of the warning a cell carries for its `n`th failed attempt
/// (1-based), which was run again.
pub fn retry_warning_head(n: usize) -> String {
    format!("attempt {n} failed")
}

/// Whether a cell's warning records a failed attempt that was run again
/// (older results say "first attempt failed" for every one of them).
fn is_retry_warning(w: &str) -> bool {
    w.starts_with("first attempt failed")
        || w.strip_prefix("attempt ")
            .and_then(|rest| rest.split_once(" failed ("))
            .is_some_and(|(n, _)| n.parse::<usize>().is_ok())
}

#[cfg(test)]
mod tests;
