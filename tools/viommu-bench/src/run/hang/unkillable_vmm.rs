//! A VMM that will not go away: where its threads are in the host's
//! kernel, and the wait for it before the next VM takes the same device.
//!
//! A VMM that SIGKILL does not end within 30 s is inside the host's kernel
//! (an ioctl that does not return, a device reset, the release of its
//! mappings). It still holds the VFIO group, so the next VM would fail to
//! open it ("busy") and be reported as a failure of its own. Seen in the
//! lab (the smp-smoke scenario): a lazy guest's VMM did not exit after
//! its guest powered off nor after SIGKILL, and the next cell failed at
//! once with "/dev/vfio/1 is busy". The runner keeps such a VMM here,
//! the next cell waits for it ([`StuckVmm::wait`]), and if it never leaves
//! the run stops with the reason instead of failing every cell after it.

use std::path::Path;
use std::time::{Duration, Instant};

/// How long the next cell waits for a stuck VMM to leave (tests: 1 s).
pub const STUCK_WAIT: Duration = if cfg!(test) {
    Duration::from_secs(1)
} else {
    Duration::from_secs(120)
};

/// Threads shown per process, and frames per thread.
const MAX_THREADS: usize = 16;
const MAX_FRAMES: usize = 6;

/// A VMM process that SIGKILL did not end, kept until it exits.
#[derive(Debug)]
pub struct StuckVmm {
    /// The cell whose VMM it is ("COLUMN round N").
    pub cell: String,
    /// Its process id, if the OS gave one.
    pub pid: Option<u32>,
    /// When it was first killed.
    pub since: Instant,
    child: tokio::process::Child,
}

impl StuckVmm {
    /// Keep `child` of `cell`, killed at `since` and still running.
    pub fn new(cell: String, child: tokio::process::Child, since: Instant) -> Self {
        Self {
            cell,
            pid: child.id(),
            since,
            child,
        }
    }

    /// Wait up to `limit` for the process to exit. `Ok` once it has;
    /// `Err(self)` with it still there.
    pub async fn wait(mut self, limit: Duration) -> Result<Duration, Self> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(_) => Ok(self.since.elapsed()),
            Err(_) => Err(self),
        }
    }
}

/// Where each thread of process `pid` is, read from `/proc/PID/task`: name,
/// state and the innermost frames of its kernel stack (`stack` is readable
/// by root only; elsewhere the wait channel stands in), one thread per
/// `; `-separated entry, at most 16 threads of 6 frames.
pub fn kernel_stacks(pid: u32) -> String {
    kernel_stacks_in(Path::new("/proc"), pid)
}

/// [`kernel_stacks`] of process `pid` under the proc root `proc`; the
/// threads and their names as `--breakdown` lists them
/// ([`crate::run::host_trace::threads`], in thread id order).
pub fn kernel_stacks_in(proc: &Path, pid: u32) -> String {
    let threads = match crate::run::host_trace::threads(proc, pid) {
        Ok(t) => t,
        Err(crate::run::host_trace::HostTraceError::Read { source, .. }) => {
            return format!("its threads could not be read ({source}): it has exited")
        }
        Err(e) => return format!("its threads could not be read ({e})"),
    };
    let task = proc.join(pid.to_string()).join("task");
    let total = threads.len();
    let mut out: Vec<String> = threads
        .iter()
        .take(MAX_THREADS)
        .map(|(tid, name)| thread_line(&task.join(tid.to_string()), *tid, name))
        .collect();
    if total > MAX_THREADS {
        out.push(format!("{} more threads", total - MAX_THREADS));
    }
    out.join("; ")
}

/// One thread: `NAME(TID) STATE: frame < caller < ...`.
fn thread_line(dir: &Path, tid: u32, name: &str) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let state = stat_state(&read("stat")).unwrap_or('?');
    let frames = stack_frames(&read("stack"));
    let place = if frames.is_empty() {
        match read("wchan").trim() {
            "" | "0" => "no kernel stack readable".to_string(),
            w => format!("waits in {w}"),
        }
    } else {
        frames.join(" < ")
    };
    format!("{name}({tid}) {state}: {place}")
}

/// The state letter of a `/proc/.../stat` line (after the name, which may
/// hold spaces and parentheses).
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The innermost frames of a `/proc/.../stack` text, each as
/// `function+offset [module]` (the `[<0>] ` prefix and the function's size
/// dropped).
fn stack_frames(stack: &str) -> Vec<String> {
    stack
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.split_once("] ").map_or(l, |(_, rest)| rest);
            let (sym, module) = match l.split_once(' ') {
                Some((s, m)) => (s, Some(m.trim())),
                None => (l, None),
            };
            let sym = sym.split_once('/').map_or(sym, |(s, _)| s);
            (!sym.is_empty()).then(|| match module {
                Some(m) if !m.is_empty() => format!("{sym} {m}"),
                _ => sym.to_string(),
            })
        })
        .take(MAX_FRAMES)
        .collect()
}

/// What a VMM that SIGKILL does not end is reported as.
pub const UNKILLABLE: &str = "the VMM did not exit within 30 s of SIGKILL: it is stuck in the host's kernel (look for a soft lockup or hung task in the host's log); the cell is given up";

/// At most this much of a thread listing goes into a warning (the log
/// has all of it).
const WARNING_STACKS: usize = 600;

/// `s` cut to [`WARNING_STACKS`] bytes at a character boundary.
pub fn bounded(s: &str) -> String {
    if s.len() <= WARNING_STACKS {
        return s.to_string();
    }
    let mut end = WARNING_STACKS;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// SIGKILL the VMM and wait up to 30 s; whether it exited.
pub async fn kill(child: &mut tokio::process::Child) -> bool {
    let _ = child.start_kill();
    matches!(
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests;
