//! A virtio-iommu device model (OASIS virtio, "IOMMU device") that turns
//! bursts of guest requests into few host DMA mapping calls.
//!
//! The device runs on [`virtio_queue::Queue`] over any
//! [`vm_memory::GuestAddressSpace`]; it knows nothing of KVM or VFIO. Host
//! DMA translations are programmed through [`dma_mapper::DmaMapper`]s, one
//! per endpoint (several endpoints may share one), and interrupts go out
//! through [`IommuInterrupt`]. See [`VirtioIommu`] for the lifecycle a
//! transport drives.
//!
//! Requests drained from one notification are executed as one batch by
//! [`viommu_planner`] (ATTACH, DETACH and PROBE are barriers) and completed
//! with a single used-ring index update and at most one interrupt. With
//! [`DeviceConfig::batching`] off, every request is executed and completed
//! on its own, like the stock devices.
//!
//! # Guest input
//!
//! Every chain is validated before anything is executed; nothing a guest
//! writes can make the device panic (see the `requests` fuzz target).
//! - Unanswerable chains (no room for a tail, a readable descriptor after a
//!   writable one, a descriptor outside guest memory) and unknown request
//!   types are returned with used length 0 and nothing written.
//! - A readable part of the wrong size, or a writable part that is not
//!   exactly a tail (PROBE: exactly `probe_size` bytes of properties and a
//!   tail), gets `S_IOERR`; a PROBE area smaller than `probe_size` `S_INVAL`.
//! - MAP: unknown flag (MMIO without `F_MMIO`) `S_INVAL`; `virt_end <=
//!   virt_start` `S_INVAL`; outside `input_range`, unaligned to the
//!   granule, overlapping a RESV_MEM region, or a physical range that is not
//!   guest RAM (non-MMIO) `S_RANGE`; over an existing mapping `S_INVAL`;
//!   over the per-domain limit `S_NOMEM`.
//! - UNMAP: splitting a mapping `S_RANGE` (nothing removed); mappings fully
//!   inside are removed, holes are fine.
//! - Any: unknown domain `S_NOENT`, domain outside `domain_range`
//!   `S_RANGE`, bypass domain `S_INVAL`, MAP/UNMAP without `F_MAP_UNMAP`
//!   `S_UNSUPP`; unknown endpoint `S_NOENT`; a new domain past
//!   [`DeviceConfig::max_domains`] `S_NOMEM`; a failing host call `S_DEVERR`
//!   (with the state matching what the host really holds).
//!
//! # The lazy unmap and pool hints (ours)
//!
//! `docs/lazy-unmap-contract.md` is the contract. With
//! `VIRTIO_IOMMU_F_LAZY_UNMAP` negotiated, an UNMAP with
//! `VIRTIO_IOMMU_UNMAP_F_DEFERRED` completes at once in the domain's table
//! while its host mappings stay until the domain's FLUSH request (or a
//! forcing event: a MAP over them, DETACH, an ATTACH that adds a mapper to
//! the domain, device reset), which removes them with one host call per run
//! of adjacent whole mappings. Other UNMAP flag bits get `S_INVAL`; FLUSH of
//! an unknown domain `S_NOENT`, outside `domain_range` `S_RANGE`, nonzero
//! reserved bytes `S_INVAL`, a host failure `S_DEVERR` (the failed mappings
//! stay pending); FLUSH without the feature `S_UNSUPP`. With
//! `VIRTIO_IOMMU_F_POOL_HINT` negotiated, PROBE adds a POOL_HINT property.
//!
//! # What the VMM provides
//!
//! - One [`DmaMapper`] per endpoint. Endpoints sharing one (one VFIO
//!   container) must end up in the same domain: an ATTACH that would put
//!   them in two gets `S_UNSUPP`.
//! - Bypass: the device tracks which endpoints are in bypass mode
//!   ([`VirtioIommu::endpoint_state`]: unattached with config `bypass` = 1,
//!   or attached to a bypass domain) but does not program identity mappings
//!   on the host; a VMM that lets the guest use bypass must map guest RAM
//!   1:1 in those endpoints' address spaces itself.

#![deny(missing_docs)]

mod chain;
mod request;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lazy;
#[cfg(test)]
mod tests_linux;
#[cfg(test)]
mod tests_smp;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use dma_mapper::{DmaMapper, DmaPerm};
use tracing::{debug, error, trace, warn};
use viommu_planner::{
    flush_deferred, replay_all, run_batch, unmap_all, CallStats, MapperSet, Mapping, MappingTable,
    Outcome, PlanOptions, Reject,
};
use viommu_wire as wire;
use viommu_wire::status::*;
use virtio_queue::{Queue, QueueT};
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemory, Permissions};

use crate::chain::{read_chain, write_at, RawRequest};
use crate::request::{parse, Parsed, Req};

pub use viommu_wire::features::*;

/// The x86 MSI doorbell window (0xfee00000-0xfeefffff), the default
/// [`DeviceConfig::msi_window`].
pub const X86_MSI_WINDOW: (u64, u64) = (0xfee0_0000, 0xfeef_ffff);

/// Raises the interrupt of a virtqueue (an irqfd, an MSI-X vector, ...).
pub trait IommuInterrupt: Send + Sync {
    /// Signal the driver that queue `queue` has used buffers.
    fn trigger(&self, queue: u16) -> std::io::Result<()>;
}

