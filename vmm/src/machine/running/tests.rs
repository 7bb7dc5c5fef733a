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
    vmm_sys_util::signal::register_signal_handler(SIGRTMIN(), super::super::kick_handler).unwrap();
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

/// A vCPU thread as `Vcpu::run` begins: it waits at the start gate, then
/// "enters the guest" (logged) unless the VM is stopping, and runs until
/// the stop.
fn gated_vcpu(r: &Running<FakeDevices>, stop: Arc<AtomicBool>, log: Log) -> JoinHandle<()> {
    let gate = r.start_gate();
    std::thread::spawn(move || {
        gate.wait();
        if stop.load(Ordering::Acquire) {
            log.lock().unwrap().push("vcpu0 never entered".into());
            return;
        }
        log.lock().unwrap().push("vcpu0 entered the guest".into());
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// The vCPU threads start before the main thread is filtered but enter
/// the guest only once [`Running::release`] opens the gate.
#[test]
fn vcpus_enter_the_guest_only_once_released() {
    let (log, _running, stop, mut r) = setup();
    r.push(gated_vcpu(&r, stop.clone(), log.clone()));
    std::thread::sleep(Duration::from_millis(50));
    assert!(log.lock().unwrap().is_empty(), "entered before the release");
    r.release();
    let entered = || {
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l == "vcpu0 entered the guest")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !entered() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(entered());
    assert!(r.finish());
}

/// A setup that fails after the vCPU threads started (the API, --user,
/// the main thread's filter) stops them at the gate: none enters the
/// guest, and the stop does not wait for a release that never comes.
#[test]
fn a_failed_setup_stops_the_vcpus_at_the_gate() {
    let (log, _running, stop, mut r) = setup();
    r.timeout = Duration::from_secs(5);
    r.push(gated_vcpu(&r, stop, log.clone()));
    assert!(r.finish(), "the gated vCPU did not stop");
    let got = log.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            "vcpu0 never entered".to_string(),
            "devices dropped, armed true, 0 vCPUs running".to_string()
        ]
    );
}
