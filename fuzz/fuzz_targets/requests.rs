//! Fuzzes request parsing and execution: the input is a small program that
//! queues well-formed, typed and hand-made (possibly hostile) descriptor
//! chains, notifies the device, feeds the event queue, writes config space
//! and resets the device. After every notification the host mappers must
//! hold exactly what the device's domains say, without any protocol
//! violation (overlapping map, splitting unmap); any panic is a finding.
//!
//! Input format (little-endian):
//! - byte 0: bit 0 batching, bit 1 EVENT_IDX, bit 2 BYPASS_CONFIG, bit 3
//!   MMIO, bit 4 withhold MAP_UNMAP, bit 5 withhold LAZY_IOTLB_FLUSH, bit 6
//!   withhold POOL_HINT (the bits of the reset record mean the same).
//! - byte 1: host failures: bits 0-2 n > 0 make host maps touching page
//!   `8 * n` fail, bits 3-5 the same for unmaps (independently), bit 6
//!   makes unmap-all fail too.
//! - then records, each a tag byte (`tag & 7` selects) and its operands:
//!   0 raw request: rlen u8, wlen u16, rlen bytes (readable part)
//!   1 typed request: kind u8, then 3 u8 fields (domain, endpoint/page...);
//!     with tag bit 3 set, a lazy-domain request: kind % 4 is ATTACH
//!     with the LAZY flag (and `kind >> 2` as more flags), UNMAP with junk
//!     reserved bytes, IOTLB_FLUSH, IOTLB_FLUSH with nonzero reserved bytes
//!   2 hand-made chain: n u8 (1-4 descriptors) of (addr u32, len u16, flags u8)
//!   3 notify the request queue and check consistency (tag bit 3: drain
//!     only a vCPU's share, as `--viommu-kicks vcpu` does)
//!   4 event queue: what u8, value u8
//!   5 config write: offset u8, value u8
//!   6 reset and renegotiate
//!   7 used_event u16 / avail flags

#![no_main]

use libfuzzer_sys::{fuzz_target, Corpus};
use viommu_device::testing::{req, FakeCall, Harness, DATA_BASE};
use viommu_device::{DeviceConfig, DrainShare, Drained, FaultReport, Notifications};
use viommu_device::{
    VIRTIO_IOMMU_F_BYPASS_CONFIG, VIRTIO_IOMMU_F_DOMAIN_RANGE, VIRTIO_IOMMU_F_INPUT_RANGE,
    VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH, VIRTIO_IOMMU_F_MAP_UNMAP, VIRTIO_IOMMU_F_MMIO,
    VIRTIO_IOMMU_F_POOL_HINT, VIRTIO_IOMMU_F_PROBE,
};

#[path = "common/input.rs"]
mod input;
use input::Input;

fn features(setup: u8) -> u64 {
    let mut f = (1u64 << 32)
        | (1 << VIRTIO_IOMMU_F_INPUT_RANGE)
        | (1 << VIRTIO_IOMMU_F_DOMAIN_RANGE)
        | (1 << VIRTIO_IOMMU_F_PROBE);
    if setup & 2 != 0 {
        f |= 1 << 29; // VIRTIO_RING_F_EVENT_IDX
    }
    if setup & 4 != 0 {
        f |= 1 << VIRTIO_IOMMU_F_BYPASS_CONFIG;
    }
    if setup & 8 != 0 {
        f |= 1 << VIRTIO_IOMMU_F_MMIO;
    }
    if setup & 16 == 0 {
        f |= 1 << VIRTIO_IOMMU_F_MAP_UNMAP;
    }
    if setup & 32 == 0 {
        f |= 1 << VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH;
    }
    if setup & 64 == 0 {
        f |= 1 << VIRTIO_IOMMU_F_POOL_HINT;
    }
    f
}

fn run(data: &[u8]) -> Option<()> {
    let mut input = Input(data);
    let setup = input.u8()?;
    let mut h = device(setup);
    inject_faults(&h, input.u8()?);
    while let Some(tag) = input.u8() {
        match tag & 7 {
            0 => push_raw_request(&mut h, &mut input)?,
            1 if tag & 8 != 0 => push_lazy_request(&mut h, &mut input)?,
            1 => push_typed_request(&mut h, &mut input)?,
            2 => push_chain(&mut h, &mut input)?,
            3 => notify(&mut h, tag & 8 != 0)?,
            4 => event_op(&mut h, &mut input)?,
            5 => config_op(&mut h, &mut input)?,
            6 => reset_op(&mut h, &mut input)?,
            _ => ring_flags_op(&mut h, &mut input)?,
        }
    }
    drain_to_the_end(&mut h)
}

