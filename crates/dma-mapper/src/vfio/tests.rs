//! VfioMapper against a fake type1 v2 container.

use std::collections::BTreeMap;

use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Map {
        iova: u64,
        size: u64,
        vaddr: u64,
        perm: DmaPerm,
    },
    Unmap {
        iova: u64,
        size: u64,
    },
    UnmapAll,
}

/// What the kernel would do, type1 v2 rules: whole mappings only, EEXIST on
/// overlap, bytes unmapped reported back.
#[derive(Default)]
struct FakeState {
    /// iova -> (size, vaddr, perm)
    maps: BTreeMap<u64, (u64, u64, DmaPerm)>,
    calls: Vec<Call>,
    /// Fail the map call with this index (0-based over map calls) with EFAULT.
    fail_map: Option<usize>,
    maps_seen: usize,
    /// Pretend UNMAP_ALL is unsupported (pre-5.12 kernel).
    no_unmap_all: bool,
    /// Fail this many of the next unmap calls with EIO.
    fail_unmaps: usize,
    /// Report this many bytes for the next unmap instead of the truth.
    lie_unmapped: Option<u64>,
    pgsizes: Option<u64>,
    /// iommufd's `IOMMU_IOAS_UNMAP` answers instead of type1's: `ENOENT`
    /// for a bisecting range (type1: `EINVAL`) and for a range with
    /// nothing mapped (type1: success, 0 bytes).
    iommufd_rules: bool,
}

#[derive(Default)]
struct FakeContainer(Mutex<FakeState>);

impl FakeContainer {
    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.0.lock().unwrap()
    }
    fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }
    fn host_maps(&self) -> Vec<(u64, u64, DmaPerm)> {
        self.state()
            .maps
            .iter()
            .map(|(i, (s, _, p))| (*i, *s, *p))
            .collect()
    }
}

