//! KVM, the IOMMU, VFIO and interrupt remapping on the host.
use super::{problem, Checks, Problem};

impl Checks {
    /// /dev/kvm, the IOMMU's groups and VFIO's container.
    pub(super) fn check_virtualization(&self, p: &mut Vec<Problem>) {
        let r = &self.root;
        if !r.exists("/dev/kvm") {
            p.push(problem(
                "no /dev/kvm",
                "enable VT-x/AMD-V in the firmware and load KVM (modprobe kvm_intel or modprobe kvm_amd)",
            ));
        }
        if r.list("/sys/kernel/iommu_groups").is_empty() {
            p.push(problem(
                "the IOMMU is off (/sys/kernel/iommu_groups is empty)",
                "enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware; on Intel boot with intel_iommu=on (iommu=pt keeps the host's own DMA fast); on AMD the kernel turns the IOMMU on by itself: check that neither amd_iommu=off nor iommu=off is on the kernel command line (there is no amd_iommu=on)",
            ));
        }
        if !r.exists("/sys/bus/pci/drivers/vfio-pci") {
            p.push(problem("vfio-pci is not loaded", "modprobe vfio-pci"));
        } else if !r.exists("/dev/vfio/vfio") {
            p.push(problem(
                "no /dev/vfio/vfio: both VMMs open the drive through VFIO's container API",
                "modprobe vfio (it makes /dev/vfio/vfio); a kernel built with iommufd and without CONFIG_VFIO_CONTAINER needs CONFIG_IOMMUFD_VFIO_CONTAINER=y",
            ));
        }
    }

    /// Whether VFIO will take the drive's interrupts: with interrupt
    /// remapping (Intel VT-d's ECAP.IR on every unit, AMD-Vi always), or
    /// with vfio_iommu_type1's `allow_unsafe_interrupts`. Without either
    /// VFIO refuses to attach the group and the run would fail after the
    /// drive was bound. `None` when fine or when no IOMMU shows at all
    /// (reported on its own).
    pub(super) fn interrupt_remapping(&self) -> Option<Problem> {
        let r = &self.root;
        let cmdline = r.read_trim("/proc/cmdline").unwrap_or_default();
        let unsafe_ok = ["vfio_iommu_type1", "iommufd"].iter().any(|m| {
            matches!(
                r.read_trim(format!(
                    "/sys/module/{m}/parameters/allow_unsafe_interrupts"
                ))
                .as_deref(),
                Ok("Y" | "y" | "1")
            )
        }) || cmdline.split_whitespace().any(|a| {
            matches!(
                a,
                "vfio_iommu_type1.allow_unsafe_interrupts=1"
                    | "vfio_iommu_type1.allow_unsafe_interrupts=Y"
                    | "vfio_iommu_type1.allow_unsafe_interrupts=y"
            )
        });
        if unsafe_ok {
            return None;
        }
        const FIX_UNSAFE: &str = "or, on a host no one else uses, let VFIO take unremapped interrupts: modprobe vfio_iommu_type1 allow_unsafe_interrupts=1 (or vfio_iommu_type1.allow_unsafe_interrupts=1 on the kernel command line)";
        if cmdline.split_whitespace().any(|a| a == "intremap=off") {
            return Some(problem(
                "interrupt remapping is off (intremap=off on the kernel command line): VFIO will not take the drive's interrupts",
                format!("remove intremap=off from the kernel command line and reboot, {FIX_UNSAFE}"),
            ));
        }
        let units = r.list("/sys/class/iommu");
        if units.is_empty() {
            return None;
        }
        let ir = |u: &String| -> bool {
            if u.starts_with("ivhd") {
                return true;
            }
            r.read_trim(format!("/sys/class/iommu/{u}/intel-iommu/ecap"))
                .ok()
                .and_then(|e| u64::from_str_radix(e.trim_start_matches("0x"), 16).ok())
                .is_some_and(|e| e & (1 << 3) != 0)
        };
        let without: Vec<&String> = units.iter().filter(|u| !ir(u)).collect();
        if without.is_empty() {
            return None;
        }
        Some(problem(
            format!(
                "no interrupt remapping: IOMMU unit(s) {} of /sys/class/iommu cannot remap interrupts, and VFIO will not take the drive's interrupts without it",
                without.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
            format!("enable interrupt remapping in the firmware (VT-d / AMD-Vi with interrupt remapping, x2APIC), {FIX_UNSAFE}"),
        ))
    }
}
