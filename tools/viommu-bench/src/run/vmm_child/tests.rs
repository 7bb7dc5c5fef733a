use std::time::{Duration, Instant};

use super::*;

/// Whether process `pid` is gone or a zombie (dead, not yet reaped).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "PID (COMM) STATE ...": COMM may hold spaces, not ')'.
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The child is killed when the thread that started it ends, as when
/// SIGKILL ends the whole tool; without the setting it would sleep on.
#[test]
fn the_child_dies_when_its_starter_goes() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let starter = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut cmd = tokio::process::Command::new("sleep");
            cmd.arg("60");
            die_with_this_process(&mut cmd);
            let child = cmd.spawn().unwrap();
            tx.send(child.id().unwrap()).unwrap();
            // Not killed on drop: only the kernel's signal ends it.
            std::mem::forget(child);
        });
        // Until the test saw the child alive.
        let _ = wait.recv();
    });
    let pid = rx.recv().unwrap();
    assert!(!dead(pid), "the child did not start");
    go.send(()).unwrap();
    starter.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dead(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let alive = !dead(pid);
    if alive {
        // SAFETY: our child's pid; do not leave it behind.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert!(!alive, "the child outlived the thread that started it");
}
