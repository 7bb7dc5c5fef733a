//! The queues: draining the request queue into batches, completing a
//! batch with one used-ring index update and at most one interrupt
//! ([`add_used_batch`]), and the event queue that carries fault reports.

use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};

use tracing::{debug, error, trace};

use crate::guest_warn;
use viommu_planner::PlanOptions;
use viommu_wire as wire;
use viommu_wire::status::*;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemory, Permissions};

use crate::chain::{head_is_indirect, read_chain, write_at, ChainError, RawRequest};
use crate::share::{DrainShare, ShareLeft};
use crate::{
    Active, Counters, Drained, Error, FaultReport, IommuInterrupt, Notifications, VirtioIommu,
};

/// One request chain of a drained batch and the reply it will get.
pub(crate) struct DrainedRequest {
    pub(crate) raw: Option<RawRequest>,
    pub(crate) head: u16,
    pub(crate) reply: Reply,
}

/// What [`VirtioIommu::pop_batch`] took.
#[derive(Default)]
struct PoppedBatch {
    /// Requests taken (and completed).
    popped: usize,
    /// The avail index was more than a queue size ahead.
    corrupt: bool,
    /// The share ran out before the queue did.
    share_used_up: bool,
}

/// How a drained request is answered.
pub(crate) enum Reply {
    /// Not decided yet (a MAP/UNMAP waiting for its segment).
    Pending,
    /// Unanswerable: return the buffer with used length 0, nothing written.
    Unanswered,
    /// Write this status into the tail.
    Status(u8),
    /// PROBE: write these properties, then an OK tail.
    Probe(Vec<u8>),
}

impl<S: GuestAddressSpace> VirtioIommu<S> {
    /// Drains the request queue: pops what the driver made available,
    /// executes it as batches and completes them, until the queue stays
    /// empty with the driver's notifications as `after` says, or until a
    /// queue size of requests has been taken, or `share` (if any) is used
    /// up ([`Drained::More`]: what is left waits for the caller's next
    /// call, with notifications still off).
    pub(crate) fn drain_requests(
        &mut self,
        active: &mut Active<S>,
        after: Notifications,
        share: Option<DrainShare>,
    ) -> Result<Drained, Error> {
        let mem = active.mem.memory();
        let q = wire::REQUEST_QUEUE;
        let queue_err = |source| Error::Queue { queue: q, source };
        // The work of one call is bounded: the avail index is re-read after
        // every batch, so a driver that posts one more request per finished
        // batch would otherwise keep the caller here for ever (and away from
        // reset, stop, config writes).
        let mut budget = usize::from(active.requestq.size()).max(1);
        let mut share = share.map(ShareLeft::new);
        let mut empty_rounds = 0u32;
        let mut rounds = 0u32;
        loop {
            if rounds > 0 && share.as_ref().is_some_and(ShareLeft::expired) {
                return Ok(Drained::More);
            }
            rounds += 1;
            active
                .requestq
                .disable_notification(&*mem)
                .map_err(queue_err)?;
            let batch = self.pop_batch(active, &*mem, budget, share.as_mut())?;
            if batch.share_used_up {
                return Ok(Drained::More);
            }
            budget -= batch.popped;
            if budget == 0 && !batch.corrupt {
                let avail = active
                    .requestq
                    .avail_idx(&*mem, Ordering::Acquire)
                    .map_err(queue_err)?;
                if avail.0 != active.requestq.next_avail() {
                    // Notifications stay off: a driver with EVENT_IDX will not
                    // kick again for these, so the caller must come back.
                    return Ok(Drained::More);
                }
            }
            // Both ways the ring is read again after the flag or index is
            // written (a fence between): a request published before the
            // driver could see the new value is taken by the next round.
            let more = match after {
                Notifications::On => active
                    .requestq
                    .enable_notification(&*mem)
                    .map_err(queue_err)?,
                Notifications::Suppressed => {
                    suppress_notifications(&*mem, &mut active.requestq).map_err(queue_err)?;
                    fence(Ordering::SeqCst);
                    let avail = active
                        .requestq
                        .avail_idx(&*mem, Ordering::Acquire)
                        .map_err(queue_err)?;
                    avail.0 != active.requestq.next_avail()
                }
            };
            if !more {
                return Ok(Drained::Empty);
            }
            if batch.corrupt {
                // A corrupt index (more than a queue size ahead): stop
                // instead of spinning; the next notification retries.
                return Ok(Drained::Empty);
            }
            if batch.popped == 0 {
                // Published between the pop and the re-enabling (the driver
                // may have seen notifications off and not kicked): go again.
                // More than twice in a row means the ring cannot be read.
                empty_rounds += 1;
                if empty_rounds > 2 {
                    guest_warn!(
                        "request queue has requests that cannot be popped; waiting for the next notification"
                    );
                    return Ok(Drained::Empty);
                }
            } else {
                empty_rounds = 0;
            }
        }
    }

