//! The reduction of one recorded window: the events in order, each
//! charged to its thread ([`super::threads`]), into an [`Analysis`]; and
//! where a record stops being whole ([`cutoff`]).

use std::collections::BTreeMap;

use super::parse::{parse_line, parse_switch, parse_sys_enter, parse_sys_exit, parse_wake};
use super::parse::{Event, Line};
use super::threads::{ioctl_name, Analysis, OnCpu, Thread, IOCTL_NR};

/// The prefix of the kprobe events on the kernel's page pinning
/// ([`crate::run::host_trace`]): `vb_pin_FUNC` at entry, `vb_pin_FUNC_ret` at
/// return.
pub const PIN_EVENT_PREFIX: &str = "vb_pin_";

/// The text of the trace markers that bound the recorded window.
pub const MARK_BEGIN: &str = "viommu-bench window begin";
/// See [`MARK_BEGIN`].
pub const MARK_END: &str = "viommu-bench window end";

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
    let mut w = Window::default();
    for l in lines {
        let e = match parse_line(l) {
            Some(Line::Event(e)) => e,
            Some(Line::Lost { events, .. }) => {
                w.lost(events);
                continue;
            }
            Some(Line::Entries { in_buffer, written }) => {
                w.a.lost_events += written.saturating_sub(in_buffer);
                continue;
            }
            None => continue,
        };
        if end.is_some_and(|c| e.ts_ns > c) || w.mark_end.is_some() {
            continue;
        }
        w.event(&e);
    }
    w.finish(names, end)
}

/// The window as its events come in.
#[derive(Default)]
struct Window {
    /// The threads seen so far, by tid.
    th: BTreeMap<u32, Thread>,
    /// The figures that are not a thread's.
    a: Analysis,
    /// The begin marker's time, else the first event's.
    start: Option<u64>,
    /// The latest event's time.
    last: u64,
    /// The end marker's time.
    mark_end: Option<u64>,
    /// The guest's write exits, once such an event was seen.
    write_exits: Option<u64>,
}

impl Window {
    /// The thread `tid`, new if not seen yet.
    fn thread(&mut self, tid: u32) -> &mut Thread {
        self.th.entry(tid).or_insert_with(|| Thread::new(tid))
    }

    /// The buffer lost `events` events here.
    fn lost(&mut self, events: u64) {
        self.a.lost_events += events;
        // What every thread was doing is unknown from here on:
        // nothing open is counted, run time resumes at the next
        // event that says where a thread is.
        for t in self.th.values_mut() {
            t.account(self.last);
            if t.ioctl.take().is_some() {
                t.stats.ioctls_cut += 1;
            }
            t.pin = None;
            if t.woken.take().is_some() {
                t.stats.wakeups_unanswered += 1;
            }
            t.cpu = OnCpu::Unknown { from_start: false };
        }
    }

    /// One event inside the window (or a marker that bounds it).
    fn event(&mut self, e: &Event<'_>) {
        if e.name == "tracing_mark_write" || e.name == "print" {
            if e.fields.contains(MARK_BEGIN) {
                self.start.get_or_insert(e.ts_ns);
            } else if e.fields.contains(MARK_END) {
                self.mark_end = Some(e.ts_ns);
            }
            return;
        }
        let s = *self.start.get_or_insert(e.ts_ns);
        self.last = self.last.max(e.ts_ns);
        self.a.events += 1;
        match e.name {
            "sched_switch" => self.switch(e, s),
            "sched_waking" | "sched_wakeup" => self.wake(e),
            "sys_enter" | "sys_exit" => self.syscall(e, s),
            "kvm_fast_mmio" | "kvm_mmio" | "kvm_pio" => {
                let n = self.write_exits.get_or_insert(0);
                if e.name == "kvm_fast_mmio"
                    || e.fields.starts_with("mmio write")
                    || is_device_port_write(e.fields)
                {
                    *n += 1;
                }
                if e.tid != 0 {
                    self.thread(e.tid).running(e.ts_ns, s);
                }
            }
            name if name.starts_with(PIN_EVENT_PREFIX) => self.pin(e, s),
            _ => {
                // Any other event of a thread's own: it is on a CPU.
                if e.tid != 0 {
                    self.thread(e.tid).running(e.ts_ns, s);
                }
            }
        }
    }

    /// A `sched_switch`: the previous task off its CPU (asleep or
    /// preempted), the next one on, its wake-up latency taken.
    fn switch(&mut self, e: &Event<'_>, s: u64) {
        let t = e.ts_ns;
        let Some(sw) = parse_switch(e.fields) else {
            return;
        };
        if sw.prev != 0 {
            let p = self.thread(sw.prev);
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
            let n = self.thread(sw.next);
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

    /// A `sched_waking` or `sched_wakeup`: a wake-up of a sleeping task,
    /// or of one still on its CPU.
    fn wake(&mut self, e: &Event<'_>) {
        let Some((comm, tid)) = parse_wake(e.fields) else {
            return;
        };
        let w = self.thread(tid);
        w.stats.comm = comm.to_string();
        if w.woken.is_some() {
            return; // sched_wakeup after its sched_waking
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
                w.woken = Some(e.ts_ns);
            }
        }
    }

    /// A `sys_enter` or `sys_exit` of the event's thread: an ioctl opened
    /// or closed.
    fn syscall(&mut self, e: &Event<'_>, s: u64) {
        let t = e.ts_ns;
        let me = self.thread(e.tid);
        me.running(t, s);
        if e.name == "sys_enter" {
            let Some((nr, args)) = parse_sys_enter(e.fields) else {
                return;
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

    /// A page pinning kprobe, at entry or return: nested calls count once.
    fn pin(&mut self, e: &Event<'_>, s: u64) {
        let t = e.ts_ns;
        let me = self.thread(e.tid);
        me.running(t, s);
        if e.name.ends_with("_ret") {
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

    /// The window closed: its bounds, every thread's open time and calls
    /// settled, the VMM's threads named.
    fn finish(mut self, names: &BTreeMap<u32, String>, end: Option<u64>) -> Analysis {
        let (last, mark_end) = (self.last, self.mark_end);
        let start = self.start.unwrap_or(0);
        let end_ns = match (mark_end, end) {
            (Some(m), Some(c)) => m.min(c),
            (Some(m), None) => m,
            (None, Some(c)) => c.min(last.max(start)),
            (None, None) => last.max(start),
        };
        let mut a = self.a;
        a.start_ns = start;
        a.end_ns = end_ns.max(start);
        a.write_exits = self.write_exits;
        // The VMM's threads that left no event are listed too.
        for tid in names.keys() {
            self.th.entry(*tid).or_insert_with(|| Thread::new(*tid));
        }
        for (tid, mut t) in self.th {
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
}
