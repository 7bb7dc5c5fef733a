//! Parking the vCPUs for a reboot: a vCPU thread leaves `KVM_RUN` and
//! waits on its thread (the main thread cannot start new ones once its
//! seccomp filter and `--user` are in place), then takes its first-boot
//! state and runs again, or returns when the VM stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a parked vCPU looks at the stop flag (the stop's kick signal
/// does not wake a condition variable).
const STOP_POLL: Duration = Duration::from_millis(10);

/// What a parked vCPU does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpark {
    /// The VM stops: return from the thread.
    Stop,
    /// The guest restarts: take the first-boot state and run.
    Restart,
}

#[derive(Debug, Default)]
struct GateState {
    /// vCPUs that parked since the last [`ParkGate::resume`] (which
    /// releases them all: a vCPU not awake yet is not counted as parked
    /// for the next pause).
    parked: usize,
    /// Bumped by each [`ParkGate::resume`]: a parked vCPU whose epoch is
    /// behind restarts.
    epoch: u64,
}

/// Where the vCPUs park and the main thread waits for them.
#[derive(Debug, Default)]
pub struct ParkGate {
    pause: AtomicBool,
    state: Mutex<GateState>,
    cv: Condvar,
}

impl ParkGate {
    /// Ask every vCPU to park after its current exit (the caller kicks
    /// them out of `KVM_RUN`).
    pub fn request_pause(&self) {
        self.pause.store(true, Ordering::Release);
    }

    /// Whether a pause was asked for: checked by a vCPU after each exit.
    pub fn pause_requested(&self) -> bool {
        self.pause.load(Ordering::Acquire)
    }

    /// vCPUs parked now.
    pub fn parked(&self) -> usize {
        self.lock().parked
    }

    /// The epoch a vCPU starts in (it parks until a resume after it).
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Park the calling vCPU, which ran in `epoch`, until a resume after
    /// it or `stop`; updates `epoch` on a restart.
    pub fn park(&self, epoch: &mut u64, stop: &AtomicBool) -> Unpark {
        let mut s = self.lock();
        s.parked += 1;
        self.cv.notify_all();
        loop {
            if s.epoch != *epoch {
                *epoch = s.epoch;
                return Unpark::Restart;
            }
            if stop.load(Ordering::Acquire) {
                s.parked = s.parked.saturating_sub(1);
                return Unpark::Stop;
            }
            s = self
                .cv
                .wait_timeout(s, STOP_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Wait until `n` vCPUs are parked, calling `kick` every `every`;
    /// false if they were not by `timeout`.
    pub fn wait_parked(
        &self,
        n: usize,
        timeout: Duration,
        every: Duration,
        mut kick: impl FnMut(),
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        loop {
            if s.parked >= n {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            drop(s);
            kick();
            s = self.lock();
            s = self
                .cv
                .wait_timeout(s, every.min(deadline - now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Let the parked vCPUs restart.
    pub fn resume(&self) {
        let mut s = self.lock();
        self.pause.store(false, Ordering::Release);
        s.epoch += 1;
        s.parked = 0;
        self.cv.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests;
