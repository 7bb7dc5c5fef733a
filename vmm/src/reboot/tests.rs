use std::sync::{Arc, Mutex};

use viommu_device::testing::{req, FakeMapper, Harness, DATA_BASE};
use viommu_device::{DeviceConfig, EndpointState};

use super::*;

fn restart_policy(max: u32, secs: u64) -> RebootPolicy {
    RebootPolicy {
        max,
        window: Duration::from_secs(secs),
        ..Default::default()
    }
}

#[test]
fn defaults_restart_on_reboot_and_exit_on_triple_fault() {
    let mut l = RebootLimiter::new(RebootPolicy::default());
    let t = Instant::now();
    assert_eq!(
        l.decide(ExitReason::Reset, t),
        Decision::Restart("guest reset")
    );
    assert_eq!(
        l.decide(ExitReason::ApiReboot, t),
        Decision::Restart("API reboot")
    );
    assert_eq!(
        l.decide(ExitReason::TripleFault, t),
        Decision::Exit(ExitReason::TripleFault)
    );
    for r in [
        ExitReason::PowerOff,
        ExitReason::ApiShutdown,
        ExitReason::Signal(15),
    ] {
        assert_eq!(l.decide(r.clone(), t), Decision::Exit(r));
    }
    // Exits are not reboots.
    assert_eq!(l.recent(), 2);
}

#[test]
fn exit_policies_keep_the_old_exit_codes() {
    let mut l = RebootLimiter::new(RebootPolicy {
        on_reboot: OnReset::Exit,
        on_triple_fault: OnReset::Restart,
        ..Default::default()
    });
    let t = Instant::now();
    let Decision::Exit(r) = l.decide(ExitReason::Reset, t) else {
        panic!("--on-reboot exit")
    };
    assert_eq!(r.exit_code(), 3);
    assert_eq!(
        l.decide(ExitReason::TripleFault, t),
        Decision::Restart("triple fault")
    );
}

#[test]
fn a_reboot_loop_ends_the_vmm() {
    let mut l = RebootLimiter::new(restart_policy(3, 60));
    let t0 = Instant::now();
    for i in 0..3 {
        let d = l.decide(ExitReason::Reset, t0 + Duration::from_secs(i));
        assert!(matches!(d, Decision::Restart(_)), "{i}: {d:?}");
    }
    match l.decide(ExitReason::Reset, t0 + Duration::from_secs(3)) {
        Decision::Exit(ExitReason::Error(m)) => {
            assert!(m.contains("more than 3 times in 60 s"), "{m}")
        }
        d => panic!("{d:?}"),
    }
    // The window slides: a minute after the first ones, reboots are fine.
    let later = t0 + Duration::from_secs(64);
    assert!(matches!(
        l.decide(ExitReason::Reset, later),
        Decision::Restart(_)
    ));
    assert!(l.recent() <= 3);
}

#[test]
fn the_limiter_stays_bounded_however_many_reboots() {
    let mut l = RebootLimiter::new(restart_policy(10, 1));
    let t0 = Instant::now();
    for i in 0..10_000u64 {
        let _ = l.decide(ExitReason::Reset, t0 + Duration::from_millis(i));
        assert!(l.recent() <= 10);
    }
}

/// What happened, in order, across the fakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Paused,
    Quiesced,
    /// A VFIO device reset, with the host mappings its mapper still held.
    VfioReset {
        endpoint: usize,
        mapped: usize,
    },
    DmaDropped,
    /// The transports reset, the virtio-iommu's among them, with the
    /// domains its model still had and the host mappings left.
    DevicesReset {
        domains: usize,
        mapped: usize,
    },
    Reloaded,
    /// The vCPUs given their first-boot state, running again.
    Resumed,
}

/// A passed-through device: its reset is recorded with what its host
/// address space still held, and refused while the IOMMU still serves
/// (DMA could be mapped under a device being reset).
struct FakeVfio {
    mapper: Arc<FakeMapper>,
}

