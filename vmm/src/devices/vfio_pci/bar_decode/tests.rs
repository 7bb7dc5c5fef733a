//! Which config writes take the BAR slots out and put them back.

use std::sync::Mutex;

use super::*;

/// Records each `set_present`; fails when told to.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<bool>>,
    fail: bool,
}

impl BarSlots for Recorder {
    fn set_present(&self, present: bool) -> std::io::Result<()> {
        self.calls.lock().unwrap().push(present);
        if self.fail {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }
}

fn decode() -> (MemDecode, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let mut d = MemDecode::default();
    d.set_slots(rec.clone());
    (d, rec)
}

/// A guest config write, as the device model makes it.
fn write(d: &mut MemDecode, off: usize, data: &[u8]) {
    d.before_write(off, data);
    d.after_write(off, data);
}

#[test]
fn clearing_memory_space_removes_the_slots_and_setting_it_restores_them() {
    let (mut d, rec) = decode();
    assert!(d.enabled(), "slots are in place from the start");
    // Dword write of command + status: Memory Space off, bus master on.
    write(&mut d, COMMAND, &[0x04, 0, 0, 0]);
    assert!(!d.enabled());
    assert_eq!(*rec.calls.lock().unwrap(), [false]);
    // Off again: nothing to do.
    write(&mut d, COMMAND, &[0x04, 0]);
    assert_eq!(*rec.calls.lock().unwrap(), [false]);
    // Byte write setting it: back.
    write(&mut d, COMMAND, &[0x06]);
    assert!(d.enabled());
    assert_eq!(*rec.calls.lock().unwrap(), [false, true]);
    // On again: nothing.
    write(&mut d, COMMAND, &[0x02, 0]);
    assert_eq!(*rec.calls.lock().unwrap(), [false, true]);
}

#[test]
fn the_slots_go_before_the_device_stops_decoding_and_come_back_after() {
    let (mut d, rec) = decode();
    d.before_write(COMMAND, &[0]);
    assert_eq!(
        *rec.calls.lock().unwrap(),
        [false],
        "removed before the write"
    );
    d.after_write(COMMAND, &[0]);
    d.before_write(COMMAND, &[2]);
    assert_eq!(
        *rec.calls.lock().unwrap(),
        [false],
        "not back before the write"
    );
    d.after_write(COMMAND, &[2]);
    assert_eq!(*rec.calls.lock().unwrap(), [false, true]);
}

#[test]
fn writes_that_miss_the_command_register_change_nothing() {
    let (mut d, rec) = decode();
    for (off, data) in [
        (0x00, &[0u8; 4][..]), // vendor and device id
        (0x05, &[0u8][..]),    // the command register's high byte
        (0x06, &[0u8; 2][..]), // status
        (0x10, &[0u8; 4][..]), // BAR0
        (0x03, &[][..]),
    ] {
        write(&mut d, off, data);
    }
    assert!(d.enabled());
    assert!(rec.calls.lock().unwrap().is_empty());
    // A write that starts before the register and covers it does count.
    write(&mut d, 0x02, &[0xff, 0xff, 0x00, 0x00]);
    assert!(!d.enabled());
}

#[test]
fn a_failed_slot_update_is_logged_not_fatal() {
    let rec = Arc::new(Recorder {
        fail: true,
        ..Recorder::default()
    });
    let mut d = MemDecode::default();
    d.set_slots(rec.clone());
    for _ in 0..100 {
        write(&mut d, COMMAND, &[0]);
        write(&mut d, COMMAND, &[2]);
    }
    assert_eq!(rec.calls.lock().unwrap().len(), 200);
    assert!(d.enabled());
}

#[test]
fn without_slots_only_the_accesses_are_refused() {
    let mut d = MemDecode::default();
    write(&mut d, COMMAND, &[0]);
    assert!(!d.enabled());
    let mut buf = [0u8; 8];
    d.refuse_read(0, 0x10, &mut buf);
    assert_eq!(buf, [0xff; 8]);
    d.refuse_write(0, 0x10, 4);
}
