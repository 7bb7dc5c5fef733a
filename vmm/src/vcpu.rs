//! vCPUs: CPUID, MSRs, the 64-bit boot state of the Linux boot protocol,
//! and the run loop that dispatches exits to the buses.
//!
//! The boot vCPU starts in long mode at the kernel's 64-bit entry with
//! `rsi` = zero page, a GDT whose `__BOOT_CS` (0x10) and `__BOOT_DS` (0x18)
//! are flat 4 GiB segments, and page tables identity-mapping the first
//! 4 GiB with 2 MiB pages (Documentation/x86/boot.rst, "64-bit Boot
//! Protocol"). Application processors wait for INIT/SIPI in the in-kernel
//! local APIC.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kvm_bindings::{
    kvm_fpu, kvm_lapic_state, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, CpuId, Msrs,
    KVM_SYSTEM_EVENT_RESET, KVM_SYSTEM_EVENT_SHUTDOWN,
};
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::bus::Bus;
use crate::devices::exit::{ExitReason, VmExit};
pub use first_boot::FirstBoot;
pub use park::{ParkGate, Unpark};

use crate::layout::{BOOT_STACK_POINTER, GDT_START, IDT_START, PML4_START, ZERO_PAGE_START};

mod start_gate;
pub use start_gate::StartGate;

