//! Stock QEMU's device counters: its trace events, written by the `log`
//! backend to the `-D` file, counted as the file grows.
//!
//! No timed phase runs with them on. QEMU starts with the `-D` file open
//! and every trace event off (`-D FILE` and a QMP socket, no `-trace`): an
//! event that is off costs a load and a branch on its state flag, exactly
//! as in a QEMU started without any tracing flag, and nothing is formatted
//! or written. After the timed phases the guest runs an untimed counting
//! phase per timed phase (`count-PHASE`: the same fio job for
//! `--count-runtime` seconds; guest/init's `lab.count`). At its begin
//! marker the tool turns [`EVENTS`] on over QMP ([`crate::run::qmp`]) and only
//! then tells the guest to start fio (a `go` line on the serial console);
//! at its end marker it turns them off and counts what the file gained.
//! Requests and VFIO calls per I/O of stock QEMU are those of that sample
//! of the same job, and lower bounds: what QEMU logs after the events are
//! off (a late deferred unmap) is missed, and the traced events are the
//! paths named here, not every VFIO call QEMU could make.
//!
//! Why a counting pass and not one mechanism for both VMMs: the host-side
//! alternatives (the host kernel counting VFIO ioctls per process, as
//! `--kvm-exits` counts exits) need root, tracefs and a kernel with the
//! right tracepoints on every user's host, and they cost each ioctl a
//! trace hit during the timed phase too; QEMU's own trace is what QEMU
//! offers, and its cost stays out of every timed phase.
//!
//! A QEMU without the `log` backend (Fedora's and RHEL's builds have only
//! `dtrace`) accepts the same QMP commands and writes nothing. So the tool
//! also turns on [`CANARY`], which logs every QMP command QEMU handles: a
//! trace file with no line at all after a counting phase is a QEMU that
//! does not write its trace, reported as such ("no trace"), never as zero.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::columns::Counting;
use crate::run::metrics::DeviceCounters;
use crate::run::qmp::Qmp;

/// The trace events counted, on only during the counting phases.
pub const EVENTS: [&str; 3] = [
    "virtio_iommu_map",
    "virtio_iommu_unmap",
    "vfio_iommu_map_notify",
];

/// The event that shows QEMU writes its trace: it logs every QMP command
/// QEMU handles (QEMU 4.0 on, monitor/trace-events), so the commands that
/// turn [`EVENTS`] on leave lines in a working trace file.
pub const CANARY: &str = "handle_qmp_command";

/// One counted trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// A virtio-iommu MAP request.
    Map,
    /// A virtio-iommu UNMAP request.
    Unmap,
    /// A VFIO map or unmap QEMU made for the device (`vfio_iommu_map_notify`).
    VfioCall,
    /// A QMP command QEMU handled ([`CANARY`]).
    Canary,
}

/// The event of one trace line: `[PID@SECS.USECS:]EVENT args...`.
pub fn classify(line: &str) -> Option<TraceEvent> {
    let line = line.trim_start();
    // The optional "1234@1700000000.123456:" prefix (timestamped messages).
    let body = match line.split_once(':') {
        Some((pre, rest))
            if pre.contains('@')
                && pre
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '@' || c == '.') =>
        {
            rest
        }
        _ => line,
    };
    match body.split(|c: char| c.is_whitespace() || c == '(').next()? {
        "virtio_iommu_map" => Some(TraceEvent::Map),
        "virtio_iommu_unmap" => Some(TraceEvent::Unmap),
        "vfio_iommu_map_notify" => Some(TraceEvent::VfioCall),
        CANARY => Some(TraceEvent::Canary),
        _ => None,
    }
}

/// Running counts of a growing trace file.
#[derive(Debug, Default)]
pub struct TraceCounter {
    offset: u64,
    partial: Vec<u8>,
    counts: DeviceCounters,
    lines: u64,
}

impl TraceCounter {
    /// Count the complete lines in `bytes` (a continuation of what came before).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let rest = self.partial.split_off(last_nl + 1);
        for line in self.partial[..last_nl].split(|&b| b == b'\n') {
            self.lines += 1;
            match classify(&String::from_utf8_lossy(line)) {
                Some(TraceEvent::Map) => self.counts.map_requests += 1,
                Some(TraceEvent::Unmap) => self.counts.unmap_requests += 1,
                Some(TraceEvent::VfioCall) => self.counts.vfio_calls += 1,
                Some(TraceEvent::Canary) | None => {}
            }
        }
        self.partial = rest;
    }

    /// Read what `path` gained since the last call and return the counts so
    /// far (a missing file counts nothing yet).
    pub fn poll(&mut self, path: &Path) -> std::io::Result<DeviceCounters> {
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self.counts),
            Err(e) => return Err(e),
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.feed(&buf);
        Ok(self.counts)
    }

    /// The counts so far.
    pub fn counts(&self) -> DeviceCounters {
        self.counts
    }

    /// Complete lines seen so far, of any kind.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

