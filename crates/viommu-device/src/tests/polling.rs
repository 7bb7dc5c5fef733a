//! Polling the request queue against the driver's notification decisions:
//! a device that drains with notifications suppressed while it
//! polls the ring, and with them on before it sleeps, as the VMM's device
//! thread does with a poll window. The driver is Linux's split ring:
//! requests published at once, a notify decision (`virtqueue_kick_prepare`)
//! at a sync, with EVENT_IDX `vring_need_event(avail_event, new, old)`,
//! without it the used ring's NO_NOTIFY flag.
//!
//! Checked, with EVENT_IDX on and off:
//! - while the device polls, no decision of the driver notifies;
//! - a request is never left unserved: once the driver's last decision is
//!   made and the device has no notification to wake for, every request is
//!   used, whatever step of the device's polling the driver published in
//!   (the one that counts: between the device's last look at the ring and
//!   its turning notifications back on).

use proptest::prelude::*;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VRING_USED_F_NO_NOTIFY};

use std::sync::Arc;

use vm_memory::{GuestAddress, GuestMemory, GuestMemoryMmap};

use crate::testing::{
    activate_busy, proptest_cases, req, BusyGuest, GuestDriver, Harness, TestMem, DATA_BASE,
    MEM_SIZE,
};
use crate::{DeviceConfig, Drained, Error, Notifications, VirtioIommu};

const QSIZE: u16 = 16;
const NO_NOTIFY: u16 = VRING_USED_F_NO_NOTIFY as u16;

/// A harness with its endpoint 1 attached to domain 1; EVENT_IDX as asked.
fn harness(event_idx: bool) -> Harness {
    let mut h = Harness::new(DeviceConfig::default(), &[1], QSIZE);
    if !event_idx {
        let f = h.dev.device_features() & !(1 << VIRTIO_RING_F_EVENT_IDX);
        h.restart(f);
    }
    assert_eq!(h.statuses(&[req::attach(1, 1, 0)]), vec![Some(0)]);
    h
}

/// Linux's notify decision (`virtqueue_kick_prepare()`) on `d`, whose
/// previous decision was at `old`: whether the driver notifies now.
fn decide<M: GuestMemory>(d: &GuestDriver, mem: &M, event_idx: bool, old: &mut u16) -> bool {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let new = d.avail_idx();
    let old = std::mem::replace(old, new);
    if event_idx {
        let event = d.avail_event(mem);
        new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
    } else {
        d.used_flags(mem) & NO_NOTIFY == 0
    }
}

/// The driver of a [`Harness`]'s request queue.
struct Driver {
    event_idx: bool,
    /// The avail index at the previous decision (`old`).
    old: u16,
    next_iova: u64,
}

impl Driver {
    fn new(h: &Harness, event_idx: bool) -> Self {
        Driver {
            event_idx,
            old: h.reqq.avail_idx(),
            next_iova: 0x10_0000,
        }
    }

    /// Publishes a MAP of a page not mapped yet (false: no room).
    fn publish(&mut self, h: &mut Harness) -> bool {
        if h.reqq.free_descriptors() < 2 {
            return false;
        }
        let iova = self.next_iova;
        self.next_iova += 0x1000;
        h.queue(&[req::map(1, iova, iova + 0xfff, DATA_BASE, req::RW)]);
        true
    }

    fn decide(&mut self, h: &Harness) -> bool {
        decide(&h.reqq, &*h.mem, self.event_idx, &mut self.old)
    }
}

/// A device whose endpoint's host maps make the guest post more requests
/// (a [`BusyGuest`], `busy` rounds of them) without a notify decision:
/// requests published while a drain is under way, after its pops and
/// before it turns notifications on, which only the drain's last read of
/// the ring can take. The guest's own requests (MAPs of other pages) are
/// published with a decision or without one.
struct Rig {
    dev: VirtioIommu<TestMem>,
    guest: Arc<BusyGuest<TestMem>>,
    event_idx: bool,
    old: u16,
    next_iova: u64,
}

impl Rig {
    fn new(event_idx: bool, busy: u64) -> Self {
        let mem: TestMem = Arc::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap(),
        );
        let mut dev = VirtioIommu::new(DeviceConfig::default()).unwrap();
        let guest = Arc::new(BusyGuest::new(
            mem.clone(),
            GuestDriver::new(&*mem, 0, QSIZE, 0x10_0000),
            1,
            busy,
        ));
        activate_busy(&mut dev, mem, &guest, event_idx);
        // ATTACH and the first busy MAP, published without a decision.
        guest.start(1);
        Rig {
            dev,
            guest,
            event_idx,
            old: 0,
            next_iova: 0x100_0000,
        }
    }

    fn publish(&mut self) {
        let iova = self.next_iova;
        let pushed = self.guest.with_driver(|d, m| {
            d.poll(m);
            (d.free_descriptors() >= 2)
                .then(|| d.push(m, &req::map(1, iova, iova + 0xfff, DATA_BASE, req::RW), 4))
        });
        if pushed.is_some() {
            self.next_iova += 0x1000;
        }
    }

    fn decide(&mut self) -> bool {
        let (event_idx, old) = (self.event_idx, &mut self.old);
        self.guest.with_driver(|d, m| decide(d, m, event_idx, old))
    }
}

