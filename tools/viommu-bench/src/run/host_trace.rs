//! The host's tracefs recording behind `--breakdown`: a tracefs instance
//! of the tool's own (`/sys/kernel/tracing/instances/viommu-bench-PID`),
//! with a bounded buffer, recording only the VMM's threads (`set_event_pid`
//! with every tid of the VMM process, `event-fork` for threads started
//! later): the scheduler's wake-ups and switches, `ioctl(2)` entry and
//! return (`raw_syscalls`, filtered to the ioctl number), KVM's MMIO
//! write exits where the host has those events, and, where the host has
//! kprobe events, the kernel's page pinning (`pin_user_pages_remote` and
//! `pin_user_pages_fast`, which VFIO's MAP_DMA and iommufd's IOAS_MAP
//! call). It records only while an untimed breakdown run goes on (from
//! [`Settings::delay`] after the guest's `go` for [`Settings::window`]),
//! then the text is analysed by [`crate::run::breakdown`] and the instance,
//! its events and the kprobes are removed (also when anything fails: the
//! [`Recorder`] removes them when it drops).
//!
//! The buffer does not overwrite (`options/overwrite` 0): when a CPU's
//! buffer fills, what comes after is dropped and counted (`per_cpu/cpuN/
//! stats`), and the analysis stops at that CPU's last event, so the
//! window it reports is whole; lost and dropped events are reported with
//! the result, never left out silently.
//!
//! Written here rather than taken from a crate: the maintained tracefs
//! libraries are C (libtracefs, libtracecmd, wrapped for Rust only with the
//! C libraries installed), the pure-Rust ones drive the top-level instance
//! only; this is a directory, a dozen file writes and two reads.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::debug;

use crate::run::breakdown::{self, Breakdown, Serving};
use crate::run::metrics::DeviceCounters;

/// What `--breakdown` needs and did not find, or a tracefs file that
/// could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HostTraceError {
    /// No tracefs.
    #[error("--breakdown: no tracefs at {0} (mount it: `mount -t tracefs tracefs /sys/kernel/tracing`; the kernel needs CONFIG_FTRACE; run as root)")]
    NoTracefs(PathBuf),
    /// A trace event it needs is missing.
    #[error("--breakdown: no trace event {event} under {}: the host kernel needs {config} (Debian's, Ubuntu's and Fedora's have it), or drop --breakdown", dir.display())]
    NoEvent {
        /// `group/event`.
        event: &'static str,
        /// Where it was looked for.
        dir: PathBuf,
        /// The kernel option.
        config: &'static str,
    },
    /// A tracefs file could not be written.
    #[error("--breakdown: cannot write {}: {source} (run as root; tracefs instances need Linux 3.x and CONFIG_FTRACE)", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A tracefs or /proc file could not be read.
    #[error("--breakdown: cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The events recorded: (group/event, required, the kernel option).
const EVENTS: [(&str, bool, &str); 8] = [
    (
        "sched/sched_switch",
        true,
        "CONFIG_FTRACE (scheduler tracepoints)",
    ),
    (
        "sched/sched_waking",
        false,
        "CONFIG_FTRACE (scheduler tracepoints)",
    ),
    (
        "sched/sched_wakeup",
        true,
        "CONFIG_FTRACE (scheduler tracepoints)",
    ),
    ("raw_syscalls/sys_enter", true, "CONFIG_FTRACE_SYSCALLS"),
    ("raw_syscalls/sys_exit", true, "CONFIG_FTRACE_SYSCALLS"),
    ("kvm/kvm_fast_mmio", false, "KVM loaded"),
    ("kvm/kvm_mmio", false, "KVM loaded"),
    ("kvm/kvm_pio", false, "KVM loaded"),
];

/// The kernel functions whose time is page pinning: (function, kprobe name).
const PIN_FUNCS: [(&str, &str); 2] = [
    ("pin_user_pages_remote", "vb_pin_remote"),
    ("pin_user_pages_fast", "vb_pin_fast"),
];

/// The whole buffer, split over the CPUs (each gets at least
/// [`MIN_CPU_KB`] and at most [`MAX_CPU_KB`]).
pub const BUFFER_KB: u64 = 32 * 1024;
/// See [`BUFFER_KB`].
const MIN_CPU_KB: u64 = 256;
/// See [`BUFFER_KB`].
const MAX_CPU_KB: u64 = 16 * 1024;

/// Where tracefs is mounted (and is mounted when it is not).
const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";

/// Where and when to record.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The tracefs mount.
    pub tracefs: PathBuf,
    /// /proc (the VMM's threads).
    pub proc: PathBuf,
    /// From the guest's `go` to recording: fio starts and settles.
    pub delay: Duration,
    /// How long it records (the run goes on after it).
    pub window: Duration,
}

