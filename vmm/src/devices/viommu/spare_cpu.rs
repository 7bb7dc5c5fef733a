//! Whether the host has a CPU to spare for the device thread's polling.
//!
//! Polling pays when the thread would otherwise sleep on a CPU nobody
//! else wants: it then saves the guest's notify exit and its own wake-up.
//! On a host whose CPUs are all wanted it takes a CPU from a task that
//! needs it (on a busy host, often the vCPU about to post the request),
//! and with notifications suppressed while it polls, a request posted
//! while the thread waits for its next time slice waits with it. The lab
//! measured both: 1.72x
//! stock QEMU at 4k with one fio job and an idle lab-host CPU, 0.53x with
//! two jobs and none.
//!
//! So before a polling session the thread asks the host how many tasks are
//! runnable right now: the fourth field of `/proc/loadavg` (`R/T`, R
//! counting this thread, which is running) against the CPUs this process
//! may use (online, within its affinity and its cgroup's `cpu.max`). It
//! polls only if no runnable task waits for a CPU (R <= CPUs), the check
//! KVM's halt polling makes per CPU with `single_task_running()`, here for
//! the whole host because the thread may run on any CPU. A `pread` of an
//! open file (opened before the thread's seccomp filter, which allows
//! `pread64` on that descriptor only), at most once per [`REFRESH`]: the
//! count is a sample of a load that changes as fast as tasks sleep and
//! wake, and one read per notification was measured to cost more than it
//! decides. With `--viommu-kicks vcpu` a vCPU asks it after every kick it
//! serves, on the guest's critical path: read per kick, the lab's stock
//! guest with two fio jobs (no CPU spare, so nothing else changed) lost
//! 5-11% per round against no polling.
//!
//! Why not a crate: `procfs` and `sysinfo` parse all of `/proc/loadavg`
//! per call through a fresh `open`, which the device thread's seccomp
//! filter does not allow; the load averages of `sysinfo(2)` are minutes
//! long. A field of one line is a few lines here.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How long a reading of the runnable count is used before the file is
/// read again.
pub const REFRESH: Duration = Duration::from_millis(10);

/// Where the answer comes from.
#[derive(Debug)]
enum Source {
    /// `/proc/loadavg`, open, the host's online CPUs, and the last
    /// reading (when, and the runnable count it gave, if any).
    Proc {
        file: File,
        cpus: u32,
        last: Option<(Instant, Option<u32>)>,
    },
    /// Always this answer (tests; a host without `/proc/loadavg`: as
    /// before the check, the thread polls).
    Fixed(bool),
}

/// The host's spare-CPU check (see the module doc).
#[derive(Debug)]
pub struct SpareCpu(Source);

impl SpareCpu {
    /// The check on this host: `/proc/loadavg` opened now. Where it cannot
    /// be opened or read, says so once and answers "spare" (polling as it
    /// did without the check; the window's own preemption check remains).
    pub fn open() -> Self {
        // SAFETY: sysconf has no memory effects.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let cpus = u32::try_from(online)
            .ok()
            .filter(|&c| c > 0)
            .map(|online| usable_cpus(online, allowed_cpus(), cgroup_cpu_quota()));
        let why = match (File::open("/proc/loadavg"), cpus) {
            (Ok(file), Some(cpus)) => {
                if runnable_in(&file).is_some() {
                    return SpareCpu(Source::Proc {
                        file,
                        cpus,
                        last: None,
                    });
                }
                "/proc/loadavg has no runnable count".to_string()
            }
            (Err(e), _) => format!("cannot open /proc/loadavg ({e})"),
            (_, None) => "the host's online CPUs are unknown".to_string(),
        };
        tracing::warn!(
            "{why}: the virtio-iommu device thread polls without checking for a spare CPU"
        );
        SpareCpu(Source::Fixed(true))
    }

    /// A check that always answers `spare`.
    pub fn fixed(spare: bool) -> Self {
        SpareCpu(Source::Fixed(spare))
    }

