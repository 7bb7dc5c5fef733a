use super::*;
use vm_memory::GuestMemoryMmap;

const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const REQS: u64 = 0x3000;
const SIZE: u16 = 8;

fn rings() -> RingAddrs {
    RingAddrs {
        desc: GuestAddress(DESC),
        avail: GuestAddress(AVAIL),
        size: SIZE,
    }
}

/// Guest memory with request `types[i]` in descriptor `i`, published
/// in avail slot `i`.
fn memory(types: &[u8]) -> GuestMemoryMmap {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
    for (i, &t) in types.iter().enumerate() {
        let i = i as u64;
        let req = REQS + 0x40 * i;
        mem.write_obj(req.to_le(), GuestAddress(DESC + 16 * i))
            .unwrap();
        mem.write_obj(20u32.to_le(), GuestAddress(DESC + 16 * i + 8))
            .unwrap();
        mem.write_obj(1u16.to_le(), GuestAddress(DESC + 16 * i + 12))
            .unwrap();
        mem.write_obj(t, GuestAddress(req)).unwrap();
        mem.write_obj((i as u16).to_le(), GuestAddress(AVAIL + 4 + 2 * i))
            .unwrap();
    }
    mem
}

#[test]
fn counts_the_untaken_requests_by_type() {
    let mem = memory(&[3, 4, 4, 0x80, 1, 4]);
    // The device took slots 0 and 1; the driver published up to 6.
    let p = peek(&mem, rings(), 2, 6);
    assert_eq!(
        p,
        PendingTypes {
            unmap: 2,
            flush: 1,
            other: 1,
            map: 0,
            unreadable: 0,
            not_read: 0
        }
    );
    // Only UNMAPs: the lazy guest's queue.
    let p = peek(&mem, rings(), 1, 3);
    assert_eq!((p.unmap, p.map + p.flush + p.other), (2, 0));
    // Nothing published beyond the device.
    assert_eq!(peek(&mem, rings(), 6, 6), PendingTypes::default());
}

#[test]
fn indices_wrap_and_hostile_rings_are_bounded() {
    let mem = memory(&[3, 3, 3, 3, 3, 3, 3, 3]);
    // Free-running indices across the 16-bit wrap: slots 7 and 0.
    let p = peek(&mem, rings(), u16::MAX, 1);
    assert_eq!(p.map, 2);
    // A driver index a whole index space ahead: no more than a queue.
    let p = peek(&mem, rings(), 0, 60000);
    assert_eq!(p.map, SIZE);
    // A head index out of the table, an indirect descriptor and a
    // request address outside guest memory are unreadable.
    mem.write_obj(9u16.to_le(), GuestAddress(AVAIL + 4))
        .unwrap();
    mem.write_obj(5u16.to_le(), GuestAddress(DESC + 16 + 12))
        .unwrap();
    mem.write_obj(0xffff_0000u64.to_le(), GuestAddress(DESC + 32))
        .unwrap();
    let p = peek(&mem, rings(), 0, 3);
    assert_eq!((p.unreadable, p.map), (3, 0));
    // Not set up.
    let none = RingAddrs { size: 0, ..rings() };
    assert_eq!(peek(&mem, none, 0, 3), PendingTypes::default());
}

#[test]
fn looks_at_no_more_than_the_bound() {
    let mem = memory(&[]);
    let big = RingAddrs {
        size: 256,
        ..rings()
    };
    let p = peek(&mem, big, 0, 200);
    assert_eq!(p.not_read, 200 - PEEK_MAX);
    // Zeroed memory: every head is descriptor 0 with length 0.
    assert_eq!(p.unreadable, PEEK_MAX);
}
