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
//! `docs/lazy-unmap-contract.md` is the contract (the shape of virtio-spec
//! proposal #204). With `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` negotiated, a
//! domain created by an ATTACH with `VIRTIO_IOMMU_ATTACH_F_LAZY` is lazy: its
//! UNMAPs complete at once in the domain's table while their host mappings
//! stay until the domain's IOTLB_FLUSH request (or a forcing event: a MAP
//! over them, DETACH, an ATTACH that adds a mapper to the domain, device
//! reset), which removes them with one host call per run of adjacent whole
//! mappings. An ATTACH in the other mode than its domain's, or LAZY with
//! BYPASS, gets `S_INVAL`; IOTLB_FLUSH of an unknown domain `S_NOENT`,
//! outside `domain_range` `S_RANGE`, nonzero reserved bytes `S_INVAL`, a
//! host failure `S_DEVERR` (the failed mappings stay pending); IOTLB_FLUSH
//! without the feature `S_UNSUPP`. With
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
mod config;
mod counters;
mod domains;
mod execute;
mod queue;
pub mod ratelimit;
mod request;
mod share;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use dma_mapper::DmaMapper;
use viommu_planner::Mapping;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddressSpace;

use crate::config::check_pool_hint;
use crate::domains::{Domain, Endpoint};

pub use crate::config::{
    clip_ranges, merge_ranges, ConfigBuilder, ConfigWrite, DeviceConfig, PoolHint, X86_MSI_WINDOW,
};
pub use crate::counters::{Counters, RequestCounts, BATCH_BUCKETS};
pub use crate::share::DrainShare;
pub use dma_mapper::DmaStats;
pub use viommu_wire::features::*;
pub use viommu_wire::req_type;

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
    /// A queue the driver set up is not usable: `why` says how.
    #[error("queue {queue}: {why}")]
    QueueSetup {
        /// Queue index.
        queue: u16,
        /// What is wrong with it.
        why: &'static str,
    },
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

/// What a call of [`VirtioIommu::process_request_queue`] left on the
/// request queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "`More` means: call again without waiting for a notification"]
pub enum Drained {
    /// Nothing is waiting; notifications are on again, the driver's next
    /// request comes with a notification.
    Empty,
    /// The call took a queue size of requests (or its share) and the
    /// driver has posted more, or may have: call again (the driver may not
    /// notify for them).
    More,
}

/// What a drain of the request queue leaves the driver's notifications
/// as once the queue is empty ([`VirtioIommu::process_request_queue_leaving`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notifications {
    /// On (EVENT_IDX: `avail_event` at the device's next available index;
    /// without it the used ring's NO_NOTIFY flag clear), and the ring read
    /// again after that: the driver's next request comes with a
    /// notification. Before waiting for one, a caller must have drained
    /// with this.
    On,
    /// Suppressed (EVENT_IDX: `avail_event` half the index space away;
    /// without it NO_NOTIFY set): the driver does not notify for what it
    /// publishes next, and the caller polls the ring
    /// ([`VirtioIommu::request_queue_pending`]) instead.
    Suppressed,
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

struct Active<S> {
    mem: S,
    requestq: Queue,
    eventq: Queue,
    interrupt: Arc<dyn IommuInterrupt>,
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
    /// Mappers that may still hold mappings of domains the device forgot
    /// (a reset whose host unmaps all failed): emptied before they serve a
    /// domain again, or that ATTACH fails.
    dirty: Vec<Arc<dyn DmaMapper>>,
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
            dirty: Vec::new(),
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