/// Why a vCPU could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum VcpuError {
    /// A KVM vCPU ioctl failed.
    #[error("vCPU {cpu}: KVM {what} failed")]
    Kvm {
        /// Which vCPU.
        cpu: u8,
        /// Which call.
        what: &'static str,
        /// The error.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// KVM accepted fewer MSRs than given.
    #[error("vCPU {cpu}: KVM set {set} of {total} boot MSRs")]
    Msrs {
        /// Which vCPU.
        cpu: u8,
        /// How many were set.
        set: usize,
        /// How many were given.
        total: usize,
    },
    /// Boot structures could not be written to guest memory.
    #[error("cannot write {what} to guest memory")]
    Memory {
        /// Which structure.
        what: &'static str,
        /// The error.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
}

// ---- CPUID ----------------------------------------------------------------

const CPUID_HYPERVISOR: u32 = 1 << 31; // leaf 1 ecx
const CPUID_HTT: u32 = 1 << 28; // leaf 1 edx

/// Leaf 1 ECX bit 24: the local APIC's TSC-deadline timer mode.
const CPUID_TSC_DEADLINE: u32 = 1 << 24;

/// Add to the host-supported CPUID (once per VM) what KVM emulates but
/// `KVM_GET_SUPPORTED_CPUID` leaves out because it depends on the in-kernel
/// irqchip, which the VMM always creates: the TSC-deadline timer, when KVM
/// has `KVM_CAP_TSC_DEADLINE_TIMER` (`tsc_deadline`). QEMU,
/// cloud-hypervisor and Firecracker set it too. Without it the guest
/// programs its one-shot timer through the xAPIC's TMICT register: an MMIO
/// exit KVM has to decode, on every idle entry and exit, where the deadline
/// is one WRMSR exit (the lab counted 0.07-0.32 TMICT writes per I/O at
/// 4k-64k randread, none behind QEMU).
pub fn add_emulated_features(cpuid: &mut CpuId, tsc_deadline: bool) {
    for e in cpuid.as_mut_slice() {
        if e.function == 1 && tsc_deadline {
            e.ecx |= CPUID_TSC_DEADLINE;
        }
    }
}

/// KVM's paravirtual feature leaf (`KVM_CPUID_FEATURES`).
const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// Asynchronous page faults, in all their forms (`KVM_FEATURE_ASYNC_PF`,
/// `..._VMEXIT`, `..._INT`: bits 4, 10 and 14 of that leaf's EAX).
const KVM_ASYNC_PF_FEATURES: u32 = (1 << 4) | (1 << 10) | (1 << 14);

/// Take asynchronous page faults out of the paravirtual features KVM
/// offers. With them, a guest access to RAM the host cannot fault in at
/// once is answered with a "page not present" event and the guest runs
/// another task meanwhile; that only pays when guest RAM is overcommitted
/// and swapped, which a VMM whose device DMA needs pinned RAM does not do.
/// In the nested lab it cost hung guests: the lab host's kernel spun for
/// minutes in KVM delivering a "page ready" event to a vCPU thread of ours
/// (`kvm_arch_async_page_present`, a soft lockup), and guests crashed at
/// syscall entry.
pub fn remove_async_pf(cpuid: &mut CpuId) {
    for e in cpuid.as_mut_slice() {
        if e.function == KVM_CPUID_FEATURES {
            e.eax &= !KVM_ASYNC_PF_FEATURES;
        }
    }
}

/// Adjust the host-supported CPUID for vCPU `cpu` of `cpus`: APIC ids and
/// topology (one socket, one thread per core), and the hypervisor bit.
pub fn setup_cpuid(cpuid: &mut CpuId, cpu: u8, cpus: u8) {
    let cpu = u32::from(cpu);
    let cpus = u32::from(cpus.max(1));
    // Bits needed to number the cores in the x2APIC id.
    let core_bits = 32 - (cpus - 1).leading_zeros();
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => {
                e.ebx = (e.ebx & 0x0000_ffff) | (cpus << 16) | (cpu << 24);
                e.ecx |= CPUID_HYPERVISOR;
                if cpus > 1 {
                    e.edx |= CPUID_HTT;
                } else {
                    e.edx &= !CPUID_HTT;
                }
            }
            4 => {
                // Cores per package - 1 in 31:26; sharing of the cache in
                // 25:14: private L1/L2, shared L3.
                let level = (e.eax >> 5) & 0x7;
                let sharing = if level >= 3 { cpus - 1 } else { 0 };
                e.eax = (e.eax & 0x3fff) | ((sharing & 0xfff) << 14) | (((cpus - 1) & 0x3f) << 26);
            }
            0xb | 0x1f => {
                e.edx = cpu;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = 1 << 8; // level type SMT
                    }
                    1 => {
                        e.eax = core_bits;
                        e.ebx = cpus;
                        e.ecx = (2 << 8) | 1; // level type core
                    }
                    i => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = i;
                    }
                }
            }
            0x8000_0008 => {
                // AMD: cores per package - 1, and the APIC id width.
                e.ecx = (e.ecx & !0xf0ff) | (core_bits << 12) | (cpus - 1);
            }
            0x8000_001e => {
                // AMD: extended APIC id, core id, one thread per core, node 0.
                e.eax = cpu;
                e.ebx = cpu & 0xff;
                e.ecx = 0;
            }
            _ => {}
        }
    }
}

// ---- MSRs -----------------------------------------------------------------

const MSR_IA32_TSC: u32 = 0x10;
const MSR_IA32_SYSENTER_CS: u32 = 0x174;
const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MISC_ENABLE_FAST_STRING: u64 = 1;
const MTRR_ENABLE: u64 = 1 << 11;
const MTRR_TYPE_WRBACK: u64 = 6;

/// MSR values at boot: syscall MSRs cleared, fast strings on, MTRRs on
/// with write-back as the default memory type.
pub fn boot_msrs() -> Vec<kvm_msr_entry> {
    [
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE | MTRR_TYPE_WRBACK),
    ]
    .into_iter()
    .map(|(index, data)| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    })
    .collect()
}

// ---- GDT, segments, page tables --------------------------------------------

/// A GDT descriptor from flags (access byte + flags nibble), base and limit.
pub fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    let (flags, base, limit) = (u64::from(flags), u64::from(base), u64::from(limit));
    ((base & 0xff00_0000) << 32)
        | ((flags & 0xf0ff) << 40)
        | ((limit & 0x000f_0000) << 32)
        | ((base & 0x00ff_ffff) << 16)
        | (limit & 0xffff)
}

