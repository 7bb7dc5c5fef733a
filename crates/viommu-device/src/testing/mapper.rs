//! A fake host mapper: an address space in memory with the rules of VFIO
//! type1 v2, failure injection and a call log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use dma_mapper::{DmaError, DmaMapper, DmaPerm};

/// One call seen by [`FakeMapper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeCall {
    /// `map(iova, gpa, size, perm)`.
    Map {
        /// IOVA.
        iova: u64,
        /// Guest-physical address.
        gpa: u64,
        /// Size.
        size: u64,
        /// Rights.
        perm: DmaPerm,
    },
    /// `unmap(iova, size)`.
    Unmap {
        /// IOVA.
        iova: u64,
        /// Size.
        size: u64,
    },
}

type FailFn = Box<dyn Fn(&FakeCall) -> bool + Send>;

#[derive(Default)]
struct FakeState {
    maps: BTreeMap<u64, (u64, u64, DmaPerm)>,
    log: Vec<FakeCall>,
    violations: Vec<String>,
    fail: Option<FailFn>,
    /// `unmap_all` fails too (the fault plan covers single calls only).
    fail_unmap_all: bool,
    /// Host mappings (keys of `maps`) no successful map made or that the
    /// caller disowned: a failed map's undo failed.
    leftovers: BTreeSet<u64>,
    record: bool,
    calls: u64,
}

impl FakeCall {
    /// The operation's name, IOVA and size.
    fn op_range(&self) -> (&'static str, u64, u64) {
        match *self {
            FakeCall::Map { iova, size, .. } => ("map", iova, size),
            FakeCall::Unmap { iova, size } => ("unmap", iova, size),
        }
    }
}

impl FakeState {
    /// Counts `call` and logs it when recording; returns the end of its
    /// range, or `None` (a violation, recorded) if the range is empty or
    /// wraps.
    fn note(&mut self, call: FakeCall) -> Option<u64> {
        self.calls += 1;
        if self.record {
            self.log.push(call);
        }
        let (op, iova, size) = call.op_range();
        let end = iova.checked_add(size).filter(|_| size > 0);
        if end.is_none() {
            self.violations
                .push(format!("bad {op} range {iova:#x}+{size:#x}"));
        }
        end
    }
}

/// A host address space in memory that behaves like VFIO type1 v2: maps
/// must not overlap, unmaps must cover whole mappings, a failed call changes
/// nothing. Protocol violations are recorded (and refused).
#[derive(Default)]
pub struct FakeMapper {
    state: Mutex<FakeState>,
}

impl FakeMapper {
    /// An empty address space that records every call.
    pub fn new() -> Self {
        let m = FakeMapper::default();
        m.with(|s| s.record = true);
        m
    }

    /// An empty address space that only counts calls (for benches).
    pub fn counting() -> Self {
        FakeMapper::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut FakeState) -> R) -> R {
        let mut g = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Makes every call for which `pred` is true fail.
    pub fn fail_when(&self, pred: impl Fn(&FakeCall) -> bool + Send + 'static) {
        self.with(|s| s.fail = Some(Box::new(pred)));
    }

    /// Stops injecting failures.
    pub fn fail_never(&self) {
        self.with(|s| {
            s.fail = None;
            s.fail_unmap_all = false;
        });
    }

    /// Puts a host mapping at `iova` that no successful map made, as a
    /// failed map whose undo failed leaves (what [`DmaError::Leftover`]
    /// reports): [`DmaMapper::has_leftovers`] is true until it is removed.
    pub fn add_leftover(&self, iova: u64, size: u64) {
        self.with(|s| {
            s.maps.insert(iova, (size, iova, DmaPerm::RW));
            s.leftovers.insert(iova);
        });
    }

    /// The host mappings held as leftovers, `(iova, size)` in IOVA order.
    pub fn leftovers(&self) -> Vec<(u64, u64)> {
        self.with(|s| {
            s.leftovers
                .iter()
                .filter_map(|i| s.maps.get(i).map(|&(size, _, _)| (*i, size)))
                .collect()
        })
    }

    /// Makes `unmap_all` fail as well (until [`Self::fail_never`]).
    pub fn fail_unmap_all(&self) {
        self.with(|s| s.fail_unmap_all = true);
    }

    /// Current mappings `(iova, size, gpa, perm)` in IOVA order.
    pub fn mappings(&self) -> Vec<(u64, u64, u64, DmaPerm)> {
        self.with(|s| {
            s.maps
                .iter()
                .map(|(&i, &(sz, g, p))| (i, sz, g, p))
                .collect()
        })
    }

    /// The guest-physical address `iova` translates to with `need`
    /// rights, as the device behind this address space would see it;
    /// `None` (an IOMMU fault) if no mapping covers it or the rights lack.
    pub fn translate(&self, iova: u64, need: DmaPerm) -> Option<u64> {
        self.with(|s| {
            let (&start, &(size, gpa, perm)) = s.maps.range(..=iova).next_back()?;
            (iova - start < size && perm.allows(need)).then(|| gpa + (iova - start))
        })
    }

    /// Calls seen (when recording).
    pub fn log(&self) -> Vec<FakeCall> {
        self.with(|s| s.log.clone())
    }

    /// Forgets the call log.
    pub fn clear_log(&self) {
        self.with(|s| s.log.clear());
    }

    /// Number of calls seen.
    pub fn calls(&self) -> u64 {
        self.with(|s| s.calls)
    }

    /// Protocol violations seen (overlapping maps, splitting unmaps).
    pub fn violations(&self) -> Vec<String> {
        self.with(|s| s.violations.clone())
    }

    fn injected(call: &FakeCall) -> DmaError {
        let (op, iova, size) = call.op_range();
        DmaError::Host {
            op,
            iova,
            size,
            source: std::io::Error::other("injected failure"),
        }
    }
}

