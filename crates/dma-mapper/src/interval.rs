//! The one interval map of the project, and the one merge of adjacent runs.
//!
//! [`IntervalMap`] holds non-overlapping ranges keyed by their first
//! address. Every mapping table is one: the device's per-domain table and
//! its deferred unmaps (`viommu-planner`), the live mappings of the software
//! and VFIO backends. It is what gives them all the VFIO type1 v2 unmap rule
//! (an unmap may remove several whole mappings and skip holes, but never
//! split one) before any host call is made.
//!
//! [`push_merged`] is the one place where a range that starts where the
//! previous one ends is folded into it: runs of adjacent mappings unmapped
//! with one call, host-contiguous pieces of a guest range, guest-physical
//! pieces of a translation.
//!
//! Ranges here are inclusive (`first..=last`), so a range may reach the top
//! of the address space; a [`Span`] itself is `start` + `size` with
//! `size > 0`.

use std::collections::BTreeMap;

/// Something that covers `[start, start + size)`, `size > 0`.
pub trait Span {
    /// First address.
    fn start(&self) -> u64;
    /// Length in bytes (> 0).
    fn size(&self) -> u64;
    /// Last address (inclusive). Cannot overflow for a valid span.
    fn last(&self) -> u64 {
        self.start() + (self.size() - 1)
    }
}

/// A [`Span`] that can absorb the span that follows it directly.
pub trait Merge: Span + Sized {
    /// Grow `self` by `next`, which starts at `self.last() + 1`.
    fn absorb(&mut self, next: Self);
}

/// Whether `b` starts right after `a` ends.
pub fn adjacent<A: Span, B: Span>(a: &A, b: &B) -> bool {
    a.last().checked_add(1) == Some(b.start())
}

/// Appends `next` to `runs`, folded into the last run when it starts where
/// that run ends.
pub fn push_merged<T: Merge>(runs: &mut Vec<T>, next: T) {
    match runs.last_mut() {
        Some(last) if adjacent(last, &next) => last.absorb(next),
        _ => runs.push(next),
    }
}

/// Folds `next` into `run` if it continues it at either end (for runs that
/// grow downwards too); gives it back otherwise.
pub fn join_either_end<T: Merge>(run: &mut T, next: T) -> Option<T> {
    if adjacent(run, &next) {
        run.absorb(next);
        None
    } else if adjacent(&next, run) {
        let before = std::mem::replace(run, next);
        run.absorb(before);
        None
    } else {
        Some(next)
    }
}

/// A plain extent `[start, start + size)` (a guest-physical piece, a run
/// of host IOVA space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Span for Extent {
    fn start(&self) -> u64 {
        self.start
    }
    fn size(&self) -> u64 {
        self.size
    }
}

impl Merge for Extent {
    fn absorb(&mut self, next: Self) {
        self.size += next.size;
    }
}

/// Non-overlapping spans keyed by their first address.
#[derive(Clone, Debug)]
pub struct IntervalMap<T> {
    map: BTreeMap<u64, T>,
}

impl<T> Default for IntervalMap<T> {
    fn default() -> Self {
        IntervalMap {
            map: BTreeMap::new(),
        }
    }
}

impl<T: Span> IntervalMap<T> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The span containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<&T> {
        let (_, e) = self.map.range(..=addr).next_back()?;
        (e.last() >= addr).then_some(e)
    }

    /// Spans intersecting `[first, last]`, in address order.
    pub fn overlapping(&self, first: u64, last: u64) -> impl Iterator<Item = &T> + '_ {
        let before = self
            .map
            .range(..first)
            .next_back()
            .map(|(_, e)| e)
            .filter(|e| e.last() >= first);
        before
            .into_iter()
            .chain(self.map.range(first..=last.max(first)).map(|(_, e)| e))
    }

    /// Whether any span intersects `[first, last]`.
    pub fn overlaps(&self, first: u64, last: u64) -> bool {
        self.overlapping(first, last).next().is_some()
    }

    /// Whether `[first, last]` cuts through a span: one that starts before
    /// `first` and reaches into the range, or one that starts inside it and
    /// ends after `last`.
    pub fn splits(&self, first: u64, last: u64) -> bool {
        if self.lookup(first).is_some_and(|e| e.start() != first) {
            return true;
        }
        // The last span starting inside the range is the only one that can
        // stick out of its end.
        self.map
            .range(first..=last.max(first))
            .next_back()
            .is_some_and(|(_, e)| e.last() > last)
    }

    /// Spans starting inside `[first, last]`, in address order (they lie
    /// wholly inside unless [`Self::splits`] says otherwise).
    pub fn within(&self, first: u64, last: u64) -> impl Iterator<Item = &T> + '_ {
        self.map.range(first..=last.max(first)).map(|(_, e)| e)
    }

    /// Inserts a span the caller knows does not overlap (check with
    /// [`Self::overlaps`]).
    pub fn insert(&mut self, span: T) {
        debug_assert!(!self.overlaps(span.start(), span.last()));
        self.map.insert(span.start(), span);
    }

    /// Removes and returns the spans starting inside `[first, last]`. Call
    /// only after [`Self::splits`] said no, so they lie wholly inside.
    pub fn remove_within(&mut self, first: u64, last: u64) -> Vec<T> {
        let keys: Vec<u64> = self.within(first, last).map(Span::start).collect();
        keys.into_iter()
            .filter_map(|k| self.map.remove(&k))
            .collect()
    }
}

impl<T> IntervalMap<T> {
    /// The span starting exactly at `start`.
    pub fn get(&self, start: u64) -> Option<&T> {
        self.map.get(&start)
    }

    /// The span starting exactly at `start`, mutably (its range must not change).
    pub fn get_mut(&mut self, start: u64) -> Option<&mut T> {
        self.map.get_mut(&start)
    }

    /// Removes the span starting exactly at `start`.
    pub fn remove(&mut self, start: u64) -> Option<T> {
        self.map.remove(&start)
    }

    /// All spans, in address order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.map.values()
    }

    /// Removes everything, returning the spans in address order.
    pub fn take_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.map).into_values().collect()
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Number of spans.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Last address of `[start, start + size)`, or `None` for an empty range
/// or one whose exclusive end overflows `u64`.
pub fn range_last(start: u64, size: u64) -> Option<u64> {
    if size == 0 {
        return None;
    }
    start.checked_add(size).map(|end| end - 1)
}

#[cfg(test)]
mod tests;
