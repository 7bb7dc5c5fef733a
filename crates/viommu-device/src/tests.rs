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

#[test]
fn malformed_chains() {
    let mut h = harness();
    let mem = h.mem.clone();
    let buf = 0x300_0000u64;
    let w = VRING_DESC_F_WRITE as u16;
    // Unknown type: returned unwritten with length 0.
    let mut unknown = req::attach(1, 1, 0);
    unknown[0] = 9;
    h.reqq.push(&*mem, &unknown, 4).unwrap();
    let u = h.kick();
    assert_eq!((u[0].len, u[0].status), (0, None));

    let attach = req::attach(1, 1, 0);
    // Short and overlong readable parts.
    h.reqq.push(&*mem, &attach[..19], 4).unwrap();
    let mut long = attach.clone();
    long.push(0);
    h.reqq.push(&*mem, &long, 4).unwrap();
    h.reqq.push(&*mem, &attach[..2], 4).unwrap(); // not even a head
                                                  // Writable part longer than a tail.
    h.reqq.push(&*mem, &attach, 8).unwrap();
    let st: Vec<_> = h.kick().iter().map(|u| u.status).collect();
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_IOERR); 4]);

    mem.write_slice(&attach, GuestAddress(buf)).unwrap();
    type Chain = Vec<(u64, u32, u16)>;
    let cases: Vec<(Chain, &str)> = vec![
        (
            vec![(buf, 20, 0), (buf + 0x100, 2, w)],
            "writable too short for a tail",
        ),
        (vec![(buf, 20, 0)], "no writable part"),
        (
            vec![(buf + 0x100, 4, w), (buf, 20, 0)],
            "readable after writable",
        ),
        (
            vec![(MEM_SIZE - 8, 20, 0), (buf + 0x100, 4, w)],
            "readable outside memory",
        ),
        (
            vec![(buf, 20, 0), (MEM_SIZE, 4, w)],
            "writable outside memory",
        ),
        (vec![(buf, 20, 0), (u64::MAX - 2, 4, w)], "writable wraps"),
        (
            // 16 readable pieces of the ATTACH plus the tail: 17 descriptors.
            (0..16u64)
                .map(|i| (buf + i, if i < 15 { 1 } else { 5 }, 0))
                .chain([(buf + 0x100, 4, w)])
                .collect(),
            "more than 16 descriptors",
        ),
        (
            // An indirect table (never offered) holding a valid request.
            vec![(buf + 0x200, 32, 4)],
            "indirect descriptor",
        ),
    ];
    // The table the indirect descriptor points to: ATTACH + tail.
    let table: Vec<u8> = [(buf, 20u32, 1u16, 1u16), (buf + 0x100, 4, 2, 0)]
        .iter()
        .flat_map(|&(a, l, f, n)| {
            let mut d = a.to_le_bytes().to_vec();
            d.extend(l.to_le_bytes());
            d.extend(f.to_le_bytes());
            d.extend(n.to_le_bytes());
            d
        })
        .collect();
    mem.write_slice(&table, GuestAddress(buf + 0x200)).unwrap();
    for (descs, what) in cases {
        mem.write_slice(&[0xa5; 4], GuestAddress(buf + 0x100))
            .unwrap();
        h.reqq.push_raw(&*mem, &descs).unwrap();
        let u = h.kick();
        assert_eq!(u.len(), 1, "{what}");
        assert_eq!(u[0].len, 0, "{what}");
        let mut t = [0u8; 4];
        mem.read_slice(&mut t, GuestAddress(buf + 0x100)).unwrap();
        assert_eq!(t, [0xa5; 4], "{what}: buffer untouched");
    }
    // A request split over several descriptors is fine.
    let split = vec![
        (buf, 7, 0),
        (buf + 7, 13, 0),
        (buf + 0x100, 2, w),
        (buf + 0x102, 2, w),
    ];
    mem.write_slice(&[0xa5; 4], GuestAddress(buf + 0x100))
        .unwrap();
    h.reqq.push_raw(&*mem, &split).unwrap();
    let u = h.kick();
    assert_eq!(u[0].len, 4);
    let mut t = [0xa5u8; 4];
    mem.read_slice(&mut t, GuestAddress(buf + 0x100)).unwrap();
    assert_eq!(t, [VIRTIO_IOMMU_S_OK, 0, 0, 0]);
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
    assert_eq!(h.dev.counters().requests.malformed, 13);
}

