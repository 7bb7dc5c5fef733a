use super::*;

#[test]
fn first_reason_wins_and_wakes() {
    let x = VmExit::new().unwrap();
    assert!(x.eventfd().read().is_err(), "nothing pending");
    x.request(ExitReason::PowerOff);
    x.request(ExitReason::TripleFault);
    assert_eq!(x.reason(), Some(ExitReason::PowerOff));
    assert!(x.eventfd().read().unwrap() >= 1);
    assert_eq!(ExitReason::PowerOff.exit_code(), 0);
    assert_eq!(ExitReason::Reset.exit_code(), 3);
    assert_ne!(ExitReason::Error("x".into()).exit_code(), 0);
    assert_eq!(ExitReason::Signal(libc::SIGTERM).exit_code(), 143);
}

#[test]
fn wait_returns_the_reason_and_clear_lets_it_wait_again() {
    let x = std::sync::Arc::new(VmExit::new().unwrap());
    let y = x.clone();
    let t = std::thread::spawn(move || y.wait());
    x.request(ExitReason::Reset);
    assert_eq!(t.join().unwrap(), ExitReason::Reset);
    assert_eq!(x.clear(), Some(ExitReason::Reset));
    let y = x.clone();
    let t = std::thread::spawn(move || y.wait());
    x.request(ExitReason::PowerOff);
    assert_eq!(t.join().unwrap(), ExitReason::PowerOff);
}
