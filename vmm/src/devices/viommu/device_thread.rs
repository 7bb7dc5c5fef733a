//! The device thread: its `poll(2)` loop on the kick and command
//! eventfds, the commands the transport sends it, the state the two share,
//! and the handle that stops it.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use viommu_device::{ConfigWrite, Counters, IommuInterrupt};
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::EventFd;

use super::model_server::ModelServer;
use super::status::ThreadStatus;
use super::ViommuModel;
#[cfg(doc)]
use super::COMMAND_QUEUE;
use crate::devices::virtio::VirtioInterrupt;

/// The transport's MSI-X path as the model's interrupt.
pub(super) struct Irq(pub(super) Arc<dyn VirtioInterrupt>);

impl IommuInterrupt for Irq {
    fn trigger(&self, queue: u16) -> std::io::Result<()> {
        self.0.trigger_queue(queue)
    }
}

/// What the transport asks of the device thread.
pub(super) enum Command {
    AckFeatures(u64),
    /// Apply the write in [`Mailbox::pending_config`] (if still there).
    WriteConfig,
    Activate {
        mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
        reply: SyncSender<Result<(), String>>,
    },
    Reset,
    /// Answer once every command before it was applied and the wake-up
    /// in progress ended.
    Sync(SyncSender<()>),
    /// Reset the model as at power-on (every domain and host mapping
    /// gone), then answer.
    SystemReset(SyncSender<()>),
    Stop,
}

/// What the transport and the device thread share besides the command
/// channel: the snapshots the transport reads, the pending config write,
/// the command counts and the liveness gauges.
pub(super) struct Mailbox {
    pub(super) config: Mutex<Vec<u8>>,
    /// The latest effective config write not applied yet; a queued
    /// [`Command::WriteConfig`] refers to it. Locked before `config`.
    pub(super) pending_config: Mutex<Option<ConfigWrite>>,
    /// Commands sent and not yet taken by the thread.
    pub(super) queued: AtomicUsize,
    /// Commands the channel refused (full, or the thread gone): 0 unless
    /// the bound of [`COMMAND_QUEUE`] is broken.
    pub(super) dropped: AtomicU64,
    pub(super) counters: Arc<Mutex<Counters>>,
    pub(super) reset_pending: AtomicBool,
    pub(super) status: Arc<ThreadStatus>,
}

impl Mailbox {
    pub(super) fn snapshot_counters(&self, model: &ViommuModel) {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner()) = model.counters();
    }

    pub(super) fn snapshot_config(&self, model: &ViommuModel) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        model.read_config(0, &mut c[..]);
    }
}

/// The device thread, to stop and join (the device manager does before
/// it removes the DMA mappings). Dropping it stops it too.
pub struct DeviceThread {
    pub(super) mailbox: Arc<Mailbox>,
    pub(super) wake: EventFd,
    pub(super) commands: SyncSender<Command>,
    pub(super) handle: Option<JoinHandle<()>>,
}

impl DeviceThread {
    /// Ask the thread to stop after the notification in progress, and wait
    /// for it. The model (and its references to the mappers) is dropped.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    /// Wait (at most `timeout`) until the thread served what it had:
    /// with the vCPUs parked, nothing new comes.
    pub fn quiesce(&self, timeout: std::time::Duration) -> Result<(), String> {
        self.call(Command::Sync, timeout)
    }

    /// Reset the model as at power-on on the thread (its host unmaps
    /// made there) and wait for it, at most `timeout`.
    pub fn system_reset(&self, timeout: std::time::Duration) -> Result<(), String> {
        self.call(Command::SystemReset, timeout)
    }

    fn call(
        &self,
        command: impl FnOnce(SyncSender<()>) -> Command,
        timeout: std::time::Duration,
    ) -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.mailbox.queued.fetch_add(1, Ordering::AcqRel);
        if self.commands.send(command(tx)).is_err() {
            self.mailbox.queued.fetch_sub(1, Ordering::AcqRel);
            return Err("the virtio-iommu device thread is gone".into());
        }
        let _ = self.wake.write(1);
        rx.recv_timeout(timeout)
            .map_err(|_| "the virtio-iommu device thread did not answer".into())
    }

    pub(super) fn stop_and_join(&mut self) {
        let Some(h) = self.handle.take() else {
            return;
        };
        // Blocking: room comes as the thread takes commands (this is the
        // main thread, at exit).
        self.mailbox.queued.fetch_add(1, Ordering::AcqRel);
        if self.commands.send(Command::Stop).is_err() {
            self.mailbox.queued.fetch_sub(1, Ordering::AcqRel);
        }
        let _ = self.wake.write(1);
        if h.join().is_err() {
            tracing::error!("the virtio-iommu device thread panicked");
        }
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// The device thread's state: its wake-up sources and the model server it
/// locks for each wake-up.
pub(super) struct DeviceThreadLoop {
    pub(super) server: Arc<Mutex<ModelServer>>,
    pub(super) kicks: [EventFd; 2],
    pub(super) wake: EventFd,
    pub(super) commands: Receiver<Command>,
    pub(super) mailbox: Arc<Mailbox>,
}

impl DeviceThreadLoop {
    pub(super) fn run(self) {
        let mut fds = [&self.wake, &self.kicks[0], &self.kicks[1]].map(|e| libc::pollfd {
            fd: e.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        loop {
            // SAFETY: `fds` is an array of valid pollfds for the duration
            // of the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("virtio-iommu device thread: poll: {e}");
                return;
            }
            let status = self.mailbox.status.clone();
            status.wakeups.fetch_add(1, Ordering::Relaxed);
            // Held for the whole wake-up: a vCPU that kicks meanwhile
            // leaves its kick to this thread.
            let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
            status.begin();
            // Commands first: a reset or activation ordered before a kick
            // is applied before the kick is served.
            let _ = self.wake.read();
            while let Ok(c) = self.commands.try_recv() {
                self.mailbox.queued.fetch_sub(1, Ordering::AcqRel);
                if !server.command(c) {
                    status.end(None);
                    return;
                }
            }
            // Nonblocking: EAGAIN when the queue was not kicked.
            if self.kicks[0].read().is_ok() {
                status.kicks.fetch_add(1, Ordering::Relaxed);
                server.serve_requests();
            }
            if self.kicks[1].read().is_ok() {
                server.serve_events();
            }
            status.end(server.model.request_queue_next_avail());
        }
    }
}
