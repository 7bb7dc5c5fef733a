use super::*;
use kvm_bindings::kvm_cpuid_entry2;
use vm_memory::GuestAddress;

fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap()
}

#[test]
fn gdt_entries_decode_to_flat_long_mode_segments() {
    let gdt = boot_gdt();
    assert_eq!(gdt[2], 0x00af_9b00_0000_ffff);
    assert_eq!(gdt[3], 0x00cf_9300_0000_ffff);
    let cs = segment_from_gdt(gdt[2], 2);
    assert_eq!((cs.selector, cs.base, cs.limit), (0x10, 0, 0xffff_ffff));
    assert_eq!((cs.l, cs.db, cs.present, cs.s, cs.type_), (1, 0, 1, 1, 0xb));
    let ds = segment_from_gdt(gdt[3], 3);
    assert_eq!((ds.selector, ds.l, ds.db, ds.type_), (0x18, 0, 1, 0x3));
    let tr = segment_from_gdt(gdt[4], 4);
    assert_eq!(
        (tr.selector, tr.type_, tr.s, tr.unusable),
        (0x20, 0xb, 0, 0)
    );
    assert_eq!(segment_from_gdt(0, 0).unusable, 1);
    assert_eq!(gdt_entry(0x8093, 0x1234_5678, 0xabcde) >> 56, 0x12);
    assert_eq!(
        segment_from_gdt(gdt_entry(0x0093, 0x1234_5678, 0xabcde), 1).base,
        0x1234_5678
    );
}

/// Walk the 4-level tables as the MMU would.
fn translate(mem: &GuestMemoryMmap, cr3: u64, va: u64) -> Option<u64> {
    let pml4e: u64 = mem
        .read_obj(GuestAddress(cr3 + ((va >> 39) & 0x1ff) * 8))
        .ok()?;
    if pml4e & 1 == 0 {
        return None;
    }
    let pdpte: u64 = mem
        .read_obj(GuestAddress((pml4e & !0xfff) + ((va >> 30) & 0x1ff) * 8))
        .ok()?;
    if pdpte & 1 == 0 {
        return None;
    }
    let pde: u64 = mem
        .read_obj(GuestAddress((pdpte & !0xfff) + ((va >> 21) & 0x1ff) * 8))
        .ok()?;
    if pde & 1 == 0 || pde & PDE_HUGE == 0 {
        return None;
    }
    Some((pde & !0x1f_ffff & 0x000f_ffff_ffff_ffff) | (va & 0x1f_ffff))
}

#[test]
fn page_tables_identity_map_4g() {
    let m = mem();
    let cr3 = setup_page_tables(&m).unwrap();
    for va in [0, 0x7000, 0x10_0000, 0x1234_5678, 0xbfff_ffff, 0xffff_f000] {
        assert_eq!(translate(&m, cr3, va), Some(va), "{va:#x}");
    }
    assert_eq!(translate(&m, cr3, 0x1_0000_0000), None);
}

#[test]
fn sregs_enter_long_mode() {
    let m = mem();
    let mut s = kvm_sregs::default();
    setup_sregs(&m, &mut s, PML4_START).unwrap();
    assert_eq!(s.cr0 & (X86_CR0_PE | X86_CR0_PG), X86_CR0_PE | X86_CR0_PG);
    assert_ne!(s.cr4 & X86_CR4_PAE, 0);
    assert_eq!(s.efer & (EFER_LME | EFER_LMA), EFER_LME | EFER_LMA);
    assert_eq!(
        (s.cs.selector, s.ds.selector, s.ss.selector),
        (0x10, 0x18, 0x18)
    );
    assert_eq!((s.gdt.base, s.gdt.limit), (GDT_START, 39));
    let cs_raw: u64 = m.read_obj(GuestAddress(GDT_START + 0x10)).unwrap();
    assert_eq!(cs_raw, boot_gdt()[2]);
    let r = boot_regs(GuestAddress(0x10_0200));
    assert_eq!((r.rip, r.rsi, r.rflags), (0x10_0200, ZERO_PAGE_START, 2));
}

fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
    kvm_cpuid_entry2 {
        function,
        index,
        eax: 0xffff_ffff,
        ebx: 0xffff_ffff,
        ecx: 0x0000_0000,
        edx: 0xffff_ffff,
        ..Default::default()
    }
}

#[test]
fn cpuid_topology_and_apic_ids() {
    let base = CpuId::from_entries(&[
        entry(1, 0),
        kvm_cpuid_entry2 {
            eax: 1 << 5,
            ..entry(4, 0)
        },
        kvm_cpuid_entry2 {
            eax: 3 << 5,
            ..entry(4, 3)
        },
        entry(0xb, 0),
        entry(0xb, 1),
        entry(0xb, 2),
        entry(0x8000_0008, 0),
    ])
    .unwrap();
    let mut c = base.clone();
    setup_cpuid(&mut c, 2, 3);
    let e = c.as_slice();
    assert_eq!(e[0].ebx >> 24, 2, "initial APIC id");
    assert_eq!((e[0].ebx >> 16) & 0xff, 3, "logical processors");
    assert_ne!(e[0].ecx & CPUID_HYPERVISOR, 0);
    assert_ne!(e[0].edx & CPUID_HTT, 0);
    assert_eq!(e[1].eax >> 26, 2, "cores per package - 1");
    assert_eq!((e[1].eax >> 14) & 0xfff, 0, "L1 private");
    assert_eq!((e[2].eax >> 14) & 0xfff, 2, "L3 shared by all");
    assert_eq!((e[3].ebx, e[3].ecx, e[3].edx), (1, 0x100, 2));
    assert_eq!((e[4].eax, e[4].ebx, e[4].ecx, e[4].edx), (2, 3, 0x201, 2));
    assert_eq!((e[5].ebx, e[5].ecx), (0, 2));
    assert_eq!(e[6].ecx & 0xff, 2);

    let mut one = base;
    setup_cpuid(&mut one, 0, 1);
    assert_eq!(one.as_slice()[0].edx & CPUID_HTT, 0);
    assert_eq!(one.as_slice()[4].eax, 0);
}

