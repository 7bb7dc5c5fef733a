//! A VMM that will not go away: where its threads are in the host's
//! kernel, and the wait for it before the next VM takes the same device.
//!
//! A VMM that SIGKILL does not end within 30 s is inside the host's kernel
//! (an ioctl that does not return, a device reset, the release of its
//! mappings). It still holds the VFIO group, so the next VM would fail to
//! open it ("busy") and be reported as a failure of its own. Seen in the
//! lab (CI of 2026-11-27, smp-smoke): a lazy guest's VMM did not exit after
//! its guest powered off nor after SIGKILL, and the next cell failed at
//! once with "/dev/vfio/1 is busy". The runner now keeps such a VMM here,
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
/// ([`crate::host_trace::threads`], in thread id order).
pub fn kernel_stacks_in(proc: &Path, pid: u32) -> String {
    let threads = match crate::host_trace::threads(proc, pid) {
        Ok(t) => t,
        Err(crate::host_trace::HostTraceError::Read { source, .. }) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lose_prefix_and_size_and_keep_module() {
        let s = "[<0>] vfio_pci_core_disable+0x1c5/0x390 [vfio_pci_core]\n\
                 [<0>] vfio_pci_core_close_device+0x62/0xe0 [vfio_pci_core]\n\
                 [<0>] do_exit+0x2f1/0xa80\n";
        assert_eq!(
            stack_frames(s),
            vec![
                "vfio_pci_core_disable+0x1c5 [vfio_pci_core]",
                "vfio_pci_core_close_device+0x62 [vfio_pci_core]",
                "do_exit+0x2f1",
            ]
        );
        let deep: String = (0..20).map(|i| format!("[<0>] f{i}+0x1/0x2\n")).collect();
        assert_eq!(stack_frames(&deep).len(), MAX_FRAMES);
        assert!(stack_frames("").is_empty());
    }

    #[test]
    fn state_after_a_name_with_parentheses() {
        assert_eq!(stat_state("42 (vcpu (0)) D 1 42 42 0"), Some('D'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn a_process_tree_in_a_directory() {
        let d = tempfile::tempdir().unwrap();
        for (tid, comm, state, stack, wchan) in [
            (
                7u32,
                "vmm",
                "D",
                "[<0>] vfio_pci_core_disable+0x1/0x2 [vfio_pci_core]\n",
                "",
            ),
            (9, "vcpu0", "S", "", "kvm_vcpu_block"),
        ] {
            let t = d.path().join("4242/task").join(tid.to_string());
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(t.join("stat"), format!("{tid} ({comm}) {state} 1 2")).unwrap();
            std::fs::write(t.join("stack"), stack).unwrap();
            std::fs::write(t.join("wchan"), wchan).unwrap();
        }
        assert_eq!(
            kernel_stacks_in(d.path(), 4242),
            "vmm(7) D: vfio_pci_core_disable+0x1 [vfio_pci_core]; vcpu0(9) S: waits in kvm_vcpu_block"
        );
        assert!(kernel_stacks_in(d.path(), 9999).contains("it has exited"));
    }

    #[test]
    fn own_process_is_readable() {
        let s = kernel_stacks(std::process::id());
        assert!(s.contains(&format!("({})", std::process::id())), "{s}");
    }

    #[tokio::test]
    async fn a_process_that_exits_is_waited_for_and_one_that_does_not_is_kept() {
        let quick = tokio::process::Command::new("true").spawn().unwrap();
        let s = StuckVmm::new("a round 1".into(), quick, Instant::now());
        assert!(s.wait(Duration::from_secs(10)).await.is_ok());
        let slow = tokio::process::Command::new("sleep")
            .arg("30")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let s = StuckVmm::new("b round 1".into(), slow, Instant::now());
        let kept = s.wait(Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(kept.cell, "b round 1");
    }
}
