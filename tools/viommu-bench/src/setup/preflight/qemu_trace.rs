//! Whether stock QEMU can write the trace its counting runs read.
//!
//! The counting runs turn QEMU's trace events on over QMP and read the
//! lines its `log` trace backend writes to the `-D` file
//! ([`crate::run::trace`]). A QEMU built without that backend (Fedora's
//! and RHEL's have only `dtrace`) accepts the same commands and writes
//! nothing; the run used to find that out only after each stock-QEMU VM's
//! counting runs (about 25 s per VM). Two commands that start no VM tell
//! it before anything runs:
//!
//! - `QEMU -d help` lists the log items, and `trace:PATTERN` among them
//!   only with the `log` backend (`qemu_print_log_usage`, under
//!   `CONFIG_TRACE_LOG`);
//! - `QEMU -trace help` lists the trace events, then, with the `dtrace`
//!   backend only, a note that the list "may be incomplete when using the
//!   DTrace/SystemTap backends" (`trace_list_events`, under
//!   `CONFIG_TRACE_DTRACE`).
//!
//! Neither names `simple`, `ftrace`, `syslog`, `ust` or `nop`; none of
//! those writes the `-D` file either, so "no `log`" is what matters and
//! `dtrace` is named when seen. Output neither command explains (a
//! wrapper, a QEMU that failed to start) settles nothing: the counting
//! runs then go ahead and their own check (the trace file's canary line)
//! reports a QEMU that writes no trace.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Checks, Outcome};

/// What `-d help` and `-trace help` say about a QEMU's trace backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceBackends {
    /// `log` is built in: the counting runs can read its trace.
    Log,
    /// `-d help` lists its log items without `trace:PATTERN`: no `log`
    /// backend. `dtrace` when `-trace help` carries the DTrace note.
    NoLog {
        /// The `dtrace` backend is built in.
        dtrace: bool,
    },
    /// `-d help` printed no list of log items: not known.
    Unknown(String),
}

/// The note `-trace help` ends with when QEMU has the dtrace backend.
const DTRACE_NOTE: &str = "DTrace/SystemTap";

/// The backends that `d_help` (`QEMU -d help`'s stdout) and `trace_help`
/// (`QEMU -trace help`'s stdout) show.
pub fn parse(d_help: &str, trace_help: &str) -> TraceBackends {
    if !d_help.lines().any(|l| l.starts_with("Log items")) {
        let first = d_help.lines().next().unwrap_or("").trim();
        return TraceBackends::Unknown(if first.is_empty() {
            "`-d help` printed nothing".into()
        } else {
            format!("`-d help` printed no log items ({first})")
        });
    }
    if d_help.lines().any(|l| l.starts_with("trace:")) {
        return TraceBackends::Log;
    }
    TraceBackends::NoLog {
        dtrace: trace_help.contains(DTRACE_NOTE),
    }
}

/// Runs `qemu -d help` and `qemu -trace help` (each prints and exits; no
/// VM, no KVM) and reads their answer.
pub fn probe(qemu: &Path) -> TraceBackends {
    let stdout = |arg: &str| {
        crate::setup::exec::output(Command::new(qemu).args([arg, "help"]).stdin(Stdio::null()))
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    match stdout("-d") {
        Ok(d) => parse(&d, &stdout("-trace").unwrap_or_default()),
        Err(e) => TraceBackends::Unknown(format!("`{} -d help`: {e}", qemu.display())),
    }
}

/// The one line said before any VM starts when `qemu` (`backends`) cannot
/// write the counting runs' trace; `None` when it can, or when it is not
/// known.
pub fn no_trace_line(qemu: &Path, backends: &TraceBackends) -> Option<String> {
    let TraceBackends::NoLog { dtrace } = backends else {
        return None;
    };
    let found = if *dtrace {
        "dtrace only: `-d help` lists no trace:PATTERN, `-trace help` ends with the DTrace note"
    } else {
        "neither log nor dtrace: `-d help` lists no trace:PATTERN, `-trace help` has no DTrace note (nop, simple, ftrace, syslog or ust)"
    };
    Some(format!(
        "stock QEMU {} has no `log` trace backend (found: {found}), so it cannot write the trace its counting runs read: they are skipped (no stock-QEMU VM runs them) and its requests and VFIO calls per I/O show as `no trace`; to count them pass --qemu with a QEMU built with the log backend (Debian's has it; configure --enable-trace-backends=log,dtrace), or --count-runtime 0 to leave counting out",
        qemu.display()
    ))
}

impl Checks {
    /// When stock QEMU's counting runs are planned: whether the QEMU found
    /// can write their trace ([`Outcome::qemu_no_trace`]).
    pub(super) fn check_qemu_trace(&self, out: &mut Outcome) {
        if !self.qemu_counts {
            return;
        }
        let Some(qemu) = &out.tools.qemu else { return };
        let backends = probe(qemu);
        if let TraceBackends::Unknown(why) = &backends {
            tracing::debug!(
                "{}: trace backends unknown ({why}); its counting runs will tell",
                qemu.display()
            );
        }
        out.qemu_no_trace = no_trace_line(qemu, &backends);
    }
}

#[cfg(test)]
mod tests;