impl ContainerOps for FakeContainer {
    unsafe fn map_dma(&self, iova: u64, size: u64, vaddr: u64, perm: DmaPerm) -> io::Result<()> {
        let mut st = self.state();
        st.calls.push(Call::Map {
            iova,
            size,
            vaddr,
            perm,
        });
        let idx = st.maps_seen;
        st.maps_seen += 1;
        if st.fail_map == Some(idx) {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        assert!(perm.any(), "no-access mappings must not reach the host");
        let end = iova + size;
        if st
            .maps
            .iter()
            .any(|(i, (s, _, _))| *i < end && iova < i + s)
        {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        st.maps.insert(iova, (size, vaddr, perm));
        Ok(())
    }

    fn unmap_dma(&self, iova: u64, size: u64) -> io::Result<u64> {
        let mut st = self.state();
        st.calls.push(Call::Unmap { iova, size });
        if st.fail_unmaps > 0 {
            st.fail_unmaps -= 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let end = iova + size;
        let bisects = st
            .maps
            .iter()
            .any(|(i, (s, _, _))| *i < end && iova < i + s && (*i < iova || i + s > end));
        if bisects {
            let errno = if st.iommufd_rules {
                libc::ENOENT
            } else {
                libc::EINVAL
            };
            return Err(io::Error::from_raw_os_error(errno));
        }
        let inside: Vec<u64> = st.maps.range(iova..end).map(|(i, _)| *i).collect();
        if inside.is_empty() && st.iommufd_rules {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let mut n = 0;
        for i in inside {
            n += st.maps.remove(&i).unwrap().0;
        }
        Ok(st.lie_unmapped.take().unwrap_or(n))
    }

    fn unmap_all_dma(&self) -> io::Result<u64> {
        let mut st = self.state();
        st.calls.push(Call::UnmapAll);
        if st.no_unmap_all {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let n = st.maps.values().map(|(s, _, _)| s).sum();
        st.maps.clear();
        Ok(n)
    }

    fn iova_pgsizes(&self) -> io::Result<u64> {
        self.state()
            .pgsizes
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }
}

const PAGE: u64 = 0x1000;

/// Two regions that are adjacent in guest-physical space but (being two
/// mmaps) almost surely not in host space, and a third after a hole.
fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x10_000),
        (GuestAddress(0x10_000), 0x10_000),
        (GuestAddress(0x40_000), 0x10_000),
    ])
    .unwrap()
}

fn mapper(fake: FakeContainer) -> VfioMapper<FakeContainer> {
    // SAFETY: test memory is only touched through vm-memory (never here).
    unsafe { VfioMapper::new(Arc::new(fake), memory()) }
}

fn hva(m: &VfioMapper<FakeContainer>, gpa: u64) -> u64 {
    m.mem.get_host_address(GuestAddress(gpa)).unwrap() as u64
}

#[test]
fn page_mask_from_container_or_4k() {
    let m = mapper(FakeContainer::default());
    assert_eq!(m.page_size_mask(), PAGE_SIZE_4K_MASK);
    let fake = FakeContainer::default();
    fake.state().pgsizes = Some(0x4020_1000);
    let m = mapper(fake);
    assert_eq!(m.page_size_mask(), 0x4020_1000);
}

#[test]
fn host_runs_split_at_region_boundaries() {
    let mem = memory();
    let h = |g| mem.get_host_address(GuestAddress(g)).unwrap() as u64;
    assert_eq!(
        host_runs(&mem, 0x1000, 0x2000).unwrap(),
        vec![HostRun {
            offset: 0,
            vaddr: h(0x1000),
            len: 0x2000
        }]
    );
    let runs = host_runs(&mem, 0xe000, 0x4000).unwrap();
    let total: u64 = runs.iter().map(|r| r.len).sum();
    assert_eq!(total, 0x4000);
    if h(0xffff) + 1 == h(0x10_000) {
        assert_eq!(runs.len(), 1, "host-adjacent regions merge");
    } else {
        assert_eq!(
            runs,
            vec![
                HostRun {
                    offset: 0,
                    vaddr: h(0xe000),
                    len: 0x2000
                },
                HostRun {
                    offset: 0x2000,
                    vaddr: h(0x10_000),
                    len: 0x2000
                },
            ]
        );
    }
    // Into the hole after the second region.
    assert!(matches!(
        host_runs(&mem, 0x1f_000, 0x2000),
        Err(DmaError::InvalidGpa {
            gpa: 0x1f_000,
            size: 0x2000
        })
    ));
    assert!(host_runs(&mem, 0x30_000, PAGE).is_err());
    assert!(host_runs(&mem, u64::MAX - 0xfff, 0x2000).is_err());
}

#[test]
fn map_translates_and_keeps_perms() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0x2000, PAGE, DmaPerm::RO).unwrap();
    m.map(0x200_000, 0x3000, 2 * PAGE, DmaPerm::WO).unwrap();
    m.map(0x300_000, 0x5000, PAGE, DmaPerm::RW).unwrap();
    assert_eq!(
        m.container().calls(),
        vec![
            Call::Map {
                iova: 0x100_000,
                size: PAGE,
                vaddr: hva(&m, 0x2000),
                perm: DmaPerm::RO
            },
            Call::Map {
                iova: 0x200_000,
                size: 2 * PAGE,
                vaddr: hva(&m, 0x3000),
                perm: DmaPerm::WO
            },
            Call::Map {
                iova: 0x300_000,
                size: PAGE,
                vaddr: hva(&m, 0x5000),
                perm: DmaPerm::RW
            },
        ]
    );
    assert_eq!(m.mapping_count(), 3);
}

#[test]
fn map_across_regions_is_one_mapping_of_several_host_calls() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0xe000, 0x4000, DmaPerm::RW).unwrap();
    let maps = m.container().host_maps();
    let total: u64 = maps.iter().map(|(_, s, _)| s).sum();
    assert_eq!(total, 0x4000);
    assert_eq!(m.mapping_count(), 1);
    // Unmapping half of it splits the guest's mapping even though the
    // host holds two mappings that would allow it.
    if maps.len() == 2 {
        assert!(matches!(
            m.unmap(0x100_000, 0x2000),
            Err(DmaError::SplitMapping { .. })
        ));
    }
    m.unmap(0x100_000, 0x4000).unwrap();
    assert!(m.container().host_maps().is_empty());
    assert_eq!(m.mapping_count(), 0);
}

