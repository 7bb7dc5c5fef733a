use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

struct Fixed(AtomicBool);
impl Attachments for Fixed {
    fn any_attached(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

fn watch(attached: bool) -> BusMasterWatch {
    BusMasterWatch::new(
        "0000:01:00.0".into(),
        Arc::new(Fixed(AtomicBool::new(attached))),
    )
}

#[test]
fn bus_master_before_any_attach_warns_once() {
    let mut w = watch(false);
    // Memory Space alone: not DMA.
    assert!(!w.after_write(COMMAND, &[0x02, 0x00]));
    // A dword write of the command and status registers.
    assert!(w.after_write(COMMAND, &[0x06, 0x00, 0x00, 0x00]));
    assert!(!w.after_write(COMMAND, &[0x06]), "once per function");
}

#[test]
fn bus_master_after_an_attach_is_quiet() {
    let mut w = watch(true);
    assert!(!w.after_write(COMMAND, &[0x06]));
}

#[test]
fn other_registers_and_a_function_not_behind_the_viommu_are_quiet() {
    let mut w = watch(false);
    // The status register's byte, and a write before the command register.
    assert!(!w.after_write(COMMAND + 1, &[0xff]));
    assert!(!w.after_write(0x00, &[0xff, 0xff, 0xff, 0xff]));
    // A dword at 0x00 does not reach 0x04; a write from 0x02 does.
    assert!(w.after_write(0x02, &[0x00, 0x00, 0x04]));
    let mut none = BusMasterWatch::default();
    assert!(!none.after_write(COMMAND, &[0x04]));
}

#[test]
fn the_viommu_counters_decide_once_set() {
    let a = ViommuAttachments::default();
    assert!(!a.any_attached(), "no virtio-iommu yet");
    let c = Arc::new(Mutex::new(viommu_device::Counters::default()));
    a.set(c.clone());
    assert!(!a.any_attached());
    c.lock().unwrap().requests.attach = 1;
    assert!(a.any_attached());
}
