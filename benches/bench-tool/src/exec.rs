//! Running a program that may have been written a moment ago.
//!
//! Linux refuses to execute a file that any process holds open for
//! writing (`ETXTBSY`, "Text file busy"). A file this process has just
//! written and closed can still be held so for a moment: a child that
//! another thread forked while the file was open keeps the descriptor
//! until it execs (it is close-on-exec, so no longer;
//! rust-lang/rust#114554). The tool's own tests write fake programs
//! (`fio`, `qemu`) from parallel threads and run them, and a cold CI run
//! met exactly this once (`fio --enghelp=libaio: Text file busy`); a
//! user's program being installed as the tool starts could be busy the
//! same way. Either is over within microseconds, so a short retry is the
//! fix, not an error to report.

use std::io;
use std::process::{Command, Output};
use std::time::Duration;

/// How many times a busy program is tried, and how long apart: about half
/// a second in all, far beyond the window a forked child holds it.
const BUSY_TRIES: u32 = 50;
const BUSY_WAIT: Duration = Duration::from_millis(10);

/// `cmd.output()`, tried again while the program is busy being written
/// (`ETXTBSY`); any other error, or the last busy one, is returned.
pub fn output(cmd: &mut Command) -> io::Result<Output> {
    let mut tries = 1;
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < BUSY_TRIES => {
                tries += 1;
                std::thread::sleep(BUSY_WAIT);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
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
}
