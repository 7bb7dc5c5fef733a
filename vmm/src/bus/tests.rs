use super::*;

#[derive(Default)]
struct Recorder {
    writes: Vec<(u64, Vec<u8>)>,
}
impl BusDevice for Recorder {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(offset as u8);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.writes.push((offset, data.to_vec()));
    }
}

#[test]
fn dispatch_by_range() {
    let bus = Bus::new();
    let a = Arc::new(Mutex::new(Recorder::default()));
    bus.insert(a.clone(), 0x3f8, 8).unwrap();
    assert!(bus.insert(a.clone(), 0x3f0, 9).is_err());
    assert!(bus.insert(a.clone(), 0x3ff, 1).is_err());
    assert!(bus.insert(a.clone(), 0x3f0, 0).is_err());
    assert!(bus.insert(a.clone(), u64::MAX, 2).is_err());
    bus.insert(a.clone(), 0x400, 1).unwrap();
    bus.insert(a.clone(), 0x3f0, 8).unwrap();

    let mut d = [0u8; 1];
    assert!(bus.read(0x3fb, &mut d));
    assert_eq!(d, [3]);
    assert!(bus.write(0x3f8, &[0x41]));
    assert!(!bus.write(0x3e0, &[1]));
    // An access straddling the end of a device is not claimed.
    let mut d4 = [0u8; 4];
    assert!(!bus.read(0x3fe, &mut d4));
    assert_eq!(d4, [0xff; 4]);
    assert_eq!(a.lock().unwrap().writes, vec![(0, vec![0x41])]);
}