impl DmaMapper for FakeMapper {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let call = FakeCall::Map {
            iova,
            gpa,
            size,
            perm,
        };
        self.with(|s| {
            let Some(end) = s.note(call) else {
                return Err(DmaError::Overlap { iova, size });
            };
            let over = s
                .maps
                .range(..end)
                .next_back()
                .filter(|(&st, &(sz, _, _))| st + sz > iova)
                .map(|(&st, _)| st);
            if over.is_some_and(|st| s.leftovers.contains(&st)) {
                // Refused like VFIO's mapper refuses a map over its strays:
                // the device cannot know of them, no violation.
                return Err(DmaError::Overlap { iova, size });
            }
            if over.is_some() {
                s.violations
                    .push(format!("map over a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::Overlap { iova, size });
            }
            if s.fail.as_ref().is_some_and(|f| f(&call)) {
                return Err(Self::injected(&call));
            }
            s.maps.insert(iova, (size, gpa, perm));
            Ok(())
        })
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let call = FakeCall::Unmap { iova, size };
        self.with(|s| {
            let Some(end) = s.note(call) else {
                return Err(DmaError::SplitMapping { iova, size });
            };
            let hit: Vec<(u64, u64)> = s
                .maps
                .range(..end)
                .rev()
                .take_while(|(&st, &(sz, _, _))| st + sz > iova)
                .map(|(&st, &(sz, _, _))| (st, sz))
                .collect();
            if hit.iter().any(|&(st, sz)| st < iova || st + sz > end) {
                s.violations
                    .push(format!("unmap splits a host mapping {iova:#x}+{size:#x}"));
                return Err(DmaError::SplitMapping { iova, size });
            }
            if s.fail.as_ref().is_some_and(|f| f(&call)) {
                return Err(Self::injected(&call));
            }
            for (st, _) in hit {
                s.maps.remove(&st);
                s.leftovers.remove(&st);
            }
            Ok(())
        })
    }

    fn page_size_mask(&self) -> u64 {
        !0xfff
    }

    fn unmap_all(&self) -> Result<(), DmaError> {
        self.with(|s| {
            s.calls += 1;
            if s.fail_unmap_all {
                return Err(DmaError::Host {
                    op: "unmap all",
                    iova: 0,
                    size: u64::MAX,
                    source: std::io::Error::other("injected"),
                });
            }
            s.maps.clear();
            s.leftovers.clear();
            Ok(())
        })
    }

    /// One more attempt to remove them first (an unmap the fault plan
    /// may fail, not logged), as VFIO's mapper does.
    fn has_leftovers(&self) -> bool {
        self.with(|s| {
            let kept: BTreeSet<u64> = s
                .leftovers
                .iter()
                .copied()
                .filter(|&iova| {
                    let size = s.maps.get(&iova).map_or(0, |m| m.0);
                    let retry = FakeCall::Unmap { iova, size };
                    size > 0 && s.fail.as_ref().is_some_and(|f| f(&retry))
                })
                .collect();
            for gone in s.leftovers.difference(&kept) {
                s.maps.remove(gone);
            }
            s.leftovers = kept;
            !s.leftovers.is_empty()
        })
    }

    fn disown(&self, iova: u64, size: u64) {
        self.with(|s| {
            let end = iova.saturating_add(size);
            let inside: Vec<u64> = s
                .maps
                .range(iova..end)
                .filter(|(&st, &(sz, _, _))| st + sz <= end)
                .map(|(&st, _)| st)
                .collect();
            s.leftovers.extend(inside);
        })
    }
}
