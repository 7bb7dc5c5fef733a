//! The device thread: kick -> drain -> interrupt through eventfds, a reset
//! while a host call is in progress, stopping, and polling the request
//! queue (notifications suppressed while it polls, nothing left unserved
//! when it stops, commands served while it polls).

use std::sync::atomic::AtomicU64;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use dma_mapper::{DmaError, DmaMapper, DmaPerm};
use viommu_device::testing::{req, BusyGuest, FakeMapper, GuestDriver, DATA_BASE, MEM_SIZE};
use viommu_device::DeviceConfig;
use virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY;
use vm_memory::GuestAddress;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::poll_window::PollWindow;
use super::spare_cpu::SpareCpu;
use super::*;
use crate::devices::virtio::{VirtioDevice, VirtioInterrupt};

const EP: u32 = 8;

/// A mapper whose maps wait at a gate while it is closed.
#[derive(Default)]
struct GateMapper {
    inner: FakeMapper,
    gate: Mutex<(bool, bool)>, // (closed, a map is waiting)
    cv: Condvar,
    /// The name of the thread that made each map.
    threads: Mutex<Vec<String>>,
}

impl GateMapper {
    fn close(&self) {
        self.gate.lock().unwrap().0 = true;
    }
    fn open(&self) {
        self.gate.lock().unwrap().0 = false;
        self.cv.notify_all();
    }
    fn wait_for_waiter(&self) {
        let g = self.gate.lock().unwrap();
        let (g, t) = self.cv.wait_timeout_while(g, STUCK, |g| !g.1).unwrap();
        assert!(!t.timed_out() && g.1, "no map reached the mapper");
    }
}

impl DmaMapper for GateMapper {
    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), DmaError> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().unwrap().push(name);
        let mut g = self.gate.lock().unwrap();
        if g.0 {
            g.1 = true;
            self.cv.notify_all();
            drop(self.cv.wait_while(g, |g| g.0).unwrap());
        } else {
            drop(g);
        }
        self.inner.map(iova, gpa, size, perm)
    }
    fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaError> {
        self.inner.unmap(iova, size)
    }
    fn page_size_mask(&self) -> u64 {
        self.inner.page_size_mask()
    }
    fn unmap_all(&self) -> Result<(), DmaError> {
        self.inner.unmap_all()
    }
    fn has_leftovers(&self) -> bool {
        self.inner.has_leftovers()
    }
    fn disown(&self, iova: u64, size: u64) {
        self.inner.disown(iova, size)
    }
}

/// The interrupt as KVM would see it through an irqfd: an eventfd signal.
struct EventIrq {
    fd: EventFd,
    count: AtomicU64,
}

impl VirtioInterrupt for EventIrq {
    fn trigger_queue(&self, _queue: u16) -> std::io::Result<()> {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.fd.write(1)
    }
    fn trigger_config(&self) -> std::io::Result<()> {
        self.fd.write(1)
    }
}

fn wait_readable(fd: &EventFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    r == 1
}

/// How long a test waits for the device thread before calling it stuck: a
/// bound, not a speed claim (10 s was seen to run out on a 2-core machine
/// with a load average of 9).
const STUCK: Duration = Duration::from_secs(60);

/// Waits for `f`, failing after [`STUCK`].
fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + STUCK;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

struct Rig {
    mem: GuestMemoryMmap,
    dev: ViommuDevice,
    thread: Option<DeviceThread>,
    mapper: Arc<GateMapper>,
    irq: Arc<EventIrq>,
    reqq: GuestDriver,
    evq: GuestDriver,
}

fn rig() -> Rig {
    rig_with(PollWindow::new(SUGGESTED_POLL_MAX))
}

/// A poll window so long that a test sees the thread polling.
fn minute_window() -> PollWindow {
    PollWindow::new(Duration::from_secs(60)).ignoring_preemption()
}

