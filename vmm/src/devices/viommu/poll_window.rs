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
mod tests;
