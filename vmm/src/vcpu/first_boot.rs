//! A vCPU's first-boot state, read once it is configured and given back
//! on each reboot, on the vCPU's own thread.
//!
//! What the guest set up that outlives its registers is undone too: the
//! paravirtual MSRs whose values point into guest memory (kvmclock, steal
//! time, asynchronous page faults, PV EOI) are written back with their
//! first-boot value, 0, so KVM stops writing there for a guest that no
//! longer expects it. The TSC runs on (a reset that set it back would need
//! every vCPU's write matched by KVM's TSC synchronisation), but its value
//! is read and written back: that makes KVM write its TSC offset into the
//! vCPU's control block again, which KVM on AMD zeroes when it serves a
//! triple fault (`shutdown_interception` clears the VMCB and INITs the
//! vCPU; its offset stays in KVM's books only). Without the write-back a
//! guest restarted after a triple fault read the host's raw TSC while
//! KVM's kvmclock and TSC-deadline arithmetic used the offset: its timers
//! fired late, a `ping -c 3` took 20 s by its own clock.

use kvm_bindings::{
    kvm_fpu, kvm_lapic_state, kvm_mp_state, kvm_msr_entry, kvm_regs, kvm_sregs, kvm_vcpu_events,
    kvm_xcrs, Msrs,
};
use kvm_ioctls::VcpuFd;

use super::{boot_msrs, VcpuError};

/// MSRs the guest may have pointed into its memory, besides the boot
/// MSRs: kvmclock (`MSR_KVM_SYSTEM_TIME`, old and new), asynchronous page
/// faults (enable and interrupt), steal time, PV EOI; and the PAT, the
/// TSC deadline and `MSR_KVM_POLL_CONTROL`. The wall-clock MSRs are left
/// out: a write makes KVM write the clock at the address written.
pub const GUEST_SET_MSRS: [u32; 9] = [
    0x12,        // MSR_KVM_SYSTEM_TIME
    0x4b56_4d01, // MSR_KVM_SYSTEM_TIME_NEW
    0x4b56_4d02, // MSR_KVM_ASYNC_PF_EN
    0x4b56_4d03, // MSR_KVM_STEAL_TIME
    0x4b56_4d04, // MSR_KVM_PV_EOI_EN
    0x4b56_4d05, // MSR_KVM_POLL_CONTROL
    0x4b56_4d06, // MSR_KVM_ASYNC_PF_INT
    0x277,       // MSR_IA32_CR_PAT
    0x6e0,       // MSR_IA32_TSC_DEADLINE
];

/// MSR_IA32_TSC: never given back (see the module doc).
const MSR_IA32_TSC: u32 = 0x10;

/// The MSRs to read at first boot: the boot MSRs but the TSC, and
/// [`GUEST_SET_MSRS`].
pub fn saved_msr_indices() -> Vec<u32> {
    boot_msrs()
        .iter()
        .map(|e| e.index)
        .filter(|i| *i != MSR_IA32_TSC)
        .chain(GUEST_SET_MSRS)
        .collect()
}

/// The state a vCPU had before it first ran.
#[derive(Clone)]
pub struct FirstBoot {
    mp_state: kvm_mp_state,
    regs: kvm_regs,
    sregs: kvm_sregs,
    xcrs: Option<kvm_xcrs>,
    fpu: kvm_fpu,
    lapic: kvm_lapic_state,
    msrs: Vec<kvm_msr_entry>,
    events: kvm_vcpu_events,
}

/// The vCPU calls a restore makes, in its order (a trait so that tests
/// can record them).
pub trait VcpuState {
    /// KVM_SET_MP_STATE.
    fn set_mp_state(&self, s: kvm_mp_state) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_REGS.
    fn set_regs(&self, r: &kvm_regs) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_SREGS.
    fn set_sregs(&self, s: &kvm_sregs) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_XCRS.
    fn set_xcrs(&self, x: &kvm_xcrs) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_FPU.
    fn set_fpu(&self, f: &kvm_fpu) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_LAPIC.
    fn set_lapic(&self, l: &kvm_lapic_state) -> Result<(), kvm_ioctls::Error>;
    /// KVM_SET_MSRS: how many of `entries`, from the first, were set.
    fn set_msrs(&self, entries: &[kvm_msr_entry]) -> Result<usize, kvm_ioctls::Error>;
    /// KVM_SET_VCPU_EVENTS.
    fn set_vcpu_events(&self, e: &kvm_vcpu_events) -> Result<(), kvm_ioctls::Error>;
    /// KVM_GET_MSRS of one MSR: its value.
    fn get_msr(&self, index: u32) -> Result<u64, kvm_ioctls::Error>;
}

