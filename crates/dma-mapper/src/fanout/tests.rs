use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use proptest::prelude::*;

use super::*;
use crate::DmaPerm;

const PAGE: u64 = 0x1000;

/// A host address space failing the calls whose sequence numbers are in
/// `fail` (a failed call changes nothing); disowned mappings stay on
/// it, as leftovers, until an unmap or unmap-all removes them.
#[derive(Default)]
struct Host {
    state: Mutex<HostState>,
}

#[derive(Default)]
struct HostState {
    maps: BTreeMap<u64, u64>,
    leftovers: BTreeSet<u64>,
    fail: BTreeSet<u64>,
    seq: u64,
}

impl Host {
    fn failing(calls: impl IntoIterator<Item = u64>) -> Self {
        let h = Host::default();
        h.st().fail = calls.into_iter().collect();
        h
    }
    fn st(&self) -> std::sync::MutexGuard<'_, HostState> {
        self.state.lock().unwrap()
    }
    fn holds(&self) -> BTreeSet<u64> {
        self.st().maps.keys().copied().collect()
    }
    fn leftovers(&self) -> BTreeSet<u64> {
        self.st().leftovers.clone()
    }
    fn fails_now(st: &mut HostState) -> bool {
        st.seq += 1;
        st.fail.contains(&(st.seq - 1))
    }
    fn error(op: &'static str, iova: u64, size: u64) -> DmaError {
        DmaError::Host {
            op,
            iova,
            size,
            source: std::io::Error::other("injected"),
        }
    }
}

impl DmaMapper for Host {
    fn map(&self, iova: u64, _gpa: u64, size: u64, _perm: DmaPerm) -> Result<(), DmaError> {
        let mut st = self.st();
        if Self::fails_now(&mut st) {
            return Err(Self::error("map", iova, size));
        }
        let end = iova + size;
        if st.maps.iter().any(|(&i, &s)| i < end && iova < i + s) {
            return Err(DmaError::Overlap { iova, size });
        }
        st.maps.insert(iova, size);
        Ok(())
    }
    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        let mut st = self.st();
        if Self::fails_now(&mut st) {
            return Err(Self::error("unmap", iova, size));
        }
        let inside: Vec<u64> = st.maps.range(iova..iova + size).map(|(&i, _)| i).collect();
        for i in inside {
            st.maps.remove(&i);
            st.leftovers.remove(&i);
        }
        Ok(())
    }
    fn page_size_mask(&self) -> u64 {
        !(PAGE - 1)
    }
    fn unmap_all(&self) -> Result<(), DmaError> {
        let mut st = self.st();
        st.maps.clear();
        st.leftovers.clear();
        Ok(())
    }
    fn has_leftovers(&self) -> bool {
        !self.st().leftovers.is_empty()
    }
    fn disown(&self, iova: u64, size: u64) {
        let mut st = self.st();
        let inside: Vec<u64> = st.maps.range(iova..iova + size).map(|(&i, _)| i).collect();
        st.leftovers.extend(inside);
    }
}

fn mapping(page: u64) -> Mapping {
    Mapping::new(page * PAGE, PAGE, page * PAGE, DmaPerm::RW).unwrap()
}

/// Mapper 1 refuses the map, mapper 0's rollback unmap fails: the map
/// fails with `Leftover` and mapper 0 reports the mapping as a leftover.
#[test]
fn a_failed_map_rollback_leaves_a_reported_leftover() {
    let (a, b) = (Arc::new(Host::failing([1])), Arc::new(Host::failing([0])));
    let mappers: Vec<Arc<dyn DmaMapper>> = vec![a.clone(), b.clone()];
    let mut stats = DmaStats::default();
    let err = MapperSet::new(&mappers, &mut stats)
        .map(&mapping(3))
        .unwrap_err();
    assert!(
        matches!(err, DmaError::Leftover { left: PAGE, .. }),
        "{err:?}"
    );
    assert_eq!(a.holds(), BTreeSet::from([3 * PAGE]), "still on host a");
    assert!(a.has_leftovers(), "and reported");
    assert!(b.holds().is_empty() && !b.has_leftovers());
    assert_eq!((stats.map_failures, stats.unmap_failures), (1, 1));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random maps and unmaps over two or three mappers, each failing
    /// random calls: after every call, whatever a host holds beyond
    /// what the caller believes mapped is a leftover it reports, and a
    /// failed map that left something behind says so (`Leftover`).
    #[test]
    fn untracked_host_mappings_are_always_reported_leftovers(
        n in 2..4usize,
        ops in proptest::collection::vec((any::<bool>(), 0..12u64), 1..60),
        fails in proptest::collection::vec(proptest::collection::btree_set(0..80u64, 0..12), 3),
    ) {
        let hosts: Vec<Arc<Host>> = (0..n).map(|i| Arc::new(Host::failing(fails[i].clone()))).collect();
        let mappers: Vec<Arc<dyn DmaMapper>> = hosts.iter().map(|h| h.clone() as Arc<dyn DmaMapper>).collect();
        let mut stats = DmaStats::default();
        // What the caller believes is mapped (on every host).
        let mut tracked: BTreeSet<u64> = BTreeSet::new();
        for (is_map, page) in ops {
            let m = mapping(page);
            let mut set = MapperSet::new(&mappers, &mut stats);
            if is_map && !tracked.contains(&m.iova) {
                let before: Vec<bool> = hosts.iter().map(|h| h.holds().contains(&m.iova)).collect();
                match set.map(&m) {
                    Ok(()) => { tracked.insert(m.iova); }
                    Err(e) => {
                        // Newly left behind (an older leftover refuses the map).
                        let left = hosts.iter().zip(&before).any(|(h, &b)| !b && h.holds().contains(&m.iova));
                        prop_assert_eq!(left, matches!(e, DmaError::Leftover { .. }), "{:?}", e);
                    }
                }
            } else if !is_map && tracked.contains(&m.iova) && set.unmap(&Run::of(m)).is_ok() {
                tracked.remove(&m.iova);
            }
            for (i, h) in hosts.iter().enumerate() {
                let untracked: BTreeSet<u64> = h.holds().difference(&tracked).copied().collect();
                prop_assert!(untracked.is_subset(&h.leftovers()), "host {}: {:x?} untracked, {:x?} reported", i, untracked, h.leftovers());
                prop_assert_eq!(h.has_leftovers(), !h.leftovers().is_empty());
            }
        }
    }
}
