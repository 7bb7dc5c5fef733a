//! Linux's virtio-iommu driver on two CPUs against the real device
//! thread: no sync ever waits for a request the device did not take,
//! with and without EVENT_IDX, served on the thread or on the vCPUs,
//! and the request-queue polling (notifications suppressed while it
//! polls, ended by stop, absent when off).

use super::*;

/// Linux's split-ring driver as the virtio-iommu driver drives it, on
/// two CPUs sharing its request lock: requests are published at once and
/// notified only at a sync (`virtqueue_kick_prepare()` with EVENT_IDX:
/// a full fence, then notify when `avail_event` lies in `[old, new)`,
/// `old` being the avail index at the previous kick_prepare), so lazy
/// UNMAPs rest in the ring unnotified until the next sync; a sync then
/// spins on the used ring. The real device thread serves it through its
/// kick eventfd. A request the device never takes leaves a sync spinning:
/// found here as a sync that waits more than 10 s.
struct LinuxDriver {
    d: GuestDriver,
    /// VIRTIO_RING_F_EVENT_IDX negotiated.
    event_idx: bool,
    /// Requests published since the last kick_prepare (`num_added`).
    num_added: u16,
    /// Requests published and not yet seen used.
    in_flight: usize,
    next_iova: u64,
}

/// How a driver's notification reaches the device: KVM's ioeventfd
/// (`--viommu-kicks thread`), or a notify write the transport hands to the
/// device on the vCPU (`--viommu-kicks vcpu`).
trait Notify {
    fn notify(&self);
}

impl Notify for EventFd {
    fn notify(&self) {
        self.write(1).unwrap();
    }
}

impl Notify for Mutex<ViommuDevice> {
    fn notify(&self) {
        self.lock().unwrap().queue_notify(0);
    }
}

impl<T: Notify> Notify for Arc<T> {
    fn notify(&self) {
        (**self).notify();
    }
}

impl LinuxDriver {
    fn add(&mut self, mem: &GuestMemoryMmap, r: &[u8]) {
        self.d.push(mem, r, 4).expect("room in the queue");
        self.num_added = self.num_added.wrapping_add(1);
        self.in_flight += 1;
    }

    /// virtqueue_kick_prepare() + virtqueue_notify().
    fn kick(&mut self, mem: &GuestMemoryMmap, notify: &impl Notify) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        let new = self.d.avail_idx();
        let old = new.wrapping_sub(self.num_added);
        self.num_added = 0;
        let need = if self.event_idx {
            let event = self.d.avail_event(mem);
            // vring_need_event()
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            self.d.used_flags(mem) & VRING_USED_F_NO_NOTIFY as u16 == 0
        };
        if need {
            notify.notify();
        }
        need
    }

    /// __viommu_sync_req(): nothing in flight, nothing to do; else kick and
    /// spin until every request is used.
    fn sync(&mut self, mem: &GuestMemoryMmap, notify: &impl Notify, status: &ThreadStatus) {
        if self.in_flight == 0 {
            return;
        }
        self.kick(mem, notify);
        self.wait(mem, status);
    }
}

/// A device thread serving a [`LinuxDriver`] (EVENT_IDX as asked) with
/// `window`, its endpoint attached by a first request (notified: the
/// device starts with notifications on).
struct LinuxRig {
    mem: GuestMemoryMmap,
    dev: ViommuDevice,
    thread: DeviceThread,
    status: Arc<ThreadStatus>,
    notify: EventFd,
    driver: Arc<Mutex<LinuxDriver>>,
}

fn linux_rig(event_idx: bool, window: PollWindow) -> LinuxRig {
    linux_rig_serving(event_idx, window, KickServing::Thread)
}

fn linux_rig_serving(event_idx: bool, window: PollWindow, serving: KickServing) -> LinuxRig {
    linux_rig_on(event_idx, window, serving, SpareCpu::fixed(true))
}