/// The reboot's steps on a real device model with fake mappers and fake
/// VFIO devices; vCPUs and guest memory are events only.
struct ModelSteps {
    h: Harness,
    vfio: Vec<FakeVfio>,
    serving: bool,
    log: Arc<Mutex<Vec<Event>>>,
}

impl ModelSteps {
    fn new() -> Self {
        let h = Harness::new(DeviceConfig::default(), &[0x18, 0x20], 64);
        let vfio = h
            .mappers
            .iter()
            .map(|m| FakeVfio { mapper: m.clone() })
            .collect();
        ModelSteps {
            h,
            vfio,
            serving: true,
            log: Default::default(),
        }
    }

    fn note(&self, e: Event) {
        self.log.lock().unwrap().push(e);
    }

    /// A boot's DMA: both endpoints attached, A lazy with a deferred unmap.
    fn boot_traffic(&mut self) {
        let map = |d: u32, iova: u64| req::map(d, iova, iova + 0xfff, DATA_BASE + iova, req::RW);
        let st = self.h.statuses(&[
            req::attach(1, 0x18, req::LAZY),
            req::attach(2, 0x20, 0),
            map(1, 0x1000),
            map(1, 0x2000),
            map(2, 0x1000),
        ]);
        assert!(st.iter().all(|s| *s == Some(0)), "{st:?}");
        assert_eq!(
            self.h.statuses(&[req::unmap(1, 0x2000, 0x2fff)]),
            vec![Some(0)]
        );
    }
}

impl RebootSteps for ModelSteps {
    fn pause_vcpus(&mut self) -> Result<(), RebootError> {
        self.note(Event::Paused);
        Ok(())
    }
    fn quiesce_iommu(&mut self) -> Result<(), RebootError> {
        self.serving = false;
        self.note(Event::Quiesced);
        Ok(())
    }
    fn reset_vfio(&mut self) {
        assert!(!self.serving, "a VFIO reset while the IOMMU still maps");
        for (endpoint, d) in self.vfio.iter().enumerate() {
            let mapped = d.mapper.mappings().len();
            self.note(Event::VfioReset { endpoint, mapped });
        }
    }
    fn drop_dma(&mut self) -> Result<(), RebootError> {
        self.h.dev.system_reset();
        for m in &self.h.mappers {
            dma_mapper::DmaMapper::unmap_all(&**m).map_err(|e| RebootError::Device {
                what: "mapper",
                why: e.to_string(),
            })?;
        }
        self.note(Event::DmaDropped);
        Ok(())
    }
    fn reset_devices(&mut self) {
        // The virtio-iommu's transport reset: the device reset as by a
        // status write of 0 (the next boot's driver activates it again).
        self.h.dev.reset();
        let domains = self.h.dev.domain_count();
        let mapped = self.h.mappers.iter().map(|m| m.mappings().len()).sum();
        self.note(Event::DevicesReset { domains, mapped });
    }
    fn reload_guest(&mut self) -> Result<(), RebootError> {
        self.note(Event::Reloaded);
        Ok(())
    }
    fn resume_vcpus(&mut self) -> Result<(), RebootError> {
        // The next boot's driver negotiates and activates again.
        let f = self.h.dev.device_features();
        self.h.restart(f);
        self.serving = true;
        self.note(Event::Resumed);
        Ok(())
    }
}

