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
mod tests;
