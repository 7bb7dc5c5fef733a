//! The mapping table every backend keeps: which `map` calls are live.
//!
//! Entries are the ranges of whole `map` calls, keyed by their first IOVA.
//! They never overlap. The table is what gives every backend the VFIO type1
//! v2 unmap rule (an unmap may remove several whole mappings and skip holes,
//! but never split one) before any host call is made.

use std::collections::BTreeMap;
use std::ops::Bound;

/// One live mapping: `[iova, iova + size)` plus backend data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry<T> {
    /// First IOVA of the mapping.
    pub iova: u64,
    /// Length in bytes (> 0).
    pub size: u64,
    /// What the backend remembers about it.
    pub value: T,
}

impl<T> Entry<T> {
    /// Exclusive end. Entries are validated on insert, so this cannot overflow.
    pub fn end(&self) -> u64 {
        self.iova + self.size
    }
}

/// Non-overlapping IOVA ranges keyed by start.
#[derive(Debug)]
pub(crate) struct Table<T> {
    map: BTreeMap<u64, Entry<T>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            map: BTreeMap::new(),
        }
    }
}

/// Exclusive end of `[iova, iova + size)`, or `None` for an empty or
/// overflowing range.
pub(crate) fn range_end(iova: u64, size: u64) -> Option<u64> {
    if size == 0 {
        return None;
    }
    iova.checked_add(size)
}

impl<T> Table<T> {
    /// The entry containing `iova`, if any.
    pub fn lookup(&self, iova: u64) -> Option<&Entry<T>> {
        self.map
            .range(..=iova)
            .next_back()
            .map(|(_, e)| e)
            .filter(|e| iova < e.end())
    }

    /// Whether any entry intersects `[iova, end)`.
    pub fn overlaps(&self, iova: u64, end: u64) -> bool {
        if self.lookup(iova).is_some() {
            return true;
        }
        self.map
            .range((Bound::Excluded(iova), Bound::Excluded(end)))
            .next()
            .is_some()
    }

    /// Insert a range known not to overlap (check with [`Table::overlaps`]).
    pub fn insert(&mut self, iova: u64, size: u64, value: T) {
        debug_assert!(range_end(iova, size).is_some_and(|end| !self.overlaps(iova, end)));
        self.map.insert(iova, Entry { iova, size, value });
    }

    /// Whether `[iova, end)` cuts through an entry: an entry that starts
    /// before `iova` and reaches into the range, or one that starts inside
    /// the range and ends after `end`.
    pub fn splits(&self, iova: u64, end: u64) -> bool {
        if let Some(e) = self.lookup(iova) {
            if e.iova != iova {
                return true;
            }
        }
        // The last entry starting inside the range is the only one that can
        // stick out of its end.
        self.map
            .range(iova..end)
            .next_back()
            .is_some_and(|(_, e)| e.end() > end)
    }

    /// Entries lying inside `[iova, end)`, in IOVA order.
    pub fn within(&self, iova: u64, end: u64) -> impl Iterator<Item = &Entry<T>> {
        self.map.range(iova..end).map(|(_, e)| e)
    }

    /// Remove and return the entries starting inside `[iova, end)`.
    /// Call only after [`Table::splits`] said no, so they lie wholly inside.
    pub fn remove_within(&mut self, iova: u64, end: u64) -> Vec<Entry<T>> {
        let keys: Vec<u64> = self.map.range(iova..end).map(|(k, _)| *k).collect();
        keys.into_iter()
            .filter_map(|k| self.map.remove(&k))
            .collect()
    }

    /// All entries, in IOVA order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry<T>> {
        self.map.values()
    }

    /// Remove everything, returning the entries.
    pub fn take_all(&mut self) -> Vec<Entry<T>> {
        std::mem::take(&mut self.map).into_values().collect()
    }

    /// Number of live mappings.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lookup_and_overlap() {
        let mut t = Table::default();
        t.insert(0x1000, 0x1000, 'a');
        t.insert(0x3000, 0x2000, 'b');
        assert_eq!(t.lookup(0x1fff).map(|e| e.value), Some('a'));
        assert!(t.lookup(0x2000).is_none());
        assert_eq!(t.lookup(0x4fff).map(|e| e.value), Some('b'));
        assert!(t.lookup(0x5000).is_none());
        assert!(!t.overlaps(0x2000, 0x3000));
        assert!(t.overlaps(0x2000, 0x3001));
        assert!(t.overlaps(0x1fff, 0x2000));
        assert!(t.overlaps(0, u64::MAX));
        assert!(!t.overlaps(0x5000, u64::MAX));
    }

    #[test]
    fn splits_detects_both_ends() {
        let mut t = Table::default();
        t.insert(0x1000, 0x2000, ());
        assert!(!t.splits(0x1000, 0x3000));
        assert!(!t.splits(0, 0x4000));
        assert!(!t.splits(0x3000, 0x4000));
        assert!(t.splits(0x2000, 0x3000)); // starts inside
        assert!(t.splits(0x1000, 0x2000)); // ends inside
        assert!(t.splits(0, 0x2000));
        assert!(t.splits(0x1800, 0x1900)); // strictly inside
    }

    #[test]
    fn remove_within_takes_whole_entries_only_inside() {
        let mut t = Table::default();
        t.insert(0x1000, 0x1000, 1);
        t.insert(0x2000, 0x1000, 2);
        t.insert(0x8000, 0x1000, 3);
        let gone = t.remove_within(0x1000, 0x8000);
        assert_eq!(gone.iter().map(|e| e.value).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.iter().next().map(|e| e.value), Some(3));
    }

    #[test]
    fn range_end_rejects_empty_and_overflow() {
        assert_eq!(range_end(0, 0), None);
        assert_eq!(range_end(u64::MAX, 1), None);
        assert_eq!(range_end(u64::MAX - 1, 1), Some(u64::MAX));
    }

    // Model: a byte-granular owner array over a small IOVA space.
    proptest! {
        #[test]
        fn matches_byte_model(ops in prop::collection::vec((0u64..64, 1u64..16, any::<bool>()), 1..60)) {
            const SPACE: u64 = 80;
            let mut t = Table::default();
            // For each byte: the (start, end) of the mapping holding it.
            let mut owner: Vec<Option<(u64, u64)>> = vec![None; SPACE as usize];
            for (iova, size, is_map) in ops {
                let end = iova + size;
                let model_overlap = (iova..end).any(|b| owner[b as usize].is_some());
                prop_assert_eq!(t.overlaps(iova, end), model_overlap);
                let model_split = (iova..end)
                    .any(|b| owner[b as usize].is_some_and(|(s, e)| s < iova || e > end));
                prop_assert_eq!(t.splits(iova, end), model_split);
                if is_map && !model_overlap {
                    t.insert(iova, size, ());
                    for b in iova..end {
                        owner[b as usize] = Some((iova, end));
                    }
                } else if !is_map && !model_split {
                    for e in t.remove_within(iova, end) {
                        for b in e.iova..e.end() {
                            owner[b as usize] = None;
                        }
                    }
                    prop_assert!((iova..end).all(|b| owner[b as usize].is_none()));
                }
                for b in 0..SPACE {
                    prop_assert_eq!(t.lookup(b).map(|e| (e.iova, e.end())), owner[b as usize]);
                }
            }
        }
    }
}