fn rig_with(window: PollWindow) -> Rig {
    rig_serving(window, KickServing::Thread)
}

fn rig_serving(window: PollWindow, serving: KickServing) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap();
    let mut model = ViommuModel::new(DeviceConfig::default()).unwrap();
    let mapper = Arc::new(GateMapper::default());
    model.add_endpoint(EP, mapper.clone()).unwrap();
    let (dev, thread) =
        ViommuDevice::spawn_polling(model, None, window, serving, SpareCpu::fixed(true)).unwrap();
    let irq = Arc::new(EventIrq {
        fd: EventFd::new(EFD_NONBLOCK).unwrap(),
        count: AtomicU64::new(0),
    });
    let reqq = GuestDriver::new(&mem, 0, 64, 0x10_0000);
    let evq = GuestDriver::new(&mem, 0x1_0000, 64, 0x80_0000);
    let mut r = Rig {
        mem,
        dev,
        thread: Some(thread),
        mapper,
        irq,
        reqq,
        evq,
    };
    r.activate();
    r
}

impl Rig {
    /// Holds the device thread inside a host map: the mapper closed, then
    /// an ATTACH of endpoint EP and a MAP kicked, until the map waits.
    fn hold_inside_a_host_map(&mut self) {
        self.mapper.close();
        self.kick(&[
            req::attach(1, EP, 0),
            req::map(1, 0x10_0000, 0x10_ffff, DATA_BASE, req::RW),
        ]);
        self.mapper.wait_for_waiter();
    }

    fn activate(&mut self) {
        self.reqq = GuestDriver::new(&self.mem, 0, 64, 0x10_0000);
        self.evq = GuestDriver::new(&self.mem, 0x1_0000, 64, 0x80_0000);
        let f = self.dev.features();
        self.dev.ack_features(f);
        self.dev
            .activate(
                self.mem.clone(),
                vec![self.reqq.queue(), self.evq.queue()],
                self.irq.clone(),
            )
            .unwrap();
    }

    /// Queue requests and kick the way KVM does: a write to the ioeventfd.
    fn kick(&mut self, reqs: &[Vec<u8>]) {
        for r in reqs {
            self.reqq.push(&self.mem, r, 4).unwrap();
        }
        let kicks = self.dev.kick_eventfds().unwrap();
        kicks[0].write(1).unwrap();
    }

    fn statuses(&mut self) -> Vec<Option<u8>> {
        self.reqq.poll(&self.mem).iter().map(|u| u.status).collect()
    }
}

#[test]
fn kick_drains_on_the_device_thread_and_raises_the_interrupt() {
    let mut r = rig();
    r.kick(&[
        req::attach(1, EP, 0),
        req::map(1, 0x10_0000, 0x10_ffff, DATA_BASE, req::RW),
    ]);
    assert!(wait_readable(&r.irq.fd, STUCK), "no interrupt");
    assert_eq!(r.statuses(), vec![Some(0), Some(0)]);
    assert_eq!(
        r.irq.count.load(Ordering::Relaxed),
        1,
        "one interrupt a batch"
    );
    assert_eq!(r.mapper.inner.mappings().len(), 1);
    // The metrics snapshot follows (refreshed before the next wait).
    until("the counters snapshot", || {
        let c = *r.dev.counters().lock().unwrap();
        c.requests.attach == 1 && c.requests.map == 1 && c.busy_ns > 0
    });
    // A notify write that reaches the transport kicks the same thread.
    r.reqq
        .push(&r.mem, &req::unmap(1, 0x10_0000, 0x10_ffff), 4)
        .unwrap();
    r.dev.queue_notify(0);
    until("the unmap", || r.mapper.inner.mappings().is_empty());
}

/// The attach, notified as a vCPU would: the vCPU leaves it to the
/// thread (never on its share), which serves it.
fn attach_on_the_thread(r: &mut Rig) {
    r.reqq.push(&r.mem, &req::attach(1, EP, 0), 4).unwrap();
    r.dev.queue_notify(0);
    until("the attach", || r.reqq.used_idx(&r.mem) == 1);
    assert_eq!(r.statuses(), vec![Some(0)]);
}

