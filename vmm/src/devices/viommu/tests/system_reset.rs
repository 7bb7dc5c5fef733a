//! A reboot's part on the device thread: quiescing waits for the host
//! call in progress, and the system reset drops every domain and host
//! mapping (a deferred unmap's too) and restores `bypass`, before the
//! next boot's driver brings the device up again from nothing.

use super::*;

/// VIRTIO_IOMMU_S_NOENT: the domain is not known.
const NOENT: u8 = 6;

/// A boot's DMA: a lazy domain with a mapping and a deferred unmap
/// (still mapped on the host until a flush), and bypass turned on.
fn first_boot(r: &mut Rig) {
    let done = r.reqq.used_idx(&r.mem);
    r.kick(&[
        req::attach(1, EP, req::LAZY),
        req::map(1, 0x10_0000, 0x10_ffff, DATA_BASE, req::RW),
        req::map(1, 0x20_0000, 0x20_ffff, DATA_BASE, req::RW),
    ]);
    until("the maps", || {
        r.reqq.used_idx(&r.mem) == done.wrapping_add(3)
    });
    // Its own batch: in the maps' batch the pair would be elided.
    r.kick(&[req::unmap(1, 0x20_0000, 0x20_ffff)]);
    until("the unmap", || {
        r.reqq.used_idx(&r.mem) == done.wrapping_add(4)
    });
    assert_eq!(r.statuses(), vec![Some(0); 4]);
    assert_eq!(r.mapper.inner.mappings().len(), 2, "the unmap is deferred");
    r.dev.write_config(BYPASS, &[1]);
    until("the config write", || bypass(&r.dev) == 1);
}

#[test]
fn quiesce_waits_for_the_host_map_in_progress() {
    let mut r = rig();
    r.hold_inside_a_host_map();
    let t = r.thread.as_ref().unwrap();
    // Inside a host map: the thread cannot answer, so a reboot would not
    // go on to reset the VFIO device under a map.
    assert!(t.quiesce(Duration::from_millis(50)).is_err());
    r.mapper.open();
    t.quiesce(STUCK).unwrap();
    assert_eq!(r.mapper.inner.mappings().len(), 1, "the map completed");
    assert_eq!(r.statuses(), vec![Some(0), Some(0)]);
}

#[test]
fn a_system_reset_drops_every_domain_and_mapping_and_restores_bypass() {
    let mut r = rig();
    first_boot(&mut r);
    let t = r.thread.as_ref().unwrap();
    t.quiesce(STUCK).unwrap();
    t.system_reset(STUCK).unwrap();
    // Every host mapping gone, the deferred one too, each unmapped whole.
    assert!(r.mapper.inner.mappings().is_empty());
    assert!(
        r.mapper.inner.violations().is_empty(),
        "{:?}",
        r.mapper.inner.violations()
    );
    assert_eq!(bypass(&r.dev), 0, "bypass as at power-on");
    // The transport's reset follows (the reboot's next step); the next
    // boot's driver activates new queues. The old domain is gone: a MAP
    // into it is refused, an ATTACH and MAP start from zero.
    r.dev.reset();
    until("the reset", || !r.dev.reset_pending());
    r.activate();
    r.kick(&[req::map(1, 0x10_0000, 0x10_ffff, DATA_BASE, req::RW)]);
    until("the map", || r.reqq.used_idx(&r.mem) == 1);
    assert_eq!(r.statuses(), vec![Some(NOENT)]);
    assert!(r.mapper.inner.mappings().is_empty());
    first_boot(&mut r);
}

#[test]
fn a_reboot_call_to_a_stopped_thread_fails_without_waiting() {
    let mut r = rig();
    let mut t = r.thread.take().unwrap();
    t.stop_and_join();
    let started = Instant::now();
    assert!(t.quiesce(STUCK).is_err());
    assert!(t.system_reset(STUCK).is_err());
    assert!(started.elapsed() < STUCK);
}
