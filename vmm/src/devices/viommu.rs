//! The virtio-iommu device model (`viommu-device`) as a [`VirtioDevice`],
//! served by a thread of its own.
//!
//! # Threads and locks
//! The model ([`VirtioIommu`]) belongs to the device thread (`viommu`),
//! except that by default ([`KickServing::Vcpu`], see below) the vCPU that
//! notified the request queue serves it while the thread is idle. With
//! `--viommu-kicks thread` no vCPU ever waits for the model, so no vCPU
//! waits for a VFIO call.
//! - A kick is an ioeventfd per queue (the request queue's only with
//!   `--viommu-kicks thread`) (`KVM_IOEVENTFD` on the queue's
//!   notify address, registered by the device manager): KVM signals the
//!   eventfd and resumes the guest without leaving the kernel. A notify
//!   write that reaches the transport anyway (no ioeventfd, tests) signals
//!   the same eventfd.
//! - The device thread waits in `poll(2)` on the two kick eventfds and a
//!   command eventfd. A dedicated OS thread blocking on eventfds is the
//!   simplest correct shape here: the drain blocks in VFIO ioctls for as
//!   long as the kernel takes to pin and map, which on the API's tokio
//!   runtime would stall its other tasks (or need `spawn_blocking`, a
//!   second hop), and it keeps the thread's seccomp list short.
//! - What the transport asks of the model (features acked, config
//!   writes, activation, reset, stop) goes to the thread as a `Command`
//!   through a channel, in order, before the kicks of the same wake-up.
//!   The channel is bounded ([`COMMAND_QUEUE`]) and a vCPU never waits on
//!   it: every command but config writes is bounded by the protocol (one
//!   reset at a time, the transport ignores the driver while it is in
//!   progress; features acked once per reset; activation waits for its
//!   answer), and config writes are coalesced: a write that changes
//!   nothing (a read-only field, bypass not negotiated, the value it
//!   already has or will have) is not queued at all, and an effective one
//!   goes to a one-write slot that at most one queued command refers to.
//! - A drain takes at most a queue size of requests per round; if the
//!   driver posted more, the thread signals its own kick eventfd and comes
//!   back after serving the commands that came meanwhile (the driver may
//!   not kick for them: with EVENT_IDX it does not while the device is
//!   behind).
//! - Polling (`--viommu-poll-us`, [`poll`]; 1 ms by default, and only when
//!   no runnable task on the host waits for a CPU, [`spare_cpu`]): after
//!   serving a request-queue
//!   kick the thread keeps looking at the ring's avail index for up to the
//!   poll window, the driver's notifications suppressed (EVENT_IDX:
//!   `avail_event` half the index space away; without it NO_NOTIFY), and
//!   serves what it finds there; so while requests keep coming the guest
//!   makes no notify exit and the thread no wake-up. Before it sleeps it
//!   turns notifications on and reads the ring once more
//!   ([`Notifications::On`]): a request published as the polling ended is
//!   served then. Between two looks it checks the command counter (a
//!   command ends the polling at once), pauses and yields the core; a
//!   look that comes late (the core went to another task) ends the
//!   polling and shrinks the window. A polling session that keeps finding
//!   requests ends after [`SESSION_MAX`] with a self-kick, so that the
//!   event queue is served between sessions.
//!   Activation waits for the thread's answer: the thread is idle then
//!   (the device was reset and nothing activated it, so no request can be
//!   in progress). A reset does not wait: the transport keeps showing the
//!   old device status until the thread has destroyed the domains (their
//!   host unmaps included), and the driver waits for status 0.
//! - With [`KickServing::Vcpu`] (`--viommu-kicks vcpu`, the default)
//!   the model sits
//!   behind a mutex the thread holds for each wake-up; the request
//!   queue has no ioeventfd, and its notify write, on the vCPU that made
//!   it, serves the queue there when the lock is free and no command
//!   waits (`ViommuDevice::serve_on_this_vcpu`): one drain, no polling
//!   on the vCPU, the rest to the thread through its eventfd. With a poll
//!   window (`--viommu-poll-us`) open and a host CPU free for the thread
//!   beside the running tasks (`SpareCpu::spare_for_another`), the vCPU
//!   then kicks the thread, which polls for the next request (the
//!   hand-over): a guest whose requests keep coming is polled, one whose
//!   requests come far apart, or a host with no CPU to spare, is served
//!   on the vCPUs alone. Otherwise (and for the event queue) the kick
//!   goes to the thread as above. This gives up
//!   "no vCPU waits for a VFIO call" for the vCPU that asked for the
//!   call, which (a stock guest's sync) waits for its reply anyway.
//! - Config-space reads are served from a snapshot the thread refreshes
//!   after a config write; features are fixed at creation.
//! - The used-ring interrupt is raised from the device thread by writing
//!   the vector's irqfd (the transport's MSI-X path, see
//!   `crate::devices::virtio::pci`): masking and pending bits stay in the
//!   transport's MSI-X table (a mutex held for a table lookup, never across
//!   a host call); the thread makes no KVM ioctl.
//! - The counters for `GET /metrics` are a snapshot the thread refreshes
//!   after each notification and reset.
//! - [`ThreadStatus`] tells, from outside, whether the thread is stuck or
//!   idle and whether the driver is waiting for it: how long the current
//!   notification has been served, where the device stands on the request
//!   queue, and the driver's indices read from guest memory when asked,
//!   with the types of the requests it published and the device has not
//!   taken ([`pending`]: a lazy guest's queued UNMAPs, MAPs before the
//!   driver's sync, or a missed kick).

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use viommu_device::{ConfigWrite, Counters, Drained, IommuInterrupt, Notifications, VirtioIommu};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::virtio::{ActivateError, VirtioDevice, VirtioInterrupt};