    /// Pops up to `budget` requests (fewer if `share` runs out: the
    /// request beyond it is put back) and executes and completes them as
    /// a batch (one by one without batching).
    fn pop_batch<M: GuestMemory + ?Sized>(
        &mut self,
        active: &mut Active<S>,
        mem: &M,
        budget: usize,
        mut share: Option<&mut ShareLeft>,
    ) -> Result<PoppedBatch, Error> {
        let mut requests = Vec::new();
        let mut batch = PoppedBatch::default();
        let desc_table = GuestAddress(active.requestq.desc_table());
        let lazy = self.acked(crate::VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH);
        while batch.popped < budget {
            let Some(chain) = pop(&mut active.requestq, mem, &mut batch.corrupt) else {
                break;
            };
            let indirect = head_is_indirect(mem, desc_table, chain.head_index());
            let read = if indirect {
                Err((chain.head_index(), ChainError::Indirect))
            } else {
                read_chain(chain)
            };
            if let Some(left) = share.as_deref_mut() {
                if !left.take(read.as_ref().ok(), self.probe_size, lazy) {
                    // Put back, for whoever drains next.
                    let next = Wrapping(active.requestq.next_avail()) - Wrapping(1);
                    active.requestq.set_next_avail(next.0);
                    batch.share_used_up = true;
                    break;
                }
            }
            batch.popped += 1;
            let request = match read {
                Ok(raw) => DrainedRequest {
                    head: raw.head,
                    raw: Some(raw),
                    reply: Reply::Pending,
                },
                Err((head, e)) => {
                    debug!(head, error = ?e, "unanswerable request chain");
                    DrainedRequest {
                        head,
                        raw: None,
                        reply: Reply::Unanswered,
                    }
                }
            };
            requests.push(request);
            if !self.cfg.batching {
                self.run_and_complete(active, mem, &mut requests, PlanOptions::ONE_BY_ONE)?;
                requests.clear();
            }
        }
        if !requests.is_empty() {
            self.run_and_complete(active, mem, &mut requests, PlanOptions::BATCHED)?;
        }
        Ok(batch)
    }

    /// Executes a batch and completes it on the request queue.
    fn run_and_complete<M: GuestMemory + ?Sized>(
        &mut self,
        active: &mut Active<S>,
        mem: &M,
        requests: &mut [DrainedRequest],
        opts: PlanOptions,
    ) -> Result<(), Error> {
        self.execute(mem, requests, opts);
        self.complete(
            mem,
            &mut active.requestq,
            &*active.interrupt,
            wire::REQUEST_QUEUE,
            requests,
        )
    }

