//! Operations on a domain's whole table: an endpoint joins (replay) or
//! leaves (unmap all), and the FLUSH of the lazy-unmap contract.

use dma_mapper::DmaError;
use tracing::{debug, error};

use crate::{adjacent_runs, HostBackend, Mapping, MappingTable, Run};

/// Maps every mapping of `table` on one more mapper (an endpoint joins a
/// domain). On failure, what was mapped is unmapped again; a run whose
/// unmap fails too is [disowned](HostBackend::disown): it stays on the
/// host as a leftover its mappers report (`has_leftovers`), and the replay
/// fails with [`DmaError::Leftover`]. The caller then owes those mappers an
/// `unmap_all`: they serve no domain.
pub fn replay_all(table: &MappingTable, backend: &mut dyn HostBackend) -> Result<(), DmaError> {
    let maps: Vec<Mapping> = table.iter().copied().collect();
    for (k, m) in maps.iter().enumerate() {
        if let Err(e) = backend.map(m) {
            let undo: Vec<Mapping> = maps[..k].to_vec();
            let mut left = 0;
            for run in adjacent_runs(&undo) {
                if let Err(re) = backend.unmap(&run) {
                    error!(iova = run.iova, size = run.size, error = %re, "rollback of a replay failed; the run stays on the host as a leftover");
                    backend.disown(&run);
                    left += run.size;
                }
            }
            if left > 0 {
                return Err(DmaError::Leftover {
                    iova: m.iova,
                    size: m.size,
                    left,
                    source: std::io::Error::other(e),
                });
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Unmaps every mapping of `table` from a mapper (an endpoint leaves a
/// domain), one call per run of adjacent mappings. On failure the runs
/// already unmapped are mapped again, so the mapper is left as it was;
/// where that fails too the mapper lacks mappings the table has (nothing
/// extra stays reachable), and either way the caller, which sees the
/// error, falls back to the mapper's `unmap_all`.
pub fn unmap_all(table: &MappingTable, backend: &mut dyn HostBackend) -> Result<(), DmaError> {
    let runs = adjacent_runs(table.iter());
    for (k, run) in runs.iter().enumerate() {
        if let Err(e) = backend.unmap(run) {
            for done in &runs[..k] {
                for m in &done.mappings {
                    if let Err(re) = backend.map(m) {
                        error!(iova = m.iova, error = %re, "restoring after a failed detach failed");
                    }
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

impl MappingTable {
    /// Whether `iova`'s entry is on the host (false while its MAP is elided).
    pub fn is_on_host(&self, iova: u64) -> bool {
        self.entry(iova).is_some_and(|e| e.off_host.is_none())
    }
}

/// What [`flush_deferred`] did.
#[derive(Debug, Default)]
pub struct FlushReport {
    /// Host unmap calls issued (one per run of adjacent deferred mappings,
    /// plus one per mapping of a run whose merged call failed).
    pub calls: usize,
    /// Deferred mappings removed from the host.
    pub removed: usize,
    /// Deferred mappings still on the host because their unmap failed.
    pub failed: usize,
    /// The first host error met.
    pub error: Option<DmaError>,
}

/// Removes every deferred mapping of `table` from the host: one call per
/// run of adjacent whole mappings (never a partial one). When a merged
/// call fails, its mappings are retried one at a time, so only the
/// mappings whose own unmap fails stay deferred (still on the host, still
/// out of the table); a later flush or a MAP over them tries again.
pub fn flush_deferred(table: &mut MappingTable, backend: &mut dyn HostBackend) -> FlushReport {
    let mut report = FlushReport::default();
    let runs = adjacent_runs(table.deferred());
    for run in runs {
        report.calls += 1;
        match backend.unmap(&run) {
            Ok(()) => {
                for m in &run.mappings {
                    table.undefer(m.iova);
                }
                report.removed += run.mappings.len();
            }
            Err(e) if run.mappings.len() > 1 => {
                debug!(iova = run.iova, size = run.size, error = %e, "merged flush unmap failed, retrying mapping by mapping");
                for m in &run.mappings {
                    report.calls += 1;
                    match backend.unmap(&Run::of(*m)) {
                        Ok(()) => {
                            table.undefer(m.iova);
                            report.removed += 1;
                        }
                        Err(e) => {
                            report.failed += 1;
                            report.error.get_or_insert(e);
                        }
                    }
                }
            }
            Err(e) => {
                report.failed += 1;
                report.error.get_or_insert(e);
            }
        }
    }
    report
}