/// Request queue size.
pub const REQUEST_QUEUE_SIZE: u16 = 256;
/// Event queue size.
pub const EVENT_QUEUE_SIZE: u16 = 64;
/// Commands the channel to the device thread holds. The transport has at
/// most one config write, one feature ack, one reset and one activation
/// in flight (see the module doc), and the thread handle one stop.
pub const COMMAND_QUEUE: usize = 8;
/// Default bound of the request queue's poll window (`--viommu-poll-us`):
/// 1 ms, polled only on a CPU no other task waits for ([`spare_cpu`]) and,
/// with the default `--viommu-kicks vcpu`, started by a vCPU's hand-over:
/// 1.66x stock QEMU for a stock guest at 4k with one fio job (every round
/// ahead) and level with no polling where no CPU was spare (two jobs)
/// (`benches/results/levers-vpoll-cached-2026-11-27.md`; `vmm/README.md`,
/// "Polling the request queue").
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(1);
/// A short window, for tests of a window that adapts within a burst.
pub const SUGGESTED_POLL_MAX: Duration = Duration::from_micros(50);
/// Largest bound `--viommu-poll-us` accepts.
pub const POLL_MAX_LIMIT: Duration = Duration::from_millis(1);
/// Longest a polling session that keeps finding requests runs before the
/// thread goes back through its `poll(2)` (a self-kick; commands end a
/// session at once).
pub const SESSION_MAX: Duration = Duration::from_millis(1);
/// A pause between two looks at the ring longer than this means the core
/// went to another task: polling would only take it from that task (a
/// vCPU of the guest, maybe the one about to post the request).
const PREEMPTED: Duration = Duration::from_micros(50);

/// Bytes of config space kept in the snapshot (the virtio-iommu config is
/// smaller; the rest reads 0, as the model reads it).
const CONFIG_SNAPSHOT: usize = 0x100;

/// The model as the VMM runs it.
pub type Model = VirtioIommu<Arc<GuestMemoryMmap>>;

struct Irq(Arc<dyn VirtioInterrupt>);

impl IommuInterrupt for Irq {
    fn trigger(&self, queue: u16) -> std::io::Result<()> {
        self.0.trigger_queue(queue)
    }
}

/// What the transport asks of the device thread.
enum Command {
    AckFeatures(u64),
    /// Apply the write in [`Shared::pending_config`] (if still there).
    WriteConfig,
    Activate {
        mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
        reply: SyncSender<Result<(), String>>,
    },
    Reset,
    Stop,
}

/// What the transport and the device thread share.
struct Shared {
    config: Mutex<Vec<u8>>,
    /// The latest effective config write not applied yet; a queued
    /// [`Command::WriteConfig`] refers to it. Locked before `config`.
    pending_config: Mutex<Option<ConfigWrite>>,
    /// Commands sent and not yet taken by the thread.
    queued: AtomicUsize,
    /// Commands the channel refused (full, or the thread gone): 0 unless
    /// the bound in the module doc is broken.
    dropped: AtomicU64,
    counters: Arc<Mutex<Counters>>,
    reset_pending: AtomicBool,
    status: Arc<ThreadStatus>,
}