fn linux_rig_on(
    event_idx: bool,
    window: PollWindow,
    serving: KickServing,
    spare: SpareCpu,
) -> LinuxRig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap();
    let mut model = ViommuModel::new(DeviceConfig::default()).unwrap();
    model.add_endpoint(EP, Arc::new(FakeMapper::new())).unwrap();
    let (mut dev, thread) =
        ViommuDevice::spawn_polling(model, None, window, serving, spare).unwrap();
    let irq = Arc::new(EventIrq {
        fd: EventFd::new(EFD_NONBLOCK).unwrap(),
        count: AtomicU64::new(0),
    });
    let reqq = GuestDriver::new(&mem, 0, 64, 0x10_0000);
    let evq = GuestDriver::new(&mem, 0x1_0000, 64, 0x80_0000);
    let f = dev.features();
    assert_ne!(f & (1 << 29), 0, "EVENT_IDX offered");
    dev.ack_features(if event_idx { f } else { f & !(1 << 29) });
    dev.activate(mem.clone(), vec![reqq.queue(), evq.queue()], irq)
        .unwrap();
    let status = dev.status();
    let notify = dev.kick_eventfds().unwrap().remove(0);
    let driver = Arc::new(Mutex::new(LinuxDriver {
        d: reqq,
        event_idx,
        num_added: 0,
        in_flight: 0,
        next_iova: 0x10_0000,
    }));
    {
        let mut d = driver.lock().unwrap();
        d.add(&mem, &req::attach(1, EP, 0));
        assert!(d.kick(&mem, &notify), "the first request is notified");
        d.wait(&mem, &status);
    }
    LinuxRig {
        mem,
        dev,
        thread,
        status,
        notify,
        driver,
    }
}

impl LinuxDriver {
    /// Spins until every request is used ([`STUCK`]: the device left one).
    fn wait(&mut self, mem: &GuestMemoryMmap, status: &ThreadStatus) {
        let deadline = Instant::now() + STUCK;
        while self.in_flight > 0 {
            self.in_flight -= self.d.poll(mem).len();
            assert!(
                Instant::now() < deadline,
                "a request the device does not serve: driver avail {}, avail_event {}; device {:?}",
                self.d.avail_idx(),
                self.d.avail_event(mem),
                status.read()
            );
            std::hint::spin_loop();
        }
    }

    /// Whether the device asks this driver not to notify now: with
    /// EVENT_IDX `avail_event` far from the avail index (as the device
    /// sets it while polling), without it NO_NOTIFY.
    fn suppressed(&self, mem: &GuestMemoryMmap) -> bool {
        if self.event_idx {
            self.d.avail_event(mem) == self.d.avail_idx().wrapping_add(0x8000)
        } else {
            self.d.used_flags(mem) & VRING_USED_F_NO_NOTIFY as u16 != 0
        }
    }
}

#[test]
fn a_linux_driver_on_two_cpus_never_waits_for_a_request_the_device_did_not_take() {
    linux_driver_on_two_cpus(true, PollWindow::new(Duration::ZERO), Duration::ZERO);
}

#[test]
fn the_same_without_event_idx() {
    linux_driver_on_two_cpus(false, PollWindow::new(Duration::ZERO), Duration::ZERO);
}

/// Polling with a short window the driver's pauses straddle: requests
/// arrive while the thread polls, just as its window ends, and after it
/// slept; the thread keeps polling however busy the machine is.
#[test]
fn the_same_with_requests_arriving_as_polling_ends() {
    let window = PollWindow::new(Duration::from_micros(20)).ignoring_preemption();
    linux_driver_on_two_cpus(true, window, Duration::from_micros(60));
}

#[test]
fn the_same_with_requests_arriving_as_polling_ends_without_event_idx() {
    let window = PollWindow::new(Duration::from_micros(20)).ignoring_preemption();
    linux_driver_on_two_cpus(false, window, Duration::from_micros(60));
}

