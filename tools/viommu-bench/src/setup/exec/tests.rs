use super::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_program_held_open_for_writing_runs_once_it_is_closed() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prog");
    std::fs::write(&p, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Held open for writing, as a forked child would hold it: busy.
    let writer = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let e = Command::new(&p).output().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETXTBSY));
    // Closed 50 ms later, within the retries: the program runs.
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(writer);
    });
    let out = output(&mut Command::new(&p)).unwrap();
    closer.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
}

#[test]
fn a_missing_program_is_not_retried() {
    let e = output(&mut Command::new("/nonexistent/prog")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
}