/// The device thread's liveness, readable from any thread (`GET /metrics`).
pub struct ThreadStatus {
    start: Instant,
    /// Times the thread woke from `poll(2)`.
    wakeups: AtomicU64,
    /// Microseconds since `start` (+1) when the notification being served
    /// began; 0 while the thread waits.
    serving_since: AtomicU64,
    /// The device's next available index after its last drain
    /// (`u32::MAX` before activation; the used index is read from guest
    /// memory).
    next_avail: AtomicU32,
    /// Notifications of the request queue the thread took (kick eventfd
    /// reads that found it signalled; several kicks between two reads
    /// count once).
    kicks: AtomicU64,
    /// Guest memory, the request queue's ring addresses (descriptor table
    /// and avail ring, used ring) and its size, from activation to reset.
    rings: Mutex<Option<(GuestMemoryMmap, pending::RingAddrs, GuestAddress)>>,
    /// Nanoseconds the thread spent polling the request queue (looking at
    /// the ring between requests, drains not included).
    poll_ns: AtomicU64,
    /// Looks at the ring that found requests (each one a notification the
    /// guest did not make and a wake-up the thread did not need; one that
    /// ends a session of [`SESSION_MAX`] counts too, the request then taken
    /// after a self-kick).
    polls_found: AtomicU64,
    /// Polls that ended with the window spent and no request.
    polls_timed_out: AtomicU64,
    /// Polls that ended because the core went to another task.
    polls_preempted: AtomicU64,
    /// Notifications served without polling, the window open, because the
    /// host had no CPU to spare.
    polls_busy: AtomicU64,
    /// The poll window now, in nanoseconds.
    poll_window_ns: AtomicU64,
    /// Request-queue notifications served on the vCPU that made them
    /// ([`KickServing::Vcpu`]).
    vcpu_kicks: AtomicU64,
    /// Notifications a vCPU left to the thread (busy, or a command
    /// waiting) with [`KickServing::Vcpu`].
    vcpu_deferred: AtomicU64,
    /// Times a vCPU, having served a notification with the poll window
    /// open and a CPU to spare, woke the thread to poll for the next.
    vcpu_handovers: AtomicU64,
}

/// A reading of [`ThreadStatus`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusReading {
    /// Times the thread woke.
    pub wakeups: u64,
    /// Milliseconds the current notification has been served (0: waiting).
    pub serving_ms: u64,
    /// The driver's avail index, read from guest memory now.
    pub driver_avail: Option<u16>,
    /// The used index in guest memory now.
    pub used: Option<u16>,
    /// The device's next available index after its last drain.
    pub device_next_avail: Option<u16>,
    /// The `avail_event` the device published in guest memory (with
    /// EVENT_IDX the driver notifies when its avail index passes it).
    pub avail_event: Option<u16>,
    /// The requests published and not taken, by type (read from guest
    /// memory now; `None` when the device is not active or has taken all).
    pub pending: Option<pending::PendingTypes>,
    /// Request queue notifications the thread took.
    pub kicks: u64,
    /// Nanoseconds spent polling the request queue.
    pub poll_ns: u64,
    /// Looks at the ring that found requests.
    pub polls_found: u64,
    /// Polls that timed out.
    pub polls_timed_out: u64,
    /// Polls ended by another task taking the core.
    pub polls_preempted: u64,
    /// Notifications served without polling because the host had no CPU
    /// to spare.
    pub polls_busy: u64,
    /// The poll window now, in nanoseconds.
    pub poll_window_ns: u64,
    /// Request-queue notifications served on the vCPU that made them.
    pub vcpu_kicks: u64,
    /// Notifications a vCPU left to the thread.
    pub vcpu_deferred: u64,
    /// Times a vCPU handed the queue over to the thread's polling.
    pub vcpu_handovers: u64,
}