#[test]
fn a_reboot_resets_the_devices_after_quiescing_and_drops_every_mapping() {
    let mut s = ModelSteps::new();
    s.boot_traffic();
    for m in &s.h.mappers {
        m.clear_log();
    }
    run_steps(&mut s).unwrap();
    let log = s.log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec![
            Event::Paused,
            Event::Quiesced,
            // Reset with their DMA still mapped (A: a mapping and a
            // deferred unmap), unmapped only after.
            Event::VfioReset {
                endpoint: 0,
                mapped: 2
            },
            Event::VfioReset {
                endpoint: 1,
                mapped: 1
            },
            Event::DmaDropped,
            // The virtio-iommu reset after every domain and mapping went.
            Event::DevicesReset {
                domains: 0,
                mapped: 0
            },
            Event::Reloaded,
            // The vCPUs last, once the guest's memory is written again.
            Event::Resumed,
        ]
    );
    // Every mapping was unmapped whole (no violation), in IOVA order,
    // before the domain went: the model holds no domain, the hosts nothing.
    for m in &s.h.mappers {
        assert!(m.mappings().is_empty());
        assert!(m.violations().is_empty(), "{:?}", m.violations());
        assert!(m
            .log()
            .iter()
            .all(|c| matches!(c, viommu_device::testing::FakeCall::Unmap { .. })));
    }
    assert_eq!(s.h.dev.domain_count(), 0);
    for ep in [0x18, 0x20] {
        assert_eq!(
            s.h.dev.endpoint_state(ep),
            Some(EndpointState::Unattached { bypass: false })
        );
    }
    // The second boot starts from zero: its MAPs are all the hosts hold.
    let calls_before = s.h.mappers[0].calls();
    s.boot_traffic();
    assert_eq!(s.h.mappers[0].mappings().len(), 2);
    assert_eq!(s.h.mappers[1].mappings().len(), 1);
    assert_eq!(
        s.h.mappers[0].calls() - calls_before,
        2,
        "two maps, nothing replayed"
    );
    s.h.check_consistency().unwrap();
}

#[test]
fn a_failed_step_stops_the_reboot() {
    struct Failing(Vec<&'static str>);
    impl RebootSteps for Failing {
        fn pause_vcpus(&mut self) -> Result<(), RebootError> {
            self.0.push("pause");
            Ok(())
        }
        fn quiesce_iommu(&mut self) -> Result<(), RebootError> {
            self.0.push("quiesce");
            Ok(())
        }
        fn reset_vfio(&mut self) {
            self.0.push("vfio");
        }
        fn drop_dma(&mut self) -> Result<(), RebootError> {
            self.0.push("dma");
            Err(RebootError::Device {
                what: "mapper",
                why: "injected".into(),
            })
        }
        fn reset_devices(&mut self) {
            self.0.push("devices");
        }
        fn reload_guest(&mut self) -> Result<(), RebootError> {
            self.0.push("reload");
            Ok(())
        }
        fn resume_vcpus(&mut self) -> Result<(), RebootError> {
            self.0.push("resume");
            Ok(())
        }
    }
    let mut f = Failing(Vec::new());
    assert!(run_steps(&mut f).is_err());
    assert_eq!(f.0, vec!["pause", "quiesce", "vfio", "dma"]);
}

#[test]
fn the_device_model_comes_back_to_its_first_boot_size_over_many_reboots() {
    let mut s = ModelSteps::new();
    let mut limiter = RebootLimiter::new(RebootPolicy::default());
    let t0 = Instant::now();
    s.boot_traffic();
    let first_boot_mappings: Vec<usize> = s.h.mappers.iter().map(|m| m.mappings().len()).collect();
    for i in 0..200u64 {
        // Reboots a minute apart: never a loop.
        let d = limiter.decide(ExitReason::Reset, t0 + Duration::from_secs(60 * i));
        assert!(matches!(d, Decision::Restart(_)));
        for m in &s.h.mappers {
            m.clear_log();
        }
        run_steps(&mut s).unwrap();
        assert_eq!(s.h.dev.domain_count(), 0);
        for m in &s.h.mappers {
            assert!(m.mappings().is_empty());
            assert!(m.leftovers().is_empty());
        }
        s.boot_traffic();
        let sizes: Vec<usize> = s.h.mappers.iter().map(|m| m.mappings().len()).collect();
        assert_eq!(sizes, first_boot_mappings, "reboot {i}");
        assert_eq!(s.h.dev.domain_count(), 2);
        assert!(limiter.recent() <= 1, "the window holds one reboot");
        s.log.lock().unwrap().clear();
    }
    assert_eq!(s.h.dev.pending_unmaps(1).unwrap().len(), 1);
}