/// The boot GDT: null, unused, `__BOOT_CS` (0x10, 64-bit code),
/// `__BOOT_DS` (0x18, data), TSS (0x20).
pub fn boot_gdt() -> [u64; 5] {
    [
        0,
        0,
        gdt_entry(0xa09b, 0, 0xfffff),
        gdt_entry(0xc093, 0, 0xfffff),
        gdt_entry(0x808b, 0, 0xfffff),
    ]
}

/// The KVM view of GDT entry `index` holding `entry`.
pub fn segment_from_gdt(entry: u64, index: u8) -> kvm_segment {
    let bit = |n: u32| ((entry >> n) & 1) as u8;
    let g = bit(55);
    let raw_limit = (((entry >> 32) & 0x000f_0000) | (entry & 0xffff)) as u32;
    let present = bit(47);
    kvm_segment {
        base: ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000),
        limit: if g == 1 {
            (raw_limit << 12) | 0xfff
        } else {
            raw_limit
        },
        selector: u16::from(index) * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present,
        dpl: ((entry >> 45) & 0x3) as u8,
        db: bit(54),
        s: bit(44),
        l: bit(53),
        g,
        avl: bit(52),
        unusable: u8::from(present == 0),
        padding: 0,
    }
}

const X86_CR0_PE: u64 = 1;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const PTE_PRESENT_RW: u64 = 0x3;
const PDE_HUGE: u64 = 0x80;
/// Identity-mapped at boot: 4 GiB, with 2 MiB pages.
pub const BOOT_IDENTITY_MAP_GIB: u64 = 4;

/// Write the boot page tables at [`PML4_START`]: PML4, one PDPT and
/// [`BOOT_IDENTITY_MAP_GIB`] page directories of 2 MiB pages. Returns CR3.
pub fn setup_page_tables(mem: &GuestMemoryMmap) -> Result<u64, VcpuError> {
    let err = |source| VcpuError::Memory {
        what: "page tables",
        source,
    };
    let pdpt = PML4_START + 0x1000;
    let pd0 = PML4_START + 0x2000;
    mem.write_obj(pdpt | PTE_PRESENT_RW, GuestAddress(PML4_START))
        .map_err(err)?;
    for gib in 0..BOOT_IDENTITY_MAP_GIB {
        let pd = pd0 + gib * 0x1000;
        mem.write_obj(pd | PTE_PRESENT_RW, GuestAddress(pdpt + gib * 8))
            .map_err(err)?;
        let mut entries = [0u8; 4096];
        for (i, chunk) in entries.chunks_exact_mut(8).enumerate() {
            let addr = (gib << 30) | ((i as u64) << 21);
            chunk.copy_from_slice(&(addr | PTE_PRESENT_RW | PDE_HUGE).to_le_bytes());
        }
        mem.write_slice(&entries, GuestAddress(pd)).map_err(err)?;
    }
    Ok(PML4_START)
}

/// Write the GDT and an empty IDT, and set `sregs` for 64-bit mode with
/// paging through `cr3`.
pub fn setup_sregs(
    mem: &GuestMemoryMmap,
    sregs: &mut kvm_sregs,
    cr3: u64,
) -> Result<(), VcpuError> {
    let gdt = boot_gdt();
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(GDT_START + 8 * i as u64))
            .map_err(|source| VcpuError::Memory {
                what: "GDT",
                source,
            })?;
    }
    mem.write_obj(0u64, GuestAddress(IDT_START))
        .map_err(|source| VcpuError::Memory {
            what: "IDT",
            source,
        })?;
    sregs.gdt.base = GDT_START;
    sregs.gdt.limit = (std::mem::size_of_val(&gdt) - 1) as u16;
    sregs.idt.base = IDT_START;
    sregs.idt.limit = 7;
    let code = segment_from_gdt(gdt[2], 2);
    let data = segment_from_gdt(gdt[3], 3);
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = segment_from_gdt(gdt[4], 4);
    sregs.cr0 |= X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
    sregs.cr3 = cr3;
    sregs.cr4 |= X86_CR4_PAE;
    sregs.efer |= EFER_LME | EFER_LMA;
    Ok(())
}