impl ThreadStatus {
    fn new() -> Self {
        ThreadStatus {
            start: Instant::now(),
            wakeups: AtomicU64::new(0),
            serving_since: AtomicU64::new(0),
            next_avail: AtomicU32::new(u32::MAX),
            kicks: AtomicU64::new(0),
            rings: Mutex::new(None),
            poll_ns: AtomicU64::new(0),
            polls_found: AtomicU64::new(0),
            polls_timed_out: AtomicU64::new(0),
            polls_preempted: AtomicU64::new(0),
            polls_busy: AtomicU64::new(0),
            poll_window_ns: AtomicU64::new(0),
            vcpu_kicks: AtomicU64::new(0),
            vcpu_deferred: AtomicU64::new(0),
            vcpu_handovers: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn begin(&self) {
        self.serving_since.store(self.now_us(), Ordering::Release);
    }

    fn end(&self, next_avail: Option<u16>) {
        self.next_avail
            .store(next_avail.map_or(u32::MAX, u32::from), Ordering::Release);
        self.serving_since.store(0, Ordering::Release);
    }

    /// The thread's state now.
    pub fn read(&self) -> StatusReading {
        let since = self.serving_since.load(Ordering::Acquire);
        let serving_ms = if since == 0 {
            0
        } else {
            self.now_us().saturating_sub(since) / 1000
        };
        let device_next_avail = u16::try_from(self.next_avail.load(Ordering::Acquire)).ok();
        let (driver_avail, used, avail_event, pending) =
            match &*self.rings.lock().unwrap_or_else(|e| e.into_inner()) {
                Some((mem, rings, used)) => {
                    let at = |ring: &GuestAddress, off: u64| {
                        ring.checked_add(off)
                            .and_then(|a| mem.read_obj::<u16>(a).ok())
                            .map(u16::from_le)
                    };
                    let driver_avail = at(&rings.avail, 2);
                    let pending = match (device_next_avail, driver_avail) {
                        (Some(n), Some(a)) if n != a => Some(pending::peek(mem, *rings, n, a)),
                        _ => None,
                    };
                    (
                        driver_avail,
                        at(used, 2),
                        at(used, 4 + 8 * u64::from(rings.size)),
                        pending,
                    )
                }
                None => (None, None, None, None),
            };
        StatusReading {
            wakeups: self.wakeups.load(Ordering::Relaxed),
            serving_ms,
            driver_avail,
            used,
            device_next_avail,
            avail_event,
            pending,
            kicks: self.kicks.load(Ordering::Relaxed),
            poll_ns: self.poll_ns.load(Ordering::Relaxed),
            polls_found: self.polls_found.load(Ordering::Relaxed),
            polls_timed_out: self.polls_timed_out.load(Ordering::Relaxed),
            polls_preempted: self.polls_preempted.load(Ordering::Relaxed),
            polls_busy: self.polls_busy.load(Ordering::Relaxed),
            poll_window_ns: self.poll_window_ns.load(Ordering::Relaxed),
            vcpu_kicks: self.vcpu_kicks.load(Ordering::Relaxed),
            vcpu_deferred: self.vcpu_deferred.load(Ordering::Relaxed),
            vcpu_handovers: self.vcpu_handovers.load(Ordering::Relaxed),
        }
    }
}

impl Shared {
    fn snapshot_counters(&self, model: &Model) {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner()) = model.counters();
    }

    fn snapshot_config(&self, model: &Model) {
        let mut c = self.config.lock().unwrap_or_else(|e| e.into_inner());
        model.read_config(0, &mut c[..]);
    }
}

/// The virtio-iommu on a virtio transport: the transport's handle on the
/// device thread.
pub struct ViommuDevice {
    features: u64,
    /// The features the transport acked since the last reset (config
    /// writes are decided with them).
    acked: u64,
    shared: Arc<Shared>,
    /// Kick eventfds of the request and event queues.
    kicks: [EventFd; 2],
    wake: EventFd,
    commands: SyncSender<Command>,
    /// The model, when request-queue kicks are served on the vCPU that
    /// made them while the thread is idle ([`KickServing::Vcpu`]); the
    /// thread holds the only strong reference, so the model goes when
    /// the thread stops.
    on_vcpu: Option<Weak<Mutex<Core>>>,
}

/// The device thread, to stop and join (the device manager does before
/// it removes the DMA mappings). Dropping it stops it too.
pub struct DeviceThread {
    shared: Arc<Shared>,
    wake: EventFd,
    commands: SyncSender<Command>,
    handle: Option<JoinHandle<()>>,
}

impl DeviceThread {
    /// Ask the thread to stop after the notification in progress, and wait
    /// for it. The model (and its references to the mappers) is dropped.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let Some(h) = self.handle.take() else {
            return;
        };
        // Blocking: room comes as the thread takes commands (this is the
        // main thread, at exit).
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        if self.commands.send(Command::Stop).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
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

impl ViommuDevice {
    /// Start the device thread on `model` (its endpoints added), polling
    /// the request queue for up to `poll_max` after serving it
    /// ([`DEFAULT_POLL_MAX`]; zero: never) when `spare` finds a CPU to
    /// spare, request-queue kicks served as `serving` says. The thread
    /// installs `seccomp` first, if given.
    pub fn spawn(
        model: Model,
        seccomp: Option<crate::seccomp::Filter>,
        poll_max: Duration,
        serving: KickServing,
        spare: SpareCpu,
    ) -> std::io::Result<(ViommuDevice, DeviceThread)> {
        Self::spawn_polling(model, seccomp, PollWindow::new(poll_max), serving, spare)
    }

