//! Two guest CPUs on one request queue: a model of the patched
//! Linux driver on a 2-vCPU guest, lazy or strict, driving the device
//! through the queue, with the guest's view checked against the host after
//! every step.
//!
//! What the model does, as Linux 6.1 with the series does it:
//! - each CPU maps I/Os of 1-32 pages (a scatterlist of physically
//!   scattered pieces, one MAP per piece, IOVA-contiguous) by queueing its
//!   MAPs without a kick; its `iotlb_sync_map` kicks only when MAPs are
//!   still pending (the other CPU's kick may already have completed them);
//! - a CPU may start mapping while the other CPU's MAPs are still queued:
//!   any kick carries every request in the ring, in ring order;
//! - I/Os complete on either CPU; in lazy mode the UNMAP (one for the whole
//!   range) is deferred and the IOVA goes to that CPU's flush queue with the
//!   flush counter, like dma-iommu's per-CPU queues; a full queue or the
//!   timer (on either CPU) flushes: FLUSH request, then IOVAs whose counter
//!   is older than the finished flushes go back to the freeing CPU's IOVA
//!   cache, and are reused most recently freed first;
//! - coherent buffers (the nvme driver's PRP-list pages) are mapped now
//!   and then and never unmapped.
//!
//! The check (the guest's view of DMA): every page of every I/O whose
//! `iotlb_sync_map` returned and that is not unmapped yet, and every
//! coherent page, is mapped on the host to the right guest-physical page
//! with the permission the guest asked for; every request completes with
//! `S_OK`; and after a final flush the host holds exactly the live
//! mappings.

use std::collections::{BTreeMap, HashMap};

use dma_mapper::DmaPerm;
use proptest::prelude::*;
use viommu_wire::status::*;

use crate::testing::{proptest_cases, req, Harness, DATA_BASE};
use crate::DeviceConfig;

const PAGE: u64 = 0x1000;
const DOMAIN: u32 = 1;
/// Flush-queue entries per CPU before a queue_iova() flushes (Linux: 256).
const FQ_SIZE: usize = 6;
/// Guest pages data may come from.
const DATA_PAGES: u64 = 4096;