impl Settings {
    /// The host's tracefs, recording the middle half of each `runtime`
    /// seconds' breakdown run (from a quarter in to three quarters).
    pub fn new(runtime: u32) -> Self {
        let ms = u64::from(runtime) * 1000;
        Settings {
            tracefs: PathBuf::from(DEFAULT_TRACEFS),
            proc: PathBuf::from("/proc"),
            delay: Duration::from_millis(ms / 4),
            window: Duration::from_millis(ms / 2),
        }
    }

    /// Mount tracefs if it is not (as `--kvm-exits` does), then check the
    /// events the recording needs are there.
    pub fn check(&self) -> Result<(), HostTraceError> {
        let events = self.tracefs.join("events");
        if !events.is_dir() && self.tracefs == Path::new(DEFAULT_TRACEFS) {
            let _ = std::process::Command::new("mount")
                .args(["-t", "tracefs", "tracefs"])
                .arg(&self.tracefs)
                .status();
        }
        if !events.is_dir() || !self.tracefs.join("instances").is_dir() {
            return Err(HostTraceError::NoTracefs(self.tracefs.clone()));
        }
        missing_event(&events)
    }
}

/// The first required event missing under `events`.
fn missing_event(events: &Path) -> Result<(), HostTraceError> {
    for (ev, required, config) in EVENTS {
        if required && !events.join(ev).is_dir() {
            return Err(HostTraceError::NoEvent {
                event: ev,
                dir: events.to_path_buf(),
                config,
            });
        }
    }
    Ok(())
}

/// The VMM's threads: tid to name, from `/proc/PID/task`.
pub fn threads(proc: &Path, pid: u32) -> Result<BTreeMap<u32, String>, HostTraceError> {
    let dir = proc.join(pid.to_string()).join("task");
    let rd = std::fs::read_dir(&dir).map_err(|source| HostTraceError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut out = BTreeMap::new();
    for e in rd.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        out.insert(tid, comm.trim_end().to_string());
    }
    Ok(out)
}

/// The per-CPU buffer size for `cpus` CPUs, KiB.
pub fn cpu_buffer_kb(cpus: usize) -> u64 {
    (BUFFER_KB / cpus.max(1) as u64).clamp(MIN_CPU_KB, MAX_CPU_KB)
}

/// `overrun` and `dropped events` of a `per_cpu/cpuN/stats` text.
pub fn parse_cpu_stats(text: &str) -> (u64, u64) {
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("overrun:"), get("dropped events:"))
}

