//! What each thread did in the window ([`ThreadStats`], gathered in
//! [`Analysis`]), the per-thread bookkeeping [`super::analyze`] does as the
//! events come in, and how the request-serving thread is picked
//! ([`Serving`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `ioctl(2)`'s system call number, as `raw_syscalls:sys_enter` shows it.
#[cfg(target_arch = "aarch64")]
pub const IOCTL_NR: u64 = 29;
/// `ioctl(2)`'s system call number, as `raw_syscalls:sys_enter` shows it.
#[cfg(not(target_arch = "aarch64"))]
pub const IOCTL_NR: u64 = 16;

/// What the request-serving thread's ioctls were, by command (the events
/// show the arguments: `cmd` is the second).
pub fn ioctl_name(cmd: u64) -> &'static str {
    match cmd {
        0x3b71 => "VFIO_IOMMU_MAP_DMA",
        0x3b72 => "VFIO_IOMMU_UNMAP_DMA",
        0x3b83 => "IOMMU_IOAS_COPY",
        0x3b85 => "IOMMU_IOAS_MAP",
        0x3b86 => "IOMMU_IOAS_UNMAP",
        _ => "other",
    }
}

/// Whether an ioctl of that name maps or unmaps DMA (the calls that find
/// stock QEMU's request-serving thread).
pub fn is_dma_ioctl(name: &str) -> bool {
    name != "other"
}

/// Calls of one kind: how many, their time from entry to return, and the
/// part of it the thread was on a CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calls {
    /// Calls that entered and returned in the window.
    pub count: u64,
    /// Their time, entry to return, ns.
    pub ns: u64,
    /// The part of it on a CPU, ns (the rest it was preempted or blocked).
    #[serde(default)]
    pub on_cpu_ns: u64,
}

/// What one thread did in the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStats {
    /// Its tid.
    pub tid: u32,
    /// Its name (from /proc or the events; empty if never seen).
    pub comm: String,
    /// Wake-ups while it slept (`sched_waking`, else `sched_wakeup`).
    pub wakeups: u64,
    /// Of those, the ones it was switched in after, within the window.
    pub wakeups_timed: u64,
    /// Wake-up latency (waking to switch-in) summed over those, ns.
    pub wake_latency_ns: u64,
    /// The longest of them, ns.
    pub wake_latency_max_ns: u64,
    /// Wake-ups with no switch-in before the window ended.
    pub wakeups_unanswered: u64,
    /// Wake-ups that found it still on a CPU (about to sleep): no latency.
    pub wakeups_running: u64,
    /// Time on a CPU in the window, ns.
    pub run_ns: u64,
    /// Times it went to sleep (switched out not runnable).
    pub sleeps: u64,
    /// Times it was preempted (switched out runnable).
    pub preemptions: u64,
    /// Its ioctls by command ([`ioctl_name`]).
    pub ioctls: BTreeMap<String, Calls>,
    /// ioctls cut by the window's edges or lost events (not counted).
    pub ioctls_cut: u64,
    /// Page pinning inside the kernel (kprobes on pin_user_pages_*), if traced.
    pub pins: Calls,
    /// Its own run time is known only from a point after the window's
    /// start (events were lost while it ran): `run_ns` is a lower bound.
    pub run_lower_bound: bool,
}

impl ThreadStats {
    /// Its DMA map/unmap ioctls (VFIO or iommufd), all commands together.
    pub fn dma_ioctls(&self) -> Calls {
        self.ioctls
            .iter()
            .filter(|(n, _)| is_dma_ioctl(n))
            .fold(Calls::default(), |a, (_, c)| Calls {
                count: a.count + c.count,
                ns: a.ns + c.ns,
                on_cpu_ns: a.on_cpu_ns + c.on_cpu_ns,
            })
    }

    /// Every ioctl, all commands together.
    pub fn all_ioctls(&self) -> Calls {
        self.ioctls.values().fold(Calls::default(), |a, c| Calls {
            count: a.count + c.count,
            ns: a.ns + c.ns,
            on_cpu_ns: a.on_cpu_ns + c.on_cpu_ns,
        })
    }
}

/// Whether a thread was on a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnCpu {
    /// Not known yet: `from_start` while nothing was lost since the
    /// window began (its first event then says what it was doing since).
    Unknown { from_start: bool },
    /// On a CPU since the segment's start.
    On,
    /// Off a CPU (sleeping or runnable).
    Off,
}