    /// How many domains exist (every one has an endpoint attached).
    pub fn domain_count(&self) -> usize {
        self.domains.len()
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
            | (1 << VIRTIO_IOMMU_F_PROBE);
        if self.cfg.offer_bypass {
            f |= 1 << VIRTIO_IOMMU_F_BYPASS_CONFIG;
        }
        if self.cfg.offer_mmio {
            f |= 1 << VIRTIO_IOMMU_F_MMIO;
        }
        if self.cfg.lazy_unmap {
            f |= 1 << VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH;
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
            guest_warn!(
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
                queue::check_rings(&*m, q).map_err(|why| Error::QueueSetup {
                    queue: i as u16,
                    why,
                })?;
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
        self.destroy_domains();
    }

    /// Restores `bypass` to its initial value (system reset).
    pub fn system_reset(&mut self) {
        self.reset();
        self.bypass = self.cfg.bypass;
    }

    /// Whether `endpoint`'s mapper may still hold mappings of a domain the
    /// device forgot (a reset whose unmap-all failed): it cannot attach
    /// until they are removed.
    pub fn mapper_is_dirty(&self, endpoint: u32) -> bool {
        self.endpoints.get(&endpoint).is_some_and(|e| {
            self.dirty
                .iter()
                .any(|m| domains::same_mapper(m, &e.mapper))
        })
    }

    /// Where the device stands on the request queue, if activated: the
    /// next available index it will take (a liveness probe compares it
    /// with the driver's avail index).
    pub fn request_queue_next_avail(&self) -> Option<u16> {
        self.active.as_ref().map(|a| a.requestq.next_avail())
    }

    /// Counters since creation.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Handles a notification of the request queue: drains it (repeatedly,
    /// until no new request arrives while notifications are re-enabled),
    /// executes and completes the requests.
    ///
    /// One call takes at most a queue size of requests. If the driver
    /// keeps posting, the call returns [`Drained::More`] with
    /// notifications still off, and the caller must call again without
    /// waiting for a notification (which may never come: a driver with
    /// EVENT_IDX does not notify while the device is behind), after
    /// serving whatever else waits for it.
    pub fn process_request_queue(&mut self) -> Result<Drained, Error> {
        self.process_request_queue_leaving(Notifications::On)
    }

    /// [`process_request_queue`](Self::process_request_queue), leaving the
    /// driver's notifications as `after` says once the queue is empty. A
    /// caller that polls the ring drains with
    /// [`Notifications::Suppressed`] while it polls, and with
    /// [`Notifications::On`] before it waits for a notification: that
    /// drain reads the ring after turning them on, so a request published
    /// as the polling ended is taken then, not left waiting for a
    /// notification the driver did not send.
    pub fn process_request_queue_leaving(
        &mut self,
        after: Notifications,
    ) -> Result<Drained, Error> {
        self.drain_timed(after, None)
    }

    /// [`process_request_queue_leaving`](Self::process_request_queue_leaving)
    /// taking at most `share` of the requests waiting (see [`DrainShare`]):
    /// [`Drained::More`] when it stopped before the queue was empty.
    pub fn process_request_queue_share(
        &mut self,
        after: Notifications,
        share: DrainShare,
    ) -> Result<Drained, Error> {
        self.drain_timed(after, Some(share))
    }

    fn drain_timed(
        &mut self,
        after: Notifications,
        share: Option<DrainShare>,
    ) -> Result<Drained, Error> {
        let Some(mut active) = self.active.take() else {
            return Err(Error::NotActivated);
        };
        let start = std::time::Instant::now();
        let r = self.drain_requests(&mut active, after, share);
        self.active = Some(active);
        self.counters.busy_ns += dma_mapper::elapsed_ns(start);
        r
    }

    /// Whether the driver has published requests the device has not taken
    /// yet (one read of the avail index in guest memory; an index more than
    /// a queue size ahead is corrupt and does not count, as a drain would
    /// not take from it either). What a caller polling the ring checks.
    pub fn request_queue_pending(&self) -> Result<bool, Error> {
        let Some(active) = self.active.as_ref() else {
            return Err(Error::NotActivated);
        };
        let mem = active.mem.memory();
        queue::pending(&*mem, &active.requestq).map_err(|source| Error::Queue {
            queue: viommu_wire::REQUEST_QUEUE,
            source,
        })
    }
}
