//! Device micro-benchmark of the lazy-unmap contract
//! (docs/lazy-unmap-contract.md) against the strict device.
//!
//! A guest with a flush queue (Linux `iommu.strict=0`): every notification
//! carries `[UNMAP old, MAP new]` (the UNMAP of a completed I/O rides along
//! with the next MAP's sync), and an IOVA is reused only after the flush
//! queue has been flushed (`IOVA_FQ_SIZE` = 256 unmaps). Three devices see
//! this stream:
//! - `strict-sync`: a stock strict guest (one request per notification), for
//!   reference;
//! - `fq-strict`: the flush-queue stream, our contract not negotiated (every
//!   UNMAP is unmapped on the host at once, as with stock QEMU);
//! - `fq-lazy`: the same stream with `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` and a
//!   lazy domain: the device defers its UNMAPs, and the guest's
//!   `flush_iotlb_all` adds one IOTLB_FLUSH to the notification that fills
//!   the queue.
//!
//! The host backend is the in-memory VFIO-like fake, so backend calls per
//! 1000 requests (and per I/O) are what a real VFIO backend would pay in
//! ioctls; they are exact. req/s is noisy on a shared machine.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use device_microbench::{bench_timed, play};
use viommu_device::testing::workload::{kicks, Pattern};
use viommu_device::testing::{req, FakeMapper, Harness, DATA_BASE};
use viommu_device::{
    DeviceConfig, VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH, VIRTIO_IOMMU_F_MAP_UNMAP, VIRTIO_IOMMU_F_PROBE,
};

const KIB: u64 = 1024;
const SIZES: [u64; 3] = [4 * KIB, 64 * KIB, 128 * KIB];
const IOS: usize = 1024;
const DEPTH: usize = 32;
/// Linux's IOVA_FQ_SIZE: unmaps queued before a flush.
const FQ_SIZE: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    StrictSync,
    FqStrict,
    FqLazy,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::StrictSync, Mode::FqStrict, Mode::FqLazy];
    fn name(self) -> &'static str {
        match self {
            Mode::StrictSync => "strict-sync",
            Mode::FqStrict => "fq-strict",
            Mode::FqLazy => "fq-lazy",
        }
    }
}

/// The flush-queue stream: top-down IOVAs, freed ones reused most
/// recently freed first, but only once the flush queue was flushed.
fn fq_kicks(io_size: u64, lazy: bool) -> Vec<Vec<Vec<u8>>> {
    let d = 1;
    let mut cursor = 0xfee0_0000u64;
    let mut free: Vec<u64> = Vec::new();
    let mut fq: Vec<u64> = Vec::new();
    let slots = (DEPTH * 2) as u64;
    // In a lazy domain the device defers every UNMAP until IOTLB_FLUSH.
    let unmap = |iova: u64| req::unmap(d, iova, iova + io_size - 1);
    let mut out = Vec::new();
    let mut inflight = std::collections::VecDeque::new();
    let flush_if_full =
        |kick: &mut Vec<Vec<u8>>, fq: &mut Vec<u64>, free: &mut Vec<u64>, all: bool| {
            if fq.len() >= FQ_SIZE || (all && !fq.is_empty()) {
                if lazy {
                    kick.push(req::iotlb_flush(d));
                }
                free.append(fq);
            }
        };
    for n in 0..IOS {
        let mut kick = Vec::new();
        if inflight.len() == DEPTH {
            let old = inflight.pop_front().unwrap_or_default();
            kick.push(unmap(old));
            fq.push(old);
            flush_if_full(&mut kick, &mut fq, &mut free, false);
        }
        let iova = free.pop().unwrap_or_else(|| {
            cursor -= io_size;
            cursor
        });
        let phys = DATA_BASE + (n as u64 % slots) * io_size;
        kick.push(req::map(d, iova, iova + io_size - 1, phys, req::RW));
        inflight.push_back(iova);
        out.push(kick);
    }
    let mut last: Vec<Vec<u8>> = Vec::new();
    for old in inflight.drain(..) {
        last.push(unmap(old));
        fq.push(old);
    }
    flush_if_full(&mut last, &mut fq, &mut free, true);
    out.push(last);
    out
}