    /// [`spawn`](Self::spawn) with this poll window.
    fn spawn_polling(
        model: Model,
        seccomp: Option<crate::seccomp::Filter>,
        window: PollWindow,
        serving: KickServing,
        spare: SpareCpu,
    ) -> std::io::Result<(ViommuDevice, DeviceThread)> {
        let shared = Arc::new(Shared {
            config: Mutex::new(vec![0; CONFIG_SNAPSHOT]),
            pending_config: Mutex::new(None),
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            counters: Arc::new(Mutex::new(Counters::default())),
            reset_pending: AtomicBool::new(false),
            status: Arc::new(ThreadStatus::new()),
        });
        shared.snapshot_config(&model);
        shared.snapshot_counters(&model);
        let kicks = [EventFd::new(EFD_NONBLOCK)?, EventFd::new(EFD_NONBLOCK)?];
        let wake = EventFd::new(EFD_NONBLOCK)?;
        let (tx, rx) = sync_channel(COMMAND_QUEUE);
        shared
            .status
            .poll_window_ns
            .store(nanos(window.current()), Ordering::Relaxed);
        let features = model.device_features();
        let core = Arc::new(Mutex::new(Core {
            model,
            shared: shared.clone(),
            request_kick: kicks[0].try_clone()?,
            window,
            spare,
            last_taken: None,
        }));
        let worker = Worker {
            core: core.clone(),
            kicks: [kicks[0].try_clone()?, kicks[1].try_clone()?],
            wake: wake.try_clone()?,
            commands: rx,
            shared: shared.clone(),
        };
        let handle = crate::seccomp::spawn("viommu", seccomp, move || worker.run())?;
        Ok((
            ViommuDevice {
                features,
                acked: 0,
                shared: shared.clone(),
                kicks,
                wake: wake.try_clone()?,
                commands: tx.clone(),
                on_vcpu: (serving == KickServing::Vcpu).then(|| Arc::downgrade(&core)),
            },
            DeviceThread {
                shared,
                wake,
                commands: tx,
                handle: Some(handle),
            },
        ))
    }

    /// The counters snapshot, shared.
    pub fn counters(&self) -> Arc<Mutex<Counters>> {
        self.shared.counters.clone()
    }

    /// The device thread's liveness, shared.
    pub fn status(&self) -> Arc<ThreadStatus> {
        self.shared.status.clone()
    }

    /// Copies of the kick eventfds, in queue order, to register as the
    /// queues' ioeventfds.
    pub fn kick_eventfds(&self) -> std::io::Result<Vec<EventFd>> {
        self.kicks.iter().map(EventFd::try_clone).collect()
    }