/// The default window, adapting (and giving up when the core is taken).
#[test]
fn the_same_with_the_default_poll_window() {
    for event_idx in [true, false] {
        let window = PollWindow::new(SUGGESTED_POLL_MAX);
        linux_driver_on_two_cpus(event_idx, window, Duration::from_micros(150));
    }
}

/// Two CPUs share the driver (its request lock) and pause up to `jitter`
/// (spinning) before each operation; their notifications reach the
/// device through its kick eventfd.
fn linux_driver_on_two_cpus(event_idx: bool, window: PollWindow, jitter: Duration) {
    let r = linux_rig(event_idx, window);
    let notify = Arc::new(r.notify.try_clone().unwrap());
    let polling = !window.max().is_zero();
    two_cpus_drive(&r.mem, &r.status, &r.driver, notify, jitter);
    let s = r.status.read();
    if polling {
        // The first request was followed by a poll, however short.
        assert!(s.poll_ns > 0, "{s:?}");
    } else {
        assert_eq!(
            (
                s.poll_ns,
                s.polls_found,
                s.polls_timed_out,
                s.poll_window_ns
            ),
            (0, 0, 0, 0)
        );
    }
    r.thread.stop();
}

/// With `--viommu-kicks vcpu`: the same two CPUs, each notification a
/// notify write the transport hands to the device on the CPU that made
/// it (served there when the thread is idle, left to the thread when it
/// is busy, both of which a run of 1500 operations a CPU meets). Without
/// polling, and with a short poll window and a spare CPU: then each kick
/// a vCPU serves hands over to the thread's polling, whose sessions
/// start and end around the CPUs' requests (a request published as a
/// session ends, or as a vCPU hands over, is never left unserved:
/// `two_cpus_drive` waits for every one).
#[test]
fn a_linux_driver_on_two_cpus_served_on_its_vcpus_never_waits_either() {
    for (event_idx, window) in [
        (true, Duration::ZERO),
        (false, Duration::ZERO),
        (true, SUGGESTED_POLL_MAX),
        (false, SUGGESTED_POLL_MAX),
    ] {
        let r = linux_rig_serving(event_idx, PollWindow::new(window), KickServing::Vcpu);
        let transport = Arc::new(Mutex::new(r.dev));
        two_cpus_drive(
            &r.mem,
            &r.status,
            &r.driver,
            transport,
            Duration::from_micros(20),
        );
        let s = r.status.read();
        assert!(s.vcpu_kicks > 0, "served on a vCPU: {s:?}");
        assert_eq!(s.vcpu_handovers > 0, !window.is_zero(), "{s:?}");
        r.thread.stop();
    }
}

