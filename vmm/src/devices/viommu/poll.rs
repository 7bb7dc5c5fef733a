//! The device thread's poll window: how long it keeps polling the request
//! queue after serving it, adapted to the gaps between requests the way
//! KVM adapts a vCPU's halt polling (`halt_poll_ns`).
//!
//! After the thread has served requests it polls the ring for up to the
//! window, notifications suppressed, before it sleeps. When the next
//! request comes (found by the poll, or by a notification after the
//! thread slept), the gap since the previous one says how the window did:
//! - within the window: the poll found it (or would have, had nothing
//!   interrupted it): the window stays;
//! - after the window but within the bound: a longer poll would have
//!   found it, without the notify exit and the wake-up: the window grows
//!   (doubles, from [`GROW_START`]);
//! - beyond the bound: polling could not have found it, and a poll that
//!   timed out was spent for nothing: the window shrinks (halves, and
//!   below [`GROW_START`] to 0, no polling at all).
//!
//! A poll that finds its core taken by another task shrinks the window
//! too (KVM stops polling when another task is runnable on the CPU).
//!
//! So a guest that keeps sending requests a few microseconds apart has the
//! thread polling for them, and one that sends none (an idle guest, the
//! lazy guest's reuse cache) costs one timed-out window and then nothing.
//! The window starts at the bound.

use std::time::Duration;

/// Where a window of 0 starts growing from (KVM's `halt_poll_ns_grow_start`).
pub const GROW_START: Duration = Duration::from_micros(10);

/// The poll window and its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollWindow {
    max: Duration,
    cur: Duration,
    /// Whether a poll that finds its core taken ends and shrinks the
    /// window (always, but in tests that need the thread to keep polling
    /// on a loaded machine).
    yields: bool,
}

impl PollWindow {
    /// A window bounded by `max` (0: never polls), starting at `max`.
    pub fn new(max: Duration) -> Self {
        PollWindow {
            max,
            cur: max,
            yields: true,
        }
    }

    /// The same window, kept however often the core is taken: for tests
    /// that need the thread polling for as long as the window says.
    #[cfg(test)]
    pub fn ignoring_preemption(self) -> Self {
        PollWindow {
            yields: false,
            ..self
        }
    }

    /// Whether a poll that finds its core taken by another task gives up.
    pub fn yields(&self) -> bool {
        self.yields
    }

    /// How long to poll now.
    pub fn current(&self) -> Duration {
        self.cur
    }

    /// The bound.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// A request came `gap` after the previous one was served: adapt the
    /// window (see the module doc).
    pub fn observe_gap(&mut self, gap: Duration) {
        if gap <= self.cur {
            return;
        }
        if gap <= self.max {
            self.cur = self.cur.saturating_mul(2).max(GROW_START).min(self.max);
        } else {
            self.shrink();
        }
    }

    /// A poll found its core taken by another task: polling competes with
    /// that task (on a busy host, maybe the vCPU about to post the
    /// request) instead of saving it a notification: shrink.
    pub fn observe_preempted(&mut self) {
        self.shrink();
    }

    fn shrink(&mut self) {
        self.cur /= 2;
        if self.cur < GROW_START {
            self.cur = Duration::ZERO;
        }
    }
}

#[cfg(test)]
mod tests {
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
}
