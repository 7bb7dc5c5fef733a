//! The device thread's liveness gauges, readable from any thread
//! (`GET /metrics`): whether it is stuck or idle, where the device stands
//! on the request queue against the driver, its polling and the kicks
//! served on vCPUs.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

use super::pending;
#[cfg(doc)]
use super::{KickServing, SESSION_MAX};

/// The device thread's liveness, readable from any thread (`GET /metrics`).
pub struct ThreadStatus {
    pub(super) start: Instant,
    /// Times the thread woke from `poll(2)`.
    pub(super) wakeups: AtomicU64,
    /// Microseconds since `start` (+1) when the notification being served
    /// began; 0 while the thread waits.
    pub(super) serving_since: AtomicU64,
    /// The device's next available index after its last drain
    /// (`u32::MAX` before activation; the used index is read from guest
    /// memory).
    pub(super) next_avail: AtomicU32,
    /// Notifications of the request queue the thread took (kick eventfd
    /// reads that found it signalled; several kicks between two reads
    /// count once).
    pub(super) kicks: AtomicU64,
    /// Guest memory, the request queue's ring addresses (descriptor table
    /// and avail ring, used ring) and its size, from activation to reset.
    pub(super) rings: Mutex<Option<(GuestMemoryMmap, pending::RingAddrs, GuestAddress)>>,
    /// Nanoseconds the thread spent polling the request queue (looking at
    /// the ring between requests, drains not included).
    pub(super) poll_ns: AtomicU64,
    /// Looks at the ring that found requests (each one a notification the
    /// guest did not make and a wake-up the thread did not need; one that
    /// ends a session of [`SESSION_MAX`] counts too, the request then taken
    /// after a self-kick).
    pub(super) polls_found: AtomicU64,
    /// Polls that ended with the window spent and no request.
    pub(super) polls_timed_out: AtomicU64,
    /// Polls that ended because the core went to another task.
    pub(super) polls_preempted: AtomicU64,
    /// Notifications served without polling, the window open, because the
    /// host had no CPU to spare.
    pub(super) polls_busy: AtomicU64,
    /// The poll window now, in nanoseconds.
    pub(super) poll_window_ns: AtomicU64,
    /// Request-queue notifications served on the vCPU that made them
    /// ([`KickServing::Vcpu`]).
    pub(super) vcpu_kicks: AtomicU64,
    /// Notifications a vCPU left to the thread (busy, or a command
    /// waiting) with [`KickServing::Vcpu`].
    pub(super) vcpu_deferred: AtomicU64,
    /// Times a vCPU, having served a notification with the poll window
    /// open and a CPU to spare, woke the thread to poll for the next.
    pub(super) vcpu_handovers: AtomicU64,
}

/// A reading of [`ThreadStatus`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusReading {
    /// Times the thread woke.
    pub wakeups: u64,
    /// Milliseconds the current notification has been served (0: waiting).
    pub serving_ms: u64,
    /// The driver's avail index, read from guest memory now.
    pub driver_avail: Option<u16>,
    /// The used index in guest memory now.
    pub used: Option<u16>,
    /// The device's next available index after its last drain.
    pub device_next_avail: Option<u16>,
    /// The `avail_event` the device published in guest memory (with
    /// EVENT_IDX the driver notifies when its avail index passes it).
    pub avail_event: Option<u16>,
    /// The requests published and not taken, by type (read from guest
    /// memory now; `None` when the device is not active or has taken all).
    pub pending: Option<pending::PendingTypes>,
    /// Request queue notifications the thread took.
    pub kicks: u64,
    /// Nanoseconds spent polling the request queue.
    pub poll_ns: u64,
    /// Looks at the ring that found requests.
    pub polls_found: u64,
    /// Polls that timed out.
    pub polls_timed_out: u64,
    /// Polls ended by another task taking the core.
    pub polls_preempted: u64,
    /// Notifications served without polling because the host had no CPU
    /// to spare.
    pub polls_busy: u64,
    /// The poll window now, in nanoseconds.
    pub poll_window_ns: u64,
    /// Request-queue notifications served on the vCPU that made them.
    pub vcpu_kicks: u64,
    /// Notifications a vCPU left to the thread.
    pub vcpu_deferred: u64,
    /// Times a vCPU handed the queue over to the thread's polling.
    pub vcpu_handovers: u64,
}

impl ThreadStatus {
    pub(super) fn new() -> Self {
        ThreadStatus {
            start: Instant::now(),
            wakeups: AtomicU64::new(0),
            serving_since: AtomicU64::new(0),
            next_avail: AtomicU32::new(u32::MAX),
            kicks: AtomicU64::new(0),
            rings: Mutex::new(None),
            poll_ns: AtomicU64::new(0),
            polls_found: AtomicU64::new(0),
            polls_timed_out: AtomicU64::new(0),
            polls_preempted: AtomicU64::new(0),
            polls_busy: AtomicU64::new(0),
            poll_window_ns: AtomicU64::new(0),
            vcpu_kicks: AtomicU64::new(0),
            vcpu_deferred: AtomicU64::new(0),
            vcpu_handovers: AtomicU64::new(0),
        }
    }

    pub(super) fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    pub(super) fn begin(&self) {
        self.serving_since.store(self.now_us(), Ordering::Release);
    }

    pub(super) fn end(&self, next_avail: Option<u16>) {
        self.next_avail
            .store(next_avail.map_or(u32::MAX, u32::from), Ordering::Release);
        self.serving_since.store(0, Ordering::Release);
    }

    /// The thread's state now.
    pub fn read(&self) -> StatusReading {
        let since = self.serving_since.load(Ordering::Acquire);
        let serving_ms = if since == 0 {
            0
        } else {
            self.now_us().saturating_sub(since) / 1000
        };
        let device_next_avail = u16::try_from(self.next_avail.load(Ordering::Acquire)).ok();
        let (driver_avail, used, avail_event, pending) =
            match &*self.rings.lock().unwrap_or_else(|e| e.into_inner()) {
                Some((mem, rings, used)) => {
                    let at = |ring: &GuestAddress, off: u64| {
                        ring.checked_add(off)
                            .and_then(|a| mem.read_obj::<u16>(a).ok())
                            .map(u16::from_le)
                    };
                    let driver_avail = at(&rings.avail, 2);
                    let pending = match (device_next_avail, driver_avail) {
                        (Some(n), Some(a)) if n != a => Some(pending::peek(mem, *rings, n, a)),
                        _ => None,
                    };
                    (
                        driver_avail,
                        at(used, 2),
                        at(used, 4 + 8 * u64::from(rings.size)),
                        pending,
                    )
                }
                None => (None, None, None, None),
            };
        StatusReading {
            wakeups: self.wakeups.load(Ordering::Relaxed),
            serving_ms,
            driver_avail,
            used,
            device_next_avail,
            avail_event,
            pending,
            kicks: self.kicks.load(Ordering::Relaxed),
            poll_ns: self.poll_ns.load(Ordering::Relaxed),
            polls_found: self.polls_found.load(Ordering::Relaxed),
            polls_timed_out: self.polls_timed_out.load(Ordering::Relaxed),
            polls_preempted: self.polls_preempted.load(Ordering::Relaxed),
            polls_busy: self.polls_busy.load(Ordering::Relaxed),
            poll_window_ns: self.poll_window_ns.load(Ordering::Relaxed),
            vcpu_kicks: self.vcpu_kicks.load(Ordering::Relaxed),
            vcpu_deferred: self.vcpu_deferred.load(Ordering::Relaxed),
            vcpu_handovers: self.vcpu_handovers.load(Ordering::Relaxed),
        }
    }
}
