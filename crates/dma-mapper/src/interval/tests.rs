use super::*;
use proptest::prelude::*;

fn x(start: u64, size: u64) -> Extent {
    Extent { start, size }
}

#[test]
fn lookup_and_overlap() {
    let mut t = IntervalMap::new();
    t.insert(x(0x1000, 0x1000));
    t.insert(x(0x3000, 0x2000));
    assert_eq!(t.lookup(0x1fff), Some(&x(0x1000, 0x1000)));
    assert!(t.lookup(0x2000).is_none());
    assert_eq!(t.lookup(0x4fff), Some(&x(0x3000, 0x2000)));
    assert!(t.lookup(0x5000).is_none());
    assert!(!t.overlaps(0x2000, 0x2fff));
    assert!(t.overlaps(0x2000, 0x3000));
    assert!(t.overlaps(0x1fff, 0x1fff));
    assert!(t.overlaps(0, u64::MAX));
    assert!(!t.overlaps(0x5000, u64::MAX));
    assert_eq!(t.overlapping(0x1800, 0x3000).count(), 2);
}

#[test]
fn splits_detects_both_ends() {
    let mut t = IntervalMap::new();
    t.insert(x(0x1000, 0x2000));
    assert!(!t.splits(0x1000, 0x2fff));
    assert!(!t.splits(0, 0x3fff));
    assert!(!t.splits(0x3000, 0x3fff));
    assert!(t.splits(0x2000, 0x2fff)); // starts inside
    assert!(t.splits(0x1000, 0x1fff)); // ends inside
    assert!(t.splits(0, 0x1fff));
    assert!(t.splits(0x1800, 0x18ff)); // strictly inside
}

#[test]
fn remove_within_takes_whole_spans_only_inside() {
    let mut t = IntervalMap::new();
    t.insert(x(0x1000, 0x1000));
    t.insert(x(0x2000, 0x1000));
    t.insert(x(0x8000, 0x1000));
    let gone = t.remove_within(0x1000, 0x7fff);
    assert_eq!(gone, [x(0x1000, 0x1000), x(0x2000, 0x1000)]);
    assert_eq!(t.len(), 1);
    assert_eq!(t.iter().next(), Some(&x(0x8000, 0x1000)));
}

#[test]
fn range_last_rejects_empty_and_overflow() {
    assert_eq!(range_last(0, 0), None);
    assert_eq!(range_last(u64::MAX, 1), None);
    assert_eq!(range_last(u64::MAX - 1, 1), Some(u64::MAX - 1));
}

#[test]
fn merges_adjacent_runs_at_either_end() {
    let mut runs = Vec::new();
    for e in [x(0, 1), x(1, 2), x(4, 1), x(5, 1), x(u64::MAX, 1)] {
        push_merged(&mut runs, e);
    }
    assert_eq!(runs, [x(0, 3), x(4, 2), x(u64::MAX, 1)]);
    let mut r = x(0x10, 0x10);
    assert_eq!(join_either_end(&mut r, x(0x20, 8)), None);
    assert_eq!(join_either_end(&mut r, x(0x8, 8)), None);
    assert_eq!(r, x(0x8, 0x20));
    assert_eq!(join_either_end(&mut r, x(0x40, 8)), Some(x(0x40, 8)));
}

// Model: a byte-granular owner array over a small address space.
proptest! {
    #[test]
    fn matches_byte_model(ops in prop::collection::vec((0u64..64, 1u64..16, any::<bool>()), 1..60)) {
        const SPACE: u64 = 80;
        let mut t = IntervalMap::new();
        // For each byte: the (start, last) of the span holding it.
        let mut owner: Vec<Option<(u64, u64)>> = vec![None; SPACE as usize];
        for (start, size, is_map) in ops {
            let last = start + size - 1;
            let model_overlap = (start..=last).any(|b| owner[b as usize].is_some());
            prop_assert_eq!(t.overlaps(start, last), model_overlap);
            let model_split = (start..=last)
                .any(|b| owner[b as usize].is_some_and(|(s, l)| s < start || l > last));
            prop_assert_eq!(t.splits(start, last), model_split);
            if is_map && !model_overlap {
                t.insert(x(start, size));
                for b in start..=last {
                    owner[b as usize] = Some((start, last));
                }
            } else if !is_map && !model_split {
                for e in t.remove_within(start, last) {
                    for b in e.start..=e.last() {
                        owner[b as usize] = None;
                    }
                }
                prop_assert!((start..=last).all(|b| owner[b as usize].is_none()));
            }
            for b in 0..SPACE {
                prop_assert_eq!(t.lookup(b).map(|e| (e.start, e.last())), owner[b as usize]);
            }
        }
    }
}
