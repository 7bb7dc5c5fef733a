//! A software IOVA address space: what emulated devices translate through.
//!
//! A [`SoftAddressSpace`] is an interval map `iova -> (gpa, perm)` filled by
//! the virtio-iommu device through [`DmaMapper`]. An emulated device behind
//! the vIOMMU calls [`SoftAddressSpace::translate`] (or
//! [`SoftAddressSpace::translate_ranges`]) before each DMA and gets the
//! guest-physical address, or an error it turns into a fault report.
//!
//! Unmap follows VFIO type1 v2 exactly, so a device model tested against
//! this backend behaves the same on VFIO: an unmap may remove several whole
//! mappings and skip holes, but a range that would split a mapping fails
//! with [`DmaError::SplitMapping`] and changes nothing.

use std::sync::RwLock;

use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use crate::interval::{push_merged, range_last, Extent, IntervalMap};
use crate::mapping::check_unmap;
use crate::{
    check_aligned, checked_last, DmaError, DmaMapper, DmaPerm, Mapping, PAGE_SIZE_4K_MASK,
};

/// Why a device access cannot be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// The access is empty or its end overflows `u64`.
    #[error("access {iova:#x}+{len:#x} is empty or wraps around")]
    InvalidRange {
        /// Start of the access.
        iova: u64,
        /// Length of the access.
        len: u64,
    },
    /// No mapping covers `iova` (the first unmapped byte of the access).
    #[error("iova {iova:#x} is not mapped")]
    Unmapped {
        /// The first unmapped IOVA.
        iova: u64,
    },
    /// A mapping covers `iova` but does not grant the access.
    #[error("iova {iova:#x} is mapped {granted:?}, access needs {needed:?}")]
    Denied {
        /// The first IOVA whose mapping denies the access.
        iova: u64,
        /// What the mapping grants.
        granted: DmaPerm,
        /// What the access needs.
        needed: DmaPerm,
    },
    /// The access is mapped, but to guest-physical ranges that are not
    /// contiguous; use [`SoftAddressSpace::translate_ranges`].
    #[error("access {iova:#x}+{len:#x} maps to discontiguous guest memory")]
    Discontiguous {
        /// Start of the access.
        iova: u64,
        /// Length of the access.
        len: u64,
    },
}

/// An IOVA address space kept in software. See the [module docs](self).
#[derive(Debug)]
pub struct SoftAddressSpace {
    table: RwLock<IntervalMap<Mapping>>,
    page_size_mask: u64,
    /// Guest RAM as sorted, disjoint `(start, exclusive end)` ranges; `None`
    /// accepts any gpa.
    guest_ram: Option<Vec<(u64, u64)>>,
}

impl Default for SoftAddressSpace {
    fn default() -> Self {
        Self::new(PAGE_SIZE_4K_MASK)
    }
}

impl SoftAddressSpace {
    /// An empty address space mapping pages of the sizes in `page_size_mask`
    /// to any guest-physical address.
    pub fn new(page_size_mask: u64) -> Self {
        SoftAddressSpace {
            table: RwLock::new(IntervalMap::new()),
            page_size_mask,
            guest_ram: None,
        }
    }

    /// An empty address space that refuses to map anything outside the
    /// regions of `mem` (with [`DmaError::InvalidGpa`]).
    pub fn for_memory<M: GuestMemoryBackend>(mem: &M, page_size_mask: u64) -> Self {
        let mut ram: Vec<(u64, u64)> = mem
            .iter()
            .map(|r| {
                let start = r.start_addr().0;
                (start, start.saturating_add(r.len()))
            })
            .collect();
        ram.sort_unstable();
        SoftAddressSpace {
            guest_ram: Some(ram),
            ..Self::new(page_size_mask)
        }
    }

