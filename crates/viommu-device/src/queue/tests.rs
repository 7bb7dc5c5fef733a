use proptest::prelude::*;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::*;

const NO_INTERRUPT: u16 = virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16;

/// One side of the comparison: guest memory with a mock split queue.
struct Side {
    mem: GuestMemoryMmap,
    queue: Queue,
    avail: u64,
    used: u64,
    size: u16,
}

impl Side {
    fn new(size: u16, event_idx: bool) -> Side {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
        let vq = MockSplitQueue::new(&mem, size);
        let mut queue: Queue = vq.create_queue().unwrap();
        queue.set_event_idx(event_idx);
        let (avail, used) = (vq.avail_addr().0, vq.used_addr().0);
        Side {
            mem,
            queue,
            avail,
            used,
            size,
        }
    }

    fn driver_wishes(&self, used_event: u16, flags: u16) {
        let ev = GuestAddress(self.avail + 4 + 2 * u64::from(self.size));
        self.mem.write_obj(used_event.to_le(), ev).unwrap();
        self.mem
            .write_obj(flags.to_le(), GuestAddress(self.avail))
            .unwrap();
    }

    fn used_ring(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4 + 8 * usize::from(self.size)];
        self.mem
            .read_slice(&mut b, GuestAddress(self.used))
            .unwrap();
        b
    }
}

/// (used_event, avail flags, used elements) of one batch.
type Batch = (u16, u16, Vec<(u16, u32)>);

fn batches() -> impl Strategy<Value = (u16, bool, Vec<Batch>)> {
    (1u32..=5, any::<bool>()).prop_flat_map(|(log2, event_idx)| {
        let size = 1u16 << log2;
        let batch = (
            any::<u16>(),
            prop_oneof![Just(0u16), Just(NO_INTERRUPT)],
            prop::collection::vec((0..size, any::<u32>()), 0..(2 * usize::from(size))),
        );
        (
            Just(size),
            Just(event_idx),
            prop::collection::vec(batch, 1..12),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::proptest_cases(256)))]

    /// The used ring, the index and the interrupt decision after each
    /// batch are what virtio-queue's own add_used + needs_notification
    /// give (the NO_INTERRUPT flag aside, which only we read).
    #[test]
    fn matches_virtio_queue((size, event_idx, seq) in batches()) {
        let mut ours = Side::new(size, event_idx);
        let mut theirs = Side::new(size, event_idx);
        // A start that wraps the 16-bit index soon.
        let start = u16::MAX - 3;
        for side in [&mut ours, &mut theirs] {
            side.queue.set_next_used(start);
            side.mem.write_obj(start.to_le(), GuestAddress(side.used + 2)).unwrap();
        }
        for (used_event, flags, used) in seq {
            ours.driver_wishes(used_event, flags);
            theirs.driver_wishes(used_event, flags);
            let notify = add_used_batch(&ours.mem, &mut ours.queue, 0, &used).unwrap();
            for &(head, len) in &used {
                theirs.queue.add_used(&theirs.mem, head, len).unwrap();
            }
            let expected = theirs.queue.needs_notification(&theirs.mem).unwrap();
            prop_assert_eq!(ours.used_ring(), theirs.used_ring());
            prop_assert_eq!(ours.queue.next_used(), theirs.queue.next_used());
            if event_idx {
                prop_assert_eq!(notify, expected);
            } else {
                prop_assert_eq!(notify, flags & NO_INTERRUPT == 0);
            }
        }
    }
}

#[test]
fn an_empty_batch_changes_nothing_and_asks_for_nothing_with_event_idx() {
    let mut s = Side::new(8, true);
    s.driver_wishes(0, 0);
    let before = s.used_ring();
    assert!(!add_used_batch(&s.mem, &mut s.queue, 0, &[]).unwrap());
    assert_eq!(s.used_ring(), before);
}