    /// Writes the replies of a batch and makes them visible with one used-ring
    /// index update and at most one interrupt.
    pub(crate) fn complete<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        queue: &mut Queue,
        interrupt: &dyn IommuInterrupt,
        qidx: u16,
        requests: &[DrainedRequest],
    ) -> Result<(), Error> {
        let mut used = Vec::with_capacity(requests.len());
        for r in requests {
            let len = match (&r.reply, &r.raw) {
                (Reply::Status(s), Some(raw)) => {
                    if *s != VIRTIO_IOMMU_S_OK {
                        self.counters.failed_requests += 1;
                    }
                    write_tail(mem, raw, *s)
                }
                (Reply::Probe(props), Some(raw)) => write_probe(mem, raw, props),
                (Reply::Pending, _) => {
                    error!(head = r.head, "request left without a reply");
                    0
                }
                _ => 0,
            };
            trace!(head = r.head, len, "used");
            used.push((r.head, len));
        }
        self.counters.add_batch(requests.len());
        complete_used(mem, queue, qidx, &used, interrupt, &mut self.counters)
    }

    /// Queues a fault report and tries to deliver it.
    pub fn report_fault(&mut self, fault: FaultReport) -> Result<(), Error> {
        if self.events.len() >= self.cfg.max_pending_events {
            self.counters.events_dropped += 1;
            guest_warn!(
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
            // Not `pop_descriptor_chain`: it logs every refusal itself.
            let chain = match active.eventq.iter(&*mem) {
                Ok(mut it) => it.next(),
                Err(e) => {
                    guest_warn!(error = %e, "event queue avail index is inconsistent");
                    None
                }
            };
            let Some(chain) = chain else {
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
                                guest_warn!(error = %e, "writing a fault event failed");
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
        complete_used(
            &*mem,
            &mut active.eventq,
            wire::EVENT_QUEUE,
            &used,
            &*active.interrupt,
            &mut self.counters,
        )
    }
}

/// Whether `queue` is ready and its rings lie in guest memory, like
/// `QueueT::is_valid` but without its error log (the driver can repeat a
/// bad setup at will: the caller reports it, rate limited).
pub(crate) fn check_rings<M: GuestMemory + ?Sized>(
    mem: &M,
    queue: &Queue,
) -> Result<(), &'static str> {
    if !queue.ready() {
        return Err("not enabled by the driver");
    }
    let size = u64::from(queue.size());
    if size == 0 {
        return Err("size 0");
    }
    // Descriptor 16 bytes; avail: flags, idx, ring, used_event; used:
    // flags, idx, 8-byte elements, avail_event.
    let rings = [
        (
            queue.desc_table(),
            16 * size,
            Permissions::Read,
            "descriptor table outside guest memory",
        ),
        (
            queue.avail_ring(),
            6 + 2 * size,
            Permissions::Read,
            "available ring outside guest memory",
        ),
        (
            queue.used_ring(),
            6 + 8 * size,
            Permissions::Write,
            "used ring outside guest memory",
        ),
    ];
    for (addr, len, access, why) in rings {
        let fits = usize::try_from(len)
            .ok()
            .is_some_and(|len| mem.check_range(GuestAddress(addr), len, access));
        if !fits {
            return Err(why);
        }
    }
    Ok(())
}

/// Asks the driver not to notify `queue`: without EVENT_IDX the used
/// ring's `VRING_USED_F_NO_NOTIFY` flag; with it, `avail_event` half the
/// index space away from the device's next available index. A driver
/// notifies when `avail_event` lies in `[old, new)`, the indices it
/// published since its previous notify decision, which never span that
/// far (the ring holds a queue size, at most 2^15), so no decision made
/// while this holds notifies. (Leaving `avail_event` where the last
/// re-enabling put it, as virtio-queue's `disable_notification` does,
/// lets the driver's next request notify once more.) Both are hints: a
/// driver may notify anyway, and a device that reads the ring after
/// turning notifications on again misses nothing.
pub(crate) fn suppress_notifications<M: GuestMemory>(
    mem: &M,
    queue: &mut Queue,
) -> Result<(), virtio_queue::Error> {
    if !queue.event_idx_enabled() {
        return queue.disable_notification(mem);
    }
    let far = Wrapping(queue.next_avail()) + Wrapping(0x8000);
    let addr = queue
        .used_ring()
        .checked_add(4 + 8 * u64::from(queue.size()))
        .ok_or(virtio_queue::Error::AddressOverflow)?;
    mem.store(u16::to_le(far.0), GuestAddress(addr), Ordering::Relaxed)
        .map_err(virtio_queue::Error::GuestMemory)
}

/// Whether the driver published requests the device has not taken: its
/// avail index 1 to a queue size ahead of the device's next one (further
/// is a corrupt index, which a drain does not serve either).
pub(crate) fn pending<M: GuestMemory + ?Sized>(
    mem: &M,
    queue: &Queue,
) -> Result<bool, virtio_queue::Error> {
    let avail = queue.avail_idx(mem, Ordering::Acquire)?;
    let ahead = (avail - Wrapping(queue.next_avail())).0;
    Ok(ahead != 0 && ahead <= queue.size())
}

/// Pops the next available chain, like `QueueT::pop_descriptor_chain`
/// but without its error log on every call: an avail index more than a
/// queue size ahead of the device (a corrupt or hostile driver) sets
/// `corrupt` and logs one rate-limited warning.
fn pop<M>(queue: &mut Queue, mem: M, corrupt: &mut bool) -> Option<DescriptorChain<M>>
where
    M: Clone + std::ops::Deref,
    M::Target: GuestMemory,
{
    match queue.iter(mem) {
        Ok(mut it) => it.next(),
        Err(e) => {
            *corrupt = true;
            guest_warn!(
                error = %e,
                "request queue avail index is inconsistent; waiting for the next notification"
            );
            None
        }
    }
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
            guest_warn!(error = %e, "writing a request tail failed");
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
        guest_warn!(error = %e, "writing probe properties failed");
        return 0;
    }
    write_tail(mem, raw, VIRTIO_IOMMU_S_OK)
}

