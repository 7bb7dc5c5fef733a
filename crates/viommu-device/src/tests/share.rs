//! A drain's share: a caller bounded by [`DrainShare`] takes at most its
//! requests and bytes, never an ATTACH, DETACH or IOTLB_FLUSH, and leaves
//! the rest, in order, to the next drain.

use std::time::Duration;

use super::*;

const SHARE: DrainShare = DrainShare {
    requests: 8,
    bytes: 16 * PAGE,
    request_bytes: 4 * PAGE,
    time: Duration::from_secs(60),
};

fn share_drain(h: &mut Harness) -> (Drained, usize) {
    let d = h
        .dev
        .process_request_queue_share(Notifications::On, SHARE)
        .unwrap();
    (d, h.reqq.poll(&*h.mem).len())
}

#[test]
fn a_share_stops_at_its_requests_bytes_and_domain_requests() {
    let mut h = harness();
    // ATTACH: never on a share; the full drain serves it.
    h.queue(&[req::attach(1, 1, 0)]);
    assert_eq!(share_drain(&mut h), (Drained::More, 0));
    assert_eq!(h.kick().len(), 1);
    // 20 one-page MAPs: 8 requests a share at most.
    let maps: Vec<_> = (0..20).map(|i| map(1, i * 2 * PAGE, 1)).collect();
    h.queue(&maps);
    assert_eq!(share_drain(&mut h), (Drained::More, 8));
    // Bytes: two 4-page MAPs and a 5-page one (over the request bound).
    h.kick();
    h.queue(&[
        map(1, 0x100 * PAGE, 4),
        map(1, 0x200 * PAGE, 4),
        map(1, 0x300 * PAGE, 4),
        map(1, 0x400 * PAGE, 4),
        map(1, 0x500 * PAGE, 4),
    ]);
    assert_eq!(share_drain(&mut h), (Drained::More, 4), "16 pages");
    h.kick();
    h.queue(&[map(1, 0x600 * PAGE, 5), map(1, 0x700 * PAGE, 1)]);
    assert_eq!(share_drain(&mut h), (Drained::More, 0), "left whole");
    // The full drain takes what the share left, in queue order.
    let rest = h.kick();
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|u| u.status == OK));
    assert_eq!(host(&h, 0).len(), 20 + 5 + 2);
    // An empty queue: the share ends it as a full drain would.
    assert_eq!(share_drain(&mut h), (Drained::Empty, 0));
}