/// Where the device thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for a notification (notifications on, unless a self-kick is
    /// pending).
    Asleep,
    /// Polling the ring, notifications suppressed.
    Polling,
}

/// The device thread's steps, as `vmm::devices::viommu` takes them.
struct Device {
    state: State,
    /// A notification (the driver's, or the thread's own re-kick after
    /// `Drained::More`) the thread has not taken yet.
    kicked: bool,
}

impl Device {
    fn drain(&mut self, dev: &mut VirtioIommu<TestMem>, after: Notifications) {
        match dev.process_request_queue_leaving(after).unwrap() {
            Drained::More => {
                // Re-kicks itself; notifications stay off.
                self.kicked = true;
                self.state = State::Asleep;
            }
            Drained::Empty => {
                self.state = match after {
                    Notifications::On => State::Asleep,
                    Notifications::Suppressed => State::Polling,
                }
            }
        }
    }

    /// Takes a pending notification and drains; with `poll`, starts polling.
    fn wake(&mut self, dev: &mut VirtioIommu<TestMem>, poll: bool) {
        if self.state == State::Asleep && self.kicked {
            self.kicked = false;
            let after = if poll {
                Notifications::Suppressed
            } else {
                Notifications::On
            };
            self.drain(dev, after);
        }
    }

    /// One look at the ring while polling; drains what it finds.
    fn poll(&mut self, dev: &mut VirtioIommu<TestMem>) {
        if self.state == State::Polling && dev.request_queue_pending().unwrap() {
            self.drain(dev, Notifications::Suppressed);
        }
    }

    /// The poll window ends: notifications on, the ring read again.
    fn time_out(&mut self, dev: &mut VirtioIommu<TestMem>) {
        if self.state == State::Polling {
            self.drain(dev, Notifications::On);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// The driver publishes `n` requests, then (if `decide`) makes its
    /// notify decision.
    Publish { n: usize, decide: bool },
    /// The device takes a pending notification (and polls after it).
    Wake { poll: bool },
    /// The device, polling, looks at the ring.
    Poll,
    /// The device's poll window ends.
    TimeOut,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, any::<bool>()).prop_map(|(n, decide)| Op::Publish { n, decide }),
        3 => any::<bool>().prop_map(|poll| Op::Wake { poll }),
        3 => Just(Op::Poll),
        2 => Just(Op::TimeOut),
    ]
}

/// Plays `ops`, then the driver's last decision and the device until it
/// waits with nothing to wake for: every request must be used by then.
fn play(event_idx: bool, busy: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut rig = Rig::new(event_idx, busy);
    let mut dev = Device {
        state: State::Asleep,
        kicked: false,
    };
    for op in ops {
        match *op {
            Op::Publish { n, decide } => {
                for _ in 0..n {
                    rig.publish();
                }
                if decide {
                    let notify = rig.decide();
                    prop_assert!(
                        !(notify && dev.state == State::Polling),
                        "the driver notifies while the device polls"
                    );
                    dev.kicked |= notify;
                }
            }
            Op::Wake { poll } => dev.wake(&mut rig.dev, poll),
            Op::Poll => dev.poll(&mut rig.dev),
            Op::TimeOut => dev.time_out(&mut rig.dev),
        }
    }
    // The driver's last sync decides; the device runs until it sleeps with
    // nothing to wake for (every step serves or ends polling, so a few
    // hundred steps are plenty).
    dev.kicked |= rig.decide();
    for _ in 0..1000 {
        match (dev.state, dev.kicked) {
            (State::Polling, _) => dev.time_out(&mut rig.dev),
            (State::Asleep, true) => dev.wake(&mut rig.dev, false),
            (State::Asleep, false) => break,
        }
    }
    prop_assert_eq!((dev.state, dev.kicked), (State::Asleep, false));
    let (used, avail, ok) = rig.guest.with_driver(|d, m| {
        let used = d.used_idx(m);
        let replies = d.poll(m);
        (
            used,
            d.avail_idx(),
            replies.iter().all(|u| u.status == Some(0)),
        )
    });
    prop_assert_eq!(
        used,
        avail,
        "requests left unserved with the device asleep and no notification"
    );
    prop_assert!(ok);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(512)))]

    #[test]
    fn polling_with_event_idx_leaves_no_request_unserved(
        busy in 0u64..12,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        play(true, busy, &ops)?;
    }

    #[test]
    fn polling_without_event_idx_leaves_no_request_unserved(
        busy in 0u64..12,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        play(false, busy, &ops)?;
    }
}