/// Errors of the device model (guest mistakes are statuses, not errors).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint id is registered already.
    #[error("endpoint {0} is already registered")]
    DuplicateEndpoint(u32),
    /// A mapper cannot map at the device's page granularity.
    #[error("endpoint mapper granule {mapper:#x} is coarser than the device's {device:#x}")]
    Granule {
        /// Smallest page size of the mapper.
        mapper: u64,
        /// Smallest page size of the device.
        device: u64,
    },
    /// `activate` got the wrong number of queues.
    #[error("expected 2 queues, got {0}")]
    QueueCount(usize),
    /// A queue does not fit guest memory or is not ready.
    #[error("queue {0} is not valid")]
    InvalidQueue(u16),
    /// The device is not activated.
    #[error("the device is not activated")]
    NotActivated,
    /// Updating a queue's notification state failed.
    #[error("failed to update queue {queue}")]
    Queue {
        /// Queue index.
        queue: u16,
        /// What virtio-queue said.
        #[source]
        source: virtio_queue::Error,
    },
    /// Writing the used ring failed.
    #[error("failed to write the used ring of queue {queue}")]
    UsedRing {
        /// Queue index.
        queue: u16,
        /// What guest memory said.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// The configuration is inconsistent.
    #[error("invalid device configuration: {0}")]
    Config(&'static str),
}

/// Device parameters chosen by the VMM.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// `page_size_mask`; its lowest set bit is the mapping granularity.
    pub page_size_mask: u64,
    /// IOVA range the device translates, inclusive.
    pub input_range: (u64, u64),
    /// Valid domain ids, inclusive.
    pub domain_range: (u32, u32),
    /// Minimum `probe_size` (raised if the properties need more room).
    pub probe_size: u32,
    /// Initial (and system-reset) value of the `bypass` config field.
    pub bypass: bool,
    /// The MSI doorbell window reported as RESV_MEM MSI, inclusive; `None`
    /// on platforms without one.
    pub msi_window: Option<(u64, u64)>,
    /// More reserved IOVA ranges reported as RESV_MEM RESERVED, inclusive.
    pub reserved: Vec<(u64, u64)>,
    /// Most domains that may exist at once.
    pub max_domains: usize,
    /// Most mappings one domain may hold.
    pub max_mappings_per_domain: usize,
    /// Drain and execute the request queue as batches (true), or one
    /// request at a time with one completion and interrupt each (false).
    pub batching: bool,
    /// Offer `VIRTIO_IOMMU_F_MMIO` (MAP requests with the MMIO flag are then
    /// passed to the mappers without the guest-RAM check).
    pub offer_mmio: bool,
    /// Fault reports kept while the event queue has no buffer.
    pub max_pending_events: usize,
    /// Offer `VIRTIO_IOMMU_F_LAZY_UNMAP` (deferrable UNMAPs and FLUSH).
    pub lazy_unmap: bool,
    /// Offer `VIRTIO_IOMMU_F_POOL_HINT` with these values (`None`: not offered).
    pub pool_hint: Option<PoolHint>,
}

/// The values of the POOL_HINT PROBE property (docs/lazy-unmap-contract.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolHint {
    /// DMA of up to this many bytes is best bounced through a pool buffer.
    pub threshold: u32,
    /// First IOVA of the window suggested for pool buffers.
    pub window_start: u64,
    /// Size of that window in bytes.
    pub window_size: u64,
    /// Suggested most bytes of pool buffers per domain.
    pub pool_max: u64,
}

impl Default for PoolHint {
    fn default() -> Self {
        PoolHint {
            threshold: 64 * 1024,
            window_start: 0x1_0000_0000,
            window_size: 1 << 30,
            pool_max: 64 << 20,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            page_size_mask: !0xfff,
            input_range: (0, (1 << 48) - 1),
            domain_range: (0, u32::from(u16::MAX)),
            probe_size: 512,
            bypass: false,
            msi_window: Some(X86_MSI_WINDOW),
            reserved: Vec::new(),
            max_domains: 1024,
            max_mappings_per_domain: 1 << 16,
            batching: true,
            offer_mmio: false,
            max_pending_events: 64,
            lazy_unmap: true,
            pool_hint: Some(PoolHint::default()),
        }
    }
}

/// Requests seen, by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.attach + self.detach + self.map + self.unmap + self.probe + self.flush + self.malformed
    }
}

/// Number of buckets of [`Counters::batch_sizes`].
pub const BATCH_BUCKETS: usize = 9;

/// What the device did, for the metrics endpoint and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests by type.
    pub requests: RequestCounts,
    /// Requests that completed with a status other than OK.
    pub failed_requests: u64,
    /// Batches completed (one used-ring update each).
    pub batches: u64,
    /// Batch size histogram: bucket `i` counts batches of `2^i ..= 2^(i+1)-1`
    /// requests (the last bucket is open-ended).
    pub batch_sizes: [u64; BATCH_BUCKETS],
    /// Host `map` calls (every mapper counts).
    pub backend_map_calls: u64,
    /// Host `unmap` calls (every mapper counts).
    pub backend_unmap_calls: u64,
    /// Host calls that failed.
    pub backend_failures: u64,
    /// Bytes mapped on the host.
    pub bytes_mapped: u64,
    /// Bytes unmapped on the host.
    pub bytes_unmapped: u64,
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
    /// `flush_backend_calls` (one mapper) it is the average merged run.
    pub merged_ranges: u64,
    /// Deferred mappings a MAP forced off the host before its FLUSH.
    pub forced_unmaps: u64,
}

impl Counters {
    /// Host calls of both kinds.
    pub fn backend_calls(&self) -> u64 {
        self.backend_map_calls + self.backend_unmap_calls
    }

    /// Deferred mappings removed per flush host call (0 without flush calls).
    pub fn average_merged_run(&self) -> f64 {
        if self.flush_backend_calls == 0 {
            0.0
        } else {
            self.merged_ranges as f64 / self.flush_backend_calls as f64
        }
    }

    fn add_calls(&mut self, s: &CallStats) {
        self.backend_map_calls += s.map_calls;
        self.backend_unmap_calls += s.unmap_calls;
        self.backend_failures += s.failed_calls;
        self.bytes_mapped += s.bytes_mapped;
        self.bytes_unmapped += s.bytes_unmapped;
    }

    fn add_batch(&mut self, size: usize) {
        if size == 0 {
            return;
        }
        self.batches += 1;
        let bucket = (usize::BITS - 1 - size.leading_zeros()) as usize;
        self.batch_sizes[bucket.min(BATCH_BUCKETS - 1)] += 1;
    }
}

/// Where an endpoint's DMA goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointState {
    /// Not attached; `bypass` says whether its DMA is identity-mapped
    /// (config `bypass` = 1) or blocked.
    Unattached {
        /// The config field `bypass`.
        bypass: bool,
    },
    /// Attached to a bypass domain (identity-mapped).
    Bypass(u32),
    /// Attached to a translating domain.
    Translated(u32),
}

/// A fault to report to the driver on the event queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultReport {
    /// `VIRTIO_IOMMU_FAULT_R_*`.
    pub reason: u8,
    /// `VIRTIO_IOMMU_FAULT_F_*`.
    pub flags: u32,
    /// Faulting endpoint.
    pub endpoint: u32,
    /// Faulting address (set `VIRTIO_IOMMU_FAULT_F_ADDRESS` in `flags`).
    pub address: u64,
}

struct Endpoint {
    mapper: Arc<dyn DmaMapper>,
    domain: Option<u32>,
}

struct Domain {
    bypass: bool,
    endpoints: BTreeSet<u32>,
    /// Distinct mappers of the endpoints (each programmed once per call).
    mappers: Vec<Arc<dyn DmaMapper>>,
    table: MappingTable,
}

struct Active<S> {
    mem: S,
    requestq: Queue,
    eventq: Queue,
    interrupt: Arc<dyn IommuInterrupt>,
}

/// One request of a drained batch.
struct Item {
    raw: Option<RawRequest>,
    head: u16,
    reply: Reply,
}

enum Reply {
    /// Not decided yet (a MAP/UNMAP waiting for its segment).
    Pending,
    /// Return the buffer with used length 0.
    Drop,
    /// Write this status into the tail.
    Status(u8),
    /// PROBE: write these properties, then an OK tail.
    Probe(Vec<u8>),
}