impl VcpuState for VcpuFd {
    fn set_mp_state(&self, s: kvm_mp_state) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_mp_state(self, s)
    }
    fn set_regs(&self, r: &kvm_regs) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_regs(self, r)
    }
    fn set_sregs(&self, s: &kvm_sregs) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_sregs(self, s)
    }
    fn set_xcrs(&self, x: &kvm_xcrs) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_xcrs(self, x)
    }
    fn set_fpu(&self, f: &kvm_fpu) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_fpu(self, f)
    }
    fn set_lapic(&self, l: &kvm_lapic_state) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_lapic(self, l)
    }
    fn set_msrs(&self, entries: &[kvm_msr_entry]) -> Result<usize, kvm_ioctls::Error> {
        let msrs = Msrs::from_entries(entries).map_err(|_| kvm_ioctls::Error::new(libc::E2BIG))?;
        VcpuFd::set_msrs(self, &msrs)
    }
    fn set_vcpu_events(&self, e: &kvm_vcpu_events) -> Result<(), kvm_ioctls::Error> {
        VcpuFd::set_vcpu_events(self, e)
    }
    fn get_msr(&self, index: u32) -> Result<u64, kvm_ioctls::Error> {
        let mut one = Msrs::from_entries(&[kvm_msr_entry {
            index,
            ..Default::default()
        }])
        .map_err(|_| kvm_ioctls::Error::new(libc::E2BIG))?;
        match VcpuFd::get_msrs(self, &mut one)? {
            1 => Ok(one.as_slice()[0].data),
            _ => Err(kvm_ioctls::Error::new(libc::EINVAL)),
        }
    }
}

impl FirstBoot {
    /// Read vCPU `cpu`'s state (after [`super::configure`], before it
    /// runs). An MSR KVM cannot read is left out.
    pub fn capture(fd: &VcpuFd, cpu: u8) -> Result<Self, VcpuError> {
        let kvm = |what| move |source| VcpuError::Kvm { cpu, what, source };
        let mut msrs = Vec::new();
        for index in saved_msr_indices() {
            match VcpuState::get_msr(fd, index) {
                Ok(data) => msrs.push(kvm_msr_entry {
                    index,
                    data,
                    ..Default::default()
                }),
                Err(_) => tracing::debug!(cpu, index, "MSR not readable; not reset on reboot"),
            }
        }
        Ok(FirstBoot {
            mp_state: fd.get_mp_state().map_err(kvm("KVM_GET_MP_STATE"))?,
            regs: fd.get_regs().map_err(kvm("KVM_GET_REGS"))?,
            sregs: fd.get_sregs().map_err(kvm("KVM_GET_SREGS"))?,
            // Without KVM_CAP_XCRS (no XSAVE), there are none.
            xcrs: fd.get_xcrs().ok(),
            fpu: fd.get_fpu().map_err(kvm("KVM_GET_FPU"))?,
            lapic: fd.get_lapic().map_err(kvm("KVM_GET_LAPIC"))?,
            msrs,
            events: fd.get_vcpu_events().map_err(kvm("KVM_GET_VCPU_EVENTS"))?,
        })
    }

    /// Give vCPU `cpu` this state again, in the order KVM needs: the APIC
    /// base (in the segment registers) before the LAPIC, XCR0 before the
    /// FPU, the TSC written back after the MSRs, pending events last.
    pub fn restore(&self, fd: &impl VcpuState, cpu: u8) -> Result<(), VcpuError> {
        let kvm = |what| move |source| VcpuError::Kvm { cpu, what, source };
        fd.set_mp_state(self.mp_state)
            .map_err(kvm("KVM_SET_MP_STATE"))?;
        fd.set_regs(&self.regs).map_err(kvm("KVM_SET_REGS"))?;
        fd.set_sregs(&self.sregs).map_err(kvm("KVM_SET_SREGS"))?;
        if let Some(x) = &self.xcrs {
            fd.set_xcrs(x).map_err(kvm("KVM_SET_XCRS"))?;
        }
        fd.set_fpu(&self.fpu).map_err(kvm("KVM_SET_FPU"))?;
        fd.set_lapic(&self.lapic).map_err(kvm("KVM_SET_LAPIC"))?;
        set_msrs_skipping(fd, &self.msrs, cpu).map_err(kvm("KVM_SET_MSRS"))?;
        // The TSC as KVM counts it, written back: its offset into the
        // control block again (see the module doc).
        let tsc = fd.get_msr(MSR_IA32_TSC).map_err(kvm("KVM_GET_MSRS"))?;
        let n = fd
            .set_msrs(&[kvm_msr_entry {
                index: MSR_IA32_TSC,
                data: tsc,
                ..Default::default()
            }])
            .map_err(kvm("KVM_SET_MSRS"))?;
        if n != 1 {
            tracing::warn!(cpu, "KVM refused the TSC's write-back on reboot");
        }
        fd.set_vcpu_events(&self.events)
            .map_err(kvm("KVM_SET_VCPU_EVENTS"))
    }
}

/// Set `entries`; one KVM refuses is logged and skipped (KVM stops at the
/// first it refuses). Returns how many were set.
pub fn set_msrs_skipping(
    fd: &impl VcpuState,
    entries: &[kvm_msr_entry],
    cpu: u8,
) -> Result<usize, kvm_ioctls::Error> {
    let (mut at, mut set) = (0, 0);
    while at < entries.len() {
        let n = fd.set_msrs(&entries[at..])?;
        set += n;
        at += n;
        if let Some(e) = entries.get(at) {
            tracing::warn!(
                cpu,
                index = format_args!("{:#x}", e.index),
                "KVM refused a first-boot MSR on reboot"
            );
            at += 1;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests;