    fn read_table(&self) -> std::sync::RwLockReadGuard<'_, IntervalMap<Mapping>> {
        // A panic while holding the lock cannot leave the table half
        // updated (every update is a single insert or remove pass), so a
        // poisoned lock still holds a consistent table.
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_table(&self) -> std::sync::RwLockWriteGuard<'_, IntervalMap<Mapping>> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    fn gpa_is_ram(&self, gpa: u64, end: u64) -> bool {
        let Some(ram) = &self.guest_ram else {
            return true;
        };
        // Adjacent regions may together cover the range.
        let mut cursor = gpa;
        for &(start, stop) in ram {
            if start <= cursor && cursor < stop {
                cursor = stop;
                if cursor >= end {
                    return true;
                }
            }
        }
        false
    }

    /// Translate an access of `len` bytes at `iova` needing `access`, when
    /// the whole access maps to one contiguous guest-physical range.
    ///
    /// Returns the guest-physical address of `iova`.
    pub fn translate(&self, iova: u64, len: u64, access: DmaPerm) -> Result<u64, TranslateError> {
        // translate_ranges merges gpa-contiguous pieces, so more than one
        // piece means a discontiguity.
        match self.translate_ranges(iova, len, access)?.as_slice() {
            [(gpa, _)] => Ok(*gpa),
            _ => Err(TranslateError::Discontiguous { iova, len }),
        }
    }

    /// Translate an access of `len` bytes at `iova` needing `access` into
    /// guest-physical `(gpa, len)` pieces, in access order. The access may
    /// span several adjacent mappings; it fails on the first hole or
    /// denied byte.
    pub fn translate_ranges(
        &self,
        iova: u64,
        len: u64,
        access: DmaPerm,
    ) -> Result<Vec<(u64, u64)>, TranslateError> {
        let last = range_last(iova, len).ok_or(TranslateError::InvalidRange { iova, len })?;
        let end = last + 1;
        let table = self.read_table();
        let mut out: Vec<Extent> = Vec::new();
        let mut cursor = iova;
        while cursor < end {
            let e = table
                .lookup(cursor)
                .ok_or(TranslateError::Unmapped { iova: cursor })?;
            if !e.perm.allows(access) {
                return Err(TranslateError::Denied {
                    iova: cursor,
                    granted: e.perm,
                    needed: access,
                });
            }
            let piece_end = e.end().min(end);
            // cursor lies inside the entry, and gpa + size was validated
            // when the entry was mapped, so this does not overflow.
            let gpa = e.gpa + (cursor - e.iova);
            let size = piece_end - cursor;
            push_merged(&mut out, Extent { start: gpa, size });
            cursor = piece_end;
        }
        Ok(out.into_iter().map(|x| (x.start, x.size)).collect())
    }

    /// Number of live mappings.
    pub fn mapping_count(&self) -> usize {
        self.read_table().len()
    }

    /// The live mappings as `(iova, size, gpa, perm)`, in IOVA order.
    pub fn mappings(&self) -> Vec<(u64, u64, u64, DmaPerm)> {
        self.read_table()
            .iter()
            .map(|e| (e.iova, e.size, e.gpa, e.perm))
            .collect()
    }

    /// Remove every mapping; returns the number of bytes unmapped.
    pub fn unmap_all(&self) -> u64 {
        self.write_table().take_all().iter().map(|e| e.size).sum()
    }
}

impl DmaMapper for SoftAddressSpace {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let last = checked_last(iova, size)?;
        check_aligned(iova, gpa, size, self.page_size_mask)?;
        let gpa_end = gpa
            .checked_add(size)
            .ok_or(DmaError::InvalidGpa { gpa, size })?;
        if !self.gpa_is_ram(gpa, gpa_end) {
            return Err(DmaError::InvalidGpa { gpa, size });
        }
        let mut table = self.write_table();
        if table.overlaps(iova, last) {
            return Err(DmaError::Overlap { iova, size });
        }
        table.insert(Mapping {
            iova,
            size,
            gpa,
            perm,
        });
        Ok(())
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let mut table = self.write_table();
        let last = check_unmap(&table, iova, size)?;
        table.remove_within(iova, last);
        Ok(())
    }

    fn page_size_mask(&self) -> u64 {
        self.page_size_mask
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        SoftAddressSpace::unmap_all(self);
        Ok(())
    }

    /// Nothing here can refuse a removal, so the disowned mappings go at
    /// once: no translation outlives its owner's interest in it.
    fn disown(&self, iova: u64, size: u64) {
        if let Some(last) = range_last(iova, size) {
            self.write_table().remove_within(iova, last);
        }
    }
}

#[cfg(test)]
mod tests;