/// A virtio-iommu device.
///
/// # Lifecycle (driven by the transport, e.g. virtio-pci)
///
/// 1. [`VirtioIommu::new`], then [`VirtioIommu::add_endpoint`] for every
///    endpoint behind this IOMMU (with the [`DmaMapper`] that programs its
///    host translations; endpoints sharing a VFIO container share a mapper).
/// 2. Feature negotiation: [`device_features`](Self::device_features),
///    [`set_acked_features`](Self::set_acked_features). Config space:
///    [`read_config`](Self::read_config) / [`write_config`](Self::write_config)
///    at any time.
/// 3. On DRIVER_OK: [`activate`](Self::activate) with guest memory, the two
///    queues (request, event) and the interrupt.
/// 4. On a notification of queue 0: [`process_request_queue`](Self::process_request_queue);
///    of queue 1: [`process_event_queue`](Self::process_event_queue).
///    [`report_fault`](Self::report_fault) queues a fault event at any time.
/// 5. On a device reset: [`reset`](Self::reset). Endpoints stay registered,
///    every domain is destroyed (host mappings removed), the queues are
///    dropped, `bypass` keeps its value.
///
/// [`counters`](Self::counters) can be read at any time.
pub struct VirtioIommu<S: GuestAddressSpace> {
    cfg: DeviceConfig,
    granule: u64,
    probe_size: u32,
    bypass: bool,
    acked: u64,
    endpoints: BTreeMap<u32, Endpoint>,
    domains: BTreeMap<u32, Domain>,
    active: Option<Active<S>>,
    events: VecDeque<FaultReport>,
    counters: Counters,
}

impl<S: GuestAddressSpace> VirtioIommu<S> {
    /// A device with these parameters and no endpoint.
    pub fn new(cfg: DeviceConfig) -> Result<Self, Error> {
        if cfg.page_size_mask == 0 {
            return Err(Error::Config("page_size_mask is empty"));
        }
        if cfg.input_range.0 > cfg.input_range.1 || cfg.domain_range.0 > cfg.domain_range.1 {
            return Err(Error::Config("empty input or domain range"));
        }
        if cfg.input_range.1 == u64::MAX {
            return Err(Error::Config(
                "input_range must end below 2^64 - 1 (host ranges are start + size)",
            ));
        }
        let granule = 1u64 << cfg.page_size_mask.trailing_zeros();
        if let Some(h) = cfg.pool_hint {
            check_pool_hint(&cfg, &h, granule)?;
        }
        let props = request::properties(&cfg, true);
        let probe_size = cfg.probe_size.max(
            u32::try_from(props.len()).map_err(|_| Error::Config("too many reserved regions"))?,
        );
        Ok(VirtioIommu {
            granule,
            probe_size,
            bypass: cfg.bypass,
            cfg,
            acked: 0,
            endpoints: BTreeMap::new(),
            domains: BTreeMap::new(),
            active: None,
            events: VecDeque::new(),
            counters: Counters::default(),
        })
    }

    /// Registers an endpoint and the mapper of its host translations.
    pub fn add_endpoint(&mut self, id: u32, mapper: Arc<dyn DmaMapper>) -> Result<(), Error> {
        if self.endpoints.contains_key(&id) {
            return Err(Error::DuplicateEndpoint(id));
        }
        let mask = mapper.page_size_mask();
        let mapper_granule = if mask == 0 {
            0
        } else {
            1u64 << mask.trailing_zeros()
        };
        if mapper_granule == 0 || mapper_granule > self.granule {
            return Err(Error::Granule {
                mapper: mapper_granule,
                device: self.granule,
            });
        }
        self.endpoints.insert(
            id,
            Endpoint {
                mapper,
                domain: None,
            },
        );
        Ok(())
    }

    /// Where an endpoint's DMA goes, or `None` for an unknown endpoint.
    pub fn endpoint_state(&self, id: u32) -> Option<EndpointState> {
        let ep = self.endpoints.get(&id)?;
        Some(match ep.domain {
            None => EndpointState::Unattached {
                bypass: self.bypass,
            },
            Some(d) if self.domains.get(&d).is_some_and(|d| d.bypass) => EndpointState::Bypass(d),
            Some(d) => EndpointState::Translated(d),
        })
    }

    /// The mappings of a domain, in IOVA order (for tests and debugging).
    pub fn domain_mappings(&self, domain: u32) -> Option<Vec<Mapping>> {
        Some(self.domains.get(&domain)?.table.iter().copied().collect())
    }

    /// The deferred unmaps of a domain still on the host, in IOVA order.
    pub fn pending_unmaps(&self, domain: u32) -> Option<Vec<Mapping>> {
        Some(
            self.domains
                .get(&domain)?
                .table
                .deferred()
                .copied()
                .collect(),
        )
    }

    /// Features offered to the driver.
    pub fn device_features(&self) -> u64 {
        use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
        use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
        let mut f = (1u64 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VIRTIO_IOMMU_F_INPUT_RANGE)
            | (1 << VIRTIO_IOMMU_F_DOMAIN_RANGE)
            | (1 << VIRTIO_IOMMU_F_MAP_UNMAP)
            | (1 << VIRTIO_IOMMU_F_PROBE)
            | (1 << VIRTIO_IOMMU_F_BYPASS_CONFIG);
        if self.cfg.offer_mmio {
            f |= 1 << VIRTIO_IOMMU_F_MMIO;
        }
        if self.cfg.lazy_unmap {
            f |= 1 << VIRTIO_IOMMU_F_LAZY_UNMAP;
        }
        if self.cfg.pool_hint.is_some() {
            f |= 1 << VIRTIO_IOMMU_F_POOL_HINT;
        }
        f
    }

    /// Records the features the driver accepted (bits not offered are ignored).
    pub fn set_acked_features(&mut self, features: u64) {
        let unknown = features & !self.device_features();
        if unknown != 0 {
            warn!(
                unknown = format_args!("{unknown:#x}"),
                "driver acked features not offered"
            );
        }
        self.acked = features & self.device_features();
    }

    /// The features negotiated so far.
    pub fn acked_features(&self) -> u64 {
        self.acked
    }

    fn acked(&self, bit: u32) -> bool {
        self.acked & (1u64 << bit) != 0
    }

    fn config(&self) -> wire::Config {
        wire::Config {
            page_size_mask: self.cfg.page_size_mask.into(),
            input_range: wire::Range64 {
                start: self.cfg.input_range.0.into(),
                end: self.cfg.input_range.1.into(),
            },
            domain_range: wire::Range32 {
                start: self.cfg.domain_range.0.into(),
                end: self.cfg.domain_range.1.into(),
            },
            probe_size: self.probe_size.into(),
            bypass: u8::from(self.bypass),
            reserved: [0; 3],
        }
    }

