use super::*;

fn program(t: &mut MsixTable, v: u64, addr: u64, data: u32) {
    t.write_table(v * 16, &(addr as u32).to_le_bytes());
    t.write_table(v * 16 + 4, &((addr >> 32) as u32).to_le_bytes());
    t.write_table(v * 16 + 8, &data.to_le_bytes());
}

#[test]
fn masked_vectors_pend_and_fire_on_unmask() {
    let mut t = MsixTable::new(2);
    program(&mut t, 1, 0xfee0_1000, 0x41);
    assert_eq!(t.raise(1), None, "disabled");
    assert!(t.set_control(true, false).is_empty(), "entry still masked");
    let mut pba = [0u8];
    t.read_pba(0, &mut pba);
    assert_eq!(pba[0], 0b10);
    // Unmask entry 1: the pending message goes out.
    let sent = t.write_table(16 + 12, &0u32.to_le_bytes());
    assert_eq!(sent, vec![(0xfee0_1000, 0x41)]);
    t.read_pba(0, &mut pba);
    assert_eq!(pba[0], 0);
    assert_eq!(t.raise(1), Some((0xfee0_1000, 0x41)));
    // Function mask holds everything back until cleared.
    t.set_control(true, true);
    assert_eq!(t.raise(1), None);
    assert_eq!(t.set_control(true, false), vec![(0xfee0_1000, 0x41)]);
    assert_eq!(t.raise(7), None, "out of range");
}

#[test]
fn table_reads_back_and_qword_writes() {
    let mut t = MsixTable::new(1);
    t.write_table(0, &0x1_fee0_0000u64.to_le_bytes());
    let mut q = [0u8; 8];
    t.read_table(0, &mut q);
    assert_eq!(u64::from_le_bytes(q), 0x1_fee0_0000);
    let mut d = [0u8; 4];
    t.read_table(12, &mut d);
    assert_eq!(u32::from_le_bytes(d), 1, "masked at reset");
    t.write_table(12, &0xffff_fffeu32.to_le_bytes());
    t.read_table(12, &mut d);
    assert_eq!(u32::from_le_bytes(d), 0, "only the mask bit is kept");
    t.read_table(64, &mut d);
    assert_eq!(d, [0; 4]);
    t.reset();
    t.read_table(12, &mut d);
    assert_eq!(u32::from_le_bytes(d), 1);
}
