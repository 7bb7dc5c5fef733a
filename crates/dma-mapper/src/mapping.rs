//! One guest mapping, and runs of adjacent whole mappings.

use crate::interval::{push_merged, IntervalMap, Merge, Span};
use crate::{checked_last, DmaError, DmaPerm};

/// One guest mapping: what a single successful MAP request created, and
/// what a backend holds as one host mapping.
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

impl Span for Mapping {
    fn start(&self) -> u64 {
        self.iova
    }
    fn size(&self) -> u64 {
        self.size
    }
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
    /// The run of one mapping.
    pub fn of(m: Mapping) -> Run {
        Run {
            iova: m.iova,
            size: m.size,
            mappings: vec![m],
        }
    }

    /// Exclusive end.
    pub fn end(&self) -> u64 {
        self.iova + self.size
    }
}

impl Span for Run {
    fn start(&self) -> u64 {
        self.iova
    }
    fn size(&self) -> u64 {
        self.size
    }
}

impl Merge for Run {
    fn absorb(&mut self, next: Self) {
        self.size += next.size;
        self.mappings.extend(next.mappings);
    }
}

/// Merges mappings (in IOVA order) into runs of adjacent ones: each run can
/// be unmapped with one backend call that covers whole host mappings only.
pub fn adjacent_runs<'a>(mappings: impl IntoIterator<Item = &'a Mapping>) -> Vec<Run> {
    let mut runs = Vec::new();
    for m in mappings {
        push_merged(&mut runs, Run::of(*m));
    }
    runs
}

/// The type1 v2 unmap rule on a backend's table: the last IOVA of an unmap
/// of `[iova, iova + size)`, or why it is refused (an empty or wrapping
/// range; a range that would split a mapping).
pub(crate) fn check_unmap(
    table: &IntervalMap<Mapping>,
    iova: u64,
    size: u64,
) -> Result<u64, DmaError> {
    let last = checked_last(iova, size)?;
    if table.splits(iova, last) {
        return Err(DmaError::SplitMapping { iova, size });
    }
    Ok(last)
}