    /// Reads config space at `offset`; bytes past the end read as zero.
    pub fn read_config(&self, offset: u64, data: &mut [u8]) {
        let cfg = self.config();
        let bytes = cfg.as_slice();
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| bytes.get(o).copied())
                .unwrap_or(0);
        }
    }

    /// Writes config space. Only `bypass` is writable, and only once
    /// `VIRTIO_IOMMU_F_BYPASS_CONFIG` is negotiated; anything else is ignored.
    pub fn write_config(&mut self, offset: u64, data: &[u8]) {
        if offset != wire::CONFIG_BYPASS_OFFSET || data.len() != 1 {
            warn!(
                offset,
                len = data.len(),
                "driver wrote a read-only config field"
            );
            return;
        }
        if !self.acked(VIRTIO_IOMMU_F_BYPASS_CONFIG) {
            warn!("driver wrote bypass without negotiating BYPASS_CONFIG");
            return;
        }
        // Spec: "The driver MUST NOT write a value different than 0 or 1 to bypass".
        match data[0] {
            0 | 1 => self.bypass = data[0] == 1,
            v => warn!(value = v, "driver wrote an invalid bypass value; ignored"),
        }
    }

    /// Hands over guest memory, queues `[request, event]` and the interrupt.
    pub fn activate(
        &mut self,
        mem: S,
        queues: Vec<Queue>,
        interrupt: Arc<dyn IommuInterrupt>,
    ) -> Result<(), Error> {
        let [mut requestq, mut eventq]: [Queue; 2] = queues
            .try_into()
            .map_err(|q: Vec<Queue>| Error::QueueCount(q.len()))?;
        let event_idx = self.acked(virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX);
        {
            let m = mem.memory();
            for (i, q) in [&mut requestq, &mut eventq].into_iter().enumerate() {
                if !q.is_valid(&*m) {
                    return Err(Error::InvalidQueue(i as u16));
                }
                q.set_event_idx(event_idx);
            }
        }
        self.active = Some(Active {
            mem,
            requestq,
            eventq,
            interrupt,
        });
        Ok(())
    }

    /// Whether [`activate`](Self::activate) has been called since the last reset.
    pub fn is_activated(&self) -> bool {
        self.active.is_some()
    }

    /// Device reset: drops queues and memory, destroys every domain (host
    /// mappings removed), forgets negotiated features and pending events.
    /// Endpoints stay registered; `bypass` keeps its value (spec: it SHOULD
    /// NOT change on device reset).
    pub fn reset(&mut self) {
        self.active = None;
        self.acked = 0;
        self.events.clear();
        let domains = std::mem::take(&mut self.domains);
        for (id, mut d) in domains {
            if Self::flush_domain(&mut self.counters, id, &mut d) != VIRTIO_IOMMU_S_OK {
                error!(domain = id, "failed to remove deferred unmaps on reset");
            }
            let mut backend = MapperSet::new(&d.mappers);
            if let Err(e) = unmap_all(&d.table, &mut backend) {
                error!(domain = id, error = %e, "failed to remove host mappings on reset");
            }
            self.counters.add_calls(&backend.stats);
        }
        for ep in self.endpoints.values_mut() {
            ep.domain = None;
        }
    }

    /// Restores `bypass` to its initial value (system reset).
    pub fn system_reset(&mut self) {
        self.reset();
        self.bypass = self.cfg.bypass;
    }

    /// Counters since creation.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Handles a notification of the request queue: drains it (repeatedly,
    /// until no new request arrives while notifications are re-enabled),
    /// executes and completes the requests.
    pub fn process_request_queue(&mut self) -> Result<(), Error> {
        let Some(mut active) = self.active.take() else {
            return Err(Error::NotActivated);
        };
        let r = self.drain_requests(&mut active);
        self.active = Some(active);
        r
    }

    fn drain_requests(&mut self, active: &mut Active<S>) -> Result<(), Error> {
        let mem = active.mem.memory();
        let q = wire::REQUEST_QUEUE;
        loop {
            active
                .requestq
                .disable_notification(&*mem)
                .map_err(|source| Error::Queue { queue: q, source })?;
            let mut items = Vec::new();
            let mut progress_unbatched = false;
            while let Some(chain) = active.requestq.pop_descriptor_chain(&*mem) {
                let item = match read_chain(chain) {
                    Ok(raw) => Item {
                        head: raw.head,
                        raw: Some(raw),
                        reply: Reply::Pending,
                    },
                    Err((head, e)) => {
                        debug!(head, error = ?e, "unanswerable request chain");
                        Item {
                            head,
                            raw: None,
                            reply: Reply::Drop,
                        }
                    }
                };
                items.push(item);
                if !self.cfg.batching {
                    self.execute(&*mem, &mut items, PlanOptions::ONE_BY_ONE);
                    self.complete(&*mem, &mut active.requestq, &*active.interrupt, q, &items)?;
                    items.clear();
                    progress_unbatched = true;
                }
            }
            if !items.is_empty() {
                self.execute(&*mem, &mut items, PlanOptions::BATCHED);
                self.complete(&*mem, &mut active.requestq, &*active.interrupt, q, &items)?;
            }
            let popped = !items.is_empty() || progress_unbatched;
            let more = active
                .requestq
                .enable_notification(&*mem)
                .map_err(|source| Error::Queue { queue: q, source })?;
            if !more {
                return Ok(());
            }
            if !popped {
                // The avail index says there is more, but nothing could be
                // popped: a corrupt index (e.g. more than a queue size ahead).
                // Stop instead of spinning; the next notification retries.
                warn!(
                    "request queue avail index is inconsistent; waiting for the next notification"
                );
                return Ok(());
            }
        }
    }

    /// Executes a batch: MAP/UNMAP runs go to the planner, the other
    /// requests are barriers executed in place.
    fn execute<M: GuestMemory + ?Sized>(&mut self, mem: &M, items: &mut [Item], opts: PlanOptions) {
        // (item index, domain, request) of the MAP/UNMAP since the last barrier.
        let mut segment: Vec<(usize, u32, viommu_planner::Request)> = Vec::new();
        for i in 0..items.len() {
            let Some(raw) = items[i].raw.as_ref() else {
                self.counters.requests.malformed += 1;
                continue;
            };
            let parsed = parse(raw, self.probe_size, self.acked(VIRTIO_IOMMU_F_LAZY_UNMAP));
            let reply = match parsed {
                Parsed::Drop => {
                    self.counters.requests.malformed += 1;
                    Reply::Drop
                }
                Parsed::Status(s) => {
                    self.counters.requests.malformed += 1;
                    Reply::Status(s)
                }
                Parsed::Req(req) => match req {
                    Req::Map(m) => {
                        self.counters.requests.map += 1;
                        match self.check_map(mem, &m) {
                            Ok((domain, r)) => {
                                segment.push((i, domain, r));
                                Reply::Pending
                            }
                            Err(s) => Reply::Status(s),
                        }
                    }
                    Req::Unmap(u) => {
                        self.counters.requests.unmap += 1;
                        match self.check_unmap(&u) {
                            Ok((domain, r)) => {
                                segment.push((i, domain, r));
                                Reply::Pending
                            }
                            Err(s) => Reply::Status(s),
                        }
                    }
                    barrier => {
                        self.run_segment(items, &mut segment, opts);
                        match barrier {
                            Req::Attach(a) => {
                                self.counters.requests.attach += 1;
                                Reply::Status(self.attach(&a))
                            }
                            Req::Detach(d) => {
                                self.counters.requests.detach += 1;
                                Reply::Status(self.detach(&d))
                            }
                            Req::Probe { endpoint } => {
                                self.counters.requests.probe += 1;
                                if self.endpoints.contains_key(&endpoint) {
                                    Reply::Probe(request::properties(
                                        &self.cfg,
                                        self.acked(VIRTIO_IOMMU_F_POOL_HINT),
                                    ))
                                } else {
                                    Reply::Status(VIRTIO_IOMMU_S_NOENT)
                                }
                            }
                            Req::Flush(f) => {
                                self.counters.requests.flush += 1;
                                Reply::Status(self.flush(&f))
                            }
                            Req::Map(_) | Req::Unmap(_) => unreachable!("handled above"),
                        }
                    }
                },
            };
            items[i].reply = reply;
        }
        self.run_segment(items, &mut segment, opts);
    }

    /// Runs the pending MAP/UNMAP requests, domain by domain (requests of
    /// different domains are independent; order within a domain is kept).
    fn run_segment(
        &mut self,
        items: &mut [Item],
        segment: &mut Vec<(usize, u32, viommu_planner::Request)>,
        opts: PlanOptions,
    ) {
        if segment.is_empty() {
            return;
        }
        let mut order: Vec<u32> = Vec::new();
        for &(_, d, _) in segment.iter() {
            if !order.contains(&d) {
                order.push(d);
            }
        }
        for d in order {
            let (idx, reqs): (Vec<usize>, Vec<viommu_planner::Request>) = segment
                .iter()
                .filter(|(_, dom, _)| *dom == d)
                .map(|&(i, _, r)| (i, r))
                .unzip();
            let Some(domain) = self.domains.get_mut(&d) else {
                // Cannot happen: domains only change at barriers.
                for i in idx {
                    items[i].reply = Reply::Status(VIRTIO_IOMMU_S_NOENT);
                }
                continue;
            };
            let mut backend = MapperSet::new(&domain.mappers);
            let report = run_batch(&mut domain.table, &reqs, opts, &mut backend);
            self.counters.add_calls(&backend.stats);
            self.counters.elided_maps += report.elided_maps.len() as u64;
            self.counters.deferred_unmaps += report.deferred.len() as u64;
            self.counters.forced_unmaps += report.forced_unmaps as u64;
            for (k, outcome) in report.outcomes.iter().enumerate() {
                let status = match outcome {
                    Outcome::Ok => VIRTIO_IOMMU_S_OK,
                    // Spec, MAP: "If a mapping already exists in the requested
                    // range, the device SHOULD reject the request and set status
                    // to VIRTIO_IOMMU_S_INVAL."
                    Outcome::Rejected(Reject::Overlap) => VIRTIO_IOMMU_S_INVAL,
                    // Spec, UNMAP: "If a mapping affected by the range is not
                    // covered in its entirety by the range (the UNMAP request
                    // would split the mapping), then the device SHOULD set the
                    // request status to VIRTIO_IOMMU_S_RANGE, and SHOULD NOT
                    // remove any mapping."
                    Outcome::Rejected(Reject::Split) => VIRTIO_IOMMU_S_RANGE,
                    Outcome::Rejected(Reject::Limit) => VIRTIO_IOMMU_S_NOMEM,
                    Outcome::HostFailed(f) => {
                        warn!(domain = d, failure = ?f, "host DMA call failed");
                        VIRTIO_IOMMU_S_DEVERR
                    }
                };
                if let Some(&i) = idx.get(k) {
                    items[i].reply = Reply::Status(status);
                }
            }
        }
        segment.clear();
    }

    fn check_domain(&self, domain: u32) -> Result<&Domain, u8> {
        if domain < self.cfg.domain_range.0 || domain > self.cfg.domain_range.1 {
            return Err(VIRTIO_IOMMU_S_RANGE);
        }
        let d = self.domains.get(&domain).ok_or(VIRTIO_IOMMU_S_NOENT)?;
        if d.bypass {
            // Spec, MAP/UNMAP: "If the domain is a bypass domain, the device
            // SHOULD reject the request and set status to VIRTIO_IOMMU_S_INVAL."
            return Err(VIRTIO_IOMMU_S_INVAL);
        }
        Ok(d)
    }

    fn overlaps_reserved(&self, first: u64, last: u64) -> bool {
        self.cfg
            .msi_window
            .iter()
            .chain(self.cfg.reserved.iter())
            .any(|&(s, e)| s <= last && first <= e)
    }

    /// Wire-level checks of a MAP (everything that does not depend on the
    /// earlier requests of the batch).
    fn check_map<M: GuestMemory + ?Sized>(
        &self,
        mem: &M,
        m: &wire::MapReq,
    ) -> Result<(u32, viommu_planner::Request), u8> {
        if !self.acked(VIRTIO_IOMMU_F_MAP_UNMAP) {
            return Err(VIRTIO_IOMMU_S_UNSUPP);
        }
        let (domain, start, end, phys, flags) = (
            m.domain.to_native(),
            m.virt_start.to_native(),
            m.virt_end.to_native(),
            m.phys_start.to_native(),
            m.flags.to_native(),
        );
        let mut known = wire::VIRTIO_IOMMU_MAP_F_READ | wire::VIRTIO_IOMMU_MAP_F_WRITE;
        if self.acked(VIRTIO_IOMMU_F_MMIO) {
            known |= wire::VIRTIO_IOMMU_MAP_F_MMIO;
        }
        // Spec, MAP: "If the device doesn't recognize a flags bit, it MUST
        // reject the request and set status to VIRTIO_IOMMU_S_INVAL." (MMIO is
        // only recognised once VIRTIO_IOMMU_F_MMIO is negotiated.)
        if flags & !known != 0 {
            return Err(VIRTIO_IOMMU_S_INVAL);
        }
        self.check_domain(domain)?;
        // Driver: "virt_end MUST be strictly greater than virt_start."
        if end <= start {
            return Err(VIRTIO_IOMMU_S_INVAL);
        }
        if start < self.cfg.input_range.0 || end > self.cfg.input_range.1 {
            return Err(VIRTIO_IOMMU_S_RANGE);
        }
        // end < input_range.1 < u64::MAX, so neither overflows.
        let size = end - start + 1;
        let g = self.granule - 1;
        // Spec, MAP: "If virt_start, phys_start or (virt_end + 1) is not
        // aligned on the page granularity, the device SHOULD reject the
        // request and set status to VIRTIO_IOMMU_S_RANGE."
        if start & g != 0 || phys & g != 0 || (end + 1) & g != 0 {
            return Err(VIRTIO_IOMMU_S_RANGE);
        }
        // Spec, RESV_MEM: "The device SHOULD reject a MAP request that
        // overlaps a RESV_MEM region."
        if self.overlaps_reserved(start, end) {
            return Err(VIRTIO_IOMMU_S_RANGE);
        }
        let perm = DmaPerm {
            read: flags & wire::VIRTIO_IOMMU_MAP_F_READ != 0,
            write: flags & wire::VIRTIO_IOMMU_MAP_F_WRITE != 0,
        };
        let mapping = Mapping::new(start, size, phys, perm).ok_or(VIRTIO_IOMMU_S_RANGE)?;
        if flags & wire::VIRTIO_IOMMU_MAP_F_MMIO == 0 {
            // The physical range must be guest RAM (the spec leaves the
            // status open; RANGE is "out-of-range parameters").
            let in_ram = usize::try_from(size)
                .is_ok_and(|n| mem.check_range(GuestAddress(phys), n, Permissions::ReadWrite));
            if !in_ram {
                return Err(VIRTIO_IOMMU_S_RANGE);
            }
        }
        Ok((domain, viommu_planner::Request::Map(mapping)))
    }

    fn check_unmap(&self, u: &wire::UnmapReq) -> Result<(u32, viommu_planner::Request), u8> {
        if !self.acked(VIRTIO_IOMMU_F_MAP_UNMAP) {
            return Err(VIRTIO_IOMMU_S_UNSUPP);
        }
        let (domain, start, end, flags) = (
            u.domain.to_native(),
            u.virt_start.to_native(),
            u.virt_end.to_native(),
            u.flags.to_native(),
        );
        // Without LAZY_UNMAP the flags are the spec's `reserved`, ignored
        // (the spec only says the device MAY reject it). With it, contract:
        // "the device MUST reject an UNMAP with an unknown flag with S_INVAL".
        let deferred = if self.acked(VIRTIO_IOMMU_F_LAZY_UNMAP) {
            if flags & !wire::VIRTIO_IOMMU_UNMAP_F_DEFERRED != 0 {
                return Err(VIRTIO_IOMMU_S_INVAL);
            }
            flags & wire::VIRTIO_IOMMU_UNMAP_F_DEFERRED != 0
        } else {
            false
        };
        self.check_domain(domain)?;
        if end < start {
            return Err(VIRTIO_IOMMU_S_INVAL);
        }
        let (first, last) = (start, end);
        Ok((
            domain,
            if deferred {
                viommu_planner::Request::UnmapDeferred { first, last }
            } else {
                viommu_planner::Request::Unmap { first, last }
            },
        ))
    }

    /// FLUSH (ours): removes the domain's deferred unmaps from the host.
    fn flush(&mut self, f: &wire::FlushReq) -> u8 {
        let domain = f.domain.to_native();
        // Contract: "the device MUST reject a FLUSH whose reserved bytes are
        // not zero with S_INVAL".
        if f.reserved != [0; 4] {
            return VIRTIO_IOMMU_S_INVAL;
        }
        if domain < self.cfg.domain_range.0 || domain > self.cfg.domain_range.1 {
            return VIRTIO_IOMMU_S_RANGE;
        }
        let Some(d) = self.domains.get_mut(&domain) else {
            return VIRTIO_IOMMU_S_NOENT;
        };
        if d.table.deferred_len() == 0 {
            // Counted as a flush even with nothing to do.
            self.counters.flushes += 1;
        }
        Self::flush_domain(&mut self.counters, domain, d)
    }

    /// Removes every deferred unmap of `d` from the host (FLUSH request or
    /// a forcing event). `S_DEVERR` if some stay (still pending).
    fn flush_domain(counters: &mut Counters, id: u32, d: &mut Domain) -> u8 {
        if d.table.deferred_len() == 0 {
            return VIRTIO_IOMMU_S_OK;
        }
        counters.flushes += 1;
        let mut backend = MapperSet::new(&d.mappers);
        let r = flush_deferred(&mut d.table, &mut backend);
        counters.add_calls(&backend.stats);
        counters.flush_backend_calls += backend.stats.unmap_calls;
        counters.merged_ranges += r.removed as u64;
        debug!(
            domain = id,
            calls = r.calls,
            removed = r.removed,
            failed = r.failed,
            "deferred unmaps flushed"
        );
        match r.error {
            None => VIRTIO_IOMMU_S_OK,
            Some(e) => {
                warn!(domain = id, failed = r.failed, error = %e, "flushing deferred unmaps failed");
                VIRTIO_IOMMU_S_DEVERR
            }
        }
    }

    fn attach(&mut self, a: &wire::AttachReq) -> u8 {
        let (domain, endpoint, flags) = (
            a.domain.to_native(),
            a.endpoint.to_native(),
            a.flags.to_native(),
        );
        // Spec, ATTACH: "If the reserved field of an ATTACH request is not
        // zero, the device MUST reject the request and set status to
        // VIRTIO_IOMMU_S_INVAL."
        if a.reserved != [0; 4] {
            return VIRTIO_IOMMU_S_INVAL;
        }
        let known = if self.acked(VIRTIO_IOMMU_F_BYPASS_CONFIG) {
            wire::VIRTIO_IOMMU_ATTACH_F_BYPASS
        } else {
            0
        };
        // Spec: "If the device does not recognize a flags bit, it MUST reject
        // the request and set status to VIRTIO_IOMMU_S_INVAL."
        if flags & !known != 0 {
            return VIRTIO_IOMMU_S_INVAL;
        }
        let bypass = flags & wire::VIRTIO_IOMMU_ATTACH_F_BYPASS != 0;
        if domain < self.cfg.domain_range.0 || domain > self.cfg.domain_range.1 {
            return VIRTIO_IOMMU_S_RANGE;
        }
        // Spec: "If the endpoint identified by endpoint doesn't exist, the
        // device MUST reject the request and set status to VIRTIO_IOMMU_S_NOENT."
        let Some(ep) = self.endpoints.get(&endpoint) else {
            return VIRTIO_IOMMU_S_NOENT;
        };
        let mapper = ep.mapper.clone();
        let old = ep.domain;
        match self.domains.get(&domain) {
            Some(d) if d.bypass != bypass => return VIRTIO_IOMMU_S_INVAL,
            Some(_) if old == Some(domain) => return VIRTIO_IOMMU_S_OK,
            None if self.domains.len() >= self.cfg.max_domains => return VIRTIO_IOMMU_S_NOMEM,
            _ => {}
        }
        // A mapper (one host address space) cannot serve two domains: the
        // endpoints sharing it cannot be isolated from each other.
        let conflict = self.endpoints.iter().any(|(&id, e)| {
            id != endpoint
                && same_mapper(&e.mapper, &mapper)
                && e.domain.is_some_and(|d| d != domain)
        });
        if conflict {
            return VIRTIO_IOMMU_S_UNSUPP;
        }
        if let Some(old) = old {
            // Spec: "the device SHOULD behave as if the driver issued a DETACH
            // request with this endpoint, followed by the ATTACH request."
            let s = self.detach_endpoint(old, endpoint);
            if s != VIRTIO_IOMMU_S_OK {
                return s;
            }
        }
        let max = self.cfg.max_mappings_per_domain;
        let d = self.domains.entry(domain).or_insert_with(|| Domain {
            bypass,
            endpoints: BTreeSet::new(),
            mappers: Vec::new(),
            table: MappingTable::new(max),
        });
        if !d.mappers.iter().any(|m| same_mapper(m, &mapper)) {
            // The new mapper gets the table, not the deferred unmaps: flush
            // them first so every mapper of the domain holds the same set.
            if Self::flush_domain(&mut self.counters, domain, d) != VIRTIO_IOMMU_S_OK {
                if d.endpoints.is_empty() {
                    self.domains.remove(&domain);
                }
                return VIRTIO_IOMMU_S_DEVERR;
            }
            let one = [mapper.clone()];
            let mut backend = MapperSet::new(&one);
            let r = replay_all(&d.table, &mut backend);
            self.counters.add_calls(&backend.stats);
            if let Err(e) = r {
                warn!(domain, endpoint, error = %e, "replaying mappings on attach failed");
                if d.endpoints.is_empty() {
                    self.domains.remove(&domain);
                }
                return VIRTIO_IOMMU_S_DEVERR;
            }
            d.mappers.push(mapper);
        }
        d.endpoints.insert(endpoint);
        if let Some(ep) = self.endpoints.get_mut(&endpoint) {
            ep.domain = Some(domain);
        }
        debug!(domain, endpoint, bypass, "attached");
        VIRTIO_IOMMU_S_OK
    }

    fn detach(&mut self, dreq: &wire::DetachReq) -> u8 {
        let (domain, endpoint) = (dreq.domain.to_native(), dreq.endpoint.to_native());
        // Spec, DETACH: "If the endpoint identified by endpoint doesn't exist,
        // then the device MUST reject the request and set status to
        // VIRTIO_IOMMU_S_NOENT."
        let Some(ep) = self.endpoints.get(&endpoint) else {
            return VIRTIO_IOMMU_S_NOENT;
        };
        if ep.domain != Some(domain) {
            return VIRTIO_IOMMU_S_INVAL;
        }
        self.detach_endpoint(domain, endpoint)
    }

    /// Detaches an attached endpoint; removes the domain when it empties.
    fn detach_endpoint(&mut self, domain: u32, endpoint: u32) -> u8 {
        let Some(mapper) = self.endpoints.get(&endpoint).map(|e| e.mapper.clone()) else {
            return VIRTIO_IOMMU_S_NOENT;
        };
        let shared = self.endpoints.iter().any(|(&id, e)| {
            id != endpoint && e.domain == Some(domain) && same_mapper(&e.mapper, &mapper)
        });
        let Some(d) = self.domains.get_mut(&domain) else {
            return VIRTIO_IOMMU_S_INVAL;
        };
        // Contract: DETACH is a forcing event; the leaving mapper must not
        // keep the deferred mappings, and every mapper stays in step.
        let s = Self::flush_domain(&mut self.counters, domain, d);
        if s != VIRTIO_IOMMU_S_OK {
            return s;
        }
        if !shared {
            // Spec: "The device MUST ensure that after being detached from a
            // domain, the endpoint cannot access any mapping from that domain."
            let one = [mapper.clone()];
            let mut backend = MapperSet::new(&one);
            let r = unmap_all(&d.table, &mut backend);
            self.counters.add_calls(&backend.stats);
            if let Err(e) = r {
                warn!(domain, endpoint, error = %e, "removing mappings on detach failed");
                return VIRTIO_IOMMU_S_DEVERR;
            }
            d.mappers.retain(|m| !same_mapper(m, &mapper));
        }
        d.endpoints.remove(&endpoint);
        if d.endpoints.is_empty() {
            // Spec: "After all endpoints have been successfully detached from
            // a domain, it ceases to exist."
            self.domains.remove(&domain);
        }
        if let Some(ep) = self.endpoints.get_mut(&endpoint) {
            ep.domain = None;
        }
        debug!(domain, endpoint, "detached");
        VIRTIO_IOMMU_S_OK
    }

    /// Writes the replies of a batch and publishes them with one used-ring
    /// index update and at most one interrupt.
    fn complete<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        queue: &mut Queue,
        interrupt: &dyn IommuInterrupt,
        qidx: u16,
        items: &[Item],
    ) -> Result<(), Error> {
        let mut used = Vec::with_capacity(items.len());
        for item in items {
            let len = match (&item.reply, &item.raw) {
                (Reply::Status(s), Some(raw)) => {
                    if *s != VIRTIO_IOMMU_S_OK {
                        self.counters.failed_requests += 1;
                    }
                    write_tail(mem, raw, *s)
                }
                (Reply::Probe(props), Some(raw)) => write_probe(mem, raw, props),
                (Reply::Pending, _) => {
                    error!(head = item.head, "request left without a reply");
                    0
                }
                _ => 0,
            };
            trace!(head = item.head, len, "used");
            used.push((item.head, len));
        }
        self.counters.add_batch(items.len());
        publish(mem, queue, qidx, &used, interrupt, &mut self.counters)
    }

    /// Queues a fault report and tries to deliver it.
    pub fn report_fault(&mut self, fault: FaultReport) -> Result<(), Error> {
        if self.events.len() >= self.cfg.max_pending_events {
            self.counters.events_dropped += 1;
            warn!(
                endpoint = fault.endpoint,
                "event backlog full, fault dropped"
            );
        } else {
            self.events.push_back(fault);
        }
        if self.active.is_some() {
            self.process_event_queue()
        } else {
            Ok(())
        }
    }

    /// Handles a notification of the event queue: writes pending fault
    /// reports into the buffers the driver made available.
    pub fn process_event_queue(&mut self) -> Result<(), Error> {
        let Some(active) = self.active.as_mut() else {
            return Err(Error::NotActivated);
        };
        let mem = active.mem.memory();
        let mut used = Vec::new();
        while !self.events.is_empty() {
            let Some(chain) = active.eventq.pop_descriptor_chain(&*mem) else {
                break;
            };
            let entry = match read_chain(chain) {
                Ok(raw) if raw.writable_len >= std::mem::size_of::<wire::Fault>() as u64 => {
                    let mut len = 0;
                    if let Some(f) = self.events.pop_front() {
                        let ev = wire::Fault {
                            reason: f.reason,
                            reserved: [0; 3],
                            flags: f.flags.into(),
                            endpoint: f.endpoint.into(),
                            reserved1: 0.into(),
                            address: f.address.into(),
                        };
                        match write_at(&*mem, &raw.writable, 0, ev.as_slice()) {
                            Ok(()) => {
                                self.counters.events_reported += 1;
                                len = std::mem::size_of::<wire::Fault>() as u32;
                            }
                            Err(e) => {
                                warn!(error = %e, "writing a fault event failed");
                                self.events.push_front(f);
                            }
                        }
                    }
                    (raw.head, len)
                }
                Ok(raw) => {
                    debug!(head = raw.head, "event buffer too small");
                    (raw.head, 0)
                }
                Err((head, e)) => {
                    debug!(head, error = ?e, "bad event buffer");
                    (head, 0)
                }
            };
            used.push(entry);
        }
        if used.is_empty() {
            return Ok(());
        }
        publish(
            &*mem,
            &mut active.eventq,
            wire::EVENT_QUEUE,
            &used,
            &*active.interrupt,
            &mut self.counters,
        )
    }
}