/// The device under test, as byte 0 says.
fn device(setup: u8) -> Harness {
    let cfg = DeviceConfig {
        batching: setup & 1 != 0,
        offer_mmio: setup & 8 != 0,
        max_domains: 4,
        max_mappings_per_domain: 32,
        max_pending_events: 4,
        ..Default::default()
    };
    let mut h = Harness::new(cfg, &[1, 2, 3], 32);
    h.restart(features(setup));
    h
}

/// Host failures, map and unmap independently: bits 0-2 of `faults` pick
/// a page (8 n) whose maps fail, bits 3-5 one whose unmaps fail, bit 6
/// makes unmap-all fail too.
fn inject_faults(h: &Harness, faults: u8) {
    let map_page = u64::from(faults & 7) * 8 * 0x1000;
    let unmap_page = u64::from((faults >> 3) & 7) * 8 * 0x1000;
    let touches = |p: u64, iova: u64, size: u64| p != 0 && iova <= p && p - iova < size;
    if map_page == 0 && unmap_page == 0 {
        return;
    }
    for m in &h.mappers {
        m.fail_when(move |c| match *c {
            FakeCall::Map { iova, size, .. } => touches(map_page, iova, size),
            FakeCall::Unmap { iova, size } => touches(unmap_page, iova, size),
        });
        if faults & 64 != 0 {
            m.fail_unmap_all();
        }
    }
}

/// Record 0: a request of raw bytes.
fn push_raw_request(h: &mut Harness, input: &mut Input) -> Option<()> {
    let rlen = usize::from(input.u8()?);
    let wlen = u32::from(input.u16()? % 1024);
    let r = input.bytes(rlen.min(0x100))?.to_vec();
    let mem = h.mem.clone();
    let _ = h.reqq.push(&*mem, &r, wlen);
    Some(())
}

/// Record 1 with tag bit 3: a lazy-domain request.
fn push_lazy_request(h: &mut Harness, input: &mut Input) -> Option<()> {
    let kind = input.u8()?;
    let (a, b, c) = (input.u8()?, input.u8()?, input.u8()?);
    let (d, p, n) = (u32::from(a % 8), u64::from(b % 64), u64::from(c % 8));
    let page = 0x1000u64;
    let (first, last) = (p * page, (p + n + 1) * page - 1);
    let r = match kind % 4 {
        0 => req::attach(d, u32::from(b % 5), req::LAZY | u32::from(kind >> 2)),
        1 => {
            let mut u = req::unmap(d, first, last);
            u[24] = kind;
            u
        }
        2 => req::iotlb_flush(d),
        _ => {
            let mut f = req::iotlb_flush(d);
            f[8] = b;
            f[11] = c;
            f
        }
    };
    let mem = h.mem.clone();
    let _ = h.reqq.push(&*mem, &r, 4);
    Some(())
}

/// Record 1: a typed request.
fn push_typed_request(h: &mut Harness, input: &mut Input) -> Option<()> {
    let kind = input.u8()?;
    let (a, b, c) = (input.u8()?, input.u8()?, input.u8()?);
    let (d, p, n) = (u32::from(a % 8), u64::from(b % 64), u64::from(c % 8));
    let page = 0x1000u64;
    let r = match kind % 6 {
        0 => req::attach(d, u32::from(b % 5), u32::from(c % 3)),
        1 => req::detach(d, u32::from(b % 5)),
        2 => req::map(
            d,
            p * page,
            (p + n + 1) * page - 1,
            DATA_BASE + p * page,
            u32::from(kind >> 3),
        ),
        3 => req::unmap(
            d,
            p * page,
            ((p + n) * page + u64::from(kind >> 4) * 0x800).wrapping_sub(1),
        ),
        4 => req::probe(u32::from(b % 5)),
        _ => req::map(
            d,
            p * page,
            p * page + u64::from(c) * 0x800,
            u64::from(b) << 20,
            3,
        ),
    };
    let wlen = if kind % 6 == 4 { 512 + 4 } else { 4 };
    let mem = h.mem.clone();
    let _ = h.reqq.push(&*mem, &r, wlen);
    Some(())
}

