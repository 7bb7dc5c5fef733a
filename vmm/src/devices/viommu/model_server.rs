//! The model and what serving its queues needs, locked by whoever serves:
//! apply a command, drain the request queue, adapt the poll window, and
//! decide whether a polling session may start or a vCPU hands over.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use viommu_device::{DrainShare, Drained, Notifications};
use vmm_sys_util::eventfd::EventFd;

use super::device_thread::{Command, Irq, Mailbox};
use super::poll_session::{nanos, PollEnd};
use super::poll_window::PollWindow;
use super::spare_cpu::SpareCpu;
#[cfg(doc)]
use super::KickServing;
use super::{ViommuModel, SESSION_MAX};

/// The model and what serving it needs, locked by whoever serves: the
/// device thread for a whole wake-up, or (with [`KickServing::Vcpu`]) the
/// vCPU whose notify write found the thread idle.
pub(super) struct ModelServer {
    pub(super) model: ViommuModel,
    pub(super) mailbox: Arc<Mailbox>,
    /// The request queue's kick eventfd, for kicking it from here.
    pub(super) request_kick: EventFd,
    /// How long to poll the request queue after serving it.
    pub(super) window: PollWindow,
    /// Whether the host has a CPU to spare for a polling session.
    pub(super) spare: SpareCpu,
    /// When a drain last took requests (since the activation): the gap to
    /// the next one adapts the window.
    pub(super) last_taken: Option<Instant>,
}

impl ModelServer {
    /// Apply one command; false on [`Command::Stop`].
    pub(super) fn command(&mut self, c: Command) -> bool {
        match c {
            Command::AckFeatures(f) => self.model.set_acked_features(f),
            Command::WriteConfig => {
                // Taken and applied under the slot's lock: the transport
                // sees either the write pending or its effect.
                let mut pending = self
                    .mailbox
                    .pending_config
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if let Some(w) = pending.take() {
                    self.model.apply_config_write(w);
                    self.mailbox.snapshot_config(&self.model);
                }
            }
            Command::Activate {
                mem,
                queues,
                interrupt,
                reply,
            } => {
                self.last_taken = None;
                let r = self
                    .model
                    .activate(Arc::new(mem), queues, Arc::new(Irq(interrupt)))
                    .map_err(|e| e.to_string());
                let _ = reply.send(r);
            }
            Command::Reset => {
                self.last_taken = None;
                self.model.reset();
                self.mailbox.snapshot_config(&self.model);
                self.mailbox.snapshot_counters(&self.model);
                self.mailbox.reset_pending.store(false, Ordering::Release);
            }
            Command::Sync(reply) => {
                let _ = reply.send(());
            }
            Command::SystemReset(reply) => {
                self.last_taken = None;
                self.model.system_reset();
                self.mailbox.snapshot_config(&self.model);
                self.mailbox.snapshot_counters(&self.model);
                let _ = reply.send(());
            }
            Command::Stop => return false,
        }
        true
    }

    /// Kicks the request queue from the thread itself: requests are left
    /// that the driver may not notify for (with EVENT_IDX it does not while
    /// the device is behind, and notifications may be suppressed), served
    /// after the commands that came meanwhile.
    pub(super) fn rekick(&self) {
        if let Err(e) = self.request_kick.write(1) {
            tracing::error!("cannot re-kick the virtio-iommu request queue: {e}");
        }
    }

    /// Whether a vCPU that served the queue should wake the thread to poll
    /// for the next request: the window is open (requests have been coming
    /// within its bound of each other) and a host CPU is free for the
    /// thread beside the running tasks, this vCPU among them. Without that
    /// CPU the wake-up takes one from a vCPU: ungated, the hand-over was
    /// 0.37-0.69x stock QEMU with two fio jobs on the lab's two CPUs.
    /// Counted in
    /// `polls_busy` when the CPU is missing.
    pub(super) fn hand_over(&mut self) -> bool {
        self.may_poll(true)
    }