fn write(path: &Path, what: &str) -> Result<(), HostTraceError> {
    std::fs::write(path, what).map_err(|source| HostTraceError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Append (kprobe_events: truncating it would remove every kprobe).
fn append(path: &Path, what: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(what.as_bytes()))
}

/// One recording: the instance, its events, the kprobes. Removed on drop.
#[derive(Debug)]
pub struct Recorder {
    root: PathBuf,
    dir: PathBuf,
    owned: bool,
    kprobes: Vec<String>,
    pins_missing: Option<String>,
    names: BTreeMap<u32, String>,
    started: Option<Instant>,
    traced: Duration,
}

impl Recorder {
    /// A new instance of the tool's own, set up for the VMM `pid`.
    pub fn create(s: &Settings, pid: u32) -> Result<Self, HostTraceError> {
        let dir = s
            .tracefs
            .join("instances")
            .join(format!("viommu-bench-{}", std::process::id()));
        // A stale one of this pid (a killed run): remove it first.
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).map_err(|source| HostTraceError::Write {
            path: dir.clone(),
            source,
        })?;
        let mut r = Self::in_dir(s, &dir, pid)?;
        r.owned = true;
        Ok(r)
    }

    /// Set up the instance at `dir` (made by the kernel when its directory
    /// was made) for the VMM `pid`; left as it is on drop.
    pub fn in_dir(s: &Settings, dir: &Path, pid: u32) -> Result<Self, HostTraceError> {
        let names = threads(&s.proc, pid)?;
        let mut r = Recorder {
            root: s.tracefs.clone(),
            dir: dir.to_path_buf(),
            owned: false,
            kprobes: Vec::new(),
            pins_missing: None,
            names,
            started: None,
            traced: Duration::ZERO,
        };
        write(&dir.join("tracing_on"), "0")?;
        missing_event(&dir.join("events"))?;
        let cpus = std::fs::read_dir(dir.join("per_cpu"))
            .map(|d| d.flatten().count())
            .unwrap_or(1);
        write(
            &dir.join("buffer_size_kb"),
            &cpu_buffer_kb(cpus).to_string(),
        )?;
        write(&dir.join("options/overwrite"), "0")?;
        if let Err(e) = write(&dir.join("options/event-fork"), "1") {
            debug!("{e}");
        }
        let tids: Vec<String> = r.names.keys().map(u32::to_string).collect();
        write(&dir.join("set_event_pid"), &tids.join(" "))?;
        let ioctl = format!("id == {}", breakdown::IOCTL_NR);
        for ev in ["raw_syscalls/sys_enter", "raw_syscalls/sys_exit"] {
            // Without the filter every system call is recorded: more
            // events, the same result.
            if let Err(e) = write(&dir.join("events").join(ev).join("filter"), &ioctl) {
                debug!("{e}");
            }
        }
        for (ev, required, _) in EVENTS {
            let enable = dir.join("events").join(ev).join("enable");
            if required || enable.exists() {
                write(&enable, "1")?;
            }
        }
        r.pins_missing = r.add_kprobes().err();
        Ok(r)
    }

    /// Kprobes on the page-pinning functions, enabled in the instance; why
    /// not, if none could be.
    fn add_kprobes(&mut self) -> Result<(), String> {
        let defs = self.root.join("kprobe_events");
        if !defs.exists() {
            return Err(format!(
                "no {} (the host kernel needs CONFIG_KPROBE_EVENTS)",
                defs.display()
            ));
        }
        let group = format!("viommu_bench_{}", std::process::id());
        let mut why = Vec::new();
        for (func, name) in PIN_FUNCS {
            for (kind, ev) in [("p", name.to_string()), ("r", format!("{name}_ret"))] {
                let full = format!("{group}/{ev}");
                match append(&defs, &format!("{kind}:{full} {func}\n")) {
                    Ok(()) => self.kprobes.push(full),
                    Err(e) => why.push(format!("{kind}:{full} {func}: {e}")),
                }
            }
        }
        if self.kprobes.is_empty() {
            return Err(format!(
                "no kprobe on {} could be added to {} ({})",
                PIN_FUNCS.map(|(f, _)| f).join(" or "),
                defs.display(),
                why.join("; ")
            ));
        }
        let enable = self.dir.join("events").join(&group).join("enable");
        write(&enable, "1").map_err(|e| e.to_string())
    }

    /// Start recording, with a begin marker.
    pub fn start(&mut self) -> Result<(), HostTraceError> {
        write(&self.dir.join("tracing_on"), "1")?;
        self.started = Some(Instant::now());
        // The markers bound the window (written by this tool, recorded
        // whatever the pid filter).
        let _ = append(
            &self.dir.join("trace_marker"),
            &format!("{}\n", breakdown::MARK_BEGIN),
        );
        Ok(())
    }

    /// Stop recording, after an end marker.
    pub fn stop(&mut self) -> Result<(), HostTraceError> {
        let _ = append(
            &self.dir.join("trace_marker"),
            &format!("{}\n", breakdown::MARK_END),
        );
        write(&self.dir.join("tracing_on"), "0")?;
        self.traced = self.started.map_or(Duration::ZERO, |t| t.elapsed());
        Ok(())
    }

    /// The recording, analysed: the serving thread found as `serving`
    /// says, `device` our VMM's counters over it.
    pub fn collect(
        &self,
        serving: Serving,
        device: Option<DeviceCounters>,
    ) -> Result<Breakdown, HostTraceError> {
        let (mut overrun, mut dropped, mut full) = (0, 0, Vec::new());
        if let Ok(rd) = std::fs::read_dir(self.dir.join("per_cpu")) {
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(cpu) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("cpu"))
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                let (o, d) = parse_cpu_stats(
                    &std::fs::read_to_string(e.path().join("stats")).unwrap_or_default(),
                );
                overrun += o;
                dropped += d;
                if d > 0 || o > 0 {
                    full.push(cpu);
                }
            }
        }
        let path = self.dir.join("trace");
        let text = std::fs::read_to_string(&path)
            .map_err(|source| HostTraceError::Read { path, source })?;
        let cut = breakdown::cutoff(text.lines(), &full);
        let analysis = breakdown::analyze(text.lines(), &self.names, cut);
        let (server_tid, server_missing) = match serving.pick(&analysis) {
            Ok(t) => (Some(t.tid), None),
            Err(e) => (None, Some(e)),
        };
        Ok(Breakdown {
            analysis,
            serving: Some(serving),
            server_tid,
            server_missing,
            traced_ns: self.traced.as_nanos() as u64,
            cut: cut.is_some(),
            dropped_events: dropped,
            overrun,
            pins_missing: self.pins_missing.clone(),
            device,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = write(&self.dir.join("tracing_on"), "0");
        let _ = write(&self.dir.join("events/enable"), "0");
        let _ = write(&self.dir.join("set_event_pid"), "");
        if self.owned {
            if let Err(e) = std::fs::remove_dir(&self.dir) {
                tracing::warn!(
                    "--breakdown: cannot remove the tracefs instance {}: {e}; remove it with `rmdir {}`",
                    self.dir.display(),
                    self.dir.display()
                );
            }
        }
        let defs = self.root.join("kprobe_events");
        for k in self.kprobes.drain(..) {
            if let Err(e) = append(&defs, &format!("-:{k}\n")) {
                tracing::warn!(
                    "--breakdown: cannot remove the kprobe {k}: {e}; remove it with `echo -:{k} >> {}`",
                    defs.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
