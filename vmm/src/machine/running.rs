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
/// Dropping it, on the normal exit ([`Running::finish`]) as on an error
/// return anywhere after it was made, sets the stop flag, kicks every vCPU
/// thread out of `KVM_RUN` (the kick signal, repeated: one that lands
/// before the thread re-enters `KVM_RUN` is lost) and joins them, and only
/// then drops the devices (fields drop after `Drop::drop`); if a vCPU does
/// not stop within the timeout, the devices are disarmed first.
pub(crate) struct Running<D: Devices> {
    stop: Arc<AtomicBool>,
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
            threads: Vec::new(),
            timeout: STOP_TIMEOUT,
            devices,
        }
    }

    /// The devices.
    pub(crate) fn devices(&self) -> &D {
        &self.devices
    }

    /// One more running vCPU thread, stopped before the devices go.
    pub(crate) fn push(&mut self, thread: JoinHandle<()>) {
        self.threads.push(thread);
    }

    /// The vCPU threads, in the order they started.
    pub(crate) fn threads(&self) -> &[JoinHandle<()>] {
        &self.threads
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
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{mpsc, Mutex};

    use super::*;
    use crate::error::{io_err, VmmError};

    /// What happened, in order.
    type Log = Arc<Mutex<Vec<String>>>;

    /// Devices that log their release and how many vCPUs ran then.
    struct FakeDevices {
        log: Log,
        running: Arc<AtomicUsize>,
        armed: bool,
    }

    impl Devices for FakeDevices {
        fn disarm(&mut self) {
            self.armed = false;
        }
    }

    impl Drop for FakeDevices {
        fn drop(&mut self) {
            let n = self.running.load(Ordering::SeqCst);
            self.log.lock().unwrap().push(format!(
                "devices dropped, armed {}, {n} vCPUs running",
                self.armed
            ));
        }
    }

    /// A vCPU thread that runs until `stop` (or, `stuck`, until the test
    /// lets it go), counted in `running` while it does.
    fn vcpu(
        stop: Arc<AtomicBool>,
        running: Arc<AtomicUsize>,
        log: Log,
        id: usize,
        stuck: Option<mpsc::Receiver<()>>,
    ) -> JoinHandle<()> {
        running.fetch_add(1, Ordering::SeqCst);
        std::thread::spawn(move || {
            match stuck {
                Some(rx) => {
                    let _ = rx.recv();
                }
                None => {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            log.lock().unwrap().push(format!("vcpu{id} stopped"));
            running.fetch_sub(1, Ordering::SeqCst);
        })
    }

    fn setup() -> (Log, Arc<AtomicUsize>, Arc<AtomicBool>, Running<FakeDevices>) {
        // The kick is SIGRTMIN, as in the VMM: without a handler it would
        // end the test process.
        vmm_sys_util::signal::register_signal_handler(SIGRTMIN(), super::super::kick_handler)
            .unwrap();
        let log: Log = Arc::default();
        let running = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let devices = FakeDevices {
            log: log.clone(),
            running: running.clone(),
            armed: true,
        };
        let r = Running::new(devices, stop.clone());
        (log, running, stop, r)
    }

    /// Like `machine::run` after the vCPUs start: a step fails (the test
    /// hook: `fail_at`) and returns with `?`.
    fn run_like(fail_at: Option<usize>) -> (Result<bool, VmmError>, Vec<String>) {
        let (log, running, stop, mut r) = setup();
        let result = (|| {
            for id in 0..3 {
                if fail_at == Some(id) {
                    // A vCPU that could not be spawned, after others were.
                    return Err(io_err("cannot spawn a vCPU thread")(std::io::Error::other(
                        "injected",
                    )));
                }
                r.push(vcpu(stop.clone(), running.clone(), log.clone(), id, None));
            }
            if fail_at == Some(3) {
                // The stdin thread, the API, --user: any `?` after start.
                Err(io_err("cannot drop to --user")(std::io::Error::other(
                    "injected",
                )))?;
            }
            Ok(r.finish())
        })();
        let log = log.lock().unwrap().clone();
        (result, log)
    }

    /// Every way out after the first vCPU started, error returns
    /// included, stops and joins the vCPUs before the devices are dropped.
    #[test]
    fn vcpus_stop_before_the_devices_go_on_every_exit_path() {
        for fail_at in [None, Some(1), Some(2), Some(3)] {
            let (result, log) = run_like(fail_at);
            assert_eq!(result.is_err(), fail_at.is_some(), "{fail_at:?}");
            let started = fail_at.unwrap_or(3).min(3);
            assert_eq!(log.len(), started + 1, "{fail_at:?}: {log:?}");
            assert_eq!(
                log.last().map(String::as_str),
                Some("devices dropped, armed true, 0 vCPUs running"),
                "{fail_at:?}: {log:?}"
            );
        }
    }

    /// A vCPU that does not stop: the devices are disarmed before they go.
    #[test]
    fn a_vcpu_that_does_not_stop_leaves_the_devices_disarmed() {
        let (log, running, stop, mut r) = setup();
        r.timeout = Duration::from_millis(50);
        let (tx, rx) = mpsc::channel();
        r.push(vcpu(stop.clone(), running.clone(), log.clone(), 0, None));
        r.push(vcpu(stop, running, log.clone(), 1, Some(rx)));
        assert!(!r.finish());
        let got = log.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                "vcpu0 stopped".to_string(),
                "devices dropped, armed false, 1 vCPUs running".to_string()
            ]
        );
        tx.send(()).unwrap();
    }
}
