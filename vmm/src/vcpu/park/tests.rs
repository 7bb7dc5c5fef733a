use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// A vCPU thread's part: park, then say how it left.
fn parker(gate: &Arc<ParkGate>, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<Unpark> {
    let (gate, stop) = (gate.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut epoch = gate.epoch();
        gate.park(&mut epoch, &stop)
    })
}

#[test]
fn parked_vcpus_restart_on_resume() {
    let gate = Arc::new(ParkGate::default());
    let stop = Arc::new(AtomicBool::new(false));
    gate.request_pause();
    assert!(gate.pause_requested());
    let threads: Vec<_> = (0..3).map(|_| parker(&gate, &stop)).collect();
    let mut kicks = 0;
    assert!(
        gate.wait_parked(3, Duration::from_secs(10), Duration::from_millis(1), || {
            kicks += 1
        })
    );
    assert_eq!(gate.parked(), 3);
    gate.resume();
    assert!(!gate.pause_requested());
    for t in threads {
        assert_eq!(t.join().unwrap(), Unpark::Restart);
    }
    assert_eq!(gate.parked(), 0);
}

#[test]
fn a_stop_ends_a_parked_vcpu() {
    let gate = Arc::new(ParkGate::default());
    let stop = Arc::new(AtomicBool::new(false));
    let t = parker(&gate, &stop);
    assert!(gate.wait_parked(1, Duration::from_secs(10), Duration::from_millis(1), || {}));
    stop.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(t.join().unwrap(), Unpark::Stop);
}

#[test]
fn a_vcpu_that_does_not_park_times_out_after_kicks() {
    let gate = ParkGate::default();
    let mut kicks = 0;
    assert!(!gate.wait_parked(
        1,
        Duration::from_millis(50),
        Duration::from_millis(5),
        || kicks += 1
    ));
    assert!(kicks >= 2, "{kicks}");
}

#[test]
fn a_second_reboot_parks_again() {
    let gate = Arc::new(ParkGate::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (gate.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        let mut epoch = g.epoch();
        let first = g.park(&mut epoch, &s);
        let second = g.park(&mut epoch, &s);
        (first, second)
    });
    for _ in 0..2 {
        gate.request_pause();
        assert!(gate.wait_parked(1, Duration::from_secs(10), Duration::from_millis(1), || {}));
        gate.resume();
    }
    assert_eq!(t.join().unwrap(), (Unpark::Restart, Unpark::Restart));
}