/// `--viommu-kicks vcpu`: a notify write served on the calling thread
/// (the vCPU) while the device thread waits: done when the call returns,
/// without a wake-up of the thread.
#[test]
fn a_vcpu_kick_is_served_on_the_vcpu_while_the_thread_waits() {
    let mut r = rig_serving(PollWindow::new(Duration::ZERO), KickServing::Vcpu);
    until("the thread waits", || r.dev.commands_applied());
    // An ATTACH is never the vCPU's: the thread serves it.
    attach_on_the_thread(&mut r);
    until("the thread waits again", || r.dev.commands_applied());
    let woke = r.dev.status().read().wakeups;
    let irqs = r.irq.count.load(Ordering::Relaxed);
    let map = req::map(1, 0x10_0000, 0x10_ffff, DATA_BASE, req::RW);
    r.reqq.push(&r.mem, &map, 4).unwrap();
    r.dev.queue_notify(0);
    assert_eq!(r.statuses(), vec![Some(0)], "served in the call");
    assert_eq!(r.irq.count.load(Ordering::Relaxed), irqs + 1);
    assert_eq!(r.mapper.inner.mappings().len(), 1);
    let s = r.dev.status().read();
    assert_eq!((s.vcpu_kicks, s.vcpu_deferred, s.kicks), (2, 0, 1), "{s:?}");
    assert_eq!(s.wakeups, woke, "the thread slept through it");
    assert_eq!(s.serving_ms, 0, "not serving after the call");
    // The counters snapshot is the same one the thread keeps.
    let c = *r.dev.counters().lock().unwrap();
    assert_eq!((c.requests.attach, c.requests.map), (1, 1));
    // The event queue's notifications still go to the thread.
    r.dev.queue_notify(1);
    until("the thread's wake-up", || {
        r.dev.status().read().wakeups > woke
    });
}

/// `--viommu-kicks vcpu`: while the device thread serves (here: stuck in
/// a host map), a notify write returns at once and leaves the requests to
/// the thread; so does one with a command waiting for the thread.
#[test]
fn a_vcpu_kick_while_the_thread_is_busy_is_left_to_the_thread() {
    let mut r = rig_serving(PollWindow::new(Duration::ZERO), KickServing::Vcpu);
    r.hold_inside_a_host_map();
    r.reqq
        .push(
            &r.mem,
            &req::map(1, 0x20_0000, 0x20_ffff, DATA_BASE, req::RW),
            4,
        )
        .unwrap();
    r.dev.queue_notify(0);
    assert_eq!(r.dev.status().read().vcpu_deferred, 1);
    // A command now waits behind the map: the vCPU leaves the kick too.
    r.dev.write_config(BYPASS, &[1]);
    r.dev.queue_notify(0);
    let s = r.dev.status().read();
    assert_eq!((s.vcpu_kicks, s.vcpu_deferred), (0, 2), "{s:?}");
    r.mapper.open();
    until("both maps", || r.mapper.inner.mappings().len() == 2);
    until("the thread waits", || r.dev.commands_applied());
    assert_eq!(r.statuses(), vec![Some(0); 3], "every request served");
    assert_eq!(bypass(&r.dev), 1);
}

#[test]
fn stop_releases_the_model_a_vcpu_could_serve() {
    let mut r = rig_serving(PollWindow::new(Duration::ZERO), KickServing::Vcpu);
    r.thread.take().unwrap().stop();
    assert_eq!(Arc::strong_count(&r.mapper), 1, "the model is gone");
    // A notify write after the stop: nothing served, nothing blocks.
    r.reqq.push(&r.mem, &req::attach(1, EP, 0), 4).unwrap();
    r.dev.queue_notify(0);
    assert!(r.statuses().is_empty());
}

