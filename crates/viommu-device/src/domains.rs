//! Domains and endpoints: ATTACH, DETACH, FLUSH and reset, the requests
//! that change which host address spaces hold a domain's mappings. They
//! are barriers of a batch (invariant 5): the planner never sees them.
//!
//! Every whole-table host operation goes through [`VirtioIommu::force_and_sync`]:
//! the forcing event of the lazy-unmap contract (deferred unmaps leave the
//! host first), then the domain's mappings replayed onto, or removed from,
//! the mappers that join or leave, counted once and answered `S_DEVERR` on
//! failure.

use std::collections::BTreeSet;
use std::sync::Arc;

use dma_mapper::DmaMapper;
use tracing::{debug, error};

use crate::guest_warn;
use viommu_planner::{flush_deferred, replay_all, unmap_all, MapperSet, MappingTable};
use viommu_wire as wire;
use viommu_wire::status::*;
use vm_memory::GuestAddressSpace;

use crate::{Counters, VirtioIommu, VIRTIO_IOMMU_F_BYPASS_CONFIG, VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH};

pub(crate) struct Endpoint {
    pub(crate) mapper: Arc<dyn DmaMapper>,
    pub(crate) domain: Option<u32>,
}

#[derive(Clone)]
pub(crate) struct Domain {
    pub(crate) bypass: bool,
    /// Attached with `VIRTIO_IOMMU_ATTACH_F_LAZY`: its UNMAPs may stay on
    /// the host until its IOTLB_FLUSH.
    pub(crate) lazy: bool,
    pub(crate) endpoints: BTreeSet<u32>,
    /// Distinct mappers of the endpoints (each programmed once per call).
    pub(crate) mappers: Vec<Arc<dyn DmaMapper>>,
    pub(crate) table: MappingTable,
}

/// What a whole-table host operation does to the mappers it is given.
#[derive(Clone, Copy, Debug)]
enum HostSync {
    /// Map every mapping of the domain on them (they join the domain).
    Replay,
    /// Unmap every mapping of the domain from them (they leave it, or the
    /// domain is destroyed).
    Remove,
}

