//! What the device did: one set of counters, updated once where each thing
//! happens (the request path counts requests and batches, the fan-out to
//! the mappers counts host calls), rendered by the VMM as Prometheus text.

use dma_mapper::DmaStats;
use viommu_counters::counters;

counters! {
    /// Requests seen, by type.
    pub struct RequestCounts {
        /// ATTACH requests.
        pub attach: u64,
        /// DETACH requests.
        pub detach: u64,
        /// MAP requests.
        pub map: u64,
        /// UNMAP requests.
        pub unmap: u64,
        /// PROBE requests.
        pub probe: u64,
        /// FLUSH requests (ours).
        pub flush: u64,
        /// Requests of unknown type or unparsable chains.
        pub malformed: u64,
    }
}

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.attach + self.detach + self.map + self.unmap + self.probe + self.flush + self.malformed
    }
}

/// Number of buckets of [`Counters::batch_sizes`].
pub const BATCH_BUCKETS: usize = 9;

counters! {
    /// What the device did, for the metrics endpoint and benchmarks.
    pub struct Counters {
        /// Requests by type.
        pub requests: RequestCounts => family "type",
        /// Requests that completed with a status other than OK.
        pub failed_requests: u64,
        /// Batches completed (one used-ring update each).
        pub batches: u64,
        /// Batches by size: bucket i counts batches of 2^i to 2^(i+1)-1
        /// requests (the last bucket is open-ended).
        pub batch_sizes: [u64; BATCH_BUCKETS] => family "size_log2",
        /// Host DMA calls made for the guest (every mapper of a domain counts).
        pub backend: DmaStats => nested,
        /// MAPs cancelled by an UNMAP of the same batch (no host call).
        pub elided_maps: u64,
        /// Interrupts raised (both queues).
        pub interrupts: u64,
        /// Fault events written to the event queue.
        pub events_reported: u64,
        /// Fault events dropped for lack of room.
        pub events_dropped: u64,
        /// UNMAP requests whose host unmap was deferred (lazy-unmap contract).
        pub deferred_unmaps: u64,
        /// Flushes of deferred unmaps: every valid FLUSH request, and each
        /// DETACH, ATTACH or reset that found deferred unmaps to remove.
        pub flushes: u64,
        /// Host unmap calls made by those flushes (every mapper counts).
        pub flush_backend_calls: u64,
        /// Deferred mappings those flushes removed from the host; divided by
        /// the flush host calls (one mapper) it is the average merged run.
        pub merged_ranges: u64,
        /// Deferred mappings a MAP forced off the host before its FLUSH.
        pub forced_unmaps: u64,
        /// Nanoseconds spent serving request-queue notifications (draining,
        /// host calls, completion): the time the notifying thread was held
        /// in the device. Against wall time it is how busy the one
        /// serialised virtio-iommu path is.
        pub busy_ns: u64,
    }
}

impl Counters {
    /// Host calls of both kinds.
    pub fn backend_calls(&self) -> u64 {
        self.backend.calls()
    }

    /// Deferred mappings removed per flush host call (0 without flush calls).
    pub fn average_merged_run(&self) -> f64 {
        if self.flush_backend_calls == 0 {
            0.0
        } else {
            self.merged_ranges as f64 / self.flush_backend_calls as f64
        }
    }

    pub(crate) fn add_batch(&mut self, size: usize) {
        if size == 0 {
            return;
        }
        self.batches += 1;
        let bucket = (usize::BITS - 1 - size.leading_zeros()) as usize;
        self.batch_sizes[bucket.min(BATCH_BUCKETS - 1)] += 1;
    }
}
