//! Counting what a piece of code logs: a guest-triggerable message must
//! stay under the rate limit however often the guest repeats it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Counts the events at `WARN` or above.
struct Counter(Arc<AtomicUsize>);

impl Subscriber for Counter {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Runs `f` on this thread and returns how many warnings and errors it
/// logged (through `tracing`).
pub fn count_warnings(f: impl FnOnce()) -> usize {
    let n = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::with_default(Counter(n.clone()), f);
    n.load(Ordering::Relaxed)
}

/// The most guest-triggerable warnings the rate limiter lets through in
/// `secs` seconds (plus the windows the run may straddle, and one "dropped"
/// summary a window).
pub fn warning_budget(secs: u64) -> usize {
    let windows = secs + 2;
    usize::try_from(windows * (crate::ratelimit::PER_SECOND + 1)).unwrap_or(usize::MAX)
}