/// Write the boot page tables, GDT and IDT to guest memory again (a
/// reboot; the vCPUs' registers come from their first-boot state).
pub fn write_boot_tables(mem: &GuestMemoryMmap) -> Result<(), VcpuError> {
    let cr3 = setup_page_tables(mem)?;
    setup_sregs(mem, &mut kvm_sregs::default(), cr3)
}

/// General registers of the boot vCPU: entry point, stack, `rsi` = zero page.
pub fn boot_regs(entry: GuestAddress) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: entry.0,
        rsp: BOOT_STACK_POINTER,
        rbp: BOOT_STACK_POINTER,
        rsi: ZERO_PAGE_START,
        ..Default::default()
    }
}

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

fn lapic_reg(l: &kvm_lapic_state, off: usize) -> u32 {
    let b = &l.regs[off..off + 4];
    u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

fn set_lapic_reg(l: &mut kvm_lapic_state, off: usize, v: u32) {
    for (i, byte) in v.to_le_bytes().iter().enumerate() {
        l.regs[off + i] = *byte as _;
    }
}

/// LINT0 as ExtINT and LINT1 as NMI, as firmware leaves them.
pub fn setup_lint(l: &mut kvm_lapic_state) {
    let lvt0 = lapic_reg(l, APIC_LVT0);
    set_lapic_reg(l, APIC_LVT0, (lvt0 & !0x700) | (APIC_MODE_EXTINT << 8));
    let lvt1 = lapic_reg(l, APIC_LVT1);
    set_lapic_reg(l, APIC_LVT1, (lvt1 & !0x700) | (APIC_MODE_NMI << 8));
}

/// Configure vCPU `cpu`: CPUID, MSRs, FPU and LAPIC for every vCPU; the
/// boot registers only for vCPU 0 (`boot` = its entry point).
pub fn configure(
    fd: &VcpuFd,
    cpu: u8,
    cpus: u8,
    base_cpuid: &CpuId,
    mem: &GuestMemoryMmap,
    boot: Option<GuestAddress>,
) -> Result<(), VcpuError> {
    let kvm = |what| move |source| VcpuError::Kvm { cpu, what, source };
    let mut cpuid = base_cpuid.clone();
    setup_cpuid(&mut cpuid, cpu, cpus);
    fd.set_cpuid2(&cpuid).map_err(kvm("KVM_SET_CPUID2"))?;

    let entries = boot_msrs();
    let msrs = Msrs::from_entries(&entries).expect("boot MSR list fits a FamStructWrapper");
    let set = fd.set_msrs(&msrs).map_err(kvm("KVM_SET_MSRS"))?;
    if set != entries.len() {
        return Err(VcpuError::Msrs {
            cpu,
            set,
            total: entries.len(),
        });
    }
    let fpu = kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    };
    fd.set_fpu(&fpu).map_err(kvm("KVM_SET_FPU"))?;
    let mut lapic = fd.get_lapic().map_err(kvm("KVM_GET_LAPIC"))?;
    setup_lint(&mut lapic);
    fd.set_lapic(&lapic).map_err(kvm("KVM_SET_LAPIC"))?;

    if let Some(entry) = boot {
        let mut sregs = fd.get_sregs().map_err(kvm("KVM_GET_SREGS"))?;
        let cr3 = setup_page_tables(mem)?;
        setup_sregs(mem, &mut sregs, cr3)?;
        fd.set_sregs(&sregs).map_err(kvm("KVM_SET_SREGS"))?;
        fd.set_regs(&boot_regs(entry))
            .map_err(kvm("KVM_SET_REGS"))?;
    }
    Ok(())
}

// ---- run loop ---------------------------------------------------------------