    /// Whether a polling session may start now: the window is open and a
    /// host CPU is spare for it (for the caller, the thread itself, or,
    /// `beside` the running tasks, for the thread a vCPU would wake).
    /// Counted in `polls_busy` when the window is open and no CPU is.
    pub(super) fn may_poll(&mut self, beside: bool) -> bool {
        if self.window.current().is_zero() {
            return false;
        }
        let spare = if beside {
            self.spare.spare_for_another()
        } else {
            self.spare.spare()
        };
        if !spare {
            self.mailbox
                .status
                .polls_busy
                .fetch_add(1, Ordering::Relaxed);
        }
        spare
    }

    /// After a drain that began at `woke`: if it `took` requests, the gap
    /// since the `previous` drain that took some adapts the window.
    pub(super) fn adapt_window(&mut self, took: bool, previous: Option<Instant>, woke: Instant) {
        if let (true, Some(p)) = (took, previous) {
            self.window.observe_gap(woke.saturating_duration_since(p));
            self.publish_window();
        }
    }

    /// Drains the request queue, leaving the driver's notifications as
    /// `after` says once it is empty, taking at most `share` of it if
    /// given; whether the drain took requests.
    pub(super) fn drain(
        &mut self,
        after: Notifications,
        share: Option<DrainShare>,
    ) -> (Drained, bool) {
        // A kick before activation or after a reset finds no queue.
        if !self.model.is_activated() {
            return (Drained::Empty, false);
        }
        let before = self.model.request_queue_next_avail();
        let r = match share {
            Some(share) => self.model.process_request_queue_share(after, share),
            None => self.model.process_request_queue_leaving(after),
        };
        let next_avail = self.model.request_queue_next_avail();
        // Where the device stands, for the liveness gauges: after every
        // drain (a polling session drains many times in one wake-up).
        self.mailbox
            .status
            .next_avail
            .store(next_avail.map_or(u32::MAX, u32::from), Ordering::Release);
        self.mailbox.snapshot_counters(&self.model);
        let r = r.unwrap_or_else(|e| {
            // Guest memory the driver's rings point at: at every kick.
            viommu_device::guest_error!(queue = 0u16, "virtio-iommu: {e}");
            Drained::Empty
        });
        let took = next_avail != before;
        if took {
            self.last_taken = Some(Instant::now());
        }
        (r, took)
    }

    /// Serves a notification of the request queue: drains it and, with a
    /// poll window, polls it for more (see the module doc). Returns with
    /// notifications on and the ring read after that, or with a self-kick
    /// pending.
    pub(super) fn serve_requests(&mut self) {
        let woke = Instant::now();
        let previous = self.last_taken;
        // A session only on a CPU nobody else is waiting for (see
        // `spare_cpu`): asked once per notification, when the window is
        // open.
        let polling = self.may_poll(false);
        let after = if polling {
            Notifications::Suppressed
        } else {
            Notifications::On
        };
        let (r, took) = self.drain(after, None);
        // The gap since the last request taken, which the thread slept
        // through (or a poll was cut short in).
        self.adapt_window(took, previous, woke);
        if r == Drained::More {
            self.rekick();
            return;
        }
        if !polling {
            return;
        }
        let session = Instant::now();
        let mut suppressed = true;
        loop {
            let end = self.poll(session, suppressed);
            if end == PollEnd::Rekicked {
                return;
            }
            // Notifications on, then the ring read again: what was
            // published as the polling ended is taken now.
            let (r, took) = self.drain(Notifications::On, None);
            if r == Drained::More {
                self.rekick();
                return;
            }
            // A request that came just as the window ended: the next may
            // be as close behind; poll for it (within the session).
            if !(took && end == PollEnd::TimedOut) || session.elapsed() >= SESSION_MAX {
                return;
            }
            suppressed = false;
        }
    }

    pub(super) fn publish_window(&self) {
        self.mailbox
            .status
            .poll_window_ns
            .store(nanos(self.window.current()), Ordering::Relaxed);
    }

    /// Serves a notification of the event queue (the driver added
    /// buffers for fault reports).
    pub(super) fn serve_events(&mut self) {
        // A kick before activation or after a reset finds no queue.
        if !self.model.is_activated() {
            return;
        }
        let r = self.model.process_event_queue();
        self.mailbox.snapshot_counters(&self.model);
        if let Err(e) = r {
            viommu_device::guest_error!(queue = 1u16, "virtio-iommu: {e}");
        }
    }
}
