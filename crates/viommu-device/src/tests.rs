//! Unit tests: every request type and error, through a real split queue in
//! guest memory.

use std::sync::Arc;

use dma_mapper::DmaPerm;
use viommu_wire as wire;
use viommu_wire::status::*;
use virtio_bindings::virtio_ring::{VRING_AVAIL_F_NO_INTERRUPT, VRING_DESC_F_WRITE};
use vm_memory::{ByteValued, Bytes, GuestAddress};

use crate::testing::{req, FakeCall, FakeMapper, Harness, DATA_BASE, MEM_SIZE};
use crate::*;

const PAGE: u64 = 0x1000;
const OK: Option<u8> = Some(VIRTIO_IOMMU_S_OK);

fn s(x: u8) -> Option<u8> {
    Some(x)
}

fn harness() -> Harness {
    Harness::new(DeviceConfig::default(), &[1, 2, 3], 64)
}

/// One endpoint, a 64-entry queue, request batching on or off.
fn batching_harness(batching: bool) -> Harness {
    Harness::new(
        DeviceConfig {
            batching,
            ..Default::default()
        },
        &[1],
        64,
    )
}

fn map(d: u32, iova: u64, pages: u64) -> Vec<u8> {
    req::map(d, iova, iova + pages * PAGE - 1, DATA_BASE + iova, req::RW)
}

fn unmap(d: u32, iova: u64, end_excl: u64) -> Vec<u8> {
    req::unmap(d, iova, end_excl - 1)
}

/// Device reset, then a new negotiation with `features` and activation.
fn reactivate(h: &mut Harness, features: u64) {
    h.dev.reset();
    h.dev.set_acked_features(features);
    h.dev
        .activate(
            h.mem.clone(),
            vec![h.reqq.queue(), h.evq.queue()],
            h.irq.clone(),
        )
        .unwrap();
}

fn host(h: &Harness, ep: usize) -> Vec<(u64, u64)> {
    h.mappers[ep]
        .mappings()
        .iter()
        .map(|&(i, s, _, _)| (i, s))
        .collect()
}

#[test]
fn features_and_config_space() {
    let h = harness();
    let f = h.dev.device_features();
    for bit in [
        VIRTIO_IOMMU_F_INPUT_RANGE,
        VIRTIO_IOMMU_F_DOMAIN_RANGE,
        VIRTIO_IOMMU_F_MAP_UNMAP,
        VIRTIO_IOMMU_F_PROBE,
        VIRTIO_IOMMU_F_BYPASS_CONFIG,
    ] {
        assert_ne!(f & (1 << bit), 0, "bit {bit}");
    }
    assert_eq!(f & (1 << VIRTIO_IOMMU_F_MMIO), 0);
    assert_eq!(f & (1 << VIRTIO_IOMMU_F_BYPASS), 0);
    assert_ne!(f & (1 << 32), 0, "VERSION_1");

    let mut b = [0u8; 40];
    h.dev.read_config(0, &mut b);
    let c = wire::Config::from_slice(&b).copied().unwrap();
    assert_eq!(c.page_size_mask.to_native(), !0xfff);
    assert_eq!(c.input_range.end.to_native(), (1 << 48) - 1);
    assert_eq!(c.domain_range.end.to_native(), 0xffff);
    assert_eq!(c.probe_size.to_native(), 512);
    assert_eq!(c.bypass, 0);
    // Reads past the end are zero, partial reads work.
    let mut tail = [0xffu8; 8];
    h.dev.read_config(36, &mut tail);
    assert_eq!(tail, [0; 8]);
}

#[test]
fn bypass_is_the_only_writable_field() {
    let mut h = harness();
    h.dev.write_config(36, &[1]);
    let mut b = [0u8; 1];
    h.dev.read_config(36, &mut b);
    assert_eq!(b[0], 1);
    h.dev.write_config(36, &[7]); // invalid value: ignored
    h.dev.read_config(36, &mut b);
    assert_eq!(b[0], 1);
    h.dev.write_config(0, &[0xff]); // page_size_mask is read-only
    let mut m = [0u8; 1];
    h.dev.read_config(0, &mut m);
    assert_eq!(m[0], 0);
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: true })
    );
    // Without BYPASS_CONFIG the field is read-only.
    h.dev.set_acked_features(1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    h.dev.write_config(36, &[0]);
    h.dev.read_config(36, &mut b);
    assert_eq!(b[0], 1);
    // Device reset keeps it, system reset restores it.
    h.dev.reset();
    h.dev.read_config(36, &mut b);
    assert_eq!(b[0], 1);
    h.dev.system_reset();
    h.dev.read_config(36, &mut b);
    assert_eq!(b[0], 0);
}

