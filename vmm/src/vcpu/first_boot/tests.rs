use std::cell::RefCell;

use super::*;

/// Records the calls; refuses the MSRs in `refuse`.
#[derive(Default)]
struct Recorder {
    calls: RefCell<Vec<&'static str>>,
    msrs: RefCell<Vec<(u32, u64)>>,
    refuse: Vec<u32>,
}

impl VcpuState for Recorder {
    fn set_mp_state(&self, _: kvm_mp_state) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("mp_state");
        Ok(())
    }
    fn set_regs(&self, _: &kvm_regs) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("regs");
        Ok(())
    }
    fn set_sregs(&self, _: &kvm_sregs) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("sregs");
        Ok(())
    }
    fn set_xcrs(&self, _: &kvm_xcrs) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("xcrs");
        Ok(())
    }
    fn set_fpu(&self, _: &kvm_fpu) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("fpu");
        Ok(())
    }
    fn set_lapic(&self, _: &kvm_lapic_state) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("lapic");
        Ok(())
    }
    fn set_msrs(&self, entries: &[kvm_msr_entry]) -> Result<usize, kvm_ioctls::Error> {
        self.calls.borrow_mut().push("msrs");
        let n = entries
            .iter()
            .take_while(|e| !self.refuse.contains(&e.index))
            .count();
        self.msrs
            .borrow_mut()
            .extend(entries[..n].iter().map(|e| (e.index, e.data)));
        Ok(n)
    }
    fn set_vcpu_events(&self, _: &kvm_vcpu_events) -> Result<(), kvm_ioctls::Error> {
        self.calls.borrow_mut().push("events");
        Ok(())
    }
    fn get_msr(&self, index: u32) -> Result<u64, kvm_ioctls::Error> {
        self.calls.borrow_mut().push("get_msr");
        Ok(if index == MSR_IA32_TSC { TSC_NOW } else { 0 })
    }
}

/// What the recorder's KVM says the TSC reads.
const TSC_NOW: u64 = 0x1234_5678_9abc;

fn first_boot(xcrs: bool) -> FirstBoot {
    FirstBoot {
        mp_state: kvm_mp_state::default(),
        regs: kvm_regs::default(),
        sregs: kvm_sregs::default(),
        xcrs: xcrs.then(kvm_xcrs::default),
        fpu: kvm_fpu::default(),
        lapic: kvm_lapic_state::default(),
        // As read at first boot: the guest-set MSRs hold 0.
        msrs: saved_msr_indices()
            .into_iter()
            .map(|index| kvm_msr_entry {
                index,
                data: u64::from(index == 0x4b56_4d05),
                ..Default::default()
            })
            .collect(),
        events: kvm_vcpu_events::default(),
    }
}

#[test]
fn the_tsc_is_left_alone_and_the_paravirtual_msrs_are_saved() {
    let idx = saved_msr_indices();
    assert!(!idx.contains(&0x10));
    for pv in [0x12, 0x4b56_4d01, 0x4b56_4d02, 0x4b56_4d03, 0x4b56_4d04] {
        assert!(idx.contains(&pv), "{pv:#x}");
    }
    // The wall clock: a write makes KVM write guest memory.
    assert!(!idx.contains(&0x11) && !idx.contains(&0x4b56_4d00));
}

#[test]
fn restore_sets_the_apic_base_before_the_lapic_and_events_last() {
    let r = Recorder::default();
    first_boot(true).restore(&r, 0).unwrap();
    assert_eq!(
        *r.calls.borrow(),
        [
            "mp_state", "regs", "sregs", "xcrs", "fpu", "lapic", "msrs", "get_msr", "msrs",
            "events"
        ]
    );
    // kvmclock, steal time, async PF, PV EOI: written back as 0.
    let msrs = r.msrs.borrow();
    // The TSC: read, then written back as read, after the first-boot
    // MSRs (the offset KVM on AMD loses serving a triple fault).
    assert_eq!(msrs.last(), Some(&(MSR_IA32_TSC, TSC_NOW)));
    assert_eq!(msrs.iter().filter(|(i, _)| *i == MSR_IA32_TSC).count(), 1);
    for pv in [0x4b56_4d01, 0x4b56_4d02, 0x4b56_4d03, 0x4b56_4d04] {
        assert!(msrs.contains(&(pv, 0)), "{pv:#x}");
    }
    let r = Recorder::default();
    first_boot(false).restore(&r, 0).unwrap();
    assert!(!r.calls.borrow().contains(&"xcrs"));
}

#[test]
fn an_msr_kvm_refuses_is_skipped_not_the_rest() {
    let r = Recorder {
        refuse: vec![0x4b56_4d02, 0x277],
        ..Default::default()
    };
    let fb = first_boot(true);
    let set = set_msrs_skipping(&r, &fb.msrs, 0).unwrap();
    assert_eq!(set, fb.msrs.len() - 2);
    let msrs = r.msrs.borrow();
    assert!(msrs.iter().all(|(i, _)| *i != 0x4b56_4d02 && *i != 0x277));
    assert!(msrs.iter().any(|(i, _)| *i == 0x6e0), "the last one is set");
}
