//! Device micro-benchmark: batching on vs off on realistic request streams.
//!
//! Each benchmark plays a whole workload (256 I/Os, 32 in flight, ending
//! with every I/O unmapped, so it can be replayed) through a device in guest
//! memory. The host backend is an in-memory fake that behaves like VFIO type1
//! (no overlap, whole-mapping unmaps) and costs next to nothing, so
//! requests/s measures the device's own overhead; backend calls per 1000
//! requests is what a real VFIO backend would pay for in ioctls.
//!
//! The driver does not negotiate EVENT_IDX, so it asks for an interrupt at
//! every completion: batching off then raises one per request (like crosvm),
//! batching on one per notification.
//!
//! After criterion's own output, a table gives, from this same run, for each
//! workload: requests/s and backend calls per 1000 requests with batching on
//! and off, and the on/off ratios.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use device_microbench::{bench_timed, play};
use viommu_device::testing::workload::{kicks, Pattern};
use viommu_device::testing::{req, FakeMapper, Harness};
use viommu_device::{DeviceConfig, VIRTIO_IOMMU_F_MAP_UNMAP, VIRTIO_IOMMU_F_PROBE};

const KIB: u64 = 1024;
const SIZES: [u64; 4] = [4 * KIB, 16 * KIB, 64 * KIB, 128 * KIB];
const IOS: usize = 256;
const DEPTH: usize = 32;

struct Row {
    name: String,
    requests: u64,
    /// (requests/s, backend calls per 1000 requests, interrupts per 1000 requests)
    on: (f64, f64, f64),
    off: (f64, f64, f64),
}

fn harness(batching: bool) -> Harness {
    let mut h = Harness::with_mappers(
        DeviceConfig {
            batching,
            ..Default::default()
        },
        &[1],
        256,
        FakeMapper::counting,
    );
    // VERSION_1, MAP_UNMAP, PROBE; no EVENT_IDX.
    h.restart((1 << 32) | (1 << VIRTIO_IOMMU_F_MAP_UNMAP) | (1 << VIRTIO_IOMMU_F_PROBE));
    let st = h.statuses(&[req::attach(1, 1, 0)]);
    assert_eq!(st, vec![Some(0)]);
    h
}

fn measure(c: &mut Criterion) -> Vec<Row> {
    let mut rows = Vec::new();
    for pattern in Pattern::ALL {
        let mut group = c.benchmark_group(pattern.name());
        group
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20);
        for size in SIZES {
            let workload = kicks(pattern, size, DEPTH, IOS, 1);
            let requests: u64 = workload.iter().map(|k| k.len() as u64).sum();
            group.throughput(Throughput::Elements(requests));
            let mut results = [(0.0, 0.0, 0.0); 2];
            for (slot, batching) in [(0usize, true), (1, false)] {
                let mut h = harness(batching);
                // Counts from one replay (deterministic).
                let before = h.dev.counters();
                let done = play(&mut h, &workload);
                let after = h.dev.counters();
                assert_eq!(done, requests);
                let calls = (after.backend_calls() - before.backend_calls()) as f64;
                let irqs = (after.interrupts - before.interrupts) as f64;
                // Timing: criterion's samples, summed.
                let id = BenchmarkId::new(
                    format!("{}KiB", size / KIB),
                    if batching {
                        "batching-on"
                    } else {
                        "batching-off"
                    },
                );
                let (iters, time) = bench_timed(&mut group, id, || {
                    play(&mut h, &workload);
                });
                let rps = (iters * requests) as f64 / time.as_secs_f64().max(1e-9);
                let per_k = 1000.0 / requests as f64;
                results[slot] = (rps, calls * per_k, irqs * per_k);
            }
            rows.push(Row {
                name: format!("{} {}KiB", pattern.name(), size / KIB),
                requests,
                on: results[0],
                off: results[1],
            });
        }
        group.finish();
    }
    rows
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rows = measure(&mut c);
    c.final_summary();
    println!();
    println!(
        "device batching: {IOS} I/Os, {DEPTH} in flight, fake VFIO-like backend; \
         calls and irqs per 1000 requests"
    );
    println!(
        "{:<24} {:>6} | {:>12} {:>8} {:>8} | {:>12} {:>8} {:>8} | {:>8} {:>8}",
        "workload",
        "reqs",
        "on req/s",
        "calls",
        "irqs",
        "off req/s",
        "calls",
        "irqs",
        "req/s x",
        "calls x"
    );
    for r in &rows {
        println!(
            "{:<24} {:>6} | {:>12.0} {:>8.1} {:>8.1} | {:>12.0} {:>8.1} {:>8.1} | {:>8.2} {:>8.3}",
            r.name,
            r.requests,
            r.on.0,
            r.on.1,
            r.on.2,
            r.off.0,
            r.off.1,
            r.off.2,
            r.on.0 / r.off.0,
            r.on.1 / r.off.1,
        );
    }
    println!("req/s x = on/off throughput ratio; calls x = on/off backend calls ratio (lower is fewer calls)");
}