#[test]
fn attach_map_unmap_reach_the_host() {
    let mut h = harness();
    let st = h.statuses(&[
        req::attach(5, 1, 0),
        map(5, 0x10_0000, 2),
        req::map(
            5,
            0x20_0000,
            0x20_0fff,
            DATA_BASE,
            wire::VIRTIO_IOMMU_MAP_F_READ,
        ),
    ]);
    assert_eq!(st, vec![OK; 3]);
    let m = h.mappers[0].mappings();
    assert_eq!(m.len(), 2);
    assert_eq!(
        m[0],
        (0x10_0000, 2 * PAGE, DATA_BASE + 0x10_0000, DmaPerm::RW)
    );
    assert_eq!(m[1], (0x20_0000, PAGE, DATA_BASE, DmaPerm::RO));
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(5)));
    assert_eq!(h.statuses(&[unmap(5, 0x10_0000, 0x10_2000)]), vec![OK]);
    assert_eq!(host(&h, 0), vec![(0x20_0000, PAGE)]);
    assert!(h.mappers[0].violations().is_empty());
}

#[test]
fn map_errors() {
    let mut h = Harness::new(
        DeviceConfig {
            max_mappings_per_domain: 3,
            reserved: vec![(0x4000_0000, 0x4000_ffff)],
            ..Default::default()
        },
        &[1, 2],
        64,
    );
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 0), map(1, 0x1000, 1)]),
        vec![OK; 2]
    );
    let b = DATA_BASE;
    let cases: Vec<(Vec<u8>, u8, &str)> = vec![
        (
            req::map(1, 0x8000, 0x8fff, b, 1 << 3),
            VIRTIO_IOMMU_S_INVAL,
            "unknown flag",
        ),
        (
            req::map(1, 0x8000, 0x8fff, b, wire::VIRTIO_IOMMU_MAP_F_MMIO),
            VIRTIO_IOMMU_S_INVAL,
            "MMIO without F_MMIO",
        ),
        (
            req::map(1, 0x8800, 0x8fff, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "unaligned start",
        ),
        (
            req::map(1, 0x8000, 0x8fff, b + 8, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "unaligned phys",
        ),
        (
            req::map(1, 0x8000, 0x8ffe, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "unaligned end",
        ),
        (
            req::map(1, 0x8000, 0x8000, b, req::RW),
            VIRTIO_IOMMU_S_INVAL,
            "end == start",
        ),
        (
            req::map(1, 0x9000, 0x8fff, b, req::RW),
            VIRTIO_IOMMU_S_INVAL,
            "end < start",
        ),
        (
            req::map(1, 1 << 48, (1 << 48) + 0xfff, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "input range",
        ),
        (
            req::map(1, 0, u64::MAX, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "whole space",
        ),
        (
            req::map(1, 0x1000, 0x1fff, b, req::RW),
            VIRTIO_IOMMU_S_INVAL,
            "overlap",
        ),
        (
            req::map(1, 0x0, 0x2fff, b, req::RW),
            VIRTIO_IOMMU_S_INVAL,
            "overlap around",
        ),
        (
            req::map(7, 0x8000, 0x8fff, b, req::RW),
            VIRTIO_IOMMU_S_NOENT,
            "no domain",
        ),
        (
            req::map(0x1_0000, 0x8000, 0x8fff, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "domain range",
        ),
        (
            req::map(1, 0xfee0_0000, 0xfee0_0fff, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "MSI window",
        ),
        (
            req::map(1, 0x4000_f000, 0x4001_0fff, b, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "reserved",
        ),
        (
            req::map(1, 0x8000, 0x8fff, MEM_SIZE, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "phys not RAM",
        ),
        (
            req::map(1, 0x8000, 0x8fff, u64::MAX - 0xfff, req::RW),
            VIRTIO_IOMMU_S_RANGE,
            "phys overflow",
        ),
    ];
    for (r, want, what) in cases {
        assert_eq!(h.statuses(&[r]), vec![s(want)], "{what}");
    }
    assert_eq!(
        host(&h, 0),
        vec![(0x1000, PAGE)],
        "no error reached the host"
    );
    // The mapping limit (3 per domain).
    let st = h.statuses(&[map(1, 0x10000, 1), map(1, 0x20000, 1), map(1, 0x30000, 1)]);
    assert_eq!(st, vec![OK, OK, s(VIRTIO_IOMMU_S_NOMEM)]);
    // MAP_UNMAP not negotiated.
    h.dev.set_acked_features(1 << VIRTIO_IOMMU_F_PROBE);
    assert_eq!(
        h.statuses(&[map(1, 0x50000, 1)]),
        vec![s(VIRTIO_IOMMU_S_UNSUPP)]
    );
    assert_eq!(
        h.statuses(&[unmap(1, 0, 0x1000)]),
        vec![s(VIRTIO_IOMMU_S_UNSUPP)]
    );
}

#[test]
fn mmio_flag_with_feature() {
    let mut h = Harness::new(
        DeviceConfig {
            offer_mmio: true,
            ..Default::default()
        },
        &[1],
        64,
    );
    let mmio = wire::VIRTIO_IOMMU_MAP_F_MMIO | req::RW;
    // MMIO mappings are not checked against guest RAM.
    let st = h.statuses(&[
        req::attach(1, 1, 0),
        req::map(1, 0x8000, 0x8fff, MEM_SIZE, mmio),
    ]);
    assert_eq!(st, vec![OK, OK]);
    assert_eq!(host(&h, 0), vec![(0x8000, PAGE)]);
}

/// The seven examples of the spec's UNMAP section, each on a blank domain.
#[test]
fn unmap_spec_examples() {
    let p = |x: u64| x * PAGE;
    type Ex = (Vec<(u64, u64)>, (u64, u64), u8, Vec<(u64, u64)>);
    let examples: Vec<Ex> = vec![
        (vec![], (0, 4), VIRTIO_IOMMU_S_OK, vec![]),
        (vec![(0, 9)], (0, 9), VIRTIO_IOMMU_S_OK, vec![]),
        (vec![(0, 4), (5, 9)], (0, 9), VIRTIO_IOMMU_S_OK, vec![]),
        (vec![(0, 9)], (0, 4), VIRTIO_IOMMU_S_RANGE, vec![(0, 9)]),
        (
            vec![(0, 4), (5, 9)],
            (0, 4),
            VIRTIO_IOMMU_S_OK,
            vec![(5, 9)],
        ),
        (vec![(0, 4)], (0, 9), VIRTIO_IOMMU_S_OK, vec![]),
        (vec![(0, 4), (10, 14)], (0, 14), VIRTIO_IOMMU_S_OK, vec![]),
    ];
    for (n, (maps, (us, ue), want, left)) in examples.into_iter().enumerate() {
        let mut h = Harness::new(DeviceConfig::default(), &[1], 64);
        let mut reqs = vec![req::attach(1, 1, 0)];
        for &(a, b) in &maps {
            reqs.push(req::map(1, p(a), p(b + 1) - 1, DATA_BASE, req::RW));
        }
        assert!(
            h.statuses(&reqs).iter().all(|&x| x == OK),
            "example {}",
            n + 1
        );
        let st = h.statuses(&[req::unmap(1, p(us), p(ue + 1) - 1)]);
        assert_eq!(st, vec![s(want)], "example {}", n + 1);
        let want_left: Vec<(u64, u64)> = left.iter().map(|&(a, b)| (p(a), p(b - a + 1))).collect();
        assert_eq!(host(&h, 0), want_left, "example {}", n + 1);
        let table: Vec<(u64, u64)> = h
            .dev
            .domain_mappings(1)
            .unwrap()
            .iter()
            .map(|m| (m.iova, m.size))
            .collect();
        assert_eq!(table, want_left, "example {}", n + 1);
    }
}

#[test]
fn unmap_errors() {
    let mut h = harness();
    h.statuses(&[req::attach(1, 1, 0)]);
    assert_eq!(
        h.statuses(&[unmap(9, 0, 0x1000)]),
        vec![s(VIRTIO_IOMMU_S_NOENT)]
    );
    assert_eq!(
        h.statuses(&[req::unmap(1, 0x2000, 0x1fff)]),
        vec![s(VIRTIO_IOMMU_S_INVAL)]
    );
    // Spilling over the whole address space is fine.
    assert_eq!(h.statuses(&[req::unmap(1, 0, u64::MAX)]), vec![OK]);
}

#[test]
fn attach_errors_and_moves() {
    let mut h = Harness::new(
        DeviceConfig {
            max_domains: 2,
            ..Default::default()
        },
        &[1, 2, 3],
        64,
    );
    let mut bad = req::attach(1, 1, 0);
    bad[16] = 1; // reserved
    assert_eq!(h.statuses(&[bad]), vec![s(VIRTIO_IOMMU_S_INVAL)]);
    assert_eq!(
        h.statuses(&[req::attach(1, 1, 4)]),
        vec![s(VIRTIO_IOMMU_S_INVAL)],
        "an unknown flag"
    );
    assert_eq!(
        h.statuses(&[req::attach(1, 99, 0)]),
        vec![s(VIRTIO_IOMMU_S_NOENT)]
    );
    assert_eq!(
        h.statuses(&[req::attach(0x1_0000, 1, 0)]),
        vec![s(VIRTIO_IOMMU_S_RANGE)]
    );
    let st = h.statuses(&[
        req::attach(1, 1, 0),
        req::attach(1, 1, 0), // again: no-op
        req::attach(2, 2, wire::VIRTIO_IOMMU_ATTACH_F_BYPASS),
        req::attach(2, 3, 0), // bypass flag inconsistent with domain 2
        req::attach(3, 3, 0), // third domain: over the limit
        map(2, 0x1000, 1),    // MAP on a bypass domain
        unmap(2, 0x1000, 0x2000),
    ]);
    assert_eq!(
        st,
        vec![
            OK,
            OK,
            OK,
            s(VIRTIO_IOMMU_S_INVAL),
            s(VIRTIO_IOMMU_S_NOMEM),
            s(VIRTIO_IOMMU_S_INVAL),
            s(VIRTIO_IOMMU_S_INVAL)
        ]
    );
    assert_eq!(h.dev.endpoint_state(2), Some(EndpointState::Bypass(2)));
    // Moving endpoint 1 from domain 1 to 2... (bypass) needs the flag; move
    // endpoint 2 to domain 1 instead: it leaves (and destroys) domain 2.
    assert_eq!(
        h.statuses(&[map(1, 0x1000, 1), req::attach(1, 2, 0)]),
        vec![OK, OK]
    );
    assert_eq!(h.dev.endpoint_state(2), Some(EndpointState::Translated(1)));
    assert!(h.dev.domain_mappings(2).is_none());
    // Endpoint 2's mapper got domain 1's mapping replayed.
    assert_eq!(host(&h, 1), vec![(0x1000, PAGE)]);
    // Later maps reach both mappers.
    assert_eq!(h.statuses(&[map(1, 0x5000, 1)]), vec![OK]);
    assert_eq!(host(&h, 0), host(&h, 1));
}

#[test]
fn attach_without_bypass_config_rejects_the_flag() {
    let mut h = harness();
    h.dev.set_acked_features(1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    let st = h.statuses(&[req::attach(1, 1, wire::VIRTIO_IOMMU_ATTACH_F_BYPASS)]);
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_INVAL)]);
}

#[test]
fn shared_mapper_cannot_span_domains() {
    let mem_mapper = Arc::new(FakeMapper::new());
    let mut h = Harness::new(DeviceConfig::default(), &[1], 64);
    h.dev.add_endpoint(10, mem_mapper.clone()).unwrap();
    h.dev.add_endpoint(11, mem_mapper.clone()).unwrap();
    assert!(matches!(
        h.dev.add_endpoint(10, mem_mapper.clone()),
        Err(Error::DuplicateEndpoint(10))
    ));
    let st = h.statuses(&[
        req::attach(1, 10, 0),
        req::attach(2, 11, 0),
        req::attach(1, 11, 0),
        map(1, 0x3000, 2),
    ]);
    assert_eq!(st, vec![OK, s(VIRTIO_IOMMU_S_UNSUPP), OK, OK]);
    // One mapper, programmed once per call although two endpoints use it.
    assert_eq!(mem_mapper.log().len(), 1);
    // Detaching one of the two keeps the mapping for the other.
    assert_eq!(h.statuses(&[req::detach(1, 10)]), vec![OK]);
    assert_eq!(mem_mapper.mappings().len(), 1);
    assert_eq!(h.statuses(&[req::detach(1, 11)]), vec![OK]);
    assert!(mem_mapper.mappings().is_empty());
}

#[test]
fn detach_removes_host_mappings_and_the_domain() {
    let mut h = harness();
    let mut reqs = vec![req::attach(1, 1, 0)];
    reqs.extend((0..6).map(|i| map(1, 0x10000 + i * PAGE, 1)));
    reqs.push(map(1, 0x80000, 1));
    h.statuses(&reqs);
    h.mappers[0].clear_log();
    let st = h.statuses(&[
        req::detach(1, 99),
        req::detach(2, 1),
        req::detach(1, 2),
        req::detach(1, 1),
        map(1, 0x1000, 1),
    ]);
    assert_eq!(
        st,
        vec![
            s(VIRTIO_IOMMU_S_NOENT),
            s(VIRTIO_IOMMU_S_INVAL),
            s(VIRTIO_IOMMU_S_INVAL),
            OK,
            s(VIRTIO_IOMMU_S_NOENT)
        ]
    );
    assert!(h.mappers[0].mappings().is_empty());
    // Adjacent mappings went in one call, the lone one in another.
    assert_eq!(
        h.mappers[0].log(),
        vec![
            FakeCall::Unmap {
                iova: 0x10000,
                size: 6 * PAGE
            },
            FakeCall::Unmap {
                iova: 0x80000,
                size: PAGE
            }
        ]
    );
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: false })
    );
}

#[test]
fn probe_reports_the_msi_window() {
    let mut h = Harness::new(
        DeviceConfig {
            reserved: vec![(0x1000_0000, 0x1000_ffff)],
            pool_hint: None,
            ..Default::default()
        },
        &[1],
        64,
    );
    let heads = h.queue(&[req::probe(1)]);
    let used = h.kick();
    assert_eq!(used[0].status, OK);
    assert_eq!(used[0].len, 512 + 4);
    // Read the properties back from the buffer.
    let addr = h.reqq.slot_addr(heads[0]) + 0x100;
    let mut props = vec![0u8; 512];
    h.mem.read_slice(&mut props, GuestAddress(addr)).unwrap();
    let msi = wire::ProbeResvMem::from_slice(&props[..24])
        .copied()
        .unwrap();
    assert_eq!(
        msi,
        wire::ProbeResvMem::new(wire::VIRTIO_IOMMU_RESV_MEM_T_MSI, 0xfee0_0000, 0xfeef_ffff)
    );
    let resv = wire::ProbeResvMem::from_slice(&props[24..48])
        .copied()
        .unwrap();
    assert_eq!(resv.subtype, wire::VIRTIO_IOMMU_RESV_MEM_T_RESERVED);
    assert_eq!(resv.start.to_native(), 0x1000_0000);
    assert!(props[48..].iter().all(|&b| b == 0), "rest zero-filled");

    assert_eq!(h.statuses(&[req::probe(42)]), vec![s(VIRTIO_IOMMU_S_NOENT)]);
    // A properties area smaller than probe_size.
    let r = req::probe(1);
    h.reqq.push(&*h.mem, &r, 100).unwrap();
    assert_eq!(h.kick()[0].status, s(VIRTIO_IOMMU_S_INVAL));
    // Larger than probe_size: refused, not zero-filled.
    h.reqq.push(&*h.mem, &r, 512 + 4 + 64).unwrap();
    assert_eq!(h.kick()[0].status, s(VIRTIO_IOMMU_S_IOERR));
    let huge = [
        (0x300_0000u64, 20u32, 0u16),
        (0x300_0100, u32::MAX - 0x1000, VRING_DESC_F_WRITE as u16),
    ];
    h.mem.write_slice(&r, GuestAddress(0x300_0000)).unwrap();
    h.reqq.push_raw(&*h.mem.clone(), &huge).unwrap();
    // Not guest memory: unanswerable.
    assert_eq!(h.kick()[0].len, 0);
}

#[test]
fn msi_window_is_a_parameter() {
    let mut h = Harness::new(
        DeviceConfig {
            msi_window: None,
            pool_hint: None,
            ..Default::default()
        },
        &[1],
        64,
    );
    let heads = h.queue(&[req::probe(1)]);
    h.kick();
    let mut props = vec![0u8; 24];
    h.mem
        .read_slice(&mut props, GuestAddress(h.reqq.slot_addr(heads[0]) + 0x100))
        .unwrap();
    assert!(props.iter().all(|&b| b == 0));
    let msi = req::map(1, 0xfee0_0000, 0xfee0_0fff, DATA_BASE, req::RW);
    assert_eq!(h.statuses(&[req::attach(1, 1, 0), msi]), vec![OK, OK]);
}

mod failures;
mod host_calls;
mod hostile;
mod lazy;
mod linux;
mod polling;
mod share;
mod smp;
mod two_endpoints;
mod virtqueue;
