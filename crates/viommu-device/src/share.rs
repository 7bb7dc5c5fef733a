//! A bounded share of a drain, for a caller that must not be held long:
//! a vCPU serving its own notification (with `--viommu-kicks vcpu`) holds
//! the transport and delays the VMM's stop for as long as it serves. It
//! takes at most [`DrainShare`]'s requests, bytes and time, and never an
//! ATTACH, DETACH or IOTLB_FLUSH (an ATTACH may replay a whole domain onto
//! a new mapper, a DETACH or a FLUSH unmap one): it stops before the first
//! request beyond its share and leaves it, and the rest, to its caller's
//! next drain ([`Drained::More`](crate::Drained::More)).

use std::time::{Duration, Instant};

use crate::chain::RawRequest;
use crate::request::{parse, Parsed, Req};

/// How much of a drain a caller takes at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainShare {
    /// Requests taken at most.
    pub requests: usize,
    /// MAP and UNMAP bytes (their IOVA ranges) taken at most, summed.
    pub bytes: u64,
    /// A MAP or UNMAP over more bytes than this is left whole.
    pub request_bytes: u64,
    /// No batch is started after this long.
    pub time: Duration,
}

/// What is left of a [`DrainShare`] in one drain.
pub(crate) struct ShareLeft {
    requests: usize,
    bytes: u64,
    request_bytes: u64,
    deadline: Instant,
}

/// What a request costs a share.
enum Weight {
    /// Bytes of host mapping work (0: no host call).
    Bytes(u64),
    /// May cost a whole domain's worth: never on a share.
    Domain,
}

impl ShareLeft {
    pub(crate) fn new(share: DrainShare) -> Self {
        ShareLeft {
            requests: share.requests,
            bytes: share.bytes,
            request_bytes: share.request_bytes,
            deadline: Instant::now() + share.time,
        }
    }

    /// Whether the time is up: no new batch.
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Whether the request (`None`: a chain that cannot be answered) fits
    /// what is left; if so its part is taken.
    pub(crate) fn take(&mut self, raw: Option<&RawRequest>, probe_size: u32, lazy: bool) -> bool {
        if self.requests == 0 {
            return false;
        }
        let bytes = match raw.map_or(Weight::Bytes(0), |r| weigh(r, probe_size, lazy)) {
            Weight::Domain => return false,
            Weight::Bytes(b) if b > self.request_bytes || b > self.bytes => return false,
            Weight::Bytes(b) => b,
        };
        self.requests -= 1;
        self.bytes -= bytes;
        true
    }
}

fn weigh(raw: &RawRequest, probe_size: u32, lazy: bool) -> Weight {
    let span = |start: u64, end: u64| end.saturating_sub(start).saturating_add(1);
    match parse(raw, probe_size, lazy) {
        Parsed::Req(Req::Map(m)) => {
            Weight::Bytes(span(m.virt_start.to_native(), m.virt_end.to_native()))
        }
        Parsed::Req(Req::Unmap(u)) => {
            Weight::Bytes(span(u.virt_start.to_native(), u.virt_end.to_native()))
        }
        Parsed::Req(Req::Probe { .. }) => Weight::Bytes(0),
        Parsed::Req(Req::Attach(_) | Req::Detach(_) | Req::IotlbFlush(_)) => Weight::Domain,
        // Answered with a status, no host call.
        Parsed::Status(_) | Parsed::Unanswerable => Weight::Bytes(0),
    }
}
