//! Request streams shaped like the Linux 6.1 virtio-iommu driver's.

use std::collections::BTreeMap;

use super::{req, DATA_BASE};

/// How the guest driver sends its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Stock 6.1 (strict): every MAP and every UNMAP is sent and waited
    /// for on its own: one request per notification.
    StrictSync,
    /// Seed 003's single flush queue on 6.1: MAPs are synced
    /// (`iotlb_sync_map`), UNMAPs only queued, so each notification
    /// carries `[UNMAP old, MAP new]`.
    FlushQueue,
    /// Deferred unmaps flushed together: a burst of MAPs (one per I/O
    /// of a plugged batch) in one notification, then one notification
    /// with all their UNMAPs (`flush_iotlb_all`).
    DeferredBursts,
}

impl Pattern {
    /// All patterns.
    pub const ALL: [Pattern; 3] = [
        Pattern::StrictSync,
        Pattern::FlushQueue,
        Pattern::DeferredBursts,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::StrictSync => "strict-sync",
            Pattern::FlushQueue => "flush-queue",
            Pattern::DeferredBursts => "deferred-bursts",
        }
    }
}

/// Linux's IOVA allocator, roughly: top-down, freed ranges reused most
/// recently freed first (the per-size rcache).
#[derive(Debug)]
pub struct IovaAllocator {
    cursor: u64,
    free: BTreeMap<u64, Vec<u64>>,
}

impl IovaAllocator {
    /// Allocates downwards from `top` (exclusive).
    pub fn new(top: u64) -> Self {
        IovaAllocator {
            cursor: top,
            free: BTreeMap::new(),
        }
    }

    /// A range of `size` bytes (a multiple of 4 KiB).
    pub fn alloc(&mut self, size: u64) -> u64 {
        if let Some(iova) = self.free.get_mut(&size).and_then(|v| v.pop()) {
            return iova;
        }
        self.cursor -= size;
        self.cursor
    }

    /// Returns a range.
    pub fn free(&mut self, iova: u64, size: u64) {
        self.free.entry(size).or_default().push(iova);
    }
}

/// A stream of notifications, each a list of requests, for `ios` I/Os
/// of `io_size` bytes with `depth` I/Os in flight, on `domain`.
///
/// Ends with every I/O unmapped (the domain is empty again).
pub fn kicks(
    pattern: Pattern,
    io_size: u64,
    depth: usize,
    ios: usize,
    domain: u32,
) -> Vec<Vec<Vec<u8>>> {
    let depth = depth.max(1);
    // Below the x86 MSI window, like a 32-bit-first DMA allocator.
    let mut alloc = IovaAllocator::new(0xfee0_0000);
    // Physical buffers: a ring of `depth * 2` slots in guest RAM.
    let slots = (depth * 2) as u64;
    let phys = |n: usize| DATA_BASE + (n as u64 % slots) * io_size;
    let map = |iova: u64, n: usize| req::map(domain, iova, iova + io_size - 1, phys(n), req::RW);
    let unmap = |iova: u64| req::unmap(domain, iova, iova + io_size - 1);
    let mut out: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut inflight: std::collections::VecDeque<u64> = Default::default();
    match pattern {
        Pattern::StrictSync | Pattern::FlushQueue => {
            for n in 0..ios {
                let mut kick = Vec::new();
                if inflight.len() == depth {
                    let old = inflight.pop_front().unwrap_or_default();
                    if pattern == Pattern::StrictSync {
                        out.push(vec![unmap(old)]);
                    } else {
                        kick.push(unmap(old));
                    }
                    alloc.free(old, io_size);
                }
                let iova = alloc.alloc(io_size);
                kick.push(map(iova, n));
                inflight.push_back(iova);
                out.push(kick);
            }
            // Drain.
            let rest: Vec<Vec<u8>> = inflight.drain(..).map(unmap).collect();
            if pattern == Pattern::StrictSync {
                out.extend(rest.into_iter().map(|r| vec![r]));
            } else if !rest.is_empty() {
                out.push(rest);
            }
        }
        Pattern::DeferredBursts => {
            let mut n = 0;
            while n < ios {
                let burst = depth.min(ios - n);
                let iovas: Vec<u64> = (0..burst).map(|_| alloc.alloc(io_size)).collect();
                out.push(
                    iovas
                        .iter()
                        .enumerate()
                        .map(|(k, &i)| map(i, n + k))
                        .collect(),
                );
                out.push(iovas.iter().map(|&i| unmap(i)).collect());
                for i in iovas {
                    alloc.free(i, io_size);
                }
                n += burst;
            }
        }
    }
    out
}