/// One step of the two CPUs.
#[derive(Clone, Debug)]
enum Step {
    /// CPU `cpu` queues the MAPs of an I/O of `pieces` (page counts of
    /// physically contiguous pieces) without kicking.
    StartMap {
        cpu: usize,
        pieces: Vec<u64>,
        write: bool,
        seed: u64,
    },
    /// CPU `cpu` returns from iotlb_sync_map for its I/O being mapped.
    SyncMap { cpu: usize },
    /// An in-flight I/O completes on `cpu` (the `pick`-th live one).
    Complete { cpu: usize, pick: usize },
    /// The flush-queue timer fires on `cpu`.
    Timer { cpu: usize },
    /// A coherent page is allocated on `cpu` (mapped and synced at once).
    Coherent { cpu: usize, seed: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    let cpu = 0..2usize;
    prop_oneof![
        4 => (cpu.clone(), prop::collection::vec(1..4u64, 1..12), any::<bool>(), any::<u64>())
            .prop_map(|(cpu, pieces, write, seed)| Step::StartMap { cpu, pieces, write, seed }),
        4 => cpu.clone().prop_map(|cpu| Step::SyncMap { cpu }),
        5 => (cpu.clone(), 0..64usize).prop_map(|(cpu, pick)| Step::Complete { cpu, pick }),
        1 => cpu.clone().prop_map(|cpu| Step::Timer { cpu }),
        1 => (cpu, any::<u64>()).prop_map(|(cpu, seed)| Step::Coherent { cpu, seed }),
    ]
}

/// A DMA buffer as the guest sees it: IOVA-contiguous pieces.
#[derive(Clone, Debug)]
struct Io {
    iova: u64,
    /// (IOVA offset, guest-physical address, bytes) of each MAP.
    pieces: Vec<(u64, u64, u64)>,
    perm: DmaPerm,
}

impl Io {
    fn size(&self) -> u64 {
        self.pieces.iter().map(|p| p.2).sum()
    }
}

struct Guest {
    h: Harness,
    lazy: bool,
    /// Heads of requests in the ring that the device has not completed.
    queued: Vec<u16>,
    /// Per CPU: the I/O whose MAPs are queued, not yet synced.
    mapping: [Option<Io>; 2],
    /// MAPs queued and not completed (the driver's pending_maps).
    pending_maps: usize,
    /// I/Os the device may use (sync_map returned), by IOVA.
    live: BTreeMap<u64, Io>,
    coherent: Vec<Io>,
    /// Per CPU flush queue: (iova, size, flush counter when queued).
    fq: [Vec<(u64, u64, u64)>; 2],
    fq_start: u64,
    fq_finish: u64,
    /// Deferred UNMAPs sent since the last FLUSH.
    flush_pending: bool,
    /// IOVA allocator: per-CPU caches by size, then a top-down cursor.
    cache: [HashMap<u64, Vec<u64>>; 2],
    cursor: u64,
    used_phys: u64,
}

impl Guest {
    fn new(lazy: bool) -> Self {
        let mut h = Harness::new(DeviceConfig::default(), &[1], 256);
        if !lazy {
            let features = h.dev.device_features() & !(1 << crate::VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH);
            h.restart(features);
        }
        let mode = if lazy { req::LAZY } else { 0 };
        assert_eq!(
            h.statuses(&[req::attach(DOMAIN, 1, mode)]),
            vec![Some(VIRTIO_IOMMU_S_OK)]
        );
        Guest {
            h,
            lazy,
            queued: Vec::new(),
            mapping: [None, None],
            pending_maps: 0,
            live: BTreeMap::new(),
            coherent: Vec::new(),
            fq: [Vec::new(), Vec::new()],
            fq_start: 0,
            fq_finish: 0,
            flush_pending: false,
            cache: [HashMap::new(), HashMap::new()],
            cursor: 0xfee0_0000,
            used_phys: 0,
        }
    }

    fn alloc_iova(&mut self, cpu: usize, size: u64) -> u64 {
        if let Some(iova) = self.cache[cpu].get_mut(&size).and_then(|v| v.pop()) {
            return iova;
        }
        self.cursor -= size;
        self.cursor
    }

    /// Adds a request to the ring (the driver's __viommu_add_req); a full
    /// ring is synced first, as Linux does on -ENOSPC.
    fn add(&mut self, r: Vec<u8>) -> Result<(), String> {
        if self.h.reqq.free_descriptors() < 4 {
            self.kick()?;
        }
        let heads = self.h.queue(&[r]);
        self.queued.extend(heads);
        Ok(())
    }

    /// Kick and wait for every request in flight (__viommu_sync_req).
    fn kick(&mut self) -> Result<(), String> {
        let used = self.h.kick();
        if used.len() != self.queued.len() {
            return Err(format!(
                "kick completed {} of {} requests",
                used.len(),
                self.queued.len()
            ));
        }
        if let Some(bad) = used.iter().find(|u| u.status != Some(VIRTIO_IOMMU_S_OK)) {
            return Err(format!("request failed: {bad:?}"));
        }
        self.queued.clear();
        self.pending_maps = 0;
        Ok(())
    }

    fn start_map(
        &mut self,
        cpu: usize,
        pieces: &[u64],
        write: bool,
        seed: u64,
    ) -> Result<(), String> {
        if self.mapping[cpu].is_some() {
            return Ok(());
        }
        let pages: u64 = pieces.iter().sum();
        let iova = self.alloc_iova(cpu, pages * PAGE);
        let perm = if write { DmaPerm::WO } else { DmaPerm::RO };
        let flags = if write {
            viommu_wire::VIRTIO_IOMMU_MAP_F_WRITE
        } else {
            viommu_wire::VIRTIO_IOMMU_MAP_F_READ
        };
        let mut io = Io {
            iova,
            pieces: Vec::new(),
            perm,
        };
        let mut off = 0;
        for (k, &n) in pieces.iter().enumerate() {
            let page = (seed.wrapping_mul(31).wrapping_add(k as u64 * 977) + self.used_phys)
                % (DATA_PAGES - 4);
            self.used_phys += n;
            let phys = DATA_BASE + page * PAGE;
            let start = iova + off;
            self.add(req::map(DOMAIN, start, start + n * PAGE - 1, phys, flags))?;
            self.pending_maps += 1;
            io.pieces.push((off, phys, n * PAGE));
            off += n * PAGE;
        }
        self.mapping[cpu] = Some(io);
        Ok(())
    }