#[test]
fn reset_while_a_host_map_is_in_progress_does_not_wait_for_it() {
    let mut r = rig();
    r.hold_inside_a_host_map();
    // The device thread is inside a host map. The transport's calls return
    // at once: config reads, the reset request.
    let mut cfg = [0u8; 8];
    r.dev.read_config(0, &mut cfg);
    assert_eq!(u64::from_le_bytes(cfg), !0xfff, "page_size_mask");
    r.dev.reset();
    assert!(r.dev.reset_pending(), "the reset waits behind the map");
    r.mapper.open();
    until("the reset", || !r.dev.reset_pending());
    // The batch completed before the reset, then the reset removed its
    // domain: nothing is left on the host.
    assert!(r.mapper.inner.mappings().is_empty());
    assert_eq!(r.statuses(), vec![Some(0), Some(0)]);
    // The queues were handed back; a new activation serves new ones.
    let before = r.irq.count.load(Ordering::Relaxed);
    r.activate();
    r.kick(&[req::attach(2, EP, 0)]);
    until("the interrupt", || {
        r.irq.count.load(Ordering::Relaxed) > before
    });
    assert_eq!(r.statuses(), vec![Some(0)]);
}

#[test]
fn kicks_before_activation_or_after_reset_are_ignored() {
    let mut r = rig();
    r.dev.reset();
    until("the reset", || !r.dev.reset_pending());
    r.kick(&[req::attach(1, EP, 0)]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.irq.count.load(Ordering::Relaxed), 0);
    assert!(r.statuses().is_empty());
}

