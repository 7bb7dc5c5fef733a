//! A guest that keeps the request queue busy, or corrupts it, cannot hold
//! the device in one notification: the work per call is bounded and what
//! is left is served by the next call, with no new kick.

use std::sync::Arc;

use crate::testing::{
    activate_busy, count_warnings, warning_budget, BusyGuest, GuestDriver, TestMem, MEM_SIZE,
};
use crate::{DeviceConfig, Drained, VirtioIommu};
use vm_memory::{GuestAddress, GuestMemoryMmap};

const QSIZE: u16 = 64;

fn busy_device(batching: bool, rounds: u64) -> (VirtioIommu<TestMem>, Arc<BusyGuest<TestMem>>) {
    let mem: TestMem =
        Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap());
    let mut dev = VirtioIommu::new(DeviceConfig {
        batching,
        ..Default::default()
    })
    .unwrap();
    let driver = GuestDriver::new(&*mem, 0, QSIZE, 0x10_0000);
    let guest = Arc::new(BusyGuest::new(mem.clone(), driver, 1, rounds));
    activate_busy(&mut dev, mem, &guest, true);
    (dev, guest)
}

#[test]
fn a_notification_serves_at_most_a_queue_size_of_requests() {
    for batching in [true, false] {
        let (mut dev, guest) = busy_device(batching, 500);
        guest.start(1);
        let first = dev.process_request_queue().unwrap();
        let served = dev.counters().requests.total();
        assert!(
            served <= u64::from(QSIZE),
            "batching {batching}: {served} requests in one notification"
        );
        assert_eq!(first, Drained::More, "batching {batching}");
        assert!(guest.posted() > served, "the guest kept posting");
        // No kick from the guest: the caller comes back because of `More`.
        let mut calls = 1;
        while dev.process_request_queue().unwrap() == Drained::More {
            calls += 1;
            assert!(calls < 1000, "the drain never ends");
        }
        assert!(calls > 2, "batching {batching}: {calls} calls");
        // Every request the guest posted was served.
        let (avail, used) = guest.with_driver(|d, m| (d.avail_idx(), d.used_idx(m)));
        assert_eq!(avail, used, "batching {batching}");
        assert_eq!(dev.counters().requests.total(), guest.posted());
        assert_eq!(dev.counters().failed_requests, 0);
    }
}

#[test]
fn config_writes_and_bad_features_log_within_the_rate_limit() {
    let (mut dev, _guest) = busy_device(true, 0);
    let start = std::time::Instant::now();
    let n = count_warnings(|| {
        for i in 0..10_000u64 {
            dev.write_config(i % 40, &[1]);
            dev.write_config(36, &[7]);
            dev.set_acked_features(u64::MAX);
        }
    });
    assert!(
        n <= warning_budget(start.elapsed().as_secs()),
        "{n} warnings for 30000 bad writes"
    );
}

#[test]
fn a_corrupt_avail_index_at_every_kick_logs_within_the_rate_limit() {
    let (mut dev, guest) = busy_device(true, 0);
    // More than a queue size ahead of the device.
    guest.with_driver(|d, m| d.set_avail_idx(m, QSIZE + 5));
    let start = std::time::Instant::now();
    let n = count_warnings(|| {
        for _ in 0..10_000 {
            assert_eq!(dev.process_request_queue().unwrap(), Drained::Empty);
        }
    });
    assert!(
        n <= warning_budget(start.elapsed().as_secs()),
        "{n} warnings"
    );
    assert_eq!(dev.counters().requests.total(), 0);
}
