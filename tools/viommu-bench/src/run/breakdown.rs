//! Where a virtio-iommu request's time goes in the VMM (`--breakdown`):
//! the host kernel's own record of the VMM's threads over an untimed pass
//! of each measured fio job, read from the text of a tracefs instance's
//! `trace` file and reduced to the request-serving thread's wake-ups,
//! wake-up latency, run time, ioctl time (by VFIO/iommufd command), page
//! pinning inside those ioctls, and the guest's MMIO write exits (its
//! notifications). Everything here is pure: lines in, numbers out; the
//! tracefs instance that records them is [`crate::run::host_trace`].
//!
//! The text format is the one `/sys/kernel/tracing/trace` has printed since
//! Linux 5.x, unchanged in 6.1 and 6.12:
//!
//! ```text
//! # entries-in-buffer/entries-written: 40/40   #P:2
//!           viommu-1234    [001] d..2.   100.000100: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
//!        CPU 0/KVM-1236    [000] d..5.   100.000200: sched_waking: comm=viommu pid=1234 prio=120 target_cpu=001
//!           viommu-1234    [001] .....   100.000300: sys_enter: NR 16 (9, 3b71, 7ffd6c8a8f30, 0, 0, 0)
//! CPU:1 [LOST 12 EVENTS]
//! ```
//!
//! (the irq-flags column is optional, a `(tgid)` may follow the pid, a task
//! whose name the kernel no longer remembers prints as `<...>`: names are
//! taken from the events' own fields and from /proc, never from that
//! column). Written here rather than taken from a crate: the maintained
//! readers of ftrace data (libtracecmd and its Rust wrapper) need the C
//! libraries and trace-cmd's binary format, and the text is a few fields
//! per event.

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

/// The prefix of the kprobe events on the kernel's page pinning
/// ([`crate::run::host_trace`]): `vb_pin_FUNC` at entry, `vb_pin_FUNC_ret` at
/// return.
pub const PIN_EVENT_PREFIX: &str = "vb_pin_";

/// The text of the trace markers that bound the recorded window.
pub const MARK_BEGIN: &str = "viommu-bench window begin";
/// See [`MARK_BEGIN`].
pub const MARK_END: &str = "viommu-bench window end";

/// One event line of a `trace` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The task (thread) the event ran in.
    pub tid: u32,
    /// The CPU.
    pub cpu: u32,
    /// Trace clock, nanoseconds.
    pub ts_ns: u64,
    /// The event's name (`sched_switch`, `sys_enter`, ...).
    pub name: &'a str,
    /// What follows `name: `.
    pub fields: &'a str,
}

/// One line of a `trace` text that matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// An event.
    Event(Event<'a>),
    /// `CPU:N [LOST M EVENTS]`: the ring buffer lost events there.
    Lost {
        /// The CPU.
        cpu: u32,
        /// How many.
        events: u64,
    },
    /// `# entries-in-buffer/entries-written: A/B`: B - A events were
    /// written and are no longer in the buffer.
    Entries {
        /// In the buffer.
        in_buffer: u64,
        /// Written.
        written: u64,
    },
}

/// Seconds with a fraction (`100.000100`) as nanoseconds.
fn parse_ts(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.')?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sec: u64 = sec.parse().ok()?;
    let frac: u64 = format!("{frac:0<9}").parse().ok()?;
    sec.checked_mul(1_000_000_000)?.checked_add(frac)
}

