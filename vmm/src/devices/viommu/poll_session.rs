//! A polling session on the request queue: looking at the ring's avail
//! index between requests, the driver's notifications suppressed, serving
//! what comes, until the window passes, a command waits or the core goes
//! to another task.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use viommu_device::{Drained, Notifications};

use super::model_server::ModelServer;
use super::SESSION_MAX;

/// A pause between two looks at the ring longer than this means the core
/// went to another task: polling would only take it from that task (a
/// vCPU of the guest, maybe the one about to post the request).
const PREEMPTED: Duration = Duration::from_micros(50);

/// How a poll of the request queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PollEnd {
    /// The window is 0: no polling.
    Off,
    /// The window passed with no request.
    TimedOut,
    /// A command waits (reset, stop, config write, activation).
    Command,
    /// The core went to another task.
    Preempted,
    /// The ring says there are requests that a drain does not take (a
    /// corrupt index, a ring that cannot be read): waiting for a
    /// notification rather than spinning on it.
    Stalled,
    /// The thread kicked itself, requests left (a drain's cap or the
    /// session's): the next wake-up serves them, notifications stay
    /// suppressed until then.
    Rekicked,
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A pause between two looks at the ring: a few spin-loop hints, then the
/// core is offered to whatever else is runnable on it.
fn pause() {
    for _ in 0..8 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}
impl ModelServer {
    /// Polls the request queue for up to the window, notifications
    /// suppressed (by a drain first unless `suppressed`), draining what
    /// it finds; each request found starts the window again. Leaves
    /// notifications suppressed: the caller turns them on (or has kicked
    /// itself, [`PollEnd::Rekicked`]).
    pub(super) fn poll(&mut self, session: Instant, suppressed: bool) -> PollEnd {
        let window = self.window.current();
        if window.is_zero() {
            return PollEnd::Off;
        }
        if !suppressed && self.drain(Notifications::Suppressed, None).0 == Drained::More {
            self.rekick();
            return PollEnd::Rekicked;
        }
        let status = self.mailbox.status.clone();
        let mut start = Instant::now();
        // None: a window past what `Instant` can count, never spent.
        let mut deadline = start.checked_add(window);
        let mut last = start;
        let mut polled = Duration::ZERO;
        let end = loop {
            if self.mailbox.queued.load(Ordering::Acquire) != 0 {
                break PollEnd::Command;
            }
            let pending = self.model.request_queue_pending();
            let now = Instant::now();
            if now.saturating_duration_since(last) > PREEMPTED && self.window.yields() {
                status.polls_preempted.fetch_add(1, Ordering::Relaxed);
                self.window.observe_preempted();
                self.publish_window();
                break PollEnd::Preempted;
            }
            last = now;
            match pending {
                Ok(true) => {
                    polled += now.saturating_duration_since(start);
                    if now.saturating_duration_since(session) >= SESSION_MAX {
                        // Found without a notification all the same: the
                        // self-kick only bounds the session, and the main
                        // loop takes it next.
                        status.polls_found.fetch_add(1, Ordering::Relaxed);
                        self.rekick();
                        start = now;
                        break PollEnd::Rekicked;
                    }
                    let (r, took) = self.drain(Notifications::Suppressed, None);
                    start = Instant::now();
                    if !took {
                        break PollEnd::Stalled;
                    }
                    status.polls_found.fetch_add(1, Ordering::Relaxed);
                    if r == Drained::More {
                        self.rekick();
                        break PollEnd::Rekicked;
                    }
                    deadline = start.checked_add(window);
                    last = start;
                }
                Ok(false) if deadline.is_some_and(|d| now >= d) => {
                    status.polls_timed_out.fetch_add(1, Ordering::Relaxed);
                    break PollEnd::TimedOut;
                }
                Ok(false) => pause(),
                Err(_) => break PollEnd::Stalled,
            }
        };
        // Up to the last look before another task took the core, if one did.
        let until = if end == PollEnd::Preempted {
            last
        } else {
            Instant::now()
        };
        polled += until.saturating_duration_since(start);
        status.poll_ns.fetch_add(nanos(polled), Ordering::Relaxed);
        end
    }
}
