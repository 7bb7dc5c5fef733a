use super::*;
use vm_memory::GuestAddress;

#[test]
fn routing_keeps_legacy_routes() {
    let mut msi = std::collections::BTreeMap::new();
    msi.insert(24, (0xfee0_1000, 0x41));
    let e = routing_entries(&msi);
    assert_eq!(e.len(), 16 * 2 + 8 + 1);
    let last = e.last().unwrap();
    assert_eq!((last.gsi, last.type_), (24, KVM_IRQ_ROUTING_MSI));
    // SAFETY: reading the member this entry was built with.
    let m = unsafe { last.u.msi };
    assert_eq!((m.address_lo, m.address_hi, m.data), (0xfee0_1000, 0, 0x41));
    let serial: Vec<_> = e.iter().filter(|x| x.gsi == 4).collect();
    assert_eq!(serial.len(), 2, "PIC and IOAPIC");
    // SAFETY: as above, irqchip entries.
    let pins: Vec<_> = serial
        .iter()
        .map(|x| unsafe { (x.u.irqchip.irqchip, x.u.irqchip.pin) })
        .collect();
    assert_eq!(pins, [(KVM_IRQCHIP_PIC_MASTER, 4), (KVM_IRQCHIP_IOAPIC, 4)]);
}

#[test]
fn a_route_kvm_refused_is_not_kept() {
    let mut routes = MsiRoutes::new();
    let refuse = |_: &MsiRoutes| Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
    let mut installed = Vec::new();
    // A new route KVM refuses: gone, so asking again installs again.
    assert!(update_route(&mut routes, 24, (0xfee0_0000, 0x41), refuse).is_err());
    assert!(routes.is_empty());
    update_route(&mut routes, 24, (0xfee0_0000, 0x41), |r| {
        installed.push(r.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(installed.len(), 1);
    // The same route again: nothing installed.
    update_route(&mut routes, 24, (0xfee0_0000, 0x41), |_| {
        panic!("an unchanged route was installed again")
    })
    .unwrap();
    // A changed route KVM refuses: the one KVM has is kept.
    assert!(update_route(&mut routes, 24, (0xfee0_1000, 0x42), refuse).is_err());
    assert_eq!(routes.get(&24), Some(&(0xfee0_0000, 0x41)));
    update_route(&mut routes, 24, (0xfee0_1000, 0x42), |r| {
        installed.push(r.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(installed[1].get(&24), Some(&(0xfee0_1000, 0x42)));
}

#[test]
fn a_drive_with_2048_vectors_fits_the_gsi_table() {
    // The largest MSI-X table (2048 vectors) on GSIs from 24 up: every
    // route and the legacy ones in one KVM_SET_GSI_ROUTING table.
    let routes: MsiRoutes = (0..2048u32)
        .map(|v| {
            (
                IOAPIC_PINS + v,
                (0xfee0_0000 | u64::from(v % 64) << 12, 0x40 + v % 200),
            )
        })
        .collect();
    let entries = routing_entries(&routes);
    assert_eq!(entries.len(), 40 + 2048);
    assert!(entries.len() <= kvm_bindings::KVM_MAX_IRQ_ROUTES);
    let table = KvmIrqRouting::from_entries(&entries).unwrap();
    assert_eq!(table.as_slice().len(), entries.len());
}

#[test]
fn guest_ram_is_advised_for_huge_pages() {
    let mem = create_guest_memory(8 << 20, false).unwrap();
    let start = mem.iter().next().unwrap().as_ptr() as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let flags = smaps
        .split("\n")
        .skip_while(|l| {
            !l.split('-')
                .next()
                .is_some_and(|a| usize::from_str_radix(a, 16) == Ok(start))
        })
        .find(|l| l.starts_with("VmFlags:"))
        .unwrap_or_default();
    assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags:?}");
}

#[test]
fn memory_follows_layout() {
    let mem = create_guest_memory(256 << 20, false).unwrap();
    assert_eq!(mem.num_regions(), 1);
    assert_eq!(mem.last_addr(), GuestAddress((256 << 20) - 1));
}