/// `--viommu-kicks vcpu` with a poll window: the vCPU serves the kick
/// that finds the thread asleep and hands over to the thread's polling,
/// so the MAPs that follow within the window are found by the poll, not
/// notified (EVENT_IDX on and off). With no CPU to spare it does not:
/// every MAP is notified and served on the vCPU, the thread never woken.
#[test]
fn a_vcpu_kick_hands_over_to_the_threads_polling_on_a_spare_cpu_only() {
    for (event_idx, spare) in [(true, true), (false, true), (true, false), (false, false)] {
        let r = linux_rig_on(
            event_idx,
            PollWindow::new(Duration::from_millis(500)).ignoring_preemption(),
            KickServing::Vcpu,
            SpareCpu::fixed(spare),
        );
        let transport = Mutex::new(r.dev);
        let mut d = r.driver.lock().unwrap();
        let map = |d: &mut LinuxDriver, i: u64| {
            let iova = 0x10_0000 + i * 0x1000;
            d.add(&r.mem, &req::map(1, iova, iova + 0xfff, DATA_BASE, 3));
        };
        // Let the attach's wake-up (and its poll, if any) end: the
        // thread sleeps.
        until("the attach to be served", || {
            let s = r.status.read();
            (s.polls_timed_out > 0 || !spare) && transport.lock().unwrap().commands_applied()
        });
        let before = r.status.read();
        map(&mut d, 0);
        assert!(d.kick(&r.mem, &transport), "notifications are on");
        d.wait(&r.mem, &r.status);
        if spare {
            // The vCPU's serve woke the thread, which now polls.
            until("the thread to poll", || {
                let s = r.status.read();
                s.kicks > before.kicks && s.serving_ms > 0
            });
        }
        let mut notified = 0;
        for i in 1..20 {
            map(&mut d, i);
            notified += u32::from(d.kick(&r.mem, &transport));
            d.wait(&r.mem, &r.status);
        }
        let s = r.status.read();
        if spare {
            assert_eq!(notified, 0, "every later MAP found by the poll: {s:?}");
            assert_eq!(s.vcpu_kicks - before.vcpu_kicks, 1, "{s:?}");
            assert_eq!(s.vcpu_handovers - before.vcpu_handovers, 1, "{s:?}");
            // Found by a look at the ring, or (a session past SESSION_MAX)
            // by the self-kick that look made.
            assert!(s.poll_ns > before.poll_ns, "{s:?}");
        } else {
            assert_eq!(notified, 19, "no polling: every MAP notified: {s:?}");
            assert_eq!(s.vcpu_kicks - before.vcpu_kicks, 20, "{s:?}");
            assert_eq!(s.vcpu_handovers, 0, "{s:?}");
            assert_eq!(s.kicks, before.kicks, "the thread never woken: {s:?}");
            assert_eq!(s.polls_busy - before.polls_busy, 20, "{s:?}");
        }
        drop(d);
        r.thread.stop();
    }
}