/// Checks the POOL_HINT values: a non-empty, granule-aligned window inside
/// `input_range` and outside every reserved region, non-zero sizes.
fn check_pool_hint(cfg: &DeviceConfig, h: &PoolHint, granule: u64) -> Result<(), Error> {
    if h.threshold == 0 || h.pool_max == 0 || h.window_size == 0 {
        return Err(Error::Config(
            "pool hint: zero threshold, window or pool_max",
        ));
    }
    let g = granule - 1;
    if h.window_start & g != 0 || h.window_size & g != 0 {
        return Err(Error::Config(
            "pool hint: window not aligned to the page granule",
        ));
    }
    let last = h
        .window_start
        .checked_add(h.window_size - 1)
        .ok_or(Error::Config("pool hint: window overflows"))?;
    if h.window_start < cfg.input_range.0 || last > cfg.input_range.1 {
        return Err(Error::Config("pool hint: window outside input_range"));
    }
    let hits_reserved = cfg
        .msi_window
        .iter()
        .chain(cfg.reserved.iter())
        .any(|&(s, e)| s <= last && h.window_start <= e);
    if hits_reserved {
        return Err(Error::Config(
            "pool hint: window overlaps a reserved region",
        ));
    }
    Ok(())
}

fn same_mapper(a: &Arc<dyn DmaMapper>, b: &Arc<dyn DmaMapper>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

fn write_tail<M: GuestMemory + ?Sized>(mem: &M, raw: &RawRequest, status: u8) -> u32 {
    let tail = wire::ReqTail {
        status,
        reserved: [0; 3],
    };
    let tlen = std::mem::size_of::<wire::ReqTail>() as u64;
    let Some(off) = raw.writable_len.checked_sub(tlen) else {
        return 0;
    };
    match write_at(mem, &raw.writable, off, tail.as_slice()) {
        Ok(()) => u32::try_from(raw.writable_len).unwrap_or(0),
        Err(e) => {
            warn!(error = %e, "writing a request tail failed");
            0
        }
    }
}

fn write_probe<M: GuestMemory + ?Sized>(mem: &M, raw: &RawRequest, props: &[u8]) -> u32 {
    let tlen = std::mem::size_of::<wire::ReqTail>() as u64;
    let Some(area) = raw.writable_len.checked_sub(tlen) else {
        return 0;
    };
    // The parser checked area >= probe_size >= props.len(); the properties
    // are followed by zeroes up to the tail.
    let Ok(area) = usize::try_from(area) else {
        return 0;
    };
    let mut buf = vec![0u8; area];
    let n = props.len().min(area);
    buf[..n].copy_from_slice(&props[..n]);
    if let Err(e) = write_at(mem, &raw.writable, 0, &buf) {
        warn!(error = %e, "writing probe properties failed");
        return 0;
    }
    write_tail(mem, raw, VIRTIO_IOMMU_S_OK)
}

/// Writes used elements and publishes them with one index store, then
/// decides (EVENT_IDX or NO_INTERRUPT) whether to interrupt.
fn publish<M: GuestMemory + ?Sized>(
    mem: &M,
    queue: &mut Queue,
    qidx: u16,
    used: &[(u16, u32)],
    interrupt: &dyn IommuInterrupt,
    counters: &mut Counters,
) -> Result<(), Error> {
    let err = |source| Error::UsedRing {
        queue: qidx,
        source,
    };
    let size = queue.size();
    if size == 0 {
        return Err(Error::InvalidQueue(qidx));
    }
    let ring = queue.used_ring();
    let old = Wrapping(queue.next_used());
    let mut idx = old;
    for &(head, len) in used {
        let slot = u64::from(idx.0 % size);
        let addr = ring
            .checked_add(4 + 8 * slot)
            .ok_or(err(vm_memory::GuestMemoryError::GuestAddressOverflow))?;
        let mut elem = [0u8; 8];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        mem.write_slice(&elem, GuestAddress(addr)).map_err(err)?;
        idx += Wrapping(1);
    }
    let idx_addr = ring
        .checked_add(2)
        .ok_or(err(vm_memory::GuestMemoryError::GuestAddressOverflow))?;
    mem.store(u16::to_le(idx.0), GuestAddress(idx_addr), Ordering::Release)
        .map_err(err)?;
    queue.set_next_used(idx.0);
    // The index store must be visible before we read the driver's wishes.
    fence(Ordering::SeqCst);
    let avail = queue.avail_ring();
    let notify = if queue.event_idx_enabled() {
        let ev_addr = avail
            .checked_add(4 + 2 * u64::from(size))
            .ok_or(err(vm_memory::GuestMemoryError::GuestAddressOverflow))?;
        let used_event = Wrapping(u16::from_le(
            mem.load::<u16>(GuestAddress(ev_addr), Ordering::Relaxed)
                .map_err(err)?,
        ));
        // vring_need_event(): interrupt if used_event is in [old, idx).
        (idx - used_event - Wrapping(1)) < (idx - old)
    } else {
        let flags = u16::from_le(
            mem.load::<u16>(GuestAddress(avail), Ordering::Relaxed)
                .map_err(err)?,
        );
        flags & virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16 == 0
    };
    if notify {
        counters.interrupts += 1;
        if let Err(e) = interrupt.trigger(qidx) {
            error!(queue = qidx, error = %e, "raising the interrupt failed");
        }
    }
    Ok(())
}
