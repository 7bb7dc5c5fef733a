//! The reboot in place on KVM: [`crate::reboot::RebootSteps`] on the
//! running machine, and what the first boot saves for it (the guest's
//! setup, the in-kernel interrupt controllers' state).

use std::sync::Arc;
use std::time::Duration;

use kvm_bindings::{
    kvm_irqchip, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::running::Running;
use crate::device_manager::DeviceManager;
use crate::devices::exit::VmExit;
use crate::error::{kvm_err, VmmError};
use crate::layout::HIGH_RAM_START;
use crate::reboot::{RebootError, RebootSteps};
use crate::vcpu::ParkGate;
use crate::{acpi, boot, vcpu, vm};

/// How long the vCPUs get to park.
const PARK_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between kicks while they do.
const KICK_EVERY: Duration = Duration::from_millis(10);

/// What the guest's memory gets at boot, kept to write it again.
pub(crate) struct GuestSetup {
    /// Kernel and initramfs bytes.
    pub image: boot::GuestImage,
    /// RAM size.
    pub mem_size: u64,
    /// The kernel command line.
    pub cmdline: String,
    /// What the ACPI tables describe.
    pub acpi: acpi::AcpiConfig,
}

impl GuestSetup {
    /// Write ACPI tables, the reset vector's stub, kernel, initramfs,
    /// command line and zero page.
    pub fn load(&self, mem: &GuestMemoryMmap) -> Result<boot::BootInfo, VmmError> {
        let rsdp = acpi::write_tables(mem, &self.acpi)?;
        acpi::write_reset_vector(mem)?;
        Ok(boot::load_image(
            mem,
            self.mem_size,
            &self.image,
            &self.cmdline,
            rsdp,
        )?)
    }

    /// Write the guest's boot memory again: the low megabyte (zero page,
    /// command line, page tables, GDT, ACPI tables) zeroed, then all of
    /// it, kernel and initramfs included, as at the first boot, which
    /// entered at `entry`. The rest of RAM is left as the guest left it
    /// (a warm reset does not clear it either, and zeroing it would
    /// commit every page).
    pub fn reload(&self, mem: &GuestMemoryMmap, entry: GuestAddress) -> Result<(), RebootError> {
        let zeros = vec![0u8; HIGH_RAM_START as usize];
        mem.write_slice(&zeros, GuestAddress(0))
            .map_err(|e| RebootError::Load(format!("zeroing the low megabyte: {e}")))?;
        let info = self
            .load(mem)
            .map_err(|e| RebootError::Load(e.to_string()))?;
        if info.entry != entry {
            return Err(RebootError::Load(format!(
                "the kernel's entry moved from {:#x} to {:#x}",
                entry.0, info.entry.0
            )));
        }
        vcpu::write_boot_tables(mem).map_err(|e| RebootError::Load(e.to_string()))
    }
}

/// The in-kernel PICs' and IOAPIC's state before the guest ran.
pub(crate) fn save_irqchips(vm: &vm::Vm) -> Result<Vec<kvm_irqchip>, VmmError> {
    [
        KVM_IRQCHIP_PIC_MASTER,
        KVM_IRQCHIP_PIC_SLAVE,
        KVM_IRQCHIP_IOAPIC,
    ]
    .into_iter()
    .map(|chip_id| {
        let mut c = kvm_irqchip {
            chip_id,
            ..Default::default()
        };
        vm.fd()
            .get_irqchip(&mut c)
            .map_err(kvm_err("KVM_GET_IRQCHIP"))?;
        Ok(c)
    })
    .collect()
}

/// A reboot's steps on the running machine.
pub(crate) struct MachineSteps<'m, 'd> {
    pub machine: &'m Running<DeviceManager<'d>>,
    pub vm: &'m vm::Vm,
    pub gate: &'m Arc<ParkGate>,
    pub exit: &'m VmExit,
    pub cpus: usize,
    pub setup: &'m GuestSetup,
    pub entry: GuestAddress,
    pub irqchips: &'m [kvm_irqchip],
}

impl RebootSteps for MachineSteps<'_, '_> {
    fn pause_vcpus(&mut self) -> Result<(), RebootError> {
        self.gate.request_pause();
        let machine = self.machine;
        if !self
            .gate
            .wait_parked(self.cpus, PARK_TIMEOUT, KICK_EVERY, || machine.kick_all())
        {
            return Err(RebootError::VcpusBusy);
        }
        // Every vCPU is parked: an exit asked for from here on (a signal,
        // the API) is kept and ends the VM once it runs again.
        self.exit.clear();
        Ok(())
    }

    fn quiesce_iommu(&mut self) -> Result<(), RebootError> {
        self.machine.devices().reboot_quiesce()
    }

    fn reset_vfio(&mut self) {
        self.machine.devices().reboot_reset_vfio();
    }

    fn drop_dma(&mut self) -> Result<(), RebootError> {
        self.machine.devices().reboot_drop_dma()
    }

    fn reset_devices(&mut self) {
        self.machine.devices().reboot_reset_devices();
        for c in self.irqchips {
            if let Err(e) = self.vm.fd().set_irqchip(c) {
                tracing::warn!(chip = c.chip_id, "cannot reset the in-kernel irqchip: {e}");
            }
        }
    }

    fn reload_guest(&mut self) -> Result<(), RebootError> {
        self.setup.reload(self.vm.memory(), self.entry)
    }

    fn resume_vcpus(&mut self) -> Result<(), RebootError> {
        // Each vCPU takes its first-boot state on its own thread, then runs.
        self.gate.resume();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