#[test]
fn one_used_update_and_one_interrupt_per_batch() {
    let mut h = harness();
    let mut reqs = vec![req::attach(1, 1, 0)];
    reqs.extend((0..20).map(|i| map(1, 0x10000 + i * PAGE, 1)));
    let u = h.send(&reqs);
    assert_eq!(u.len(), 21);
    assert!(u.iter().all(|u| u.status == OK));
    assert_eq!(h.irq.get(0), 1);
    let c = h.dev.counters();
    assert_eq!(c.batches, 1);
    assert_eq!(c.batch_sizes[4], 1, "21 requests: bucket 16..=31");
    assert_eq!(c.requests.map, 20);
    assert_eq!(c.requests.attach, 1);
    assert_eq!(c.backend.map_calls, 20);
    assert_eq!(c.backend.bytes_mapped, 20 * PAGE);
    assert_eq!(c.interrupts, 1);

    // Batching off: one completion and one interrupt per request (without
    // EVENT_IDX, so that the driver asks for every interrupt).
    let mut h = Harness::new(
        DeviceConfig {
            batching: false,
            ..Default::default()
        },
        &[1],
        64,
    );
    reactivate(&mut h, 1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    h.send(&reqs);
    assert_eq!(h.irq.get(0), 21);
    assert_eq!(h.dev.counters().batches, 21);
    assert_eq!(h.dev.counters().batch_sizes[0], 21);
}

#[test]
fn event_idx_and_no_interrupt_are_honoured() {
    let mut h = harness();
    // EVENT_IDX acked (Harness acks all): used_event far ahead, no interrupt.
    h.reqq.set_used_event(&*h.mem, 100);
    h.send(&[req::attach(1, 1, 0), map(1, 0x1000, 1)]);
    assert_eq!(h.irq.get(0), 0);
    // used_event = 2 lies in [2, 4): interrupt.
    h.reqq.set_used_event(&*h.mem, 2);
    h.send(&[map(1, 0x2000, 1), map(1, 0x3000, 1)]);
    assert_eq!(h.irq.get(0), 1);

    // Without EVENT_IDX, the avail flag suppresses interrupts.
    let mut h = harness();
    h.dev.reset();
    let mut h2 = Harness::new(DeviceConfig::default(), &[1], 64);
    reactivate(&mut h2, 1 << VIRTIO_IOMMU_F_MAP_UNMAP);
    h2.reqq
        .set_avail_flags(&*h2.mem, VRING_AVAIL_F_NO_INTERRUPT as u16);
    h2.send(&[req::attach(1, 1, 0)]);
    assert_eq!(h2.irq.get(0), 0);
    h2.reqq.set_avail_flags(&*h2.mem, 0);
    h2.send(&[req::detach(1, 1)]);
    assert_eq!(h2.irq.get(0), 1);
    assert!(matches!(
        h.dev.process_request_queue(),
        Err(Error::NotActivated)
    ));
}

#[test]
fn unmap_bursts_coalesce_only_when_batching() {
    for (batching, calls) in [(true, 1usize), (false, 16)] {
        let mut h = Harness::new(
            DeviceConfig {
                batching,
                ..Default::default()
            },
            &[1],
            64,
        );
        let mut reqs = vec![req::attach(1, 1, 0)];
        reqs.extend((0..16).map(|i| map(1, 0x100000 - (i + 1) * PAGE, 1)));
        h.send(&reqs);
        h.mappers[0].clear_log();
        // A burst of deferred unmaps, in allocation (descending) order.
        let reqs: Vec<Vec<u8>> = (0..16)
            .map(|i| unmap(1, 0x100000 - (i + 1) * PAGE, 0x100000 - i * PAGE))
            .collect();
        assert!(h.send(&reqs).iter().all(|u| u.status == OK));
        assert_eq!(h.mappers[0].log().len(), calls, "batching {batching}");
        assert!(h.mappers[0].mappings().is_empty());
    }
}

#[test]
fn cancelling_map_unmap_pair_skips_the_host() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0)]);
    h.mappers[0].clear_log();
    let st = h.statuses(&[
        map(1, 0x1000, 1),
        map(1, 0x8000, 1),
        unmap(1, 0x1000, 0x2000),
    ]);
    assert_eq!(st, vec![OK; 3]);
    assert_eq!(h.mappers[0].log().len(), 1);
    assert_eq!(h.dev.counters().elided_maps, 1);
}

