//! The text of a tracefs `trace` file, line by line.
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
pub(super) struct Switch<'a> {
    /// The task that left the CPU.
    pub prev_comm: &'a str,
    /// Its tid.
    pub prev: u32,
    /// Its state (`R`: preempted, runnable).
    pub prev_state: &'a str,
    /// The task that took the CPU.
    pub next_comm: &'a str,
    /// Its tid.
    pub next: u32,
}

/// A `sched_switch`'s fields.
pub(super) fn parse_switch(fields: &str) -> Option<Switch<'_>> {
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
pub(super) fn parse_wake(fields: &str) -> Option<(&str, u32)> {
    Some((
        name_before(fields, "comm", "pid")?,
        word_after(fields, "pid")?.parse().ok()?,
    ))
}

/// `sys_enter: NR 16 (a, b, ...)`: the number and the arguments.
pub(super) fn parse_sys_enter(fields: &str) -> Option<(u64, Vec<u64>)> {
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
pub(super) fn parse_sys_exit(fields: &str) -> Option<u64> {
    fields
        .strip_prefix("NR ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
