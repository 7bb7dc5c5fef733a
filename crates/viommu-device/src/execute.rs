//! Executing a drained batch: every request is validated against the wire
//! rules (statuses quote the spec), MAP/UNMAP segments between barriers go
//! to the planner domain by domain, ATTACH/DETACH/PROBE/FLUSH run in place.

use crate::guest_warn;
use dma_mapper::DmaPerm;
use viommu_planner::{run_batch, MapperSet, Mapping, Outcome, PlanOptions, Reject};
use viommu_wire as wire;
use viommu_wire::status::*;
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemory, Permissions};

use crate::domains::Domain;
use crate::queue::{DrainedRequest, Reply};
use crate::request::{self, parse, Parsed, Req};
use crate::{
    VirtioIommu, VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH, VIRTIO_IOMMU_F_MAP_UNMAP, VIRTIO_IOMMU_F_MMIO,
    VIRTIO_IOMMU_F_POOL_HINT,
};

impl<S: GuestAddressSpace> VirtioIommu<S> {
    /// Executes a batch: MAP/UNMAP runs go to the planner, the other
    /// requests are barriers executed in place.
    pub(crate) fn execute<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        requests: &mut [DrainedRequest],
        opts: PlanOptions,
    ) {
        // (item index, domain, request) of the MAP/UNMAP since the last barrier.
        let mut segment: Vec<(usize, u32, viommu_planner::Request)> = Vec::new();
        for i in 0..requests.len() {
            let Some(raw) = requests[i].raw.as_ref() else {
                self.counters.requests.malformed += 1;
                continue;
            };
            let parsed = parse(
                raw,
                self.probe_size,
                self.acked(VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH),
            );
            let reply = match parsed {
                Parsed::Unanswerable => {
                    self.counters.requests.malformed += 1;
                    Reply::Unanswered
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
                        self.run_segment(requests, &mut segment, opts);
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
                            Req::IotlbFlush(f) => {
                                self.counters.requests.flush += 1;
                                Reply::Status(self.iotlb_flush(&f))
                            }
                            Req::Map(_) | Req::Unmap(_) => unreachable!("handled above"),
                        }
                    }
                },
            };
            requests[i].reply = reply;
        }
        self.run_segment(requests, &mut segment, opts);
    }

    /// Runs the pending MAP/UNMAP requests, domain by domain (requests of
    /// different domains are independent; order within a domain is kept).
    fn run_segment(
        &mut self,
        requests: &mut [DrainedRequest],
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
                    requests[i].reply = Reply::Status(VIRTIO_IOMMU_S_NOENT);
                }
                continue;
            };
            let mut backend = MapperSet::new(&domain.mappers, &mut self.counters.backend);
            let report = run_batch(&mut domain.table, &reqs, opts, &mut backend);
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
                        guest_warn!(domain = d, failure = ?f, "host DMA call failed");
                        VIRTIO_IOMMU_S_DEVERR
                    }
                };
                if let Some(&i) = idx.get(k) {
                    requests[i].reply = Reply::Status(status);
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
        let (domain, start, end) = (
            u.domain.to_native(),
            u.virt_start.to_native(),
            u.virt_end.to_native(),
        );
        // `reserved` is ignored (the spec only says the device MAY reject
        // it). The UNMAPs of a lazy domain (attached with
        // VIRTIO_IOMMU_ATTACH_F_LAZY) may keep their host translations until
        // the domain's IOTLB_FLUSH; a strict domain's are removed at once.
        let deferred = self.check_domain(domain)?.lazy;
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
}
