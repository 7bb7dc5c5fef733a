//! The request queue's mechanics: malformed descriptor chains, one used
//! update and one interrupt per batch, EVENT_IDX and NO_INTERRUPT, and an
//! avail index that runs ahead of the ring.

use super::*;

#[test]
fn malformed_chains() {
    let mut h = harness();
    let mem = h.mem.clone();
    let buf = 0x300_0000u64;
    let w = VRING_DESC_F_WRITE as u16;
    // Unknown type: returned unwritten with length 0.
    let mut unknown = req::attach(1, 1, 0);
    unknown[0] = 9;
    h.reqq.push(&*mem, &unknown, 4).unwrap();
    let u = h.kick();
    assert_eq!((u[0].len, u[0].status), (0, None));

    let attach = req::attach(1, 1, 0);
    // Short and overlong readable parts.
    h.reqq.push(&*mem, &attach[..19], 4).unwrap();
    let mut long = attach.clone();
    long.push(0);
    h.reqq.push(&*mem, &long, 4).unwrap();
    h.reqq.push(&*mem, &attach[..2], 4).unwrap(); // not even a head
                                                  // Writable part longer than a tail.
    h.reqq.push(&*mem, &attach, 8).unwrap();
    let st: Vec<_> = h.kick().iter().map(|u| u.status).collect();
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_IOERR); 4]);

    mem.write_slice(&attach, GuestAddress(buf)).unwrap();
    type Chain = Vec<(u64, u32, u16)>;
    let cases: Vec<(Chain, &str)> = vec![
        (
            vec![(buf, 20, 0), (buf + 0x100, 2, w)],
            "writable too short for a tail",
        ),
        (vec![(buf, 20, 0)], "no writable part"),
        (
            vec![(buf + 0x100, 4, w), (buf, 20, 0)],
            "readable after writable",
        ),
        (
            vec![(MEM_SIZE - 8, 20, 0), (buf + 0x100, 4, w)],
            "readable outside memory",
        ),
        (
            vec![(buf, 20, 0), (MEM_SIZE, 4, w)],
            "writable outside memory",
        ),
        (vec![(buf, 20, 0), (u64::MAX - 2, 4, w)], "writable wraps"),
        (
            // 16 readable pieces of the ATTACH plus the tail: 17 descriptors.
            (0..16u64)
                .map(|i| (buf + i, if i < 15 { 1 } else { 5 }, 0))
                .chain([(buf + 0x100, 4, w)])
                .collect(),
            "more than 16 descriptors",
        ),
        (
            // An indirect table (never offered) holding a valid request.
            vec![(buf + 0x200, 32, 4)],
            "indirect descriptor",
        ),
    ];
    // The table the indirect descriptor points to: ATTACH + tail.
    let table: Vec<u8> = [(buf, 20u32, 1u16, 1u16), (buf + 0x100, 4, 2, 0)]
        .iter()
        .flat_map(|&(a, l, f, n)| {
            let mut d = a.to_le_bytes().to_vec();
            d.extend(l.to_le_bytes());
            d.extend(f.to_le_bytes());
            d.extend(n.to_le_bytes());
            d
        })
        .collect();
    mem.write_slice(&table, GuestAddress(buf + 0x200)).unwrap();
    for (descs, what) in cases {
        mem.write_slice(&[0xa5; 4], GuestAddress(buf + 0x100))
            .unwrap();
        h.reqq.push_raw(&*mem, &descs).unwrap();
        let u = h.kick();
        assert_eq!(u.len(), 1, "{what}");
        assert_eq!(u[0].len, 0, "{what}");
        let mut t = [0u8; 4];
        mem.read_slice(&mut t, GuestAddress(buf + 0x100)).unwrap();
        assert_eq!(t, [0xa5; 4], "{what}: buffer untouched");
    }
    // A request split over several descriptors is fine.
    let split = vec![
        (buf, 7, 0),
        (buf + 7, 13, 0),
        (buf + 0x100, 2, w),
        (buf + 0x102, 2, w),
    ];
    mem.write_slice(&[0xa5; 4], GuestAddress(buf + 0x100))
        .unwrap();
    h.reqq.push_raw(&*mem, &split).unwrap();
    let u = h.kick();
    assert_eq!(u[0].len, 4);
    let mut t = [0xa5u8; 4];
    mem.read_slice(&mut t, GuestAddress(buf + 0x100)).unwrap();
    assert_eq!(t, [VIRTIO_IOMMU_S_OK, 0, 0, 0]);
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
    assert_eq!(h.dev.counters().requests.malformed, 13);
}