impl<S: GuestAddressSpace> VirtioIommu<S> {
    /// IOTLB_FLUSH: removes the domain's deferred unmaps from the host.
    pub(crate) fn iotlb_flush(&mut self, f: &wire::IotlbFlushReq) -> u8 {
        let domain = f.domain.to_native();
        // Contract: "the device MUST reject an IOTLB_FLUSH whose reserved
        // bytes are not zero with S_INVAL".
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
        let before = counters.backend.unmap_calls;
        let r = flush_deferred(
            &mut d.table,
            &mut MapperSet::new(&d.mappers, &mut counters.backend),
        );
        counters.flush_backend_calls += counters.backend.unmap_calls - before;
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
                guest_warn!(domain = id, failed = r.failed, error = %e, "flushing deferred unmaps failed");
                VIRTIO_IOMMU_S_DEVERR
            }
        }
    }

    pub(crate) fn attach(&mut self, a: &wire::AttachReq) -> u8 {
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
        let mut known = 0;
        if self.acked(VIRTIO_IOMMU_F_BYPASS_CONFIG) {
            known |= wire::VIRTIO_IOMMU_ATTACH_F_BYPASS;
        }
        if self.acked(VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH) {
            known |= wire::VIRTIO_IOMMU_ATTACH_F_LAZY;
        }
        // Spec: "If the device does not recognize a flags bit, it MUST reject
        // the request and set status to VIRTIO_IOMMU_S_INVAL."
        if flags & !known != 0 {
            return VIRTIO_IOMMU_S_INVAL;
        }
        let bypass = flags & wire::VIRTIO_IOMMU_ATTACH_F_BYPASS != 0;
        let lazy = flags & wire::VIRTIO_IOMMU_ATTACH_F_LAZY != 0;
        // Contract: a bypass domain has no IOTLB to be lazy about.
        if bypass && lazy {
            return VIRTIO_IOMMU_S_INVAL;
        }
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
            // Contract: the ATTACH that creates a domain fixes its mode; an
            // endpoint cannot join it in the other mode.
            Some(d) if d.bypass != bypass || d.lazy != lazy => return VIRTIO_IOMMU_S_INVAL,
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
        // A mapper the device forgot mappings on (failed reset) is emptied
        // first; if that fails the ATTACH fails and nothing changed.
        if let Some(pos) = self.dirty.iter().position(|m| same_mapper(m, &mapper)) {
            if let Err(e) = mapper.unmap_all() {
                guest_warn!(endpoint, error = %e, "host mappings left by a reset still cannot be removed");
                return VIRTIO_IOMMU_S_DEVERR;
            }
            self.dirty.remove(pos);
        }
        // The old domain as it is, to put the endpoint back if the move fails.
        let before = old.and_then(|o| self.domains.get(&o).cloned().map(|d| (o, d)));
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
            lazy,
            endpoints: BTreeSet::new(),
            mappers: Vec::new(),
            table: MappingTable::new(max).with_byte_limit(self.cfg.max_bytes_per_domain),
        });
        if !d.mappers.iter().any(|m| same_mapper(m, &mapper)) {
            // The new mapper gets the table, not the deferred unmaps: flush
            // them first so every mapper of the domain holds the same set.
            let one = [mapper.clone()];
            if Self::force_and_sync(&mut self.counters, domain, d, &one, HostSync::Replay)
                != VIRTIO_IOMMU_S_OK
            {
                if d.endpoints.is_empty() {
                    self.domains.remove(&domain);
                }
                if self.empty_if_stranded(domain, &mapper) {
                    self.undo_move(before, endpoint, &mapper);
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

    /// An ATTACH that moved `endpoint` out of its domain failed on the
    /// target: put it back (contract: a failed ATTACH changes nothing). The
    /// detach removed the old domain's deferred unmaps from the host and its
    /// mappings from `mapper` (never shared in a move); they go back on it.
    fn undo_move(
        &mut self,
        before: Option<(u32, Domain)>,
        endpoint: u32,
        mapper: &Arc<dyn DmaMapper>,
    ) {
        let Some((old, mut snapshot)) = before else {
            return;
        };
        // If the endpoint was its last one, the domain comes back as it was,
        // minus the deferred unmaps the detach flushed off the host.
        let d = self.domains.entry(old).or_insert_with(|| {
            snapshot.table.forget_deferred();
            snapshot.endpoints.clear();
            snapshot.mappers.clear();
            snapshot
        });
        let one = [mapper.clone()];
        if Self::sync_mappers(&mut self.counters, old, &d.table, &one, HostSync::Replay)
            != VIRTIO_IOMMU_S_OK
        {
            error!(
                domain = old,
                endpoint, "cannot put the endpoint back after a failed move; it stays detached"
            );
            if d.endpoints.is_empty() {
                self.domains.remove(&old);
            }
            self.empty_if_stranded(old, mapper);
            return;
        }
        d.mappers.push(mapper.clone());
        d.endpoints.insert(endpoint);
        if let Some(ep) = self.endpoints.get_mut(&endpoint) {
            ep.domain = Some(old);
        }
    }

    /// After a failed replay onto `mapper`, which then serves no domain:
    /// if the replay's rollback failed, the host keeps mappings of `domain`
    /// the device no longer tracks (leftovers, `has_leftovers`), so
    /// everything is removed from it; if even that fails the mapper is
    /// dirty (no ATTACH until it is emptied). Returns whether it is clean.
    fn empty_if_stranded(&mut self, domain: u32, mapper: &Arc<dyn DmaMapper>) -> bool {
        if !mapper.has_leftovers() {
            return true;
        }
        let stuck = unmap_everything(domain, std::slice::from_ref(mapper));
        if stuck.is_empty() {
            return true;
        }
        crate::guest_error!(
            domain,
            "host mappings left by a failed replay; the endpoint cannot attach until they are removed"
        );
        self.dirty.extend(stuck);
        false
    }

    pub(crate) fn detach(&mut self, dreq: &wire::DetachReq) -> u8 {
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
        // Spec: "The device MUST ensure that after being detached from a
        // domain, the endpoint cannot access any mapping from that domain."
        // (A mapper another endpoint of the domain still uses keeps them.)
        let leaving = if shared { vec![] } else { vec![mapper.clone()] };
        match Self::flush_domain(&mut self.counters, domain, d) {
            VIRTIO_IOMMU_S_OK => {}
            s => return s,
        }
        let s = Self::sync_mappers(
            &mut self.counters,
            domain,
            &d.table,
            &leaving,
            HostSync::Remove,
        );
        // The leaving mapper serves this endpoint alone: if removing the
        // domain's mappings range by range failed, or the host holds
        // leftovers of a failed map no mapping of the domain covers,
        // remove everything.
        let leftovers = leaving.iter().any(|m| m.has_leftovers());
        if (s != VIRTIO_IOMMU_S_OK || leftovers) && !unmap_everything(domain, &leaving).is_empty() {
            return if s == VIRTIO_IOMMU_S_OK {
                VIRTIO_IOMMU_S_DEVERR
            } else {
                s
            };
        }
        if !shared {
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

    /// A forcing event followed by a whole-table host operation: removes
    /// the deferred unmaps of `d` from the host (every mapper of the
    /// domain), then [`Self::sync_mappers`]. `S_DEVERR` if either fails
    /// (nothing runs after a failure).
    fn force_and_sync(
        counters: &mut Counters,
        id: u32,
        d: &mut Domain,
        mappers: &[Arc<dyn DmaMapper>],
        op: HostSync,
    ) -> u8 {
        match Self::flush_domain(counters, id, d) {
            VIRTIO_IOMMU_S_OK => Self::sync_mappers(counters, id, &d.table, mappers, op),
            s => s,
        }
    }

    /// Replays or removes every mapping of `table` on `mappers`, counted
    /// once; on failure the mappers are left as they were and the answer
    /// is `S_DEVERR`.
    fn sync_mappers(
        counters: &mut Counters,
        id: u32,
        table: &MappingTable,
        mappers: &[Arc<dyn DmaMapper>],
        op: HostSync,
    ) -> u8 {
        let mut backend = MapperSet::new(mappers, &mut counters.backend);
        let r = match op {
            HostSync::Replay => replay_all(table, &mut backend),
            HostSync::Remove => unmap_all(table, &mut backend),
        };
        match r {
            Ok(()) => VIRTIO_IOMMU_S_OK,
            Err(e) => {
                guest_warn!(domain = id, ?op, error = %e, "host mappings out of step with the domain");
                VIRTIO_IOMMU_S_DEVERR
            }
        }
    }

    /// Device reset: destroys every domain (deferred unmaps and mappings
    /// removed from the host) and detaches every endpoint.
    pub(crate) fn destroy_domains(&mut self) {
        let domains = std::mem::take(&mut self.domains);
        for (id, mut d) in domains {
            // A failed flush does not stop the removal of the mappings.
            let flushed = Self::flush_domain(&mut self.counters, id, &mut d) == VIRTIO_IOMMU_S_OK;
            let s = Self::sync_mappers(
                &mut self.counters,
                id,
                &d.table,
                &d.mappers,
                HostSync::Remove,
            );
            let leftovers = d.mappers.iter().any(|m| m.has_leftovers());
            if !flushed || s != VIRTIO_IOMMU_S_OK || leftovers {
                // Contract: after a reset nothing of a domain is reachable.
                // The device forgets the domain, so the host must too.
                let stuck = unmap_everything(id, &d.mappers);
                if !stuck.is_empty() {
                    error!(
                        domain = id,
                        mappers = stuck.len(),
                        "host mappings left after a reset; their endpoints cannot attach until they are removed"
                    );
                }
                self.dirty.extend(stuck);
            }
        }
        for ep in self.endpoints.values_mut() {
            ep.domain = None;
        }
    }
}

/// Removes everything from each of `mappers` (the last resort when range by
/// range failed); returns the mappers where even that failed.
fn unmap_everything(domain: u32, mappers: &[Arc<dyn DmaMapper>]) -> Vec<Arc<dyn DmaMapper>> {
    mappers
        .iter()
        .filter(|m| match m.unmap_all() {
            Ok(()) => {
                guest_warn!(
                    domain,
                    "host mappings removed with unmap-all after a failed unmap"
                );
                false
            }
            Err(e) => {
                error!(domain, error = %e, "unmap-all failed");
                true
            }
        })
        .cloned()
        .collect()
}

pub(crate) fn same_mapper(a: &Arc<dyn DmaMapper>, b: &Arc<dyn DmaMapper>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
