use proptest::prelude::*;

use super::*;

const US: Duration = Duration::from_micros(1);

#[test]
fn grows_from_zero_on_short_gaps_and_shrinks_to_zero_on_long_ones() {
    let mut w = PollWindow::new(100 * US);
    assert_eq!(w.current(), 100 * US, "starts at the bound");
    // Requests far apart: every poll times out for nothing.
    for want_ns in [50_000, 25_000, 12_500, 0, 0] {
        w.observe_gap(Duration::from_millis(5));
        assert_eq!(w.current(), Duration::from_nanos(want_ns));
    }
    // Requests 30 us apart: each missed one a poll of twice the
    // window would have caught.
    for want in [10, 20, 40, 40, 40] {
        w.observe_gap(30 * US);
        assert_eq!(w.current(), want * US);
    }
    // Closer still: caught, the window stays.
    w.observe_gap(5 * US);
    assert_eq!(w.current(), 40 * US);
    // The core was wanted elsewhere.
    w.observe_preempted();
    assert_eq!(w.current(), 20 * US);
    w.observe_gap(30 * US);
    assert_eq!(w.current(), 40 * US);
    // Gaps just under the bound grow it to the bound, not past it.
    for _ in 0..4 {
        w.observe_gap(99 * US);
    }
    assert_eq!(w.current(), 100 * US);
}

#[test]
fn any_bound_is_safe() {
    let mut w = PollWindow::new(Duration::MAX);
    w.observe_gap(Duration::from_secs(1));
    assert_eq!(w.current(), Duration::MAX);
    for _ in 0..200 {
        w.observe_preempted();
    }
    assert_eq!(w.current(), Duration::ZERO);
    let gap = Duration::from_secs(u64::MAX / 2);
    for _ in 0..200 {
        w.observe_gap(gap);
    }
    assert!(w.current() >= gap, "grown until it covers the gap");
}

#[test]
fn a_zero_bound_never_polls() {
    let mut w = PollWindow::new(Duration::ZERO);
    for gap in [0, 1, 10, 1000, 1_000_000] {
        w.observe_gap(gap * US);
        assert_eq!(w.current(), Duration::ZERO);
    }
}

#[test]
fn a_bound_below_the_grow_start_still_polls_up_to_it() {
    let mut w = PollWindow::new(4 * US);
    w.observe_gap(Duration::from_millis(1));
    assert_eq!(w.current(), Duration::ZERO);
    w.observe_gap(3 * US);
    assert_eq!(w.current(), 4 * US);
}

proptest! {
    /// Whatever the gaps, the window stays within [0, max] and is 0 or
    /// at least the grow start (or the bound, if smaller).
    #[test]
    fn stays_within_its_bounds(
        max_us in 0u32..2000,
        gaps in prop::collection::vec(0u32..5000, 0..200),
    ) {
        let max = max_us * US;
        let mut w = PollWindow::new(max);
        for g in gaps {
            if g % 17 == 0 {
                w.observe_preempted();
            } else {
                w.observe_gap(g * US);
            }
            let c = w.current();
            prop_assert!(c <= max);
            prop_assert!(c.is_zero() || c >= GROW_START.min(max));
        }
    }
}