/// Record 2: a hand-made chain of 1-4 descriptors.
fn push_chain(h: &mut Harness, input: &mut Input) -> Option<()> {
    let n = usize::from(input.u8()? % 4) + 1;
    let mut descs = Vec::with_capacity(n);
    for _ in 0..n {
        let addr = u64::from(input.u32()?);
        let len = u32::from(input.u16()?);
        // WRITE and INDIRECT only; NEXT is set by the driver.
        let flags = u16::from(input.u8()?) & 0x6;
        descs.push((addr, len, flags));
    }
    let mem = h.mem.clone();
    let _ = h.reqq.push_raw(&*mem, &descs);
    Some(())
}

/// A small share, as a vCPU takes one (with tag bit 3 on record 3).
const SHARE: DrainShare = DrainShare {
    requests: 3,
    bytes: 8 * 0x1000,
    request_bytes: 4 * 0x1000,
    time: std::time::Duration::from_secs(1),
};

/// Record 3: notify the request queue (a whole drain, or a vCPU's
/// `share`) and check consistency.
fn notify(h: &mut Harness, share: bool) -> Option<()> {
    // One notification's worth; `More` is served by a later op or the
    // loop at the end, as the device thread does.
    let _more = if share {
        h.dev
            .process_request_queue_share(Notifications::On, SHARE)
            .ok()?
    } else {
        h.dev.process_request_queue().ok()?
    };
    let mem = h.mem.clone();
    h.reqq.poll(&*mem);
    if let Err(e) = h.check_consistency() {
        panic!("inconsistent after a batch: {e}");
    }
    Some(())
}

/// Record 4: an event-queue buffer, a fault report, or an event-queue
/// notification.
fn event_op(h: &mut Harness, input: &mut Input) -> Option<()> {
    let what = input.u8()?;
    let v = input.u8()?;
    let mem = h.mem.clone();
    match what % 3 {
        0 => {
            let slot = h.evq.slot_addr(u16::from(v % 32));
            let _ = h.evq.push_raw(&*mem, &[(slot, u32::from(v), 2)]);
        }
        1 => {
            let _ = h.dev.report_fault(FaultReport {
                reason: v % 4,
                flags: u32::from(v),
                endpoint: u32::from(v % 5),
                address: u64::from(v) << 12,
            });
        }
        _ => {
            let _ = h.dev.process_event_queue();
            h.evq.poll(&*mem);
        }
    }
    Some(())
}

/// Record 5: a config-space write and read.
fn config_op(h: &mut Harness, input: &mut Input) -> Option<()> {
    let off = u64::from(input.u8()? % 48);
    let v = input.u8()?;
    h.dev.write_config(off, &[v]);
    let mut buf = [0u8; 8];
    h.dev.read_config(off, &mut buf);
    Some(())
}

/// Record 6: reset and renegotiate.
fn reset_op(h: &mut Harness, input: &mut Input) -> Option<()> {
    let f = input.u8()?;
    h.restart(features(f));
    if let Err(e) = h.check_consistency() {
        panic!("inconsistent after reset: {e}");
    }
    Some(())
}

/// Record 7: the driver's used_event or avail flags.
fn ring_flags_op(h: &mut Harness, input: &mut Input) -> Option<()> {
    let v = input.u16()?;
    let mem = h.mem.clone();
    if v & 1 == 0 {
        h.reqq.set_used_event(&*mem, v >> 1);
    } else {
        h.reqq.set_avail_flags(&*mem, (v >> 1) & 1);
    }
    Some(())
}

/// Nothing the driver published is left: the device says `More` until
/// the queue is empty (a queue size at most a call).
fn drain_to_the_end(h: &mut Harness) -> Option<()> {
    let mut calls = 0;
    while h.dev.process_request_queue().ok()? == Drained::More {
        calls += 1;
        assert!(calls <= 64, "the request queue never drains");
    }
    let mem = h.mem.clone();
    h.reqq.poll(&*mem);
    if let Err(e) = h.check_consistency() {
        panic!("inconsistent at the end: {e}");
    }
    Some(())
}

fuzz_target!(|data: &[u8]| -> Corpus {
    if data.is_empty() {
        return Corpus::Reject;
    }
    run(data);
    Corpus::Keep
});