#[test]
fn one_used_update_and_one_interrupt_per_batch() {
    let mut h = harness();
    let mut reqs = vec![req::attach(1, 1, 0)];
    reqs.extend((0..20).map(|i| map(1, 0x10000 + i * PAGE, 1)));
    let u = h.send(&reqs);
    assert_eq!(u.len(), 21);
    assert!(u.iter().all(|u| u.status == OK));
    assert_eq!(h.irq.get(0), 1);
    let c = h.dev.counters();
    assert_eq!(c.batches, 1);
    assert_eq!(c.batch_sizes[4], 1, "21 requests: bucket 16..=31");
    assert_eq!(c.requests.map, 20);
    assert_eq!(c.requests.attach, 1);
    assert_eq!(c.backend.map_calls, 20);
    assert_eq!(c.backend.bytes_mapped, 20 * PAGE);
    assert_eq!(c.interrupts, 1);

    // Batching off: one completion and one interrupt per request (without
    // EVENT_IDX, so that the driver asks for every interrupt).
    let mut h = Harness::new(
        DeviceConfig {
            batching: false,
            ..Default::default()
        },
        &[1],
        64,
    );
    reactivate(&mut h, 1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    h.send(&reqs);
    assert_eq!(h.irq.get(0), 21);
    assert_eq!(h.dev.counters().batches, 21);
    assert_eq!(h.dev.counters().batch_sizes[0], 21);
}

#[test]
fn event_idx_and_no_interrupt_are_honoured() {
    let mut h = harness();
    // EVENT_IDX acked (Harness acks all): used_event far ahead, no interrupt.
    h.reqq.set_used_event(&*h.mem, 100);
    h.send(&[req::attach(1, 1, 0), map(1, 0x1000, 1)]);
    assert_eq!(h.irq.get(0), 0);
    // used_event = 2 lies in [2, 4): interrupt.
    h.reqq.set_used_event(&*h.mem, 2);
    h.send(&[map(1, 0x2000, 1), map(1, 0x3000, 1)]);
    assert_eq!(h.irq.get(0), 1);

    // Without EVENT_IDX, the avail flag suppresses interrupts.
    let mut h = harness();
    h.dev.reset();
    let mut h2 = Harness::new(DeviceConfig::default(), &[1], 64);
    reactivate(&mut h2, 1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    h2.reqq
        .set_avail_flags(&*h2.mem, VRING_AVAIL_F_NO_INTERRUPT as u16);
    h2.send(&[req::attach(1, 1, 0)]);
    assert_eq!(h2.irq.get(0), 0);
    h2.reqq.set_avail_flags(&*h2.mem, 0);
    h2.send(&[req::detach(1, 1)]);
    assert_eq!(h2.irq.get(0), 1);
    assert!(matches!(
        h.dev.process_request_queue(),
        Err(Error::NotActivated)
    ));
}

#[test]
fn corrupt_avail_index_does_not_hang() {
    for batching in [true, false] {
        let mut h = batching_harness(batching);
        h.send(&[req::attach(1, 1, 0)]);
        // More than a queue size ahead of what the device consumed.
        h.reqq.set_avail_idx(&*h.mem, 1 + 64 + 5);
        assert_eq!(h.dev.process_request_queue().unwrap(), Drained::Empty);
        h.reqq.set_avail_idx(&*h.mem, 0);
        assert_eq!(h.dev.process_request_queue().unwrap(), Drained::Empty);
    }
}
