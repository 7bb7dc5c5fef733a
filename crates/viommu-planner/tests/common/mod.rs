//! A fake host for the planner's integration tests: it fails calls
//! touching poisoned pages (atomically), logs every call and records
//! protocol violations.

#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use dma_mapper::{DmaError, DmaMapper, DmaPerm};
use viommu_planner::Mapping;

pub const PAGE: u64 = 0x1000;
pub const PAGES: u64 = 48;
pub const LIMIT: usize = 24;

/// A mapping as an ordered key: (iova, size, gpa, read, write).
pub type K = (u64, u64, u64, bool, bool);

pub fn key(m: &Mapping) -> K {
    (m.iova, m.size, m.gpa, m.perm.read, m.perm.write)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Map(u64, u64),
    Unmap(u64, u64),
}

/// A host that fails calls touching poisoned pages (atomically: a failed
/// call changes nothing) and records protocol violations.
#[derive(Default)]
pub struct FakeHost {
    pub maps: BTreeMap<u64, (u64, u64, DmaPerm)>,
    pub map_poison: BTreeSet<u64>,
    pub unmap_poison: BTreeSet<u64>,
    pub log: Vec<Event>,
    pub violations: Vec<String>,
    /// Host mappings the caller disowned (its rollback failed): still on
    /// the host until an unmap removes them.
    pub leftovers: BTreeSet<u64>,
}

pub fn touches(poison: &BTreeSet<u64>, iova: u64, size: u64) -> bool {
    poison
        .range(iova / PAGE..(iova + size).div_ceil(PAGE))
        .next()
        .is_some()
}

pub fn host_err(op: &'static str, iova: u64, size: u64) -> DmaError {
    DmaError::Host {
        op,
        iova,
        size,
        source: std::io::Error::other("injected"),
    }
}

#[derive(Clone, Default)]
pub struct Fake(pub Arc<Mutex<FakeHost>>);

impl Fake {
    pub fn with<R>(&self, f: impl FnOnce(&mut FakeHost) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
    pub fn mappings(&self) -> BTreeSet<K> {
        self.with(|h| {
            h.maps
                .iter()
                .map(|(&iova, &(size, gpa, perm))| (iova, size, gpa, perm.read, perm.write))
                .collect()
        })
    }
}

impl DmaMapper for Fake {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        self.with(|h| {
            h.log.push(Event::Map(iova, size));
            let end = iova + size;
            let over = h
                .maps
                .range(..end)
                .next_back()
                .filter(|(&s, &(sz, _, _))| s + sz > iova)
                .map(|(&s, _)| s);
            if over.is_some_and(|s| h.leftovers.contains(&s)) {
                // The caller does not know about leftovers: no violation.
                return Err(DmaError::Overlap { iova, size });
            }
            if over.is_some() {
                h.violations
                    .push(format!("map over a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::Overlap { iova, size });
            }
            if touches(&h.map_poison, iova, size) {
                return Err(host_err("map", iova, size));
            }
            h.maps.insert(iova, (size, gpa, perm));
            Ok(())
        })
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        self.with(|h| {
            h.log.push(Event::Unmap(iova, size));
            let end = iova + size;
            let hit: Vec<(u64, u64)> = h
                .maps
                .iter()
                .filter(|(&s, &(sz, _, _))| s < end && s + sz > iova)
                .map(|(&s, &(sz, _, _))| (s, sz))
                .collect();
            if hit.iter().any(|&(s, sz)| s < iova || s + sz > end) {
                h.violations
                    .push(format!("unmap splits a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::SplitMapping { iova, size });
            }
            if touches(&h.unmap_poison, iova, size) {
                return Err(host_err("unmap", iova, size));
            }
            for (s, _) in hit {
                h.maps.remove(&s);
                h.leftovers.remove(&s);
            }
            Ok(())
        })
    }

    fn page_size_mask(&self) -> u64 {
        !(PAGE - 1)
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        self.with(|h| {
            h.maps.clear();
            h.leftovers.clear();
        });
        Ok(())
    }

    /// One more attempt to remove them first (as VFIO's mapper does).
    fn has_leftovers(&self) -> bool {
        self.with(|h| {
            let gone: Vec<u64> = h
                .leftovers
                .iter()
                .copied()
                .filter(|&s| !touches(&h.unmap_poison, s, h.maps[&s].0))
                .collect();
            for s in gone {
                h.maps.remove(&s);
                h.leftovers.remove(&s);
            }
            !h.leftovers.is_empty()
        })
    }

    fn disown(&self, iova: u64, size: u64) {
        self.with(|h| {
            let inside: Vec<u64> = h.maps.range(iova..iova + size).map(|(&s, _)| s).collect();
            h.leftovers.extend(inside);
        })
    }
}
