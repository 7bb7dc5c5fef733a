//! The gate every vCPU thread waits at before its first `KVM_RUN`.
//!
//! The vCPU threads start (and install their own seccomp filter) while
//! the main thread still finishes the setup unfiltered: the serial and
//! API threads, the socket, the drop of root. No guest instruction runs
//! before the main thread's filter is in place: the main thread opens
//! the gate only after it installed it, and a stop opens it too (the
//! vCPUs then see the stop flag and return without entering the guest).

use std::sync::{Condvar, Mutex, PoisonError};

/// Closed until [`StartGate::open`]; then every waiter goes on, and so
/// does every later one.
#[derive(Debug, Default)]
pub struct StartGate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl StartGate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Let every vCPU through, now and later.
    pub fn open(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.opened.notify_all();
    }

    /// Block until the gate is open. A signal (the vCPU kick) wakes the
    /// wait, which goes on waiting: only [`StartGate::open`] ends it.
    pub fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        while !*open {
            open = self
                .opened
                .wait(open)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}
