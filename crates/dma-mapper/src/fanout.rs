//! The fan-out of one domain's host calls to the mappers of its endpoints.

use std::sync::Arc;

use tracing::error;

use crate::{DmaError, DmaMapper, DmaStats, Mapping, Run};

/// Where host calls go: the mappers of one domain.
pub trait HostBackend {
    /// Map one guest mapping on the host.
    fn map(&mut self, m: &Mapping) -> Result<(), DmaError>;
    /// Unmap a run of adjacent whole host mappings with one call.
    fn unmap(&mut self, run: &Run) -> Result<(), DmaError>;
    /// The caller mapped `run` and could not unmap it again (a rollback
    /// failed): whatever of it the host still holds becomes a leftover of
    /// the mappers holding it ([`DmaMapper::disown`]), so their
    /// [`DmaMapper::has_leftovers`] reports it until it is removed.
    fn disown(&mut self, run: &Run);
}

/// A [`HostBackend`] over the distinct mappers of a domain's endpoints.
///
/// Each call goes to every mapper; if mapper `k` fails, the call is rolled
/// back on mappers `0..k` so all mappers keep the same state. A rollback
/// can fail too:
/// - a map's rollback unmap failing leaves a host mapping nobody tracks:
///   that mapper [disowns](DmaMapper::disown) it (a leftover, reported by
///   its `has_leftovers`, which makes the domain's end remove it with
///   `unmap_all`), and the map fails with [`DmaError::Leftover`];
/// - an unmap's rollback map failing leaves that mapper *without* mappings
///   the caller keeps: DMA through them faults on that host, nothing stays
///   reachable that should not; logged.
///
/// Every call, rollbacks included, is counted once, in the [`DmaStats`] it
/// was given.
pub struct MapperSet<'a> {
    mappers: &'a [Arc<dyn DmaMapper>],
    stats: &'a mut DmaStats,
}

impl<'a> MapperSet<'a> {
    /// A backend over `mappers`, counting into `stats`.
    pub fn new(mappers: &'a [Arc<dyn DmaMapper>], stats: &'a mut DmaStats) -> Self {
        MapperSet { mappers, stats }
    }

    fn map_one(&mut self, mapper: &dyn DmaMapper, m: &Mapping) -> Result<(), DmaError> {
        let start = std::time::Instant::now();
        let r = mapper.map(m.iova, m.gpa, m.size, m.perm);
        self.stats.map_ns += elapsed_ns(start);
        self.stats.count_map(m.size, r.is_ok());
        r
    }

    fn unmap_one(&mut self, mapper: &dyn DmaMapper, iova: u64, size: u64) -> Result<(), DmaError> {
        let start = std::time::Instant::now();
        let r = mapper.unmap(iova, size);
        self.stats.unmap_ns += elapsed_ns(start);
        self.stats.count_unmap(size, r.is_ok());
        r
    }
}

impl HostBackend for MapperSet<'_> {
    fn map(&mut self, m: &Mapping) -> Result<(), DmaError> {
        let mappers = self.mappers;
        for (k, mapper) in mappers.iter().enumerate() {
            if let Err(e) = self.map_one(mapper.as_ref(), m) {
                let mut stranded = false;
                for done in &mappers[..k] {
                    if let Err(re) = self.unmap_one(done.as_ref(), m.iova, m.size) {
                        error!(iova = m.iova, size = m.size, error = %re, "rollback of a partial map failed; the mapping stays on that host as a leftover");
                        done.disown(m.iova, m.size);
                        stranded = true;
                    }
                }
                if stranded {
                    return Err(DmaError::Leftover {
                        iova: m.iova,
                        size: m.size,
                        left: m.size,
                        source: std::io::Error::other(e),
                    });
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn unmap(&mut self, run: &Run) -> Result<(), DmaError> {
        let mappers = self.mappers;
        for (k, mapper) in mappers.iter().enumerate() {
            if let Err(e) = self.unmap_one(mapper.as_ref(), run.iova, run.size) {
                for done in &mappers[..k] {
                    for m in &run.mappings {
                        if let Err(re) = self.map_one(done.as_ref(), m) {
                            error!(iova = m.iova, size = m.size, error = %re, "rollback of a partial unmap failed; that host lacks a mapping the domain keeps");
                        }
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn disown(&mut self, run: &Run) {
        for mapper in self.mappers {
            mapper.disown(run.iova, run.size);
        }
    }
}

/// Nanoseconds since `start`, saturating (a u64 of them lasts 584 years).
pub fn elapsed_ns(start: std::time::Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