fn harness(lazy: bool) -> Harness {
    let mut h = Harness::with_mappers(DeviceConfig::default(), &[1], 256, FakeMapper::counting);
    // VERSION_1, MAP_UNMAP, PROBE (+ LAZY_IOTLB_FLUSH); no EVENT_IDX.
    let mut f = (1 << 32) | (1 << VIRTIO_IOMMU_F_MAP_UNMAP) | (1 << VIRTIO_IOMMU_F_PROBE);
    if lazy {
        f |= 1 << VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH;
    }
    h.restart(f);
    let mode = if lazy { req::LAZY } else { 0 };
    assert_eq!(h.statuses(&[req::attach(1, 1, mode)]), vec![Some(0)]);
    h
}

struct Row {
    name: String,
    requests: u64,
    rps: f64,
    calls_per_k: f64,
    calls_per_io: f64,
    map_calls: u64,
    unmap_calls: u64,
    flushes: u64,
    avg_run: f64,
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("lazy-unmap");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    for size in SIZES {
        for mode in Mode::ALL {
            let workload = match mode {
                Mode::StrictSync => kicks(Pattern::StrictSync, size, DEPTH, IOS, 1),
                Mode::FqStrict => fq_kicks(size, false),
                Mode::FqLazy => fq_kicks(size, true),
            };
            let requests: u64 = workload.iter().map(|k| k.len() as u64).sum();
            let mut h = harness(mode == Mode::FqLazy);
            let before = h.dev.counters();
            assert_eq!(play(&mut h, &workload), requests);
            let after = h.dev.counters();
            assert_eq!(h.dev.pending_unmaps(1), Some(Vec::new()), "all flushed");
            let calls = after.backend_calls() - before.backend_calls();
            let flush_calls = after.flush_backend_calls - before.flush_backend_calls;
            let merged = after.merged_ranges - before.merged_ranges;
            group.throughput(Throughput::Elements(requests));
            let (iters, time) = bench_timed(
                &mut group,
                BenchmarkId::new(format!("{}KiB", size / KIB), mode.name()),
                || {
                    play(&mut h, &workload);
                },
            );
            rows.push(Row {
                name: format!("{} {}KiB", mode.name(), size / KIB),
                requests,
                rps: (iters * requests) as f64 / time.as_secs_f64().max(1e-9),
                calls_per_k: calls as f64 * 1000.0 / requests as f64,
                calls_per_io: calls as f64 / IOS as f64,
                map_calls: after.backend.map_calls - before.backend.map_calls,
                unmap_calls: after.backend.unmap_calls - before.backend.unmap_calls,
                flushes: after.flushes - before.flushes,
                avg_run: if flush_calls == 0 {
                    0.0
                } else {
                    merged as f64 / flush_calls as f64
                },
            });
        }
    }
    group.finish();
    c.final_summary();
    println!();
    println!(
        "lazy unmap: {IOS} I/Os, {DEPTH} in flight, flush queue of {FQ_SIZE}, fake VFIO-like backend"
    );
    println!(
        "{:<20} {:>6} | {:>10} | {:>9} {:>9} | {:>6} {:>6} | {:>7} {:>8}",
        "workload", "reqs", "req/s", "calls/1k", "calls/io", "maps", "unmaps", "flushes", "avg run"
    );
    for r in &rows {
        println!(
            "{:<20} {:>6} | {:>10.0} | {:>9.1} {:>9.3} | {:>6} {:>6} | {:>7} {:>8.1}",
            r.name,
            r.requests,
            r.rps,
            r.calls_per_k,
            r.calls_per_io,
            r.map_calls,
            r.unmap_calls,
            r.flushes,
            r.avg_run
        );
    }
    for size in SIZES {
        let find = |m: Mode| {
            rows.iter()
                .find(|r| r.name == format!("{} {}KiB", m.name(), size / KIB))
                .map(|r| r.calls_per_k)
                .unwrap_or(f64::NAN)
        };
        println!(
            "{}KiB: backend calls per 1000 requests, fq-lazy / fq-strict = {:.3}, fq-lazy / strict-sync = {:.3}",
            size / KIB,
            find(Mode::FqLazy) / find(Mode::FqStrict),
            find(Mode::FqLazy) / find(Mode::StrictSync)
        );
    }
}
