//! The vCPUs and the devices they use, released in the one safe order on
//! every way out of [`crate::machine::run`]: the vCPUs stop and are joined
//! first, the devices are released after.
//!
//! Before this guard, the vCPU threads were plain `JoinHandle`s beside the
//! device manager: an error return after they started (the stdin thread,
//! the API, privilege drop) dropped the manager, releasing the VFIO
//! devices and DMA mappings under vCPUs still running the guest, and
//! detached the threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::signal::{Killable, SIGRTMIN};

use crate::device_manager::DeviceManager;
use crate::vcpu::StartGate;

/// How long the vCPUs get to leave `KVM_RUN` when stopped.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// Devices the vCPUs use: released by dropping them, once no vCPU runs.
pub(crate) trait Devices {
    /// A vCPU did not stop and may still access the devices: dropping
    /// them must release nothing (the kernel does when the process exits).
    fn disarm(&mut self);
}

impl Devices for DeviceManager<'_> {
    fn disarm(&mut self) {
        DeviceManager::disarm(self);
    }
}

/// The running vCPU threads and the devices they use.
///
/// The vCPU threads wait at its [`StartGate`] before they enter the guest:
/// [`Running::release`] opens it once the main thread is filtered.
/// Dropping it, on the normal exit ([`Running::finish`]) as on an error
/// return anywhere after it was made, sets the stop flag, kicks every vCPU
/// thread out of `KVM_RUN` (the kick signal, repeated: one that lands
/// before the thread re-enters `KVM_RUN` is lost) and joins them, and only
/// then drops the devices (fields drop after `Drop::drop`); if a vCPU does
/// not stop within the timeout, the devices are disarmed first.
pub(crate) struct Running<D: Devices> {
    stop: Arc<AtomicBool>,
    /// Where the vCPU threads wait before their first `KVM_RUN`.
    start: Arc<StartGate>,
    /// Emptied by the stop.
    threads: Vec<JoinHandle<()>>,
    timeout: Duration,
    devices: D,
}

impl<D: Devices> Running<D> {
    /// No vCPU yet; `stop` is the flag every vCPU checks.
    pub(crate) fn new(devices: D, stop: Arc<AtomicBool>) -> Self {
        Running {
            stop,
            start: Arc::new(StartGate::new()),
            threads: Vec::new(),
            timeout: STOP_TIMEOUT,
            devices,
        }
    }

    /// The devices.
    pub(crate) fn devices(&self) -> &D {
        &self.devices
    }

    /// The gate the vCPU threads wait at before they enter the guest.
    pub(crate) fn start_gate(&self) -> Arc<StartGate> {
        self.start.clone()
    }

    /// Lets the vCPU threads enter the guest: only once the main thread's
    /// own seccomp filter is in place.
    pub(crate) fn release(&self) {
        self.start.open();
    }

    /// One more running vCPU thread, stopped before the devices go.
    pub(crate) fn push(&mut self, thread: JoinHandle<()>) {
        self.threads.push(thread);
    }

    /// The vCPU threads, in the order they started.
    pub(crate) fn threads(&self) -> &[JoinHandle<()>] {
        &self.threads
    }

    /// Kick every vCPU thread still running out of `KVM_RUN` (a reboot's
    /// pause; the kick repeats until they parked).
    pub(crate) fn kick_all(&self) {
        for t in self.threads.iter().filter(|t| !t.is_finished()) {
            let _ = t.kill(SIGRTMIN());
        }
    }

    /// Stops and joins the vCPUs, then releases the devices; false if a
    /// vCPU did not stop (the devices were then left to the kernel).
    pub(crate) fn finish(mut self) -> bool {
        self.stop_vcpus()
        // `self` drops here: no thread left to stop, the devices go.
    }

    /// Stops the vCPU threads still held; disarms the devices if one does
    /// not stop. Returns whether all stopped.
    fn stop_vcpus(&mut self) -> bool {
        if self.threads.is_empty() {
            return true;
        }
        // vCPUs still at the start gate go through it, see the stop flag
        // and return without entering the guest.
        self.stop.store(true, Ordering::Release);
        self.start.open();
        let stopped = stop_threads(std::mem::take(&mut self.threads), &self.stop, self.timeout);
        if !stopped {
            // A vCPU still holds the buses: releasing devices under a
            // running vCPU is unsafe for the guest's state.
            self.devices.disarm();
        }
        stopped
    }
}

impl<D: Devices> Drop for Running<D> {
    fn drop(&mut self) {
        self.stop_vcpus();
    }
}

/// Stop the vCPUs: kick until each has left `KVM_RUN`. Returns false if one
/// did not stop within `timeout`.
fn stop_threads(threads: Vec<JoinHandle<()>>, stop: &AtomicBool, timeout: Duration) -> bool {
    stop.store(true, Ordering::Release);
    let deadline = Instant::now() + timeout;
    while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
        for t in threads.iter().filter(|t| !t.is_finished()) {
            let _ = t.kill(SIGRTMIN());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut all_stopped = true;
    for t in threads {
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::warn!("a vCPU thread did not stop; leaving the devices to the kernel");
            all_stopped = false;
        }
    }
    all_stopped
}

#[cfg(test)]
mod tests;
