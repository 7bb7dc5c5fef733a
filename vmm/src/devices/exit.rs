//! How the guest (or a fatal error) ends the VM, and the process exit code.

use std::sync::{Condvar, Mutex};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Why the VM stopped. The first reason reported wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReason {
    /// The guest powered off (ACPI S5 through the FADT sleep control register).
    PowerOff,
    /// The guest asked for a reset (ACPI reset register or i8042 0xfe):
    /// restarted in place unless `--on-reboot exit`.
    Reset,
    /// The control plane asked for a reboot (`vmmctl reboot`).
    ApiReboot,
    /// A vCPU triple-faulted or KVM reported a shutdown.
    TripleFault,
    /// The control plane asked the VM to stop.
    ApiShutdown,
    /// SIGTERM or SIGINT (the signal number): the VMM stops the guest and
    /// releases its devices in order, as for any other exit.
    Signal(i32),
    /// The VMM failed while the guest ran.
    Error(String),
}

impl ExitReason {
    /// The process exit code for this reason:
    /// 0 poweroff or API shutdown, 3 reset (reboot), 4 triple fault, 1 VMM error,
    /// 128 + N stopped by signal N (the shell's convention: 143 for SIGTERM).
    /// (2 is a command line error, from clap or flag validation.)
    pub fn exit_code(&self) -> u8 {
        match self {
            ExitReason::PowerOff | ExitReason::ApiShutdown => 0,
            ExitReason::Reset | ExitReason::ApiReboot => 3,
            ExitReason::TripleFault => 4,
            ExitReason::Error(_) => 1,
            ExitReason::Signal(n) => u8::try_from(128 + n).unwrap_or(1),
        }
    }
}

/// Where devices and vCPUs report that the VM must stop; the main thread
/// waits in [`VmExit::wait`] (a condition variable: after a reboot in
/// place it waits again without reading an eventfd, a `read` its filter
/// does not allow). [`VmExit::eventfd`] is written on each request too.
#[derive(Debug)]
pub struct VmExit {
    reason: Mutex<Option<ExitReason>>,
    requested: Condvar,
    evt: EventFd,
}

impl VmExit {
    /// A fresh exit channel.
    pub fn new() -> std::io::Result<Self> {
        Ok(VmExit {
            reason: Mutex::new(None),
            requested: Condvar::new(),
            evt: EventFd::new(EFD_NONBLOCK)?,
        })
    }

    /// Record `reason` (if none was recorded yet) and wake the main thread.
    pub fn request(&self, reason: ExitReason) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            tracing::info!(?reason, "VM exit requested");
            *r = Some(reason);
        }
        self.requested.notify_all();
        drop(r);
        if let Err(e) = self.evt.write(1) {
            tracing::error!("cannot signal VM exit: {e}");
        }
    }

    /// The recorded reason, if any.
    pub fn reason(&self) -> Option<ExitReason> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Wait until a reason is recorded; returns it (it stays recorded).
    pub fn wait(&self) -> ExitReason {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(reason) = r.as_ref() {
                return reason.clone();
            }
            r = self.requested.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Forget the recorded reason: the guest is restarted and runs again
    /// (the eventfd is left as it is). Returns the reason forgotten.
    pub fn clear(&self) -> Option<ExitReason> {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        r.take()
    }

    /// Readable once an exit was requested.
    pub fn eventfd(&self) -> &EventFd {
        &self.evt
    }
}

#[cfg(test)]
mod tests;