    /// Commands sent to the device thread that it has not taken yet (at
    /// most [`COMMAND_QUEUE`]).
    pub fn queued_commands(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Commands the channel refused since the start (logged each time):
    /// 0 while the transport keeps to the bound of [`COMMAND_QUEUE`].
    pub fn dropped_commands(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Whether every command sent so far has been applied: none waits in
    /// the channel and the thread is not serving a wake-up (a command is
    /// taken and applied within one). Kicks may still be pending.
    pub fn commands_applied(&self) -> bool {
        // Queued first: a command taken after this read is taken inside a
        // wake-up, which the second read sees in progress or over.
        self.shared.queued.load(Ordering::Acquire) == 0
            && self.shared.status.serving_since.load(Ordering::Acquire) == 0
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
    fn serve_on_this_vcpu(&self) -> bool {
        let Some(core) = self.on_vcpu.as_ref().and_then(Weak::upgrade) else {
            return false;
        };
        let status = &self.shared.status;
        if self.shared.queued.load(Ordering::Acquire) != 0
            || self.shared.reset_pending.load(Ordering::Acquire)
        {
            status.vcpu_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        // Busy (or poisoned by a panic on another thread): the thread's.
        let Ok(mut core) = core.try_lock() else {
            status.vcpu_deferred.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        status.begin();
        status.vcpu_kicks.fetch_add(1, Ordering::Relaxed);
        let woke = Instant::now();
        let previous = core.last_taken;
        let (r, took) = core.drain(Notifications::On);
        // The gap the thread's polling would have had to cover: the window
        // adapts as when the thread serves.
        core.adapt_window(took, previous, woke);
        if r == Drained::More {
            core.rekick();
        } else if core.hand_over() {
            status.vcpu_handovers.fetch_add(1, Ordering::Relaxed);
            core.rekick();
        }
        status.end(core.model.request_queue_next_avail());
        true
    }

    /// Queues a command without waiting (this is a vCPU).
    fn send(&self, c: Command) {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        match self.commands.try_send(c) {
            Ok(()) => {}
            Err(e) => {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
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
        let c = self.shared.config.lock().unwrap_or_else(|e| e.into_inner());
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
            .shared
            .pending_config
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Against what the config space will read once the pending write
        // is in.
        let changes = match *pending {
            Some(p) => p != write,
            None => write.changes(&self.shared.config.lock().unwrap_or_else(|e| e.into_inner())),
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
                .shared
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
            .shared
            .status
            .rings
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.shared.reset_pending.store(true, Ordering::Release);
        self.send(Command::Reset);
    }

    fn reset_pending(&self) -> bool {
        self.shared.reset_pending.load(Ordering::Acquire)
    }
}

/// The device thread's state.
struct Worker {
    core: Arc<Mutex<Core>>,
    kicks: [EventFd; 2],
    wake: EventFd,
    commands: Receiver<Command>,
    shared: Arc<Shared>,
}

/// The model and what serving it needs, locked by whoever serves: the
/// device thread for a whole wake-up, or (with [`KickServing::Vcpu`]) the
/// vCPU whose notify write found the thread idle.
struct Core {
    model: Model,
    shared: Arc<Shared>,
    /// The request queue's kick eventfd, for kicking it from here.
    request_kick: EventFd,
    /// How long to poll the request queue after serving it.
    window: PollWindow,
    /// Whether the host has a CPU to spare for a polling session.
    spare: SpareCpu,
    /// When a drain last took requests (since the activation): the gap to
    /// the next one adapts the window.
    last_taken: Option<Instant>,
}

/// Who serves a notification of the request queue. The default is the
/// CLI's (`vcpu`, `Cli::validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KickServing {
    /// The device thread, woken by the queue's ioeventfd (KVM signals it
    /// without leaving the kernel); with `--viommu-poll-us` it polls after
    /// each notification it served.
    Thread,
    /// The vCPU that wrote the notify register, when the device thread is
    /// idle and no command waits for it; otherwise the device thread, as
    /// with `thread`. The notify write leaves KVM for the VMM (no
    /// ioeventfd on the request queue), and the vCPU makes the VFIO calls
    /// itself: no wake-up of another thread on another core per request.
    /// With a poll window it then hands over to the thread's polling when
    /// a host CPU is free for it (`Core::hand_over`).
    /// The default: ahead of `thread` beyond the noise in 3 of 8 phases,
    /// never behind (`benches/results/vcpu-kicks-4rounds-2026-11-27.md`).
    /// (Taken back once because the 7.3 lazy guest's idle check failed
    /// with it; that was the check reading the guest's counters outside
    /// the host's window, `benches/results/smoke-7.3-ci-vcpu-2026-11-27.md`.)
    Vcpu,
}

/// How a poll of the request queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PollEnd {
    /// The window is 0: no polling.
    Off,
    /// The window passed with no request.
    TimedOut,
    /// A command waits (reset, stop, config write, activation).
    Command,
    /// The core went to another task.
    Preempted,
    /// The ring says there are requests that a drain does not take (a
    /// corrupt index, a ring that cannot be read): waiting for a
    /// notification rather than spinning on it.
    Stalled,
    /// The thread kicked itself, requests left (a drain's cap or the
    /// session's): the next wake-up serves them, notifications stay
    /// suppressed until then.
    Rekicked,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A pause between two looks at the ring: a few spin-loop hints, then the
/// core is offered to whatever else is runnable on it.
fn pause() {
    for _ in 0..8 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

impl Worker {
    fn run(self) {
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
            let status = self.shared.status.clone();
            status.wakeups.fetch_add(1, Ordering::Relaxed);
            // Held for the whole wake-up: a vCPU that kicks meanwhile
            // leaves its kick to this thread.
            let mut core = self.core.lock().unwrap_or_else(|e| e.into_inner());
            status.begin();
            // Commands first: a reset or activation ordered before a kick
            // is applied before the kick is served.
            let _ = self.wake.read();
            while let Ok(c) = self.commands.try_recv() {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                if !core.command(c) {
                    status.end(None);
                    return;
                }
            }
            // Nonblocking: EAGAIN when the queue was not kicked.
            if self.kicks[0].read().is_ok() {
                status.kicks.fetch_add(1, Ordering::Relaxed);
                core.serve_requests();
            }
            if self.kicks[1].read().is_ok() {
                core.serve_events();
            }
            status.end(core.model.request_queue_next_avail());
        }
    }
}

impl Core {
    /// Apply one command; false on [`Command::Stop`].
    fn command(&mut self, c: Command) -> bool {
        match c {
            Command::AckFeatures(f) => self.model.set_acked_features(f),
            Command::WriteConfig => {
                // Taken and applied under the slot's lock: the transport
                // sees either the write pending or its effect.
                let mut pending = self
                    .shared
                    .pending_config
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if let Some(w) = pending.take() {
                    self.model.apply_config_write(w);
                    self.shared.snapshot_config(&self.model);
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
                self.shared.snapshot_config(&self.model);
                self.shared.snapshot_counters(&self.model);
                self.shared.reset_pending.store(false, Ordering::Release);
            }
            Command::Stop => return false,
        }
        true
    }

    /// Kicks the request queue from the thread itself: requests are left
    /// that the driver may not notify for (with EVENT_IDX it does not while
    /// the device is behind, and notifications may be suppressed), served
    /// after the commands that came meanwhile.
    fn rekick(&self) {
        if let Err(e) = self.request_kick.write(1) {
            tracing::error!("cannot re-kick the virtio-iommu request queue: {e}");
        }
    }

    /// Whether a vCPU that served the queue should wake the thread to poll
    /// for the next request: the window is open (requests have been coming
    /// within its bound of each other) and a host CPU is free for the
    /// thread beside the running tasks, this vCPU among them. Without that
    /// CPU the wake-up takes one from a vCPU: ungated, the hand-over was
    /// 0.37-0.69x stock QEMU with two fio jobs on the lab's two CPUs
    /// (`benches/results/levers-vpoll-2026-11-27.md`). Counted in
    /// `polls_busy` when the CPU is missing.
    fn hand_over(&mut self) -> bool {
        self.may_poll(true)
    }

    /// Whether a polling session may start now: the window is open and a
    /// host CPU is spare for it (for the caller, the thread itself, or,
    /// `beside` the running tasks, for the thread a vCPU would wake).
    /// Counted in `polls_busy` when the window is open and no CPU is.
    fn may_poll(&mut self, beside: bool) -> bool {
        if self.window.current().is_zero() {
            return false;
        }
        let spare = if beside {
            self.spare.spare_for_another()
        } else {
            self.spare.spare()
        };
        if !spare {
            self.shared
                .status
                .polls_busy
                .fetch_add(1, Ordering::Relaxed);
        }
        spare
    }

    /// After a drain that began at `woke`: if it `took` requests, the gap
    /// since the `previous` drain that took some adapts the window.
    fn adapt_window(&mut self, took: bool, previous: Option<Instant>, woke: Instant) {
        if let (true, Some(p)) = (took, previous) {
            self.window.observe_gap(woke.saturating_duration_since(p));
            self.publish_window();
        }
    }

    /// Drains the request queue, leaving the driver's notifications as
    /// `after` says once it is empty; whether the drain took requests.
    fn drain(&mut self, after: Notifications) -> (Drained, bool) {
        // A kick before activation or after a reset finds no queue.
        if !self.model.is_activated() {
            return (Drained::Empty, false);
        }
        let before = self.model.request_queue_next_avail();
        let r = self.model.process_request_queue_leaving(after);
        let next_avail = self.model.request_queue_next_avail();
        // Where the device stands, for the liveness gauges: after every
        // drain (a polling session drains many times in one wake-up).
        self.shared
            .status
            .next_avail
            .store(next_avail.map_or(u32::MAX, u32::from), Ordering::Release);
        self.shared.snapshot_counters(&self.model);
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
    fn serve_requests(&mut self) {
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
        let (r, took) = self.drain(after);
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
            let (r, took) = self.drain(Notifications::On);
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

    /// Polls the request queue for up to the window, notifications
    /// suppressed (by a drain first unless `suppressed`), draining what
    /// it finds; each request found starts the window again. Leaves
    /// notifications suppressed: the caller turns them on (or has kicked
    /// itself, [`PollEnd::Rekicked`]).
    fn poll(&mut self, session: Instant, suppressed: bool) -> PollEnd {
        let window = self.window.current();
        if window.is_zero() {
            return PollEnd::Off;
        }
        if !suppressed && self.drain(Notifications::Suppressed).0 == Drained::More {
            self.rekick();
            return PollEnd::Rekicked;
        }
        let status = self.shared.status.clone();
        let mut start = Instant::now();
        // None: a window past what `Instant` can count, never spent.
        let mut deadline = start.checked_add(window);
        let mut last = start;
        let mut polled = Duration::ZERO;
        let end = loop {
            if self.shared.queued.load(Ordering::Acquire) != 0 {
                break PollEnd::Command;
            }
            let pending = self.model.request_queue_pending();
            let now = Instant::now();
            if now.saturating_duration_since(last) > PREEMPTED && self.window.yields() {
                status.polls_preempted.fetch_add(1, Ordering::Relaxed);
                self.window.observe_preempted();
                self.publish_window();
                break PollEnd::Preempted;
            }
            last = now;
            match pending {
                Ok(true) => {
                    polled += now.saturating_duration_since(start);
                    if now.saturating_duration_since(session) >= SESSION_MAX {
                        // Found without a notification all the same: the
                        // self-kick only bounds the session, and the main
                        // loop takes it next.
                        status.polls_found.fetch_add(1, Ordering::Relaxed);
                        self.rekick();
                        start = now;
                        break PollEnd::Rekicked;
                    }
                    let (r, took) = self.drain(Notifications::Suppressed);
                    start = Instant::now();
                    if !took {
                        break PollEnd::Stalled;
                    }
                    status.polls_found.fetch_add(1, Ordering::Relaxed);
                    if r == Drained::More {
                        self.rekick();
                        break PollEnd::Rekicked;
                    }
                    deadline = start.checked_add(window);
                    last = start;
                }
                Ok(false) if deadline.is_some_and(|d| now >= d) => {
                    status.polls_timed_out.fetch_add(1, Ordering::Relaxed);
                    break PollEnd::TimedOut;
                }
                Ok(false) => pause(),
                Err(_) => break PollEnd::Stalled,
            }
        };
        // Up to the last look before another task took the core, if one did.
        let until = if end == PollEnd::Preempted {
            last
        } else {
            Instant::now()
        };
        polled += until.saturating_duration_since(start);
        status.poll_ns.fetch_add(nanos(polled), Ordering::Relaxed);
        end
    }

    fn publish_window(&self) {
        self.shared
            .status
            .poll_window_ns
            .store(nanos(self.window.current()), Ordering::Relaxed);
    }

    /// Serves a notification of the event queue (the driver added
    /// buffers for fault reports).
    fn serve_events(&mut self) {
        // A kick before activation or after a reset finds no queue.
        if !self.model.is_activated() {
            return;
        }
        let r = self.model.process_event_queue();
        self.shared.snapshot_counters(&self.model);
        if let Err(e) = r {
            viommu_device::guest_error!(queue = 1u16, "virtio-iommu: {e}");
        }
    }
}

pub mod pending;
pub mod poll;
pub mod spare_cpu;
#[cfg(test)]
mod tests;

use poll::PollWindow;
use spare_cpu::SpareCpu;