/// A configured vCPU ready to run on its own thread.
pub struct Vcpu {
    /// KVM vCPU fd.
    pub fd: VcpuFd,
    /// Its index (= APIC id).
    pub id: u8,
    /// Port I/O bus.
    pub pio: Arc<Bus>,
    /// MMIO bus.
    pub mmio: Arc<Bus>,
    /// Where to report that the VM must stop.
    pub exit: Arc<VmExit>,
    /// Set by the main thread when the VM stops; checked after every exit.
    pub stop: Arc<AtomicBool>,
    /// Opened by the main thread once its own seccomp filter is in place
    /// (or by a stop): the vCPU enters the guest only after that.
    pub start: Arc<StartGate>,
    /// Where the API asks for this vCPU's registers.
    pub probe: Arc<crate::vcpu_probe::VcpuProbe>,
    /// Guest memory, for the probe's stack words.
    pub mem: vm_memory::GuestMemoryMmap,
    /// Where it parks for a reboot.
    pub gate: Arc<ParkGate>,
    /// Its state before it first ran, given back on a reboot.
    pub first_boot: FirstBoot,
}

impl Vcpu {
    /// Run until the VM stops. A panic on this thread (device emulation on
    /// a vCPU, such as a virtio-iommu drain served here: a bug, since
    /// guest input must never panic) stops the VM in order, through the
    /// same exit request as a power-off, instead of ending this thread
    /// alone while the guest runs on.
    pub fn run(self) {
        let (id, exit) = (self.id, self.exit.clone());
        stop_vm_on_panic(id, &exit, || self.run_loop());
    }

    /// Run; after an exit it reports, or when a reboot pauses it, park:
    /// then return when the VM stops, or take the first-boot state and
    /// run again.
    fn run_loop(mut self) {
        let id = self.id;
        self.probe.register_thread();
        // No guest instruction before the main thread is filtered.
        self.start.wait();
        let mut epoch = self.gate.epoch();
        loop {
            if let Some(reason) = self.run_until_exit() {
                self.exit.request(reason);
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            match self.gate.park(&mut epoch, &self.stop) {
                Unpark::Stop => return,
                Unpark::Restart => {
                    if let Err(e) = self.first_boot.restore(&self.fd, id) {
                        tracing::error!(vcpu = id, "cannot reset the vCPU for the reboot: {e}");
                        self.exit.request(ExitReason::Error(format!("reboot: {e}")));
                        return;
                    }
                    tracing::debug!(vcpu = id, "vCPU reset for the reboot");
                }
            }
        }
    }

    /// Run the guest until an exit that ends this run (returned), or until
    /// the VM stops or a reboot pauses the vCPUs (`None`).
    fn run_until_exit(&mut self) -> Option<ExitReason> {
        let id = self.id;
        while !self.stop.load(Ordering::Acquire) && !self.gate.pause_requested() {
            self.probe.answer(&self.fd, &self.mem);
            let reason = match self.fd.run() {
                Ok(VcpuExit::IoIn(port, data)) => {
                    if !self.pio.read(u64::from(port), data) {
                        tracing::trace!(port, len = data.len(), "unclaimed port read");
                    }
                    continue;
                }
                Ok(VcpuExit::IoOut(port, data)) => {
                    if !self.pio.write(u64::from(port), data) {
                        tracing::trace!(port, ?data, "unclaimed port write");
                    }
                    continue;
                }
                Ok(VcpuExit::MmioRead(addr, data)) => {
                    if !self.mmio.read(addr, data) {
                        log_unclaimed("unclaimed MMIO read", addr, data.len());
                    }
                    continue;
                }
                Ok(VcpuExit::MmioWrite(addr, data)) => {
                    if !self.mmio.write(addr, data) {
                        log_unclaimed("unclaimed MMIO write", addr, data.len());
                    }
                    continue;
                }
                Ok(VcpuExit::Shutdown) => {
                    log_triple_fault(&self.fd, id);
                    ExitReason::TripleFault
                }
                Ok(VcpuExit::SystemEvent(kind, _)) => match kind {
                    KVM_SYSTEM_EVENT_SHUTDOWN => ExitReason::PowerOff,
                    KVM_SYSTEM_EVENT_RESET => ExitReason::Reset,
                    other => ExitReason::Error(format!("vCPU {id}: system event {other}")),
                },
                Ok(VcpuExit::Hlt) => {
                    ExitReason::Error(format!("vCPU {id}: HLT exit with an in-kernel irqchip"))
                }
                Ok(VcpuExit::FailEntry(reason, cpu)) => ExitReason::Error(format!(
                    "vCPU {id}: KVM entry failed, hardware reason {reason:#x} on host CPU {cpu}"
                )),
                Ok(VcpuExit::InternalError) => {
                    ExitReason::Error(format!("vCPU {id}: KVM internal error"))
                }
                Ok(other) => ExitReason::Error(format!("vCPU {id}: unexpected exit {other:?}")),
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
                Err(e) => ExitReason::Error(format!("vCPU {id}: KVM_RUN failed: {e}")),
            };
            return Some(reason);
        }
        None
    }
}

/// Runs `f` (vCPU `id`'s loop); if it panics, logs it and asks `exit`
/// to stop the VM with an error (exit code 1, devices released in order).
fn stop_vm_on_panic(id: u8, exit: &VmExit, f: impl FnOnce()) {
    // AssertUnwindSafe: after a panic nothing `f` touched is used on this
    // thread again; the state it shares with other threads is behind
    // mutexes whose users take a poisoned lock as it is, and the VM stops.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!(vcpu = id, "a vCPU thread panicked; stopping the VM");
        exit.request(ExitReason::Error(format!("vCPU {id}: panicked")));
    }
}