    /// The descriptor the thread reads (for its seccomp filter), if any.
    pub fn fd(&self) -> Option<RawFd> {
        match &self.0 {
            Source::Proc { file, .. } => Some(file.as_raw_fd()),
            Source::Fixed(_) => None,
        }
    }

    /// Whether no runnable task waits for a CPU now (the caller, which is
    /// running, counted: the device thread about to poll). A read that
    /// fails answers "spare" (as without the check).
    pub fn spare(&mut self) -> bool {
        self.spare_beside(0)
    }

    /// Whether a CPU is free for one more task beside the runnable ones
    /// (the caller counted): a vCPU that would wake the device thread to
    /// poll asks this, the thread not yet runnable.
    pub fn spare_for_another(&mut self) -> bool {
        self.spare_beside(1)
    }

    fn spare_beside(&mut self, more: u32) -> bool {
        match &mut self.0 {
            Source::Fixed(s) => *s,
            Source::Proc { file, cpus, last } => {
                let now = Instant::now();
                let runnable = match *last {
                    Some((at, r)) if now.saturating_duration_since(at) < REFRESH => r,
                    _ => {
                        let r = runnable_in(file);
                        *last = Some((now, r));
                        r
                    }
                };
                fits(runnable, more, *cpus)
            }
        }
    }
}

/// The CPUs this process may use: the online ones, fewer if its
/// affinity (cpuset) allows fewer, fewer again if its cgroup's
/// `cpu.max` quota is less (rounded up to whole CPUs). The runnable count
/// stays host-wide, so a process confined to a few CPUs polls only when
/// the host as a whole has fewer runnable tasks than those: conservative.
fn usable_cpus(online: u32, allowed: Option<u32>, quota: Option<(u64, u64)>) -> u32 {
    let by_quota = quota
        .filter(|&(_, period)| period > 0)
        .map(|(q, period)| u32::try_from(q.div_ceil(period)).unwrap_or(u32::MAX).max(1));
    [Some(online), allowed.filter(|&a| a > 0), by_quota]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(online)
}

/// How many CPUs this thread's affinity mask allows.
fn allowed_cpus() -> Option<u32> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel writes at most its
    // size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    // SAFETY: `set` was filled by the kernel.
    (rc == 0).then(|| u32::try_from(unsafe { libc::CPU_COUNT(&set) }).unwrap_or(0))
}

/// The tightest `cpu.max` quota (quota, period) on this process's cgroup
/// v2 path and its ancestors; `None` without cgroup v2 or a quota.
fn cgroup_cpu_quota() -> Option<(u64, u64)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup");
    let mut tightest: Option<(u64, u64)> = None;
    let mut consider = |dir: &std::path::Path| {
        let Ok(text) = std::fs::read_to_string(dir.join("cpu.max")) else {
            return;
        };
        if let Some(q) = parse_cpu_max(&text) {
            let cpus = |(q, p): (u64, u64)| q as f64 / p.max(1) as f64;
            if tightest.is_none_or(|t| cpus(q) < cpus(t)) {
                tightest = Some(q);
            }
        }
    };
    for part in path.trim().split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
        consider(&dir);
    }
    tightest
}

/// A cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD": no quota).
fn parse_cpu_max(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_ascii_whitespace();
    let quota = f.next()?.parse().ok()?;
    let period = f.next()?.parse().ok()?;
    Some((quota, period))
}

/// Runnable tasks on the host now, from `/proc/loadavg` open as `file`.
fn runnable_in(file: &File) -> Option<u32> {
    // "0.52 0.58 0.59 3/467 12345\n": 64 bytes hold it on any host.
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0).ok()?;
    runnable_of(buf.get(..n)?)
}

/// Whether `runnable` tasks and `more` fit on `cpus` (an unknown count
/// fits: polling as without the check).
fn fits(runnable: Option<u32>, more: u32, cpus: u32) -> bool {
    runnable.is_none_or(|r| r.saturating_add(more) <= cpus)
}

/// The runnable count (R of the fourth field `R/T`) of a `/proc/loadavg`
/// line.
fn runnable_of(line: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(line).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

#[cfg(test)]
mod tests;
