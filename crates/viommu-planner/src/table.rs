//! The per-domain mapping table: an interval map IOVA -> (GPA, size, perm).

use std::collections::BTreeMap;

use dma_mapper::DmaPerm;

/// One guest mapping: what a single successful MAP request created.
///
/// Invariant (checked by [`Mapping::new`]): `size > 0` and `iova + size`
/// does not overflow `u64` (the end is exclusive), same for `gpa`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First IOVA.
    pub iova: u64,
    /// Length in bytes.
    pub size: u64,
    /// Guest-physical address `iova` translates to.
    pub gpa: u64,
    /// Access rights.
    pub perm: DmaPerm,
}

impl Mapping {
    /// A mapping, or `None` if the range is empty or overflows.
    pub fn new(iova: u64, size: u64, gpa: u64, perm: DmaPerm) -> Option<Mapping> {
        if size == 0 {
            return None;
        }
        iova.checked_add(size)?;
        gpa.checked_add(size)?;
        Some(Mapping {
            iova,
            size,
            gpa,
            perm,
        })
    }

    /// Last IOVA (inclusive).
    pub fn last(&self) -> u64 {
        // Cannot overflow: `iova + size` fits in u64 and size > 0.
        self.iova + (self.size - 1)
    }

    /// Exclusive end IOVA.
    pub fn end(&self) -> u64 {
        self.iova + self.size
    }
}

/// Why the table refuses a request (before any host call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// MAP over an existing mapping.
    Overlap,
    /// UNMAP that would split a mapping.
    Split,
    /// The per-domain mapping limit is reached.
    Limit,
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) mapping: Mapping,
    /// `Some(request index)` while the MAP of this entry was elided by the
    /// planner and the host does not hold it yet (see [`crate::Batch`]).
    pub(crate) off_host: Option<usize>,
}

/// The guest's view of one domain: non-overlapping mappings keyed by IOVA,
/// plus the deferred unmaps of the lazy-unmap contract.
///
/// Outside a batch being executed, every entry is also mapped on the host
/// with exactly the same range (one host mapping per guest mapping), and so
/// is every deferred unmap: a mapping the guest unmapped with
/// `VIRTIO_IOMMU_UNMAP_F_DEFERRED` that is gone from the table but stays on
/// the host until [`crate::flush_deferred`] (or a MAP over it) removes it.
/// Deferred mappings never overlap each other; they may overlap table
/// entries only transiently inside [`crate::run_batch`].
#[derive(Clone, Debug)]
pub struct MappingTable {
    map: BTreeMap<u64, Entry>,
    deferred: BTreeMap<u64, Mapping>,
    limit: usize,
}

impl MappingTable {
    /// An empty table holding at most `limit` mappings.
    pub fn new(limit: usize) -> Self {
        MappingTable {
            map: BTreeMap::new(),
            deferred: BTreeMap::new(),
            limit,
        }
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no mapping.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The mapping limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Mappings in IOVA order.
    pub fn iter(&self) -> impl Iterator<Item = &Mapping> + '_ {
        self.map.values().map(|e| &e.mapping)
    }

    /// The mapping containing `iova`, if any.
    pub fn lookup(&self, iova: u64) -> Option<&Mapping> {
        let (_, e) = self.map.range(..=iova).next_back()?;
        (e.mapping.last() >= iova).then_some(&e.mapping)
    }

    /// Whether any mapping intersects the inclusive range `[first, last]`.
    pub fn overlaps(&self, first: u64, last: u64) -> bool {
        if self.lookup(first).is_some() {
            return true;
        }
        self.map.range(first..=last).next().is_some()
    }

    /// Checks a MAP against the table (spec: overlap is refused).
    pub fn check_map(&self, m: &Mapping) -> Result<(), Reject> {
        if self.overlaps(m.iova, m.last()) {
            return Err(Reject::Overlap);
        }
        if self.map.len() >= self.limit {
            return Err(Reject::Limit);
        }
        Ok(())
    }