/// One thread as the events come in: its figures so far and what it is
/// in the middle of.
#[derive(Debug)]
pub(super) struct Thread {
    /// Its figures so far.
    pub stats: ThreadStats,
    /// Whether it is on a CPU.
    pub cpu: OnCpu,
    /// Start of the current accounting segment.
    pub seg: u64,
    /// Waiting to run since this wake-up.
    pub woken: Option<u64>,
    /// In an ioctl since (time, command name, on-CPU time so far).
    pub ioctl: Option<(u64, &'static str, u64)>,
    /// Pinning depth and the outermost call's start.
    pub pin: Option<(u32, u64, u64)>,
}

impl Thread {
    /// A thread not seen yet.
    pub fn new(tid: u32) -> Self {
        Thread {
            stats: ThreadStats {
                tid,
                ..Default::default()
            },
            cpu: OnCpu::Unknown { from_start: true },
            seg: 0,
            woken: None,
            ioctl: None,
            pin: None,
        }
    }

    /// Count the time since the last segment's start as what it was.
    pub fn account(&mut self, t: u64) {
        let d = t.saturating_sub(self.seg);
        if self.cpu == OnCpu::On {
            self.stats.run_ns += d;
            if let Some((_, _, on)) = self.ioctl.as_mut() {
                *on += d;
            }
            if let Some((_, _, on)) = self.pin.as_mut() {
                *on += d;
            }
        }
        self.seg = t;
    }

    /// An event in this thread's own context at `t`: it is on a CPU, and
    /// (unless it came on in the window, which a switch-in would have
    /// said) has been since the window began.
    pub fn running(&mut self, t: u64, start: u64) {
        match self.cpu {
            OnCpu::Unknown { from_start } => {
                self.seg = if from_start { start } else { t };
                if !from_start {
                    self.stats.run_lower_bound = true;
                }
                self.cpu = OnCpu::On;
            }
            // Its switch-in was not seen (lost): on from here.
            OnCpu::Off => {
                self.seg = t;
                self.cpu = OnCpu::On;
            }
            OnCpu::On => {}
        }
        self.account(t);
    }
}

/// The threads' record over one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Analysis {
    /// The window analysed, trace clock ns (begin marker, or the first
    /// event; end marker or cut-off, or the last event).
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Every thread seen, by tid.
    pub threads: Vec<ThreadStats>,
    /// The guest's write exits (`kvm_fast_mmio`, `kvm_mmio` writes, and
    /// `kvm_pio` writes to a port a PCI BAR can hold: notifications by MMIO
    /// or port) on the VMM's threads; `None` when no such event was
    /// recorded.
    #[serde(alias = "mmio_writes")]
    pub write_exits: Option<u64>,
    /// Events the buffer lost (`[LOST N EVENTS]` lines, and written but no
    /// longer in the buffer per the header).
    pub lost_events: u64,
    /// Events in the window that were analysed.
    pub events: u64,
}

impl Analysis {
    /// The window's length, ns.
    pub fn window_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The thread `tid`.
    pub fn thread(&self, tid: u32) -> Option<&ThreadStats> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

/// How the request-serving thread is found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Serving {
    /// The thread with this name (our VMM's device thread, `viommu`: what
    /// the tool used for ours before it could serve on vCPUs; kept so
    /// older results read back).
    Named(String),
    /// The thread that made the most DMA map/unmap ioctls (both VMMs:
    /// stock QEMU's vCPU, whose thread names differ between versions, and
    /// ours, its device thread or a vCPU by `--viommu-kicks`).
    DmaCaller,
}

impl Serving {
    /// The thread it picks in `a`, or why none.
    pub fn pick<'a>(&self, a: &'a Analysis) -> Result<&'a ThreadStats, String> {
        match self {
            Serving::Named(n) => a
                .threads
                .iter()
                .filter(|t| &t.comm == n)
                .max_by_key(|t| (t.run_ns, t.wakeups))
                .ok_or_else(|| format!("no thread named {n:?} in the trace")),
            Serving::DmaCaller => a
                .threads
                .iter()
                .filter(|t| t.dma_ioctls().count > 0)
                .max_by_key(|t| t.dma_ioctls().count)
                .ok_or_else(|| {
                    "no thread of the VMM made a VFIO or iommufd map/unmap ioctl in the window"
                        .into()
                }),
        }
    }
}