    fn sync_map(&mut self, cpu: usize) -> Result<(), String> {
        let Some(io) = self.mapping[cpu].take() else {
            return Ok(());
        };
        if self.pending_maps > 0 {
            self.kick()?;
        }
        self.live.insert(io.iova, io);
        Ok(())
    }

    fn complete(&mut self, cpu: usize, pick: usize) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let key = *self.live.keys().nth(pick % self.live.len()).unwrap_or(&0);
        // The device finished its DMA: it must have been able to reach
        // every page until now (checked after every step), so unmap.
        let Some(io) = self.live.remove(&key) else {
            return Ok(());
        };
        let size = io.size();
        if self.pending_maps > 0 {
            // viommu_unmap_pages() completes queued MAPs first.
            self.kick()?;
        }
        if self.lazy {
            self.add(req::unmap(DOMAIN, io.iova, io.iova + size - 1))?;
            self.flush_pending = true;
            // queue_iova(): free what finished flushes cover, flush a full queue.
            self.fq_free(cpu);
            if self.fq[cpu].len() >= FQ_SIZE {
                self.flush()?;
                self.fq_free(cpu);
            }
            self.fq[cpu].push((io.iova, size, self.fq_start));
        } else {
            self.add(req::unmap(DOMAIN, io.iova, io.iova + size - 1))?;
            self.kick()?;
            self.cache[cpu].entry(size).or_default().push(io.iova);
        }
        Ok(())
    }

    /// fq_flush_iotlb(): flush_iotlb_all between the two counters.
    fn flush(&mut self) -> Result<(), String> {
        self.fq_start += 1;
        if self.flush_pending {
            self.flush_pending = false;
            self.add(req::iotlb_flush(DOMAIN))?;
        }
        self.kick()?;
        self.fq_finish += 1;
        Ok(())
    }

    /// fq_ring_free(): entries older than the finished flushes go back to
    /// the IOVA cache of the CPU that frees them.
    fn fq_free(&mut self, cpu: usize) {
        let finish = self.fq_finish;
        let (done, keep): (Vec<_>, Vec<_>) = self.fq[cpu].drain(..).partition(|e| e.2 < finish);
        self.fq[cpu] = keep;
        for (iova, size, _) in done {
            self.cache[cpu].entry(size).or_default().push(iova);
        }
    }

    fn timer(&mut self, cpu: usize) -> Result<(), String> {
        if !self.lazy {
            return Ok(());
        }
        self.flush()?;
        for c in [cpu, 1 - cpu] {
            self.fq_free(c);
        }
        Ok(())
    }

    fn coherent(&mut self, cpu: usize, seed: u64) -> Result<(), String> {
        if self.coherent.len() >= 16 {
            return Ok(());
        }
        let iova = self.alloc_iova(cpu, PAGE);
        let phys = DATA_BASE + (seed % (DATA_PAGES - 4)) * PAGE;
        self.add(req::map(DOMAIN, iova, iova + PAGE - 1, phys, req::RW))?;
        self.pending_maps += 1;
        if self.pending_maps > 0 {
            self.kick()?;
        }
        self.coherent.push(Io {
            iova,
            pieces: vec![(0, phys, PAGE)],
            perm: DmaPerm::RW,
        });
        Ok(())
    }