    /// The mappings an UNMAP of `[first, last]` removes, in IOVA order, or
    /// [`Reject::Split`] if one of them is only partly covered.
    pub fn check_unmap(&self, first: u64, last: u64) -> Result<Vec<Mapping>, Reject> {
        let mut out = Vec::new();
        if let Some(m) = self.lookup(first) {
            if m.iova < first {
                return Err(Reject::Split);
            }
        }
        for e in self.map.range(first..=last).map(|(_, e)| e) {
            if e.mapping.last() > last {
                return Err(Reject::Split);
            }
            out.push(e.mapping);
        }
        Ok(out)
    }

    /// Inserts a mapping the caller has checked with [`Self::check_map`].
    pub(crate) fn insert(&mut self, entry: Entry) {
        self.map.insert(entry.mapping.iova, entry);
    }

    pub(crate) fn remove(&mut self, iova: u64) -> Option<Entry> {
        self.map.remove(&iova)
    }

    pub(crate) fn entry(&self, iova: u64) -> Option<&Entry> {
        self.map.get(&iova)
    }

    pub(crate) fn entry_mut(&mut self, iova: u64) -> Option<&mut Entry> {
        self.map.get_mut(&iova)
    }

    pub(crate) fn off_host_entries(&self) -> Vec<(Mapping, usize)> {
        self.map
            .values()
            .filter_map(|e| e.off_host.map(|r| (e.mapping, r)))
            .collect()
    }

    /// Removes every mapping and forgets the deferred unmaps (the domain is
    /// destroyed; the caller has dealt with the host).
    pub fn clear(&mut self) {
        self.map.clear();
        self.deferred.clear();
    }

    /// Deferred unmaps still on the host, in IOVA order.
    pub fn deferred(&self) -> impl Iterator<Item = &Mapping> + '_ {
        self.deferred.values()
    }

    /// Number of deferred unmaps still on the host.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// Deferred mappings intersecting the inclusive range `[first, last]`.
    pub fn deferred_overlapping(&self, first: u64, last: u64) -> Vec<Mapping> {
        let mut out = Vec::new();
        if let Some((_, m)) = self.deferred.range(..first).next_back() {
            if m.last() >= first {
                out.push(*m);
            }
        }
        out.extend(self.deferred.range(first..=last).map(|(_, m)| *m));
        out
    }

    pub(crate) fn defer(&mut self, m: Mapping) {
        self.deferred.insert(m.iova, m);
    }

    pub(crate) fn undefer(&mut self, iova: u64) -> Option<Mapping> {
        self.deferred.remove(&iova)
    }

    /// Inserts a mapping that is already on the host (tests and replay).
    ///
    /// Fails like [`Self::check_map`].
    pub fn insert_mapped(&mut self, m: Mapping) -> Result<(), Reject> {
        self.check_map(&m)?;
        self.insert(Entry {
            mapping: m,
            off_host: None,
        });
        Ok(())
    }
}

/// Merges mappings (in IOVA order) into runs of adjacent ones: each run can
/// be unmapped with one backend call that covers whole host mappings only.
pub fn adjacent_runs<'a>(mappings: impl IntoIterator<Item = &'a Mapping>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for m in mappings {
        match runs.last_mut() {
            Some(r) if r.end() == m.iova => {
                r.size += m.size;
                r.mappings.push(*m);
            }
            _ => runs.push(Run {
                iova: m.iova,
                size: m.size,
                mappings: vec![*m],
            }),
        }
    }
    runs
}

/// A run of adjacent whole host mappings, unmapped with one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// First IOVA.
    pub iova: u64,
    /// Length in bytes (sum of the mappings' sizes).
    pub size: u64,
    /// The mappings, in IOVA order.
    pub mappings: Vec<Mapping>,
}

impl Run {
    /// Exclusive end.
    pub fn end(&self) -> u64 {
        self.iova + self.size
    }
}