#[test]
fn backend_failures_stay_per_request() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0)]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Map { iova: 0x2000, .. }));
    let st = h.statuses(&[map(1, 0x1000, 1), map(1, 0x2000, 1), map(1, 0x3000, 1)]);
    assert_eq!(st, vec![OK, s(VIRTIO_IOMMU_S_DEVERR), OK]);
    // Nothing there any more: OK, and no host call.
    assert_eq!(h.statuses(&[unmap(1, 0x2000, 0x3000)]), vec![OK]);
    // In one batch, a MAP cancelled by an UNMAP never reaches the host, so
    // the failure the host would have returned never happens.
    let st = h.statuses(&[map(1, 0x2000, 1), unmap(1, 0x2000, 0x3000)]);
    assert_eq!(st, vec![OK, OK]);
    assert_eq!(host(&h, 0), vec![(0x1000, PAGE), (0x3000, PAGE)]);
    h.mappers[0].fail_when(|c| matches!(c, FakeCall::Unmap { .. }));
    let st = h.statuses(&[unmap(1, 0x1000, 0x2000), unmap(1, 0x3000, 0x4000)]);
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_DEVERR); 2]);
    // Failed unmaps leave the mappings in the table and on the host.
    assert_eq!(h.dev.domain_mappings(1).unwrap().len(), 2);
    assert_eq!(host(&h, 0).len(), 2);
    // Detach fails too (when even unmap-all fails) and keeps the endpoint
    // attached.
    h.mappers[0].fail_unmap_all();
    assert_eq!(
        h.statuses(&[req::detach(1, 1)]),
        vec![s(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert_eq!(h.dev.endpoint_state(1), Some(EndpointState::Translated(1)));
    h.mappers[0].fail_never();
    assert_eq!(h.statuses(&[req::detach(1, 1)]), vec![OK]);
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.dev.counters().backend.failures() >= 4);
    assert!(h.mappers[0].violations().is_empty());
}

#[test]
fn attach_replay_failure_is_rolled_back() {
    let mut h = harness();
    h.send(&[req::attach(1, 1, 0), map(1, 0x1000, 1), map(1, 0x5000, 1)]);
    h.mappers[1].fail_when(|c| matches!(c, FakeCall::Map { iova: 0x5000, .. }));
    assert_eq!(
        h.statuses(&[req::attach(1, 2, 0)]),
        vec![s(VIRTIO_IOMMU_S_DEVERR)]
    );
    assert!(h.mappers[1].mappings().is_empty());
    assert_eq!(
        h.dev.endpoint_state(2),
        Some(EndpointState::Unattached { bypass: false })
    );
}

#[test]
fn faults_go_to_the_event_queue() {
    let mut h = Harness::new(
        DeviceConfig {
            max_pending_events: 2,
            ..Default::default()
        },
        &[1],
        64,
    );
    let f = FaultReport {
        reason: wire::VIRTIO_IOMMU_FAULT_R_MAPPING,
        flags: wire::VIRTIO_IOMMU_FAULT_F_WRITE | wire::VIRTIO_IOMMU_FAULT_F_ADDRESS,
        endpoint: 1,
        address: 0xdead_0000,
    };
    // No buffer yet: kept.
    h.dev.report_fault(f).unwrap();
    h.dev.report_fault(f).unwrap();
    h.dev.report_fault(f).unwrap(); // over the backlog: dropped
    assert_eq!(h.dev.counters().events_dropped, 1);
    let mem = h.mem.clone();
    let b0 = h.evq.slot_addr(0);
    h.evq
        .push_raw(&*mem, &[(b0, 24, VRING_DESC_F_WRITE as u16)])
        .unwrap();
    h.evq
        .push_raw(&*mem, &[(b0 + 0x100, 8, VRING_DESC_F_WRITE as u16)])
        .unwrap(); // too small
    h.dev.process_event_queue().unwrap();
    let used = h.evq.poll(&*mem);
    assert_eq!(used.iter().map(|u| u.len).collect::<Vec<_>>(), vec![24, 0]);
    let ev: wire::Fault = mem.read_obj(GuestAddress(b0)).unwrap();
    assert_eq!(ev.reason, wire::VIRTIO_IOMMU_FAULT_R_MAPPING);
    assert_eq!(ev.endpoint.to_native(), 1);
    assert_eq!(ev.address.to_native(), 0xdead_0000);
    assert_eq!(h.irq.get(1), 1);
    assert_eq!(h.dev.counters().events_reported, 1);
    // The second fault is still pending; the next buffer gets it.
    h.evq
        .push_raw(&*mem, &[(b0 + 0x200, 64, VRING_DESC_F_WRITE as u16)])
        .unwrap();
    h.dev.process_event_queue().unwrap();
    assert_eq!(h.evq.poll(&*mem)[0].len, 24);
}

#[test]
fn reset_destroys_domains() {
    let mut h = harness();
    h.send(&[
        req::attach(1, 1, 0),
        map(1, 0x1000, 2),
        req::attach(2, 2, 0),
        map(2, 0x1000, 1),
    ]);
    h.dev.reset();
    assert!(!h.dev.is_activated());
    assert!(h.mappers[0].mappings().is_empty());
    assert!(h.mappers[1].mappings().is_empty());
    assert!(h.dev.domain_mappings(1).is_none());
    assert_eq!(h.dev.acked_features(), 0);
    assert_eq!(
        h.dev.endpoint_state(1),
        Some(EndpointState::Unattached { bypass: false })
    );
}

#[test]
fn bad_configurations_are_refused() {
    use crate::testing::TestMem;
    let bad = |cfg: DeviceConfig| VirtioIommu::<TestMem>::new(cfg).is_err();
    assert!(bad(DeviceConfig {
        page_size_mask: 0,
        ..Default::default()
    }));
    assert!(bad(DeviceConfig {
        input_range: (0, u64::MAX),
        ..Default::default()
    }));
    assert!(bad(DeviceConfig {
        domain_range: (5, 4),
        ..Default::default()
    }));
    let mut dev = VirtioIommu::<TestMem>::new(DeviceConfig {
        page_size_mask: 1 << 9,
        ..Default::default()
    })
    .unwrap();
    // A 4 KiB mapper cannot serve a 512-byte granule.
    assert!(matches!(
        dev.add_endpoint(1, Arc::new(FakeMapper::new())),
        Err(Error::Granule { .. })
    ));
}

#[test]
fn corrupt_avail_index_does_not_hang() {
    for batching in [true, false] {
        let mut h = Harness::new(
            DeviceConfig {
                batching,
                ..Default::default()
            },
            &[1],
            64,
        );
        h.send(&[req::attach(1, 1, 0)]);
        // More than a queue size ahead of what the device consumed.
        h.reqq.set_avail_idx(&*h.mem, 1 + 64 + 5);
        assert_eq!(h.dev.process_request_queue().unwrap(), Drained::Empty);
        h.reqq.set_avail_idx(&*h.mem, 0);
        assert_eq!(h.dev.process_request_queue().unwrap(), Drained::Empty);
    }
}

/// The device against dma-mapper's own software address space (type1-like
/// rules) behind its recording wrapper with fault injection.
#[test]
fn with_dma_mapper_software_space_and_recorder() {
    use dma_mapper::{FaultPlan, RecordingMapper, SoftAddressSpace, PAGE_SIZE_4K_MASK};

    use crate::testing::workload::{kicks, Pattern};

    let mut h = Harness::new(DeviceConfig::default(), &[], 256);
    let soft = SoftAddressSpace::for_memory(&*h.mem, PAGE_SIZE_4K_MASK);
    let rec = Arc::new(RecordingMapper::new(soft));
    h.dev.add_endpoint(1, rec.clone()).unwrap();
    assert_eq!(h.statuses(&[req::attach(1, 1, 0)]), vec![OK]);

    // Invariant 3 through a real translation: reachable after MAP, not after UNMAP.
    let iova = 0x40_0000;
    assert_eq!(h.statuses(&[map(1, iova, 4)]), vec![OK]);
    assert_eq!(
        rec.inner().translate(iova + 8, 8, DmaPerm::RW),
        Ok(DATA_BASE + iova + 8)
    );
    assert_eq!(h.statuses(&[unmap(1, iova, iova + 4 * PAGE)]), vec![OK]);
    assert!(rec.inner().translate(iova + 8, 8, DmaPerm::RO).is_err());

    let before = rec.stats();
    for kick in kicks(Pattern::DeferredBursts, 64 * 1024, 32, 200, 1) {
        assert!(h.send(&kick).iter().all(|u| u.status == OK));
    }
    let after = rec.stats();
    assert_eq!(after.map_calls - before.map_calls, 200);
    assert_eq!(after.unmap_calls - before.unmap_calls, 7);
    assert_eq!(after.map_failures + after.unmap_failures, 0);
    assert_eq!(rec.inner().mapping_count(), 0);

    // An injected failure on the next call: that MAP alone fails.
    rec.set_faults(FaultPlan::fail_calls([rec.next_seq()]));
    let st = h.statuses(&[map(1, 0x1000, 1), map(1, 0x2000, 1)]);
    assert_eq!(st, vec![s(VIRTIO_IOMMU_S_DEVERR), OK]);
    assert_eq!(rec.inner().mappings().len(), 1);
    assert_eq!(h.dev.domain_mappings(1).unwrap().len(), 1);
}

mod failures;
mod hostile;
mod lazy;
mod linux;
mod polling;
mod share;
mod smp;
mod two_endpoints;
