//! The transport's face of the virtio-iommu ([`ViommuDevice`]): the
//! [`VirtioDevice`] whose register accesses become commands for the device
//! thread, config reads served from a snapshot, and a request-queue kick
//! served on the notifying vCPU when the thread is idle.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use viommu_device::{ConfigWrite, Counters, Drained, Notifications};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::device_thread::{Command, DeviceThread, DeviceThreadLoop, Mailbox};
use super::model_server::ModelServer;
use super::poll_session::nanos;
use super::poll_window::PollWindow;
use super::spare_cpu::SpareCpu;
use super::status::ThreadStatus;
#[cfg(doc)]
use super::DEFAULT_POLL_MAX;
use super::{
    pending, KickServing, ViommuModel, COMMAND_QUEUE, EVENT_QUEUE_SIZE, REQUEST_QUEUE_SIZE,
    VCPU_SHARE,
};
use crate::devices::virtio::{ActivateError, VirtioDevice, VirtioInterrupt};

/// Bytes of config space kept in the snapshot (the virtio-iommu config is
/// smaller; the rest reads 0, as the model reads it).
const CONFIG_SNAPSHOT: usize = 0x100;

/// The virtio-iommu on a virtio transport: the transport's handle on the
/// device thread.
pub struct ViommuDevice {
    pub(super) features: u64,
    /// The features the transport acked since the last reset (config
    /// writes are decided with them).
    pub(super) acked: u64,
    pub(super) mailbox: Arc<Mailbox>,
    /// Kick eventfds of the request and event queues.
    pub(super) kicks: [EventFd; 2],
    pub(super) wake: EventFd,
    pub(super) commands: SyncSender<Command>,
    /// The model, when request-queue kicks are served on the vCPU that
    /// made them while the thread is idle ([`KickServing::Vcpu`]); the
    /// thread holds the only strong reference, so the model goes when
    /// the thread stops.
    pub(super) on_vcpu: Option<Weak<Mutex<ModelServer>>>,
}

impl ViommuDevice {
    /// Start the device thread on `model` (its endpoints added), polling
    /// the request queue for up to `poll_max` after serving it
    /// ([`DEFAULT_POLL_MAX`]; zero: never) when `spare` finds a CPU to
    /// spare, request-queue kicks served as `serving` says. The thread
    /// installs `seccomp` first, if given.
    pub fn spawn(
        model: ViommuModel,
        seccomp: Option<crate::seccomp::Filter>,
        poll_max: Duration,
        serving: KickServing,
        spare: SpareCpu,
    ) -> std::io::Result<(ViommuDevice, DeviceThread)> {
        Self::spawn_polling(model, seccomp, PollWindow::new(poll_max), serving, spare)
    }

    /// [`spawn`](Self::spawn) with this poll window.
    pub(super) fn spawn_polling(
        model: ViommuModel,
        seccomp: Option<crate::seccomp::Filter>,
        window: PollWindow,
        serving: KickServing,
        spare: SpareCpu,
    ) -> std::io::Result<(ViommuDevice, DeviceThread)> {
        let mailbox = Arc::new(Mailbox {
            config: Mutex::new(vec![0; CONFIG_SNAPSHOT]),
            pending_config: Mutex::new(None),
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            counters: Arc::new(Mutex::new(Counters::default())),
            reset_pending: AtomicBool::new(false),
            status: Arc::new(ThreadStatus::new()),
        });
        mailbox.snapshot_config(&model);
        mailbox.snapshot_counters(&model);
        let kicks = [EventFd::new(EFD_NONBLOCK)?, EventFd::new(EFD_NONBLOCK)?];
        let wake = EventFd::new(EFD_NONBLOCK)?;
        let (tx, rx) = sync_channel(COMMAND_QUEUE);
        mailbox
            .status
            .poll_window_ns
            .store(nanos(window.current()), Ordering::Relaxed);
        let features = model.device_features();
        let server = Arc::new(Mutex::new(ModelServer {
            model,
            mailbox: mailbox.clone(),
            request_kick: kicks[0].try_clone()?,
            window,
            spare,
            last_taken: None,
        }));
        let thread_loop = DeviceThreadLoop {
            server: server.clone(),
            kicks: [kicks[0].try_clone()?, kicks[1].try_clone()?],
            wake: wake.try_clone()?,
            commands: rx,
            mailbox: mailbox.clone(),
        };
        let handle = crate::seccomp::spawn("viommu", seccomp, move || thread_loop.run())?;
        Ok((
            ViommuDevice {
                features,
                acked: 0,
                mailbox: mailbox.clone(),
                kicks,
                wake: wake.try_clone()?,
                commands: tx.clone(),
                on_vcpu: (serving == KickServing::Vcpu).then(|| Arc::downgrade(&server)),
            },
            DeviceThread {
                mailbox,
                wake,
                commands: tx,
                handle: Some(handle),
            },
        ))
    }