/// Stock QEMU's counts for one VM: its trace file, its QMP socket, and
/// what the counting phases found.
#[derive(Debug)]
pub struct QemuTrace {
    trace: PathBuf,
    qmp_path: PathBuf,
    qmp: Option<Qmp>,
    counter: TraceCounter,
    on: bool,
    counted: u32,
    failed: Option<String>,
    empty: Option<String>,
}

impl QemuTrace {
    /// QEMU started with `-D trace` and `-qmp unix:qmp,...`.
    pub fn new(trace: &Path, qmp: &Path) -> Self {
        QemuTrace {
            trace: trace.to_path_buf(),
            qmp_path: qmp.to_path_buf(),
            qmp: None,
            counter: TraceCounter::default(),
            on: false,
            counted: 0,
            failed: None,
            empty: None,
        }
    }

    /// At a counting phase's begin marker: the events on (the canary
    /// first), then the counts so far. An error says why this phase (and
    /// every later one: a QEMU that failed once, or wrote no trace, is not
    /// asked again) is not counted.
    pub async fn begin(&mut self) -> Result<DeviceCounters, String> {
        if let Some(why) = self.failed.as_ref().or(self.empty.as_ref()) {
            return Err(why.clone());
        }
        match self.switch_on().await {
            Ok(c) => Ok(c),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    async fn switch_on(&mut self) -> Result<DeviceCounters, String> {
        if self.qmp.is_none() {
            self.qmp = Some(
                Qmp::connect(&self.qmp_path)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let q = self.qmp.as_mut().expect("connected above");
        let mut names = vec![CANARY];
        names.extend(EVENTS);
        // QEMU answers once the event is on: the guest, told "go" after
        // this, starts no I/O that the trace does not see.
        q.set_trace(&names, true).await.map_err(|e| e.to_string())?;
        self.on = true;
        self.poll()
    }

    /// At a counting phase's end marker: the events off, then the counts
    /// so far; `Ok(None)` when the trace file has no line at all (this
    /// QEMU does not write its trace: see [`QemuTrace::counting`]).
    pub async fn end(&mut self, phase: &str) -> Result<Option<DeviceCounters>, String> {
        if !self.on {
            return Err("its events were not on".into());
        }
        self.on = false;
        // Off first, then read: every line QEMU wrote while they were on is
        // in the file by the time it answers (it flushes each line).
        let off = match self.qmp.as_mut() {
            Some(q) => q.set_trace(&EVENTS, false).await.map_err(|e| e.to_string()),
            None => Err("no QMP connection".into()),
        };
        let counts = self.poll();
        if let Err(e) = off {
            // The events may still be on: the next phases are not counted.
            let why = format!("turning QEMU's trace events off failed ({e})");
            self.failed = Some(why.clone());
            return Err(why);
        }
        let counts = counts?;
        if self.counter.lines() == 0 {
            self.empty = Some(format!(
                "QEMU wrote no line to its trace file {} in the counting phase {phase}, not even for the QMP commands that turned its events on ({CANARY}): this QEMU has no `log` trace backend (Fedora's and RHEL's builds have only dtrace; `qemu-system-x86_64 -d help` lists no trace:PATTERN), so its requests and VFIO calls per I/O are unknown",
                self.trace.display()
            ));
            return Ok(None);
        }
        self.counted += 1;
        Ok(Some(counts))
    }

    fn poll(&mut self) -> Result<DeviceCounters, String> {
        self.counter
            .poll(&self.trace)
            .map_err(|e| format!("reading QEMU's trace file {}: {e}", self.trace.display()))
    }

    /// How this VM's counts were taken, after its last phase.
    pub fn counting(&self) -> Counting {
        if let Some(why) = &self.empty {
            Counting::NoTrace { why: why.clone() }
        } else if let Some(why) = &self.failed {
            Counting::NotCounted {
                why: format!("QEMU's counting pass failed: {why}"),
            }
        } else if self.counted == 0 {
            Counting::NotCounted {
                why: "the guest ran no counting phase (it ended before them)".into(),
            }
        } else {
            Counting::Pass
        }
    }
}

#[cfg(test)]
mod tests;