/// One line of a `trace` text; `None` for comments, banners and anything
/// that is not an event.
pub fn parse_line(line: &str) -> Option<Line<'_>> {
    let t = line.trim();
    if let Some(rest) = t.strip_prefix("# entries-in-buffer/entries-written:") {
        let (a, b) = rest.split_whitespace().next()?.split_once('/')?;
        return Some(Line::Entries {
            in_buffer: a.parse().ok()?,
            written: b.parse().ok()?,
        });
    }
    if t.starts_with('#') {
        return None;
    }
    if let Some(rest) = t.strip_prefix("CPU:") {
        let (cpu, lost) = rest.split_once(' ')?;
        let n = lost
            .trim()
            .strip_prefix("[LOST ")?
            .split_whitespace()
            .next()?;
        return Some(Line::Lost {
            cpu: cpu.parse().ok()?,
            events: n.parse().ok()?,
        });
    }
    // The first `[CPU]` that follows `TASK-PID` (and an optional `(TGID)`).
    let mut from = 0;
    let (tid, cpu, after) = loop {
        let open = from + t[from..].find('[')?;
        let close = open + t[open..].find(']')?;
        let inner = &t[open + 1..close];
        let mut task = t[..open].trim_end();
        if task.ends_with(')') {
            if let Some(p) = task.rfind('(') {
                task = task[..p].trim_end();
            }
        }
        let pid = task
            .rsplit_once('-')
            .map(|(_, p)| p)
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        match (pid, inner.parse::<u32>()) {
            (Some(pid), Ok(cpu)) if !inner.is_empty() => {
                break (pid.parse().ok()?, cpu, &t[close + 1..]);
            }
            _ => from = open + 1,
        }
    };
    // [irq flags] TIMESTAMP: NAME: FIELDS
    let mut rest = after.trim_start();
    let mut ts = None;
    for _ in 0..2 {
        let (tok, r) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        rest = r.trim_start();
        if let Some(x) = tok.strip_suffix(':').and_then(parse_ts) {
            ts = Some(x);
            break;
        }
    }
    let ts_ns = ts?;
    let (name, fields) = match rest.split_once(": ") {
        Some((n, f)) => (n, f),
        None => (rest.trim_end_matches(':'), ""),
    };
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    Some(Line::Event(Event {
        tid,
        cpu,
        ts_ns,
        name,
        fields,
    }))
}

/// The word after the last ` KEY=` (or a leading `KEY=`) in `s`: task
/// names before it may hold spaces, the values read here do not.
fn word_after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=");
    let at = match s.rfind(&format!(" {pat}")) {
        Some(i) => i + 1 + pat.len(),
        None => s.strip_prefix(&pat).map(|_| pat.len())?,
    };
    s[at..].split_whitespace().next()
}

/// The text between `KEY=` at the start of `s` and the last ` NEXT=`.
fn name_before<'a>(s: &'a str, key: &str, next: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(&format!("{key}="))?;
    let end = rest.rfind(&format!(" {next}="))?;
    Some(&rest[..end])
}

/// A `sched_switch`: who left the CPU (name, tid, state) and who took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Switch<'a> {
    prev_comm: &'a str,
    prev: u32,
    prev_state: &'a str,
    next_comm: &'a str,
    next: u32,
}

fn parse_switch(fields: &str) -> Option<Switch<'_>> {
    let (p, n) = fields.split_once(" ==> ")?;
    Some(Switch {
        prev_comm: name_before(p, "prev_comm", "prev_pid")?,
        prev: word_after(p, "prev_pid")?.parse().ok()?,
        prev_state: word_after(p, "prev_state")?,
        next_comm: name_before(n, "next_comm", "next_pid")?,
        next: word_after(n, "next_pid")?.parse().ok()?,
    })
}

/// A `sched_waking`/`sched_wakeup`: the woken task's name and tid.
fn parse_wake(fields: &str) -> Option<(&str, u32)> {
    Some((
        name_before(fields, "comm", "pid")?,
        word_after(fields, "pid")?.parse().ok()?,
    ))
}

/// `sys_enter: NR 16 (a, b, ...)`: the number and the arguments.
fn parse_sys_enter(fields: &str) -> Option<(u64, Vec<u64>)> {
    let rest = fields.strip_prefix("NR ")?;
    let (nr, args) = rest.split_once(' ').unwrap_or((rest, ""));
    let args = args
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .filter_map(|a| u64::from_str_radix(a.trim().trim_start_matches("0x"), 16).ok())
        .collect();
    Some((nr.parse().ok()?, args))
}