    /// The counters snapshot, shared.
    pub fn counters(&self) -> Arc<Mutex<Counters>> {
        self.mailbox.counters.clone()
    }

    /// The device thread's liveness, shared.
    pub fn status(&self) -> Arc<ThreadStatus> {
        self.mailbox.status.clone()
    }

    /// Copies of the kick eventfds, in queue order, to register as the
    /// queues' ioeventfds.
    pub fn kick_eventfds(&self) -> std::io::Result<Vec<EventFd>> {
        self.kicks.iter().map(EventFd::try_clone).collect()
    }

    /// Commands sent to the device thread that it has not taken yet (at
    /// most [`COMMAND_QUEUE`]).
    pub fn queued_commands(&self) -> usize {
        self.mailbox.queued.load(Ordering::Acquire)
    }

    /// Commands the channel refused since the start (logged each time):
    /// 0 while the transport keeps to the bound of [`COMMAND_QUEUE`].
    pub fn dropped_commands(&self) -> u64 {
        self.mailbox.dropped.load(Ordering::Relaxed)
    }

    /// Whether every command sent so far has been applied: none waits in
    /// the channel and the thread is not serving a wake-up (a command is
    /// taken and applied within one). Kicks may still be pending.
    pub fn commands_applied(&self) -> bool {
        // Queued first: a command taken after this read is taken inside a
        // wake-up, which the second read sees in progress or over.
        self.mailbox.queued.load(Ordering::Acquire) == 0
            && self.mailbox.status.serving_since.load(Ordering::Acquire) == 0
    }

