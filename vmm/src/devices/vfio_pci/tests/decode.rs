//! Memory Space off: the BAR slots leave before the device stops
//! decoding, BAR accesses are refused, and all comes back after.

use super::*;

/// The fake device's command low byte at each `set_present`.
struct Slots {
    fake: Arc<Fake>,
    calls: Mutex<Vec<(bool, u8)>>,
}

impl BarSlots for Slots {
    fn set_present(&self, present: bool) -> std::io::Result<()> {
        let command = self.fake.config.lock().unwrap()[4];
        self.calls.lock().unwrap().push((present, command));
        Ok(())
    }
}

#[test]
fn memory_space_off_takes_the_bar_slots_out_and_refuses_bar_accesses() {
    let (mut d, fake, _router) = device();
    fake.config.lock().unwrap()[4] = 0x06;
    fake.bar0.lock().unwrap()[0x100..0x104].copy_from_slice(&[1, 2, 3, 4]);
    let slots = Arc::new(Slots {
        fake: fake.clone(),
        calls: Mutex::new(Vec::new()),
    });
    d.set_bar_slots(slots.clone());
    // Memory Space off (bus master kept): the slots leave while the
    // device still decodes.
    d.write_config(1, 0, &[0x04, 0x00]);
    assert_eq!(*slots.calls.lock().unwrap(), [(false, 0x06)]);
    assert_eq!(fake.config.lock().unwrap()[4], 0x04, "the write reached it");
    let mut b = [0u8; 4];
    d.bar_read(0, 0x100, &mut b);
    assert_eq!(b, [0xff; 4], "a read with decode off");
    d.bar_write(0, 0x100, &[9, 9, 9, 9]);
    assert_eq!(fake.bar0.lock().unwrap()[0x100..0x104], [1, 2, 3, 4]);
    // The MSI-X table is refused too (the device would not decode it).
    d.bar_read(0, 0x2000, &mut b);
    assert_eq!(b, [0xff; 4]);
    // On again: back once the device decodes.
    d.write_config(1, 0, &[0x06, 0x00, 0x00, 0x00]);
    assert_eq!(*slots.calls.lock().unwrap(), [(false, 0x06), (true, 0x06)]);
    d.bar_read(0, 0x100, &mut b);
    assert_eq!(b, [1, 2, 3, 4]);
}