/// The two CPUs of [`linux_driver_on_two_cpus`], notifying through
/// `notify`; returns once every request they made was used.
fn two_cpus_drive<N: Notify + Clone + Send + 'static>(
    mem: &GuestMemoryMmap,
    status: &Arc<ThreadStatus>,
    driver: &Arc<Mutex<LinuxDriver>>,
    notify: N,
    jitter: Duration,
) {
    let ops = 1500;
    let cpus: Vec<_> = (0..2u64)
        .map(|cpu| {
            let (driver, mem, status) = (driver.clone(), mem.clone(), status.clone());
            let notify = notify.clone();
            std::thread::spawn(move || {
                // xorshift: each CPU its own reproducible op sequence.
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (cpu + 1);
                for _ in 0..ops {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if !jitter.is_zero() {
                        let pause = jitter.mul_f64((x >> 11) as f64 / (1u64 << 53) as f64);
                        let t = Instant::now();
                        while t.elapsed() < pause {
                            std::hint::spin_loop();
                        }
                    }
                    let mut d = driver.lock().unwrap();
                    if d.d.free_descriptors() < 4 {
                        // __viommu_add_req() on -ENOSPC: sync and retry.
                        d.sync(&mem, &notify, &status);
                    }
                    let iova = d.next_iova;
                    d.next_iova += 0x1000;
                    // A MAP and its sync (iotlb_sync_map), or a lazy UNMAP
                    // left in the ring until a later sync.
                    if x.is_multiple_of(3) {
                        d.add(&mem, &req::unmap(1, iova, iova + 0xfff));
                    } else {
                        d.add(&mem, &req::map(1, iova, iova + 0xfff, DATA_BASE, 3));
                        d.sync(&mem, &notify, &status);
                    }
                    drop(d);
                    if x.is_multiple_of(7) {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for c in cpus {
        c.join().unwrap();
    }
    driver.lock().unwrap().sync(mem, &notify, status);
}

/// While the thread polls, the driver is asked not to notify, and the
/// requests it does not notify are served; commands (a config write, a
/// reset) are served at once, not after the window.
#[test]
fn while_the_thread_polls_requests_need_no_notification() {
    for event_idx in [true, false] {
        let mut r = linux_rig(event_idx, minute_window());
        let mut d = r.driver.lock().unwrap();
        until("notifications suppressed", || d.suppressed(&r.mem));
        for i in 0..200u64 {
            let iova = 0x10_0000 + i * 0x1000;
            d.add(&r.mem, &req::map(1, iova, iova + 0xfff, DATA_BASE, 3));
            assert!(
                !d.kick(&r.mem, &r.notify),
                "request {i} notified (event_idx {event_idx})"
            );
            d.wait(&r.mem, &r.status);
        }
        // (The thread's own kicks, between polling sessions, count in
        // `kicks`; the driver's were checked above.)
        let s = r.status.read();
        assert!(s.polls_found >= 1, "{s:?}");
        assert_eq!(s.poll_window_ns, 60_000_000_000, "the window stays");
        // A command ends the polling: served now, not in a minute.
        r.dev.write_config(BYPASS, &[1]);
        until("the config write", || bypass(&r.dev) == 1);
        // The polling ended with notifications on: the next request is
        // notified, and polling starts again after it.
        until("the thread waits", || r.dev.commands_applied());
        assert!(!d.suppressed(&r.mem));
        d.add(&r.mem, &req::unmap(1, 0x10_0000, 0x10_0fff));
        assert!(d.kick(&r.mem, &r.notify), "event_idx {event_idx}");
        d.wait(&r.mem, &r.status);
        until("notifications suppressed", || d.suppressed(&r.mem));
        r.dev.reset();
        until("the reset", || !r.dev.reset_pending());
        drop(d);
        r.thread.stop();
    }
}

/// Stopping the VMM does not wait for the poll window either.
#[test]
fn stop_ends_polling() {
    let mut r = rig_with(minute_window());
    r.kick(&[req::attach(1, EP, 0)]);
    until("the attach", || r.reqq.used_idx(&r.mem) == 1);
    until("polling", || {
        r.reqq.used_flags(&r.mem) & VRING_USED_F_NO_NOTIFY as u16 != 0
            || r.reqq.avail_event(&r.mem) == r.reqq.avail_idx().wrapping_add(0x8000)
    });
    let t = Instant::now();
    r.thread.take().unwrap().stop();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "waited for the window"
    );
}

/// Without polling, the thread sleeps as soon as it has served: every
/// request after that is notified, and one that is not stays unserved
/// until a notification comes. The same with the poll window open on a
/// host with no CPU to spare.
#[test]
fn without_polling_the_thread_waits_for_notifications() {
    let off = || (PollWindow::new(Duration::ZERO), SpareCpu::fixed(true));
    let busy = || (minute_window(), SpareCpu::fixed(false));
    for (event_idx, (window, spare)) in [
        (true, off()),
        (false, off()),
        (true, busy()),
        (false, busy()),
    ] {
        let gated = !window.current().is_zero();
        let r = linux_rig_on(event_idx, window, KickServing::Thread, spare);
        let mut d = r.driver.lock().unwrap();
        for i in 0..50u64 {
            until("the thread waits", || r.dev.commands_applied());
            let iova = 0x10_0000 + i * 0x1000;
            d.add(&r.mem, &req::map(1, iova, iova + 0xfff, DATA_BASE, 3));
            assert!(
                d.kick(&r.mem, &r.notify),
                "request {i} not notified (event_idx {event_idx})"
            );
            d.wait(&r.mem, &r.status);
        }
        until("the thread waits", || r.dev.commands_applied());
        let used = d.d.used_idx(&r.mem);
        d.add(&r.mem, &req::unmap(1, 0x10_0000, 0x10_0fff));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(d.d.used_idx(&r.mem), used, "served without a notification");
        r.notify.write(1).unwrap();
        d.wait(&r.mem, &r.status);
        let s = r.status.read();
        assert_eq!((s.poll_ns, s.polls_found), (0, 0));
        assert_eq!(s.kicks, 52);
        // Each notification of the request queue asked the host, and found
        // no spare CPU.
        assert_eq!(s.polls_busy, if gated { 52 } else { 0 }, "{s:?}");
        drop(d);
        r.thread.stop();
    }
}