/// Writes the used elements `(head, len)` of a batch to `queue`'s used
/// ring and makes them visible with one index store (release), then says
/// whether the driver asked for an interrupt: with EVENT_IDX, whether
/// `used_event` lies in the batch (vring_need_event()); without it,
/// whether `VRING_AVAIL_F_NO_INTERRUPT` is clear.
///
/// It is `virtio_queue::Queue::add_used` for each element followed by one
/// `needs_notification`, with a single index update instead of one per
/// element (a driver polling the index never sees half a batch), and with
/// the NO_INTERRUPT flag honoured (virtio-queue does not read it). The
/// property tests below hold it to that.
pub(crate) fn add_used_batch<M: GuestMemory + ?Sized>(
    mem: &M,
    queue: &mut Queue,
    qidx: u16,
    used: &[(u16, u32)],
) -> Result<bool, Error> {
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
    if queue.event_idx_enabled() {
        let ev_addr = avail
            .checked_add(4 + 2 * u64::from(size))
            .ok_or(err(vm_memory::GuestMemoryError::GuestAddressOverflow))?;
        let used_event = Wrapping(u16::from_le(
            mem.load::<u16>(GuestAddress(ev_addr), Ordering::Relaxed)
                .map_err(err)?,
        ));
        // vring_need_event(): interrupt if used_event is in [old, idx).
        Ok((idx - used_event - Wrapping(1)) < (idx - old))
    } else {
        let flags = u16::from_le(
            mem.load::<u16>(GuestAddress(avail), Ordering::Relaxed)
                .map_err(err)?,
        );
        Ok(flags & virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16 == 0)
    }
}

/// Completes a batch: [`add_used_batch`], then the interrupt if the
/// driver wants one.
fn complete_used<M: GuestMemory + ?Sized>(
    mem: &M,
    queue: &mut Queue,
    qidx: u16,
    used: &[(u16, u32)],
    interrupt: &dyn IommuInterrupt,
    counters: &mut Counters,
) -> Result<(), Error> {
    if add_used_batch(mem, queue, qidx, used)? {
        counters.interrupts += 1;
        if let Err(e) = interrupt.trigger(qidx) {
            error!(queue = qidx, error = %e, "raising the interrupt failed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
