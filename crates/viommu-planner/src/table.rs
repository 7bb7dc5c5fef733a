//! The per-domain mapping table: an interval map IOVA -> (GPA, size, perm).

use dma_mapper::interval::{IntervalMap, Span};
use dma_mapper::Mapping;

/// Why the table refuses a request (before any host call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// MAP over an existing mapping.
    Overlap,
    /// UNMAP that would split a mapping.
    Split,
    /// The per-domain mapping limit or byte budget is reached.
    Limit,
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) mapping: Mapping,
    /// `Some(request index)` while the MAP of this entry was elided by the
    /// planner and the host does not hold it yet (see [`crate::run_batch`]).
    pub(crate) off_host: Option<usize>,
}

impl Span for Entry {
    fn start(&self) -> u64 {
        self.mapping.iova
    }
    fn size(&self) -> u64 {
        self.mapping.size
    }
}

/// The guest's view of one domain: non-overlapping mappings keyed by IOVA,
/// plus the deferred unmaps of the lazy-unmap contract.
///
/// Outside a batch being executed, every entry is also mapped on the host
/// with exactly the same range (one host mapping per guest mapping), and so
/// is every deferred unmap: a mapping the guest unmapped in a lazy domain
/// that is gone from the table but stays on the host until
/// [`crate::flush_deferred`] (the domain's IOTLB_FLUSH) or a MAP over it
/// removes it.
/// Deferred mappings never overlap each other; they may overlap table
/// entries only transiently inside [`crate::run_batch`].
#[derive(Clone, Debug)]
pub struct MappingTable {
    map: IntervalMap<Entry>,
    deferred: IntervalMap<Mapping>,
    limit: usize,
    /// Bytes of the mappings and of the deferred unmaps (all on the host).
    bytes: u64,
    byte_limit: u64,
}

impl MappingTable {
    /// An empty table holding at most `limit` mappings.
    pub fn new(limit: usize) -> Self {
        MappingTable {
            map: IntervalMap::new(),
            deferred: IntervalMap::new(),
            limit,
            bytes: 0,
            byte_limit: u64::MAX,
        }
    }

    /// The same table refusing MAPs once its mappings and deferred unmaps
    /// would hold more than `bytes` bytes of IOVA space on the host (a
    /// guest can otherwise alias its RAM without bound).
    pub fn with_byte_limit(mut self, bytes: u64) -> Self {
        self.byte_limit = bytes;
        self
    }

    /// Bytes held on the host: mappings plus deferred unmaps.
    pub fn bytes(&self) -> u64 {
        self.bytes
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
        self.map.iter().map(|e| &e.mapping)
    }

    /// The mapping containing `iova`, if any.
    pub fn lookup(&self, iova: u64) -> Option<&Mapping> {
        self.map.lookup(iova).map(|e| &e.mapping)
    }

    /// Whether any mapping intersects the inclusive range `[first, last]`.
    pub fn overlaps(&self, first: u64, last: u64) -> bool {
        self.map.overlaps(first, last)
    }

    /// Checks a MAP against the table (spec: overlap is refused).
    pub fn check_map(&self, m: &Mapping) -> Result<(), Reject> {
        if self.overlaps(m.iova, m.last()) {
            return Err(Reject::Overlap);
        }
        if self.map.len() >= self.limit || self.bytes.saturating_add(m.size) > self.byte_limit {
            return Err(Reject::Limit);
        }
        Ok(())
    }

    /// The mappings an UNMAP of `[first, last]` removes, in IOVA order, or
    /// [`Reject::Split`] if one of them is only partly covered.
    pub fn check_unmap(&self, first: u64, last: u64) -> Result<Vec<Mapping>, Reject> {
        if self.map.splits(first, last) {
            return Err(Reject::Split);
        }
        Ok(self.map.within(first, last).map(|e| e.mapping).collect())
    }

    /// Inserts a mapping the caller has checked with [`Self::check_map`].
    pub(crate) fn insert(&mut self, entry: Entry) {
        self.bytes = self.bytes.saturating_add(entry.mapping.size);
        self.map.insert(entry);
    }

    pub(crate) fn remove(&mut self, iova: u64) -> Option<Entry> {
        let e = self.map.remove(iova)?;
        self.bytes = self.bytes.saturating_sub(e.mapping.size);
        Some(e)
    }

    pub(crate) fn entry(&self, iova: u64) -> Option<&Entry> {
        self.map.get(iova)
    }

    pub(crate) fn entry_mut(&mut self, iova: u64) -> Option<&mut Entry> {
        self.map.get_mut(iova)
    }

    pub(crate) fn off_host_entries(&self) -> Vec<(Mapping, usize)> {
        self.map
            .iter()
            .filter_map(|e| e.off_host.map(|r| (e.mapping, r)))
            .collect()
    }

    /// Removes every mapping and forgets the deferred unmaps (the domain is
    /// destroyed; the caller has dealt with the host).
    pub fn clear(&mut self) {
        self.map.clear();
        self.deferred.clear();
        self.bytes = 0;
    }

    /// Deferred unmaps still on the host, in IOVA order.
    pub fn deferred(&self) -> impl Iterator<Item = &Mapping> + '_ {
        self.deferred.iter()
    }

    /// Forgets the deferred unmaps (the caller removed them from the host).
    pub fn forget_deferred(&mut self) {
        let gone: u64 = self.deferred.iter().map(|m| m.size).sum();
        self.bytes = self.bytes.saturating_sub(gone);
        self.deferred.clear();
    }

    /// Number of deferred unmaps still on the host.
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// Deferred mappings intersecting the inclusive range `[first, last]`.
    pub fn deferred_overlapping(&self, first: u64, last: u64) -> Vec<Mapping> {
        self.deferred.overlapping(first, last).copied().collect()
    }

    pub(crate) fn defer(&mut self, m: Mapping) {
        self.bytes = self.bytes.saturating_add(m.size);
        self.deferred.insert(m);
    }

    pub(crate) fn undefer(&mut self, iova: u64) -> Option<Mapping> {
        let m = self.deferred.remove(iova)?;
        self.bytes = self.bytes.saturating_sub(m.size);
        Some(m)
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