#[test]
fn failed_host_map_rolls_back_earlier_runs() {
    let mem = memory();
    let split = mem.get_host_address(GuestAddress(0xffff)).unwrap() as u64 + 1
        != mem.get_host_address(GuestAddress(0x10_000)).unwrap() as u64;
    if !split {
        return; // the two mmaps happen to be adjacent: nothing to roll back
    }
    let fake = FakeContainer::default();
    fake.state().fail_map = Some(1);
    let m = mapper(fake);
    let err = m.map(0x100_000, 0xe000, 0x4000, DmaPerm::RW).unwrap_err();
    assert!(matches!(err, DmaError::Host { op: "map", .. }), "{err:?}");
    assert!(m.container().host_maps().is_empty());
    assert_eq!(m.mapping_count(), 0);
    assert_eq!(
        m.container().calls().last(),
        Some(&Call::Unmap {
            iova: 0x100_000,
            size: 0x2000
        })
    );
}

/// A failed multi-run map whose undo fails too: the piece left on the
/// host is reported (`Leftover`), kept as a leftover (no later map can
/// overlap it), retried before the next call, and removed by unmap-all.
#[test]
fn failed_rollback_of_a_multi_run_map_is_reported_and_kept() {
    let mem = memory();
    let split = mem.get_host_address(GuestAddress(0xffff)).unwrap() as u64 + 1
        != mem.get_host_address(GuestAddress(0x10_000)).unwrap() as u64;
    if !split {
        return; // the two mmaps happen to be adjacent: one run, no undo
    }
    let fake = FakeContainer::default();
    fake.state().fail_map = Some(1);
    fake.state().fail_unmaps = 4; // the undo, and three retries
    let m = mapper(fake);
    let err = m.map(0x100_000, 0xe000, 0x4000, DmaPerm::RW).unwrap_err();
    assert!(
        matches!(err, DmaError::Leftover { left: 0x2000, .. }),
        "{err:?}"
    );
    assert_eq!(m.leftovers(), vec![(0x100_000, 0x2000)]);
    assert_eq!(m.container().host_maps().len(), 1, "the host kept run 1");
    assert_eq!(m.mapping_count(), 0, "no guest mapping");
    // The next call retries it (and fails again): a map over it is refused
    // before the host sees it.
    assert!(matches!(
        m.map(0x100_000, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert!(DmaMapper::has_leftovers(&m));
    // Unmap-all removes it with the rest.
    m.map(0x200_000, 0, PAGE, DmaPerm::RW).unwrap();
    assert_eq!(m.unmap_all().unwrap(), 0x2000 + PAGE);
    assert!(m.container().host_maps().is_empty());
    assert!(!DmaMapper::has_leftovers(&m));
    // A leftover the retry removes frees its range.
    m.container().state().fail_map = Some(3);
    m.container().state().maps_seen = 2;
    m.container().state().fail_unmaps = 1;
    assert!(matches!(
        m.map(0x100_000, 0xe000, 0x4000, DmaPerm::RW),
        Err(DmaError::Leftover { .. })
    ));
    m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
    assert!(!DmaMapper::has_leftovers(&m));
    assert_eq!(m.container().host_maps().len(), 1);
}

/// A mapping whose owner's rollback failed (`DmaMapper::disown`, from a
/// fan-out over several mappers) leaves the table and becomes a leftover:
/// reported, refused to later maps while the host keeps it, retried, and
/// removed by unmap-all. A no-access mapping was never on the host.
#[test]
fn a_disowned_mapping_is_a_leftover_until_the_host_removes_it() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    m.map(0x200_000, 0, PAGE, DmaPerm::NONE).unwrap();
    m.container().state().fail_unmaps = 2; // two retries fail
    DmaMapper::disown(&m, 0x100_000, 2 * PAGE);
    DmaMapper::disown(&m, 0x200_000, PAGE);
    assert_eq!(m.mapping_count(), 0, "no longer the caller's");
    assert_eq!(m.leftovers(), vec![(0x100_000, 2 * PAGE)]);
    assert!(DmaMapper::has_leftovers(&m), "retried, still there");
    assert!(matches!(
        m.map(0x101_000, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert_eq!(m.container().host_maps().len(), 1, "still on the host");
    // The next retry succeeds.
    assert!(!DmaMapper::has_leftovers(&m));
    assert!(m.container().host_maps().is_empty());
    // Unmap-all counts and removes one as well.
    m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
    m.container().state().fail_unmaps = 1;
    DmaMapper::disown(&m, 0x100_000, PAGE);
    assert!(DmaMapper::has_leftovers(&m));
    assert_eq!(m.unmap_all().unwrap(), PAGE);
    assert!(!DmaMapper::has_leftovers(&m));
}

#[test]
fn map_validates_before_any_host_call() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    let before = m.container().calls().len();
    assert!(matches!(
        m.map(0x101_000, 0x8000, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert!(matches!(
        m.map(0x200_000, 0x30_000, PAGE, DmaPerm::RW),
        Err(DmaError::InvalidGpa { .. })
    ));
    assert!(matches!(
        m.map(0x200_800, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Unaligned { .. })
    ));
    assert!(matches!(
        m.map(0x200_000, 0, 0, DmaPerm::RW),
        Err(DmaError::InvalidRange { .. })
    ));
    assert_eq!(m.container().calls().len(), before);
}

#[test]
fn host_eexist_is_overlap() {
    let fake = FakeContainer::default();
    // Someone else mapped this iova in the container behind our back.
    fake.state().maps.insert(0x100_000, (PAGE, 0, DmaPerm::RW));
    let m = mapper(fake);
    assert!(matches!(
        m.map(0x100_000, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert_eq!(m.mapping_count(), 0);
}

#[test]
fn no_access_mapping_is_tracked_but_not_on_host() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, 2 * PAGE, DmaPerm::NONE).unwrap();
    assert!(m.container().calls().is_empty());
    assert!(matches!(
        m.map(0x101_000, 0, PAGE, DmaPerm::RW),
        Err(DmaError::Overlap { .. })
    ));
    assert!(matches!(
        m.unmap(0x100_000, PAGE),
        Err(DmaError::SplitMapping { .. })
    ));
    m.unmap(0x100_000, 2 * PAGE).unwrap();
    assert!(m.container().calls().is_empty());
    assert_eq!(m.mapping_count(), 0);
}

#[test]
fn unmap_whole_mappings_with_holes_in_one_call() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
    m.map(0x101_000, 0x1000, PAGE, DmaPerm::RO).unwrap();
    m.map(0x108_000, 0x8000, PAGE, DmaPerm::RW).unwrap();
    let n = m.container().calls().len();
    // One host call for three mappings and the holes between them; the
    // kernel reports 3 pages for a 16-page range, which is right.
    m.unmap(0x100_000, 0x10_000).unwrap();
    assert_eq!(
        &m.container().calls()[n..],
        &[Call::Unmap {
            iova: 0x100_000,
            size: 0x10_000
        }]
    );
    assert_eq!(m.mapping_count(), 0);
    // A range holding nothing makes no host call.
    m.unmap(0x100_000, 0x10_000).unwrap();
    assert_eq!(m.container().calls().len(), n + 1);
}

#[test]
fn split_unmap_refused_before_the_host() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, 4 * PAGE, DmaPerm::RW).unwrap();
    let n = m.container().calls().len();
    for (iova, size) in [(0x100_000, PAGE), (0x101_000, PAGE), (0xff_000, 2 * PAGE)] {
        assert!(matches!(
            m.unmap(iova, size),
            Err(DmaError::SplitMapping { .. })
        ));
    }
    assert_eq!(m.container().calls().len(), n);
    assert_eq!(m.container().host_maps().len(), 1);
}

#[test]
fn kernel_disagreement_is_a_host_error() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    m.map(0x200_000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    // The kernel reports a different byte count: the table follows the
    // kernel (which removed everything in range) and the error says so.
    m.container().state().lie_unmapped = Some(PAGE);
    let err = m.unmap(0x100_000, 2 * PAGE).unwrap_err();
    match &err {
        DmaError::Host { op, source, .. } => {
            assert_eq!(*op, "unmap");
            assert_eq!(source.kind(), io::ErrorKind::InvalidData);
            assert!(source.to_string().contains("0x1000"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.mapping_count(), 1);
    // The kernel refuses (EINVAL) what the table thought whole: the host
    // mapping was split behind our back. Host error, table unchanged.
    m.container()
        .state()
        .maps
        .insert(0x1ff_000, (2 * PAGE, 0, DmaPerm::RW));
    let err = m.unmap(0x200_000, 2 * PAGE).unwrap_err();
    assert!(
        matches!(&err, DmaError::Host { source, .. } if source.raw_os_error() == Some(libc::EINVAL))
    );
    assert_eq!(m.mapping_count(), 1);
}

#[test]
fn unmap_all_uses_flag_all() {
    let m = mapper(FakeContainer::default());
    m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
    m.map(0x200_000, 0, 2 * PAGE, DmaPerm::RO).unwrap();
    m.map(0x300_000, 0, PAGE, DmaPerm::NONE).unwrap();
    assert_eq!(m.unmap_all().unwrap(), 3 * PAGE);
    assert_eq!(m.container().calls().last(), Some(&Call::UnmapAll));
    assert_eq!(m.mapping_count(), 0);
    assert!(m.container().host_maps().is_empty());
}

#[test]
fn unmap_all_falls_back_to_runs_of_adjacent_mappings() {
    let fake = FakeContainer::default();
    fake.state().no_unmap_all = true;
    let m = mapper(fake);
    m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
    m.map(0x101_000, 0x4000, PAGE, DmaPerm::RW).unwrap();
    m.map(0x200_000, 0, PAGE, DmaPerm::RW).unwrap();
    let n = m.container().calls().len();
    assert_eq!(m.unmap_all().unwrap(), 3 * PAGE);
    assert_eq!(
        &m.container().calls()[n..],
        &[
            Call::UnmapAll,
            Call::Unmap {
                iova: 0x100_000,
                size: 2 * PAGE
            },
            Call::Unmap {
                iova: 0x200_000,
                size: PAGE
            },
        ]
    );
    assert!(m.container().host_maps().is_empty());
}

#[test]
fn drop_unmaps_everything() {
    let fake = Arc::new(FakeContainer::default());
    {
        // SAFETY: test memory is only touched through vm-memory.
        let m = unsafe { VfioMapper::new(fake.clone(), memory()) };
        m.map(0x100_000, 0, PAGE, DmaPerm::RW).unwrap();
        assert_eq!(fake.host_maps().len(), 1);
    }
    assert!(fake.host_maps().is_empty());
}

fn cap(id: u16, next: u32, body: &[u8]) -> Vec<u8> {
    let mut c = Vec::new();
    c.extend_from_slice(&id.to_le_bytes());
    c.extend_from_slice(&1u16.to_le_bytes());
    c.extend_from_slice(&next.to_le_bytes());
    c.extend_from_slice(body);
    c
}

#[test]
fn iova_ranges_from_the_capability_chain() {
    // Info header (24 bytes), a migration cap at 24, the IOVA cap at 48.
    let mut buf = vec![0u8; 24];
    buf.extend(cap(2, 48, &[0; 16]));
    let mut body = Vec::new();
    body.extend_from_slice(&2u32.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    for (a, b) in [(0u64, 0xfedf_ffffu64), (0xfef0_0000, 0x7f_ffff_ffff)] {
        body.extend_from_slice(&a.to_le_bytes());
        body.extend_from_slice(&b.to_le_bytes());
    }
    buf.extend(cap(1, 0, &body));
    assert_eq!(
        parse_iova_ranges(&buf, 24),
        Some(vec![(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)])
    );
    // Truncated, looping or missing chains are refused without panicking.
    assert_eq!(parse_iova_ranges(&buf[..buf.len() - 4], 24), None);
    assert_eq!(parse_iova_ranges(&buf, 0), None);
    assert_eq!(parse_iova_ranges(&buf, 10_000), None);
    let mut looped = vec![0u8; 24];
    looped.extend(cap(2, 24, &[]));
    assert_eq!(parse_iova_ranges(&looped, 24), None);
    // A range with start > end is corrupt.
    let mut bad = vec![0u8; 24];
    let mut body = 1u32.to_le_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(&5u64.to_le_bytes());
    body.extend_from_slice(&4u64.to_le_bytes());
    bad.extend(cap(1, 0, &body));
    assert_eq!(parse_iova_ranges(&bad, 24), None);
    // The DMA-available count, found behind the other capabilities.
    let mut avail = buf[..24 + 24].to_vec();
    avail[24 + 4..24 + 8].copy_from_slice(&48u32.to_le_bytes());
    avail.extend(cap(3, 0, &65_000u32.to_le_bytes()));
    assert_eq!(parse_dma_avail(&avail, 24), Some(65_000));
    assert_eq!(parse_dma_avail(&buf, 24), None, "not reported");
    // Fakes without the capability report Unsupported.
    let m = mapper(FakeContainer::default());
    assert_eq!(
        m.iova_ranges().unwrap_err().kind(),
        io::ErrorKind::Unsupported
    );
}

/// What one guest-visible step gave: `Ok`, or the error's kind (and errno
/// of a host error), to compare backends by.
fn outcome(r: Result<(), DmaError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(DmaError::Host { op, source, .. }) => {
            format!("host {op} {:?}", source.kind())
        }
        Err(e) => format!("{e:?}").split([' ', '{']).next().unwrap().into(),
    }
}

/// The same guest sequence on type1's and on iommufd's unmap rules: the
/// same answers, the same host calls, the same host state after each step.
#[test]
fn iommufd_rules_give_the_guest_the_same_answers_as_type1() {
    let type1 = mapper(FakeContainer::default());
    let iommufd = {
        let fake = FakeContainer::default();
        fake.state().iommufd_rules = true;
        mapper(fake)
    };
    type Step = fn(&VfioMapper<FakeContainer>) -> Result<(), DmaError>;
    let steps: &[(&str, Step)] = &[
        ("map 4 pages", |m| {
            m.map(0x100_000, 0, 4 * PAGE, DmaPerm::RW)
        }),
        ("map read-only", |m| {
            m.map(0x108_000, 0x8000, PAGE, DmaPerm::RO)
        }),
        ("map no access", |m| {
            m.map(0x10a_000, 0x8000, PAGE, DmaPerm::NONE)
        }),
        ("overlapping map", |m| {
            m.map(0x101_000, 0, PAGE, DmaPerm::RW)
        }),
        ("bisecting unmap", |m| m.unmap(0x101_000, PAGE)),
        ("unmap over two mappings and holes", |m| {
            m.unmap(0x100_000, 0x10_000)
        }),
        ("unmap of nothing", |m| m.unmap(0x100_000, 0x10_000)),
        ("map across two regions", |m| {
            m.map(0x200_000, 0xf000, 2 * PAGE, DmaPerm::RW)
        }),
        ("unmap inside it", |m| m.unmap(0x201_000, PAGE)),
        ("unmap it whole", |m| m.unmap(0x200_000, 2 * PAGE)),
        ("map outside guest memory", |m| {
            m.map(0x300_000, 0x20_000, PAGE, DmaPerm::RW)
        }),
        ("map again", |m| m.map(0x300_000, 0, 2 * PAGE, DmaPerm::WO)),
        ("unaligned unmap", |m| m.unmap(0x300_800, PAGE)),
        ("unmap all", |m| m.unmap_all().map(|_| ())),
        ("unmap all of nothing", |m| {
            VfioMapper::unmap_all(m).map(|_| ())
        }),
    ];
    for (what, step) in steps {
        let (a, b) = (outcome(step(&type1)), outcome(step(&iommufd)));
        assert_eq!(a, b, "{what}");
        assert_eq!(type1.mappings().len(), iommufd.mappings().len(), "{what}");
        assert_eq!(
            type1.container().host_maps(),
            iommufd.container().host_maps(),
            "{what}"
        );
    }
    // The same calls, but for the host addresses of the two memories.
    let calls = |m: &VfioMapper<FakeContainer>| -> Vec<Call> {
        m.container()
            .calls()
            .into_iter()
            .map(|c| match c {
                Call::Map {
                    iova, size, perm, ..
                } => Call::Map {
                    iova,
                    size,
                    vaddr: 0,
                    perm,
                },
                other => other,
            })
            .collect()
    };
    assert_eq!(calls(&type1), calls(&iommufd));
}

/// Where the host and the table disagree, iommufd answers `ENOENT` where
/// type1 answers `EINVAL`: a host error either way, the table unchanged.
#[test]
fn iommufd_enoent_on_a_disagreement_is_a_host_error_table_unchanged() {
    let fake = FakeContainer::default();
    fake.state().iommufd_rules = true;
    let m = mapper(fake);
    m.map(0x200_000, 0, 2 * PAGE, DmaPerm::RW).unwrap();
    // The host mapping was changed behind the table's back.
    m.container()
        .state()
        .maps
        .insert(0x1ff_000, (2 * PAGE, 0, DmaPerm::RW));
    let err = m.unmap(0x200_000, 2 * PAGE).unwrap_err();
    assert!(
        matches!(&err, DmaError::Host { source, .. } if source.raw_os_error() == Some(libc::ENOENT)),
        "{err:?}"
    );
    assert_eq!(m.mapping_count(), 1);
}