/// `sys_exit: NR 16 = 0`: the number.
fn parse_sys_exit(fields: &str) -> Option<u64> {
    fields
        .strip_prefix("NR ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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
enum OnCpu {
    /// Not known yet: `from_start` while nothing was lost since the
    /// window began (its first event then says what it was doing since).
    Unknown { from_start: bool },
    /// On a CPU since the segment's start.
    On,
    /// Off a CPU (sleeping or runnable).
    Off,
}

#[derive(Debug)]
struct Thread {
    stats: ThreadStats,
    cpu: OnCpu,
    /// Start of the current accounting segment.
    seg: u64,
    /// Waiting to run since this wake-up.
    woken: Option<u64>,
    /// In an ioctl since (time, command name, on-CPU time so far).
    ioctl: Option<(u64, &'static str, u64)>,
    /// Pinning depth and the outermost call's start.
    pin: Option<(u32, u64, u64)>,
}

impl Thread {
    fn new(tid: u32) -> Self {
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
    fn account(&mut self, t: u64) {
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
    fn running(&mut self, t: u64, start: u64) {
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

/// The last event time of each CPU in `full` (the CPUs whose buffer
/// filled and dropped what came after): the earliest of them is where the
/// record stops being whole, the window's cut-off.
pub fn cutoff<'a>(lines: impl IntoIterator<Item = &'a str>, full: &[u32]) -> Option<u64> {
    if full.is_empty() {
        return None;
    }
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for l in lines {
        if let Some(Line::Event(e)) = parse_line(l) {
            if full.contains(&e.cpu) {
                last.insert(e.cpu, e.ts_ns);
            }
        }
    }
    last.values().min().copied()
}

/// Ports below this are the PC's fixed ones (the serial console, the
/// PCI configuration mechanism at 0xcf8, ACPI's registers, the timers);
/// PCI I/O BARs, where a virtio notify register can be, start here in
/// both VMMs' layouts.
const FIRST_BAR_PORT: u64 = 0x1000;

/// Whether a `kvm_pio` event's fields are a write to a port a PCI BAR can
/// hold (`pio_write at 0x1000 size 2 ...`): a guest's console output is
/// not a notification.
fn is_device_port_write(fields: &str) -> bool {
    fields
        .strip_prefix("pio_write at 0x")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|port| u64::from_str_radix(port, 16).ok())
        .is_some_and(|port| port >= FIRST_BAR_PORT)
}

/// Reduce a `trace` text to what each thread did. `names`: tid to name
/// (the VMM's threads from /proc; the events' names fill the rest);
/// `end`: a cut-off ([`cutoff`]): later events are left out.
pub fn analyze<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    names: &BTreeMap<u32, String>,
    end: Option<u64>,
) -> Analysis {
    let mut th: BTreeMap<u32, Thread> = BTreeMap::new();
    let mut a = Analysis::default();
    let (mut start, mut last, mut mark_end) = (None::<u64>, 0u64, None::<u64>);
    let mut write_exits = None::<u64>;
    for l in lines {
        let e = match parse_line(l) {
            Some(Line::Event(e)) => e,
            Some(Line::Lost { events, .. }) => {
                a.lost_events += events;
                // What every thread was doing is unknown from here on:
                // nothing open is counted, run time resumes at the next
                // event that says where a thread is.
                for t in th.values_mut() {
                    t.account(last);
                    if t.ioctl.take().is_some() {
                        t.stats.ioctls_cut += 1;
                    }
                    t.pin = None;
                    if t.woken.take().is_some() {
                        t.stats.wakeups_unanswered += 1;
                    }
                    t.cpu = OnCpu::Unknown { from_start: false };
                }
                continue;
            }
            Some(Line::Entries { in_buffer, written }) => {
                a.lost_events += written.saturating_sub(in_buffer);
                continue;
            }
            None => continue,
        };
        if end.is_some_and(|c| e.ts_ns > c) || mark_end.is_some() {
            continue;
        }
        if e.name == "tracing_mark_write" || e.name == "print" {
            if e.fields.contains(MARK_BEGIN) {
                start.get_or_insert(e.ts_ns);
            } else if e.fields.contains(MARK_END) {
                mark_end = Some(e.ts_ns);
            }
            continue;
        }
        let s = *start.get_or_insert(e.ts_ns);
        last = last.max(e.ts_ns);
        a.events += 1;
        let t = e.ts_ns;
        match e.name {
            "sched_switch" => {
                let Some(sw) = parse_switch(e.fields) else {
                    continue;
                };
                if sw.prev != 0 {
                    let p = th.entry(sw.prev).or_insert_with(|| Thread::new(sw.prev));
                    p.stats.comm = sw.prev_comm.to_string();
                    p.running(t, s);
                    p.cpu = OnCpu::Off;
                    if sw.prev_state.starts_with('R') {
                        p.stats.preemptions += 1;
                    } else {
                        p.stats.sleeps += 1;
                    }
                }
                if sw.next != 0 {
                    let n = th.entry(sw.next).or_insert_with(|| Thread::new(sw.next));
                    n.stats.comm = sw.next_comm.to_string();
                    n.account(t);
                    n.cpu = OnCpu::On;
                    n.seg = t;
                    if let Some(w) = n.woken.take() {
                        let lat = t.saturating_sub(w);
                        n.stats.wakeups_timed += 1;
                        n.stats.wake_latency_ns += lat;
                        n.stats.wake_latency_max_ns = n.stats.wake_latency_max_ns.max(lat);
                    }
                }
            }
            "sched_waking" | "sched_wakeup" => {
                let Some((comm, tid)) = parse_wake(e.fields) else {
                    continue;
                };
                let w = th.entry(tid).or_insert_with(|| Thread::new(tid));
                w.stats.comm = comm.to_string();
                if w.woken.is_some() {
                    continue; // sched_wakeup after its sched_waking
                }
                match w.cpu {
                    OnCpu::On => {
                        if e.name == "sched_waking" {
                            w.stats.wakeups_running += 1;
                        }
                    }
                    _ => {
                        // It was asleep (if nothing said so before: since
                        // the window began, or since the lost events).
                        w.cpu = OnCpu::Off;
                        w.stats.wakeups += 1;
                        w.woken = Some(t);
                    }
                }
            }
            "sys_enter" | "sys_exit" => {
                let me = th.entry(e.tid).or_insert_with(|| Thread::new(e.tid));
                me.running(t, s);
                if e.name == "sys_enter" {
                    let Some((nr, args)) = parse_sys_enter(e.fields) else {
                        continue;
                    };
                    if nr == IOCTL_NR {
                        if me.ioctl.is_some() {
                            me.stats.ioctls_cut += 1;
                        }
                        let cmd = args.get(1).copied().unwrap_or(0);
                        me.ioctl = Some((t, ioctl_name(cmd), 0));
                    }
                } else if parse_sys_exit(e.fields) == Some(IOCTL_NR) {
                    match me.ioctl.take() {
                        Some((t0, name, on)) => {
                            let c = me.stats.ioctls.entry(name.to_string()).or_default();
                            c.count += 1;
                            c.ns += t.saturating_sub(t0);
                            c.on_cpu_ns += on;
                        }
                        None => me.stats.ioctls_cut += 1,
                    }
                }
            }
            "kvm_fast_mmio" | "kvm_mmio" | "kvm_pio" => {
                let n = write_exits.get_or_insert(0);
                if e.name == "kvm_fast_mmio"
                    || e.fields.starts_with("mmio write")
                    || is_device_port_write(e.fields)
                {
                    *n += 1;
                }
                if e.tid != 0 {
                    th.entry(e.tid)
                        .or_insert_with(|| Thread::new(e.tid))
                        .running(t, s);
                }
            }
            name if name.starts_with(PIN_EVENT_PREFIX) => {
                let me = th.entry(e.tid).or_insert_with(|| Thread::new(e.tid));
                me.running(t, s);
                if name.ends_with("_ret") {
                    match me.pin.take() {
                        Some((1, t0, on)) => {
                            me.stats.pins.count += 1;
                            me.stats.pins.ns += t.saturating_sub(t0);
                            me.stats.pins.on_cpu_ns += on;
                        }
                        Some((d, t0, on)) => me.pin = Some((d - 1, t0, on)),
                        None => {}
                    }
                } else {
                    me.pin = Some(match me.pin {
                        Some((d, t0, on)) => (d + 1, t0, on),
                        None => (1, t, 0),
                    });
                }
            }
            _ => {
                // Any other event of a thread's own: it is on a CPU.
                if e.tid != 0 {
                    th.entry(e.tid)
                        .or_insert_with(|| Thread::new(e.tid))
                        .running(t, s);
                }
            }
        }
    }
    let start = start.unwrap_or(0);
    let end_ns = match (mark_end, end) {
        (Some(m), Some(c)) => m.min(c),
        (Some(m), None) => m,
        (None, Some(c)) => c.min(last.max(start)),
        (None, None) => last.max(start),
    };
    a.start_ns = start;
    a.end_ns = end_ns.max(start);
    a.write_exits = write_exits;
    // The VMM's threads that left no event are listed too.
    for tid in names.keys() {
        th.entry(*tid).or_insert_with(|| Thread::new(*tid));
    }
    for (tid, mut t) in th {
        match t.cpu {
            // Never switched, never woken: either always on a CPU (it made
            // events of its own: `running` said so) or never seen running.
            OnCpu::Unknown { .. } | OnCpu::Off => {}
            OnCpu::On => t.account(a.end_ns),
        }
        if t.ioctl.is_some() {
            t.stats.ioctls_cut += 1;
        }
        if t.woken.is_some() {
            t.stats.wakeups_unanswered += 1;
        }
        if let Some(n) = names.get(&tid) {
            t.stats.comm = n.clone();
        }
        a.threads.push(t.stats);
    }
    a
}

/// What one untimed breakdown pass recorded (results.json: the `breakdown`
/// of the phase `breakdown-RUN`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// The VMM's threads over the analysed window.
    pub analysis: Analysis,
    /// How the request-serving thread was found.
    pub serving: Option<Serving>,
    /// Its tid, if found.
    pub server_tid: Option<u32>,
    /// Why it was not found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_missing: Option<String>,
    /// Tracing on to off by the host's clock, ns.
    pub traced_ns: u64,
    /// A CPU's buffer filled before tracing went off: the window ends at
    /// that CPU's last event (see [`cutoff`]), before `traced_ns` was over.
    pub cut: bool,
    /// Events the full buffers dropped (tracefs `per_cpu/*/stats`).
    pub dropped_events: u64,
    /// Events overwritten (`overrun`; 0 with the instance's overwrite off).
    pub overrun: u64,
    /// Why page pinning was not traced (None: it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins_missing: Option<String>,
    /// Our VMM's device counters from tracing on to off (None: stock QEMU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::run::metrics::DeviceCounters>,
}

impl Breakdown {
    /// The request-serving thread's record.
    pub fn server(&self) -> Option<&ThreadStats> {
        self.analysis.thread(self.server_tid?)
    }

    /// Events missing from the record: lost, dropped or overwritten.
    pub fn missing_events(&self) -> u64 {
        self.analysis.lost_events + self.dropped_events + self.overrun
    }
}

#[cfg(test)]
mod tests;
