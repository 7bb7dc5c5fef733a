//! Benchmarks of the virtio-iommu device (see `benches/`).
//!
//! `cargo bench -p device-microbench --bench device_batching` plays the Linux
//! 6.1 driver's request patterns (strict sync, seed 003's flush queue,
//! deferred unmap bursts) at 4-128 KiB I/O sizes through the device in guest
//! memory, with batching on and off, and prints requests/s, backend calls
//! and interrupts per 1000 requests for both, and their ratios.

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};
use viommu_device::testing::Harness;
use viommu_device::Drained;

/// Plays a workload (the request chains of each kick) through the device
/// once and returns the requests completed; every one must succeed.
pub fn play(h: &mut Harness, workload: &[Vec<Vec<u8>>]) -> u64 {
    let mut n = 0;
    for kick in workload {
        h.queue(kick);
        while h.dev.process_request_queue().expect("request queue") == Drained::More {}
        let used = h.reqq.poll(&*h.mem);
        assert!(used.iter().all(|u| u.status == Some(0)));
        n += used.len() as u64;
    }
    n
}

/// Benchmarks `play` under `id` and returns what criterion measured in all
/// (iterations, time), so a bench can print its own requests/s beside the
/// exact call counts it took from the device.
pub fn bench_timed(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    mut play: impl FnMut(),
) -> (u64, Duration) {
    let mut spent = (0u64, Duration::ZERO);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                play();
            }
            let d = start.elapsed();
            spent.0 += iters;
            spent.1 += d;
            d
        })
    });
    spent
}