#[test]
fn stop_joins_the_thread_and_releases_the_model() {
    let mut r = rig();
    r.kick(&[req::attach(1, EP, 0)]);
    until("the attach", || r.irq.count.load(Ordering::Relaxed) == 1);
    assert!(
        Arc::strong_count(&r.mapper) > 1,
        "the model holds the mapper"
    );
    r.thread.take().unwrap().stop();
    assert_eq!(Arc::strong_count(&r.mapper), 1, "the model is gone");
    // The transport's handle survives its thread: nothing blocks or panics.
    r.dev.queue_notify(0);
    r.dev.reset();
    let err = r
        .dev
        .activate(
            r.mem.clone(),
            vec![r.reqq.queue(), r.evq.queue()],
            r.irq.clone(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("gone"), "{err}");
}

#[test]
fn dropping_the_thread_handle_stops_it() {
    let mut r = rig();
    drop(r.thread.take());
    assert_eq!(Arc::strong_count(&r.mapper), 1);
}

#[test]
fn exposes_the_model_through_the_virtio_trait() {
    let r = rig();
    assert_eq!(r.dev.device_type(), 23);
    assert_eq!(r.dev.queue_max_sizes().len(), 2);
    assert_ne!(r.dev.features() & (1 << 32), 0, "VERSION_1");
}

#[test]
fn status_tells_a_thread_stuck_in_a_host_call_from_one_waiting() {
    let mut r = rig();
    let status = r.dev.status();
    until("the activation", || {
        let s = status.read();
        s.device_next_avail == Some(0) && s.driver_avail == Some(0) && s.serving_ms == 0
    });
    r.hold_inside_a_host_map();
    std::thread::sleep(Duration::from_millis(30));
    // Inside the host map: serving for a while, the driver ahead.
    let s = status.read();
    assert!(s.serving_ms >= 20, "{s:?}");
    assert_eq!(
        (s.driver_avail, s.used, s.device_next_avail),
        (Some(2), Some(0), Some(0))
    );
    // The two requests published and not taken, read from the rings: an
    // ATTACH and a MAP (not a lazy guest's queue of UNMAPs).
    let p = s.pending.expect("requests published and not taken");
    assert_eq!(
        (p.other, p.map, p.unmap, p.unreadable),
        (1, 1, 0, 0),
        "{p:?}"
    );
    r.mapper.open();
    until("the drain", || {
        let s = status.read();
        s.serving_ms == 0 && s.device_next_avail == Some(2) && s.used == Some(2)
    });
    assert_eq!(status.read().pending, None);
    assert!(status.read().wakeups >= 2);
    // After a reset the rings are the driver's again: nothing is read.
    r.dev.reset();
    until("the reset", || !r.dev.reset_pending());
    assert_eq!(status.read().driver_avail, None);
}

/// The config space's `bypass` byte (virtio-iommu config offset 36).
const BYPASS: u64 = 36;

fn bypass(dev: &ViommuDevice) -> u8 {
    let mut b = [0u8];
    dev.read_config(BYPASS, &mut b);
    b[0]
}

#[test]
fn config_writes_that_change_nothing_are_not_queued() {
    let mut r = rig();
    // Hold the thread inside a host map: nothing it is sent is taken.
    r.hold_inside_a_host_map();
    assert_eq!(bypass(&r.dev), 0);
    for i in 0..10_000u64 {
        // Read-only fields, any width; bypass as it is; bypass invalid.
        r.dev
            .write_config(i % 40, &i.to_le_bytes()[..(i % 8 + 1) as usize]);
        r.dev.write_config(BYPASS, &[0]);
        r.dev.write_config(BYPASS, &[2 + (i % 250) as u8]);
    }
    let idle = r.dev.queued_commands();
    // Effective writes coalesce: one command, the last value wins.
    for i in 0..10_000u32 {
        r.dev.write_config(BYPASS, &[(i % 2) as u8]);
    }
    let coalesced = r.dev.queued_commands();
    let before = bypass(&r.dev);
    // Let the thread go before any assertion (a failing one would wait
    // for it at the drop).
    r.mapper.open();
    assert_eq!(idle, 0, "writes that change nothing");
    assert_eq!(coalesced, 1, "coalesced");
    assert_eq!(before, 0, "not applied while the thread is busy");
    until("the config write", || {
        r.dev.queued_commands() == 0 && bypass(&r.dev) == 1
    });
    // The value it has now changes nothing either.
    r.dev.write_config(BYPASS, &[1]);
    assert_eq!(r.dev.queued_commands(), 0);
    // After a reset the driver has negotiated nothing: bypass is read-only.
    r.dev.reset();
    until("the reset", || !r.dev.reset_pending());
    r.dev.write_config(BYPASS, &[0]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!((r.dev.queued_commands(), bypass(&r.dev)), (0, 1));
}

type BusyMem = Arc<GuestMemoryMmap>;

/// A device thread behind which a [`BusyGuest`] posts `rounds` UNMAP + MAP
/// pairs without kicking, every feature acked (EVENT_IDX included),
/// polling up to `poll`.
fn busy_rig(
    rounds: u64,
    poll: Duration,
) -> (
    ViommuDevice,
    DeviceThread,
    Arc<BusyGuest<BusyMem>>,
    Arc<EventIrq>,
) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap();
    let guest = Arc::new(BusyGuest::new(
        Arc::new(mem.clone()),
        GuestDriver::new(&mem, 0, 64, 0x10_0000),
        1,
        rounds,
    ));
    let mut model = ViommuModel::new(DeviceConfig::default()).unwrap();
    model.add_endpoint(EP, guest.clone()).unwrap();
    let (mut dev, thread) = ViommuDevice::spawn(
        model,
        None,
        poll,
        KickServing::Thread,
        SpareCpu::fixed(true),
    )
    .unwrap();
    let irq = Arc::new(EventIrq {
        fd: EventFd::new(EFD_NONBLOCK).unwrap(),
        count: AtomicU64::new(0),
    });
    let evq = GuestDriver::new(&mem, 0x1_0000, 64, 0x80_0000);
    let f = dev.features();
    assert_ne!(f & (1 << 29), 0, "EVENT_IDX offered");
    dev.ack_features(f);
    let reqq = guest.with_driver(|d, _| d.queue());
    dev.activate(mem, vec![reqq, evq.queue()], irq.clone())
        .unwrap();
    (dev, thread, guest, irq)
}

#[test]
fn a_guest_that_keeps_the_queue_busy_cannot_starve_a_reset() {
    for poll in [Duration::ZERO, SUGGESTED_POLL_MAX, POLL_MAX_LIMIT] {
        a_guest_that_keeps_the_queue_busy_cannot_starve_a_reset_polling(poll);
    }
}

fn a_guest_that_keeps_the_queue_busy_cannot_starve_a_reset_polling(poll: Duration) {
    let (mut dev, thread, guest, _irq) = busy_rig(u64::MAX, poll);
    guest.start(EP);
    dev.kick_eventfds().unwrap()[0].write(1).unwrap();
    until("the stream", || guest.posted() > 2000);
    // The guest never stops posting. The reset must be served anyway.
    dev.reset();
    let deadline = Instant::now() + STUCK;
    while dev.reset_pending() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let served = !dev.reset_pending();
    // Let a thread that is still draining go (and the test end).
    guest.stop();
    assert!(
        served,
        "the reset waited behind a guest that kept posting requests"
    );
    thread.stop();
    assert!(guest.inner.mappings().is_empty(), "the reset unmapped all");
}

#[test]
fn requests_left_at_the_cap_are_served_without_a_new_kick() {
    for poll in [Duration::ZERO, SUGGESTED_POLL_MAX] {
        requests_left_at_the_cap_are_served_without_a_new_kick_polling(poll);
    }
}

fn requests_left_at_the_cap_are_served_without_a_new_kick_polling(poll: Duration) {
    let (dev, thread, guest, irq) = busy_rig(1000, poll);
    let status = dev.status();
    guest.start(EP);
    // One kick, the only one: with EVENT_IDX the driver would not kick
    // again while the device's avail_event is behind.
    dev.kick_eventfds().unwrap()[0].write(1).unwrap();
    until("every request the guest posted", || {
        let (avail, used) = guest.with_driver(|d, m| (d.avail_idx(), d.used_idx(m)));
        guest.posted() == 2002 && avail == used
    });
    until("the counters", || {
        dev.counters().lock().unwrap().requests.total() == 2002
    });
    // Served in several rounds (a queue size of 64 at most each), each
    // one a wake-up of the thread by itself.
    let wakeups = status.read().wakeups;
    assert!(wakeups >= 2002 / 64, "{wakeups} wake-ups");
    assert!(irq.count.load(Ordering::Relaxed) >= 1);
    assert_eq!(status.read().device_next_avail, Some(2002u16));
    thread.stop();
}

/// `commands_applied` says when every command sent is in effect (the
/// fuzz target's settle point), and `dropped_commands` counts what the
/// bounded channel refused: nothing while the transport keeps its bound,
/// the excess when a caller breaks it (resets sent without waiting, which
/// the transport never does).
#[test]
fn applied_commands_and_refused_ones_are_told() {
    let mut r = rig();
    r.hold_inside_a_host_map();
    r.dev.write_config(BYPASS, &[1]);
    let held = (r.dev.commands_applied(), bypass(&r.dev));
    for _ in 0..COMMAND_QUEUE + 3 {
        r.dev.reset();
    }
    let refused = r.dev.dropped_commands();
    r.mapper.open();
    assert_eq!(held, (false, 0), "queued behind the busy thread");
    assert_eq!(refused, 4, "the channel holds COMMAND_QUEUE");
    until("the commands", || r.dev.commands_applied());
    assert_eq!(bypass(&r.dev), 1, "applied once commands_applied says so");
    assert!(!r.dev.reset_pending());
}

mod linux_driver;
mod system_reset;
mod vcpu_share;