    fn run(&mut self, s: &Step) -> Result<(), String> {
        match s {
            Step::StartMap {
                cpu,
                pieces,
                write,
                seed,
            } => self.start_map(*cpu, pieces, *write, *seed),
            Step::SyncMap { cpu } => self.sync_map(*cpu),
            Step::Complete { cpu, pick } => self.complete(*cpu, *pick),
            Step::Timer { cpu } => self.timer(*cpu),
            Step::Coherent { cpu, seed } => self.coherent(*cpu, *seed),
        }
    }

    /// Every page the device may use is mapped on the host, to the right
    /// guest page, with at least the permission asked for.
    fn check_dma(&self) -> Result<(), String> {
        let host = self.h.mappers[0].mappings();
        for io in self.live.values().chain(&self.coherent) {
            for &(off, phys, len) in &io.pieces {
                let mut a = 0;
                while a < len {
                    let iova = io.iova + off + a;
                    let Some(&(hi, hs, hg, hp)) =
                        host.iter().find(|m| m.0 <= iova && iova < m.0 + m.1)
                    else {
                        return Err(format!(
                            "iova {iova:#x} of a live buffer is not mapped on the host"
                        ));
                    };
                    let _ = hs;
                    if hg + (iova - hi) != phys + a {
                        return Err(format!("iova {iova:#x} maps to the wrong page"));
                    }
                    if !hp.allows(io.perm) {
                        return Err(format!(
                            "iova {iova:#x}: host grants {hp:?}, guest asked {:?}",
                            io.perm
                        ));
                    }
                    a += PAGE;
                }
            }
        }
        self.h.check_consistency()
    }

    /// Ends the run: sync what is queued, flush, and compare the host with
    /// the live buffers.
    fn finish(&mut self) -> Result<(), String> {
        for cpu in 0..2 {
            self.sync_map(cpu)?;
        }
        if self.lazy {
            self.timer(0)?;
        }
        self.kick()?;
        self.check_dma()?;
        let host: u64 = self.h.mappers[0].mappings().iter().map(|m| m.1).sum();
        let live: u64 = self.live.values().chain(&self.coherent).map(Io::size).sum();
        if host != live {
            return Err(format!(
                "host holds {host:#x} bytes after the flush, live buffers {live:#x}"
            ));
        }
        Ok(())
    }
}

fn play(lazy: bool, steps: &[Step]) -> Result<(), String> {
    let mut g = Guest::new(lazy);
    for (n, s) in steps.iter().enumerate() {
        g.run(s).map_err(|e| format!("step {n} {s:?}: {e}"))?;
        g.check_dma()
            .map_err(|e| format!("after step {n} {s:?}: {e}"))?;
    }
    g.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    #[test]
    fn two_cpus_lazy_never_lose_a_live_mapping(steps in prop::collection::vec(step(), 1..200)) {
        if let Err(e) = play(true, &steps) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn two_cpus_strict_never_lose_a_live_mapping(steps in prop::collection::vec(step(), 1..200)) {
        if let Err(e) = play(false, &steps) {
            return Err(TestCaseError::fail(e));
        }
    }
}

#[test]
fn map_started_on_one_cpu_completed_by_the_others_kick() {
    // CPU 0 queues its MAPs, CPU 1 maps and syncs (its kick completes
    // CPU 0's MAPs too), CPU 0's sync then has nothing pending.
    let steps = vec![
        Step::StartMap {
            cpu: 0,
            pieces: vec![1, 2, 1],
            write: true,
            seed: 7,
        },
        Step::StartMap {
            cpu: 1,
            pieces: vec![3],
            write: false,
            seed: 9,
        },
        Step::SyncMap { cpu: 1 },
        Step::SyncMap { cpu: 0 },
        Step::Complete { cpu: 1, pick: 0 },
        Step::Coherent { cpu: 0, seed: 3 },
        Step::Timer { cpu: 1 },
        Step::Complete { cpu: 0, pick: 0 },
    ];
    play(true, &steps).unwrap();
    play(false, &steps).unwrap();
}
