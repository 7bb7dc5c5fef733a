//! Warnings a guest can trigger, rate limited: a guest repeating a bad
//! request must not flood the VMM's log (or the disk under it). At most
//! [`PER_SECOND`] such warnings a second are logged; how many were dropped
//! is logged when the next second starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Guest-triggered warnings logged per second at most.
pub const PER_SECOND: u64 = 10;

static START: OnceLock<Instant> = OnceLock::new();
/// The current one-second window (seconds since START).
static WINDOW: AtomicU64 = AtomicU64::new(0);
/// Warnings allowed in the current window.
static COUNT: AtomicU64 = AtomicU64::new(0);
/// Warnings dropped since the last report.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Whether one more guest-triggered warning may be logged now.
pub fn allow() -> bool {
    let now = START.get_or_init(Instant::now).elapsed().as_secs();
    let window = WINDOW.load(Ordering::Relaxed);
    if now != window
        && WINDOW
            .compare_exchange(window, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        COUNT.store(0, Ordering::Relaxed);
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "guest-triggered warnings dropped (more than {PER_SECOND} a second)"
            );
        }
    }
    if COUNT.fetch_add(1, Ordering::Relaxed) < PER_SECOND {
        true
    } else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        false
    }
}

/// `tracing::warn!` for what a guest can trigger, rate limited by
/// [`allow`] (shared by every thread and crate that uses it).
#[macro_export]
macro_rules! guest_warn {
    ($($arg:tt)*) => {
        if $crate::ratelimit::allow() {
            $crate::ratelimit::__tracing::warn!($($arg)*);
        }
    };
}

/// `tracing::error!` for a failure a guest can repeat at will (a host
/// call its request makes fails), rate limited with [`guest_warn!`]'s
/// budget.
#[macro_export]
macro_rules! guest_error {
    ($($arg:tt)*) => {
        if $crate::ratelimit::allow() {
            $crate::ratelimit::__tracing::error!($($arg)*);
        }
    };
}

#[doc(hidden)]
pub use tracing as __tracing;

#[cfg(test)]
mod tests;