    /// With [`KickServing::Vcpu`]: serves a request-queue notification on
    /// this thread (the vCPU that wrote the notify register) if the device
    /// thread is idle and no command waits for it; whether it did. The
    /// drain is the thread's, without polling: a queue size of requests
    /// at most, the rest left to the thread through its kick eventfd.
    /// With the poll window open and a host CPU free for the thread
    /// ([`SpareCpu::spare_for_another`]) it then wakes the thread, which
    /// polls for the next request (the hand-over).
    /// A command queued before this looks is applied by the thread first
    /// (this leaves the kick to it); one queued after is ordered after
    /// this kick anyway.
    pub(super) fn serve_on_this_vcpu(&self) -> bool {
        let Some(server) = self.on_vcpu.as_ref().and_then(Weak::upgrade) else {
            return false;
        };
        let status = &self.mailbox.status;
        if self.mailbox.queued.load(Ordering::Acquire) != 0
            || self.mailbox.reset_pending.load(Ordering::Acquire)
        {
            status.vcpu_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        // Busy (or poisoned by a panic on another thread): the thread's.
        let Ok(mut server) = server.try_lock() else {
            status.vcpu_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        status.begin();
        status.vcpu_kicks.fetch_add(1, Ordering::Relaxed);
        let woke = Instant::now();
        let previous = server.last_taken;
        let (r, took) = server.drain(Notifications::On, Some(VCPU_SHARE));
        // The gap the thread's polling would have had to cover: the window
        // adapts as when the thread serves.
        server.adapt_window(took, previous, woke);
        if r == Drained::More {
            server.rekick();
        } else if server.hand_over() {
            status.vcpu_handovers.fetch_add(1, Ordering::Relaxed);
            server.rekick();
        }
        status.end(server.model.request_queue_next_avail());
        true
    }

    /// Queues a command without waiting (this is a vCPU).
    pub(super) fn send(&self, c: Command) {
        self.mailbox.queued.fetch_add(1, Ordering::AcqRel);
        match self.commands.try_send(c) {
            Ok(()) => {}
            Err(e) => {
                self.mailbox.queued.fetch_sub(1, Ordering::AcqRel);
                self.mailbox.dropped.fetch_add(1, Ordering::Relaxed);
                match e {
                    TrySendError::Disconnected(_) => {
                        tracing::error!("the virtio-iommu device thread is gone")
                    }
                    // Cannot happen: see COMMAND_QUEUE.
                    TrySendError::Full(_) => {
                        tracing::error!("the virtio-iommu command queue is full; command dropped")
                    }
                }
                return;
            }
        }
        if let Err(e) = self.wake.write(1) {
            tracing::error!("cannot wake the virtio-iommu device thread: {e}");
        }
    }
}

impl VirtioDevice for ViommuDevice {
    fn device_type(&self) -> u32 {
        virtio_bindings::virtio_ids::VIRTIO_ID_IOMMU
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![REQUEST_QUEUE_SIZE, EVENT_QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        self.features
    }

    fn ack_features(&mut self, features: u64) {
        self.acked = features & self.features;
        self.send(Command::AckFeatures(features));
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let c = self
            .mailbox
            .config
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| c.get(o).copied())
                .unwrap_or(0);
        }
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        let write = ConfigWrite::decide(self.acked, offset, data);
        if write.is_ignored() {
            // Not queued: the guest may repeat this as fast as it likes.
            write.log_ignored();
            return;
        }
        let mut pending = self
            .mailbox
            .pending_config
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Against what the config space will read once the pending write
        // is in.
        let changes = match *pending {
            Some(p) => p != write,
            None => write.changes(
                &self
                    .mailbox
                    .config
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            ),
        };
        if !changes {
            return;
        }
        if pending.replace(write).is_none() {
            drop(pending);
            self.send(Command::WriteConfig);
        }
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
    ) -> Result<(), ActivateError> {
        if let Some(q) = queues.first() {
            *self
                .mailbox
                .status
                .rings
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some((
                mem.clone(),
                pending::RingAddrs {
                    desc: GuestAddress(q.desc_table()),
                    avail: GuestAddress(q.avail_ring()),
                    size: q.size(),
                },
                GuestAddress(q.used_ring()),
            ));
        }
        let (reply, answer) = sync_channel(1);
        self.send(Command::Activate {
            mem,
            queues,
            interrupt,
            reply,
        });
        // The thread is idle: see the module doc.
        answer
            .recv()
            .map_err(|_| ActivateError("the virtio-iommu device thread is gone".into()))?
            .map_err(ActivateError)
    }

    fn queue_notify(&mut self, queue: u16) {
        if queue == 0 && self.serve_on_this_vcpu() {
            return;
        }
        if let Some(k) = self.kicks.get(usize::from(queue)) {
            if let Err(e) = k.write(1) {
                tracing::error!(queue, "cannot kick the virtio-iommu device thread: {e}");
            }
        }
    }

    fn reset(&mut self) {
        self.acked = 0;
        *self
            .mailbox
            .status
            .rings
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.mailbox.reset_pending.store(true, Ordering::Release);
        self.send(Command::Reset);
    }

    fn reset_pending(&self) -> bool {
        self.mailbox.reset_pending.load(Ordering::Acquire)
    }
}