/// Unclaimed accesses logged per second per vCPU thread at most.
const UNCLAIMED_PER_SECOND: u32 = 10;

/// Logs (debug) a guest access no device claimed, at most
/// [`UNCLAIMED_PER_SECOND`] a second per vCPU thread: the guest picks the
/// address and repeats the access at will. How many were left out is
/// logged with the next one logged.
fn log_unclaimed(what: &'static str, addr: u64, len: usize) {
    thread_local! {
        /// (start of the current second, logged in it, left out since).
        static BUDGET: std::cell::Cell<(Option<std::time::Instant>, u32, u64)> =
            const { std::cell::Cell::new((None, 0, 0)) };
    }
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    BUDGET.with(|b| {
        let (start, logged, dropped) = b.get();
        let now = std::time::Instant::now();
        let (start, logged) = match start {
            Some(s) if now.duration_since(s).as_secs() == 0 => (s, logged),
            _ => (now, 0),
        };
        if logged < UNCLAIMED_PER_SECOND {
            tracing::debug!(addr, len, dropped, "{what}");
            b.set((Some(start), logged + 1, 0));
        } else {
            b.set((Some(start), logged, dropped + 1));
        }
    });
}

/// Log where vCPU `id` was when the guest triple-faulted (a guest reboot
/// through its last-resort method, or a crash whose exception handling
/// failed: the registers tell which).
fn log_triple_fault(fd: &VcpuFd, id: u8) {
    match (fd.get_regs(), fd.get_sregs()) {
        (Ok(r), Ok(s)) => tracing::warn!(
            vcpu = id,
            rip = format_args!("{:#x}", r.rip),
            rsp = format_args!("{:#x}", r.rsp),
            rflags = format_args!("{:#x}", r.rflags),
            cs = format_args!("{:#x}", s.cs.selector),
            cr0 = format_args!("{:#x}", s.cr0),
            cr2 = format_args!("{:#x}", s.cr2),
            cr3 = format_args!("{:#x}", s.cr3),
            cr4 = format_args!("{:#x}", s.cr4),
            idt = format_args!("{:#x}", s.idt.base),
            "the guest triple-faulted"
        ),
        (r, s) => tracing::warn!(
            vcpu = id,
            regs = ?r.err(),
            sregs = ?s.err(),
            "the guest triple-faulted; its registers cannot be read"
        ),
    }
}

pub mod first_boot;
pub mod park;

#[cfg(test)]
mod tests;