/// The race spelt out: the device's poll looked at an empty ring, the
/// driver publishes and (notifications suppressed) does not notify, the
/// window ends: the drain that turns notifications on takes the request.
#[test]
fn a_request_published_as_polling_ends_is_served_by_the_drain_that_turns_notifications_on() {
    for event_idx in [true, false] {
        let mut h = harness(event_idx);
        let mut drv = Driver::new(&h, event_idx);
        let r = h
            .dev
            .process_request_queue_leaving(Notifications::Suppressed)
            .unwrap();
        assert_eq!(r, Drained::Empty);
        let next = h.reqq.avail_idx();
        if event_idx {
            assert_eq!(h.reqq.avail_event(&*h.mem), next.wrapping_add(0x8000));
        } else {
            assert_eq!(h.reqq.used_flags(&*h.mem) & NO_NOTIFY, NO_NOTIFY);
        }
        assert!(!h.dev.request_queue_pending().unwrap(), "the poll's look");
        assert!(drv.publish(&mut h));
        assert!(!drv.decide(&h), "suppressed (event_idx {event_idx})");
        assert!(h.dev.request_queue_pending().unwrap());
        let used = h.reqq.used_idx(&*h.mem);
        let r = h
            .dev
            .process_request_queue_leaving(Notifications::On)
            .unwrap();
        assert_eq!(r, Drained::Empty);
        assert_eq!(h.reqq.used_idx(&*h.mem), used.wrapping_add(1), "served");
        assert_eq!(h.reqq.poll(&*h.mem)[0].status, Some(0));
        // On again: the next request notifies.
        if event_idx {
            assert_eq!(h.reqq.avail_event(&*h.mem), h.reqq.avail_idx());
        } else {
            assert_eq!(h.reqq.used_flags(&*h.mem) & NO_NOTIFY, 0);
        }
        assert!(drv.publish(&mut h));
        assert!(drv.decide(&h), "notifies (event_idx {event_idx})");
    }
}

/// With EVENT_IDX, suppression moves `avail_event` with the device: a
/// driver that keeps publishing while the device keeps polling, round the
/// 16-bit index and past it, never has to notify.
#[test]
fn a_driver_that_keeps_publishing_while_the_device_polls_never_notifies() {
    for event_idx in [true, false] {
        let mut h = harness(event_idx);
        let mut drv = Driver::new(&h, event_idx);
        let start = h.reqq.avail_idx();
        let mut published = 0u32;
        for round in 0..40_000u32 {
            for _ in 0..=(round % 3) {
                if h.reqq.free_descriptors() >= 2 {
                    // An UNMAP of nothing: cheap, and OK.
                    h.queue(&[req::unmap(1, 0x1000, 0x1fff)]);
                    published += 1;
                }
            }
            assert!(!drv.decide(&h) || round == 0, "round {round}");
            while h.dev.request_queue_pending().unwrap() {
                let _ = h
                    .dev
                    .process_request_queue_leaving(Notifications::Suppressed)
                    .unwrap();
            }
            assert_eq!(h.reqq.used_idx(&*h.mem), h.reqq.avail_idx());
            h.reqq.poll(&*h.mem);
        }
        assert!(published > 0x1_0000, "{published}");
        assert_eq!(
            h.reqq.avail_idx(),
            start.wrapping_add(published as u16),
            "wrapped"
        );
    }
}

/// What polling reads: requests 1 to a queue size ahead; nothing when the
/// ring is empty or its index corrupt (a poll does not spin on garbage);
/// an error before activation.
#[test]
fn pending_is_work_a_drain_would_take() {
    let mut h = harness(true);
    assert!(!h.dev.request_queue_pending().unwrap());
    let at = h.reqq.avail_idx();
    for (ahead, pending) in [
        (1u16, true),
        (QSIZE, true),
        (QSIZE + 1, false),
        (0x8000, false),
        (u16::MAX, false),
        (0, false),
    ] {
        h.reqq.set_avail_idx(&*h.mem, at.wrapping_add(ahead));
        assert_eq!(
            h.dev.request_queue_pending().unwrap(),
            pending,
            "{ahead} ahead"
        );
    }
    h.dev.reset();
    assert!(matches!(
        h.dev.request_queue_pending(),
        Err(Error::NotActivated)
    ));
}