#[test]
fn intel_extended_topology_leaf_0x1f_is_set_like_0xb() {
    // Intel hosts since Alder Lake / Sapphire Rapids report leaf 0x1f,
    // which Linux prefers to 0xb: both must give the same topology.
    let mut c = CpuId::from_entries(&[
        entry(0xb, 0),
        entry(0xb, 1),
        entry(0x1f, 0),
        entry(0x1f, 1),
        entry(0x1f, 2),
    ])
    .unwrap();
    setup_cpuid(&mut c, 5, 8);
    let e = c.as_slice();
    let regs = |x: &kvm_cpuid_entry2| (x.eax, x.ebx, x.ecx, x.edx);
    assert_eq!(regs(&e[2]), regs(&e[0]), "SMT level");
    assert_eq!(regs(&e[3]), regs(&e[1]), "core level");
    assert_eq!(
        regs(&e[3]),
        (3, 8, 0x201, 5),
        "8 cores: 3 id bits, x2APIC id 5"
    );
    assert_eq!((e[4].ebx, e[4].ecx >> 8), (0, 0), "no third level");
}

#[test]
fn tsc_deadline_only_when_kvm_has_it() {
    let base = CpuId::from_entries(&[entry(1, 0), entry(7, 0)]).unwrap();
    let mut with = base.clone();
    add_emulated_features(&mut with, true);
    assert_ne!(with.as_slice()[0].ecx & CPUID_TSC_DEADLINE, 0);
    assert_eq!(with.as_slice()[1].ecx, 0, "other leaves untouched");
    let mut without = base;
    add_emulated_features(&mut without, false);
    assert_eq!(without.as_slice()[0].ecx & CPUID_TSC_DEADLINE, 0);
}

#[test]
fn async_page_faults_are_not_offered() {
    let mut c = CpuId::from_entries(&[
        kvm_cpuid_entry2 {
            function: KVM_CPUID_FEATURES,
            eax: 0x0100_7fff,
            ..Default::default()
        },
        kvm_cpuid_entry2 {
            function: 1,
            eax: 0x7fff,
            ..Default::default()
        },
    ])
    .unwrap();
    remove_async_pf(&mut c);
    assert_eq!(
        c.as_slice()[0].eax,
        0x0100_7fff & !0x4410,
        "kvmclock and the rest stay"
    );
    assert_eq!(c.as_slice()[1].eax, 0x7fff, "other leaves untouched");
}

#[test]
fn lint_modes() {
    let mut l = kvm_lapic_state::default();
    set_lapic_reg(&mut l, APIC_LVT0, 0x0001_0700);
    setup_lint(&mut l);
    assert_eq!(lapic_reg(&l, APIC_LVT0), 0x0001_0700);
    assert_eq!((lapic_reg(&l, APIC_LVT1) >> 8) & 7, APIC_MODE_NMI);
    assert_eq!(boot_msrs().len(), 11);
}

/// Counts every event, at every level.
struct AllEvents(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl tracing::Subscriber for AllEvents {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A guest hammering an address no device claims logs a bounded number
/// of debug lines, not one per access.
#[test]
fn unclaimed_mmio_logging_is_rate_limited() {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = std::time::Instant::now();
    tracing::subscriber::with_default(AllEvents(n.clone()), || {
        for _ in 0..100_000 {
            log_unclaimed("unclaimed MMIO write", 0xdead_0000, 4);
        }
    });
    let seconds = start.elapsed().as_secs() + 1;
    let logged = n.load(std::sync::atomic::Ordering::Relaxed) as u64;
    assert!(logged >= 1, "the first is logged");
    assert!(
        logged <= seconds * u64::from(UNCLAIMED_PER_SECOND),
        "{logged} lines in {seconds} s"
    );
}

/// A panic on a vCPU thread asks the VM to stop with an error (exit code
/// 1, ordered release) instead of ending that thread silently.
#[test]
fn a_panic_on_a_vcpu_thread_stops_the_vm() {
    let exit = VmExit::new().unwrap();
    stop_vm_on_panic(3, &exit, || {});
    assert_eq!(exit.reason(), None, "no panic, no stop");
    // (The panic's message is printed: the hook is the process's.)
    stop_vm_on_panic(3, &exit, || panic!("a drain went wrong"));
    match exit.reason() {
        Some(ExitReason::Error(e)) => assert!(e.contains("vCPU 3"), "{e}"),
        other => panic!("{other:?}"),
    }
}
