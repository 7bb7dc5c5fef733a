//! Guest console output on its way to the host without blocking a vCPU: a
//! bounded buffer the UART fills and a thread that writes it out.
//!
//! The UART's `out` is a [`ConsoleOut`]: a write copies what fits into the
//! buffer ([`CONSOLE_BUFFER`] bytes) and returns at once; what does not fit
//! is dropped and counted (a host that stops reading the VMM's stdout must
//! not stop the guest's vCPU under the serial lock). The `serial-out`
//! thread writes the buffer to the real output and logs the count of
//! dropped bytes (at most once a second). At exit, [`ConsoleFlusher::finish`]
//! writes what is left, waiting a bounded time.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of guest output held while the host side is slow.
pub const CONSOLE_BUFFER: usize = 1 << 20;

#[derive(Default)]
struct Buf {
    bytes: VecDeque<u8>,
    closed: bool,
    /// The writer thread is writing a chunk it took out.
    writing: bool,
}

/// The console buffer between the UART and the writer thread, with the
/// count of bytes dropped when it was full.
struct ConsoleBuffer {
    buf: Mutex<Buf>,
    cv: Condvar,
    dropped: AtomicU64,
    cap: usize,
}

impl ConsoleBuffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Buf> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The UART's side: never blocks on the host's output.
pub struct ConsoleOut(Arc<ConsoleBuffer>);

impl ConsoleOut {
    /// Bytes dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }
}

impl Write for ConsoleOut {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut g = self.0.lock();
        let room = self.0.cap.saturating_sub(g.bytes.len());
        let n = room.min(b.len());
        g.bytes.extend(&b[..n]);
        drop(g);
        if n < b.len() {
            self.0
                .dropped
                .fetch_add((b.len() - n) as u64, Ordering::Relaxed);
        }
        if n > 0 {
            self.0.cv.notify_all();
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // The writer thread flushes after each chunk.
        Ok(())
    }
}

/// The writer thread's handle: [`finish`](Self::finish) it at exit.
pub struct ConsoleFlusher {
    shared: Arc<ConsoleBuffer>,
    thread: Option<JoinHandle<()>>,
}

impl ConsoleFlusher {
    /// Write out what is buffered (waiting at most `timeout`) and stop the
    /// thread. Returns whether everything was written.
    pub fn finish(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.shared.lock();
        g.closed = true;
        self.shared.cv.notify_all();
        while !g.bytes.is_empty() || g.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self
                .shared
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(g);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let dropped = self.shared.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "guest console bytes dropped in all (the host output was not read fast enough)"
            );
        }
        true
    }
}

/// A buffer of `cap` bytes in front of `out`, and the `serial-out` thread
/// (with `seccomp` installed first) that empties it.
pub fn console(
    out: Box<dyn Write + Send>,
    cap: usize,
    seccomp: Option<crate::seccomp::Filter>,
) -> std::io::Result<(ConsoleOut, ConsoleFlusher)> {
    let shared = Arc::new(ConsoleBuffer {
        buf: Mutex::new(Buf::default()),
        cv: Condvar::new(),
        dropped: AtomicU64::new(0),
        cap,
    });
    let s = shared.clone();
    let thread = crate::seccomp::spawn("serial-out", seccomp, move || writer(s, out))?;
    Ok((
        ConsoleOut(shared.clone()),
        ConsoleFlusher {
            shared,
            thread: Some(thread),
        },
    ))
}

fn writer(shared: Arc<ConsoleBuffer>, mut out: Box<dyn Write + Send>) {
    let mut reported = 0u64;
    let mut last_report = Instant::now();
    let mut chunk = Vec::new();
    loop {
        {
            let mut g = shared.lock();
            while g.bytes.is_empty() && !g.closed {
                g = shared.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.bytes.is_empty() {
                // Closed and empty.
                shared.cv.notify_all();
                return;
            }
            chunk.clear();
            chunk.extend(g.bytes.drain(..));
            g.writing = true;
        }
        // A failing output (closed stdout) loses the chunk, as a
        // disconnected serial line would.
        let _ = out.write_all(&chunk).and_then(|()| out.flush());
        shared.lock().writing = false;
        shared.cv.notify_all();
        let dropped = shared.dropped.load(Ordering::Relaxed);
        if dropped != reported && last_report.elapsed() >= Duration::from_secs(1) {
            tracing::warn!(
                dropped = dropped - reported,
                "guest console output dropped: the host side does not read it fast enough"
            );
            reported = dropped;
            last_report = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests;
