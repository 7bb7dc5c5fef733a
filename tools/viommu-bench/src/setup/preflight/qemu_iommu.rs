//! Stock QEMU's emulated AMD-Vi with a VFIO device behind it: QEMU 10.2
//! or later (`amd-iommu,dma-remap=on`; earlier versions refuse vfio-pci).

use super::{problem, Checks, Problem};
use crate::columns::Iommu;

/// The first QEMU whose `amd-iommu` takes a VFIO device.
pub const AMD_IOMMU_VFIO_QEMU: (u32, u32) = (10, 2);

/// (major, minor) of a `qemu --version` first line ("QEMU emulator
/// version 10.0.2 (Debian 1:10.0.2+ds-1)").
pub fn parse_qemu_version(line: &str) -> Option<(u32, u32)> {
    let v = line.split("version").nth(1)?.split_whitespace().next()?;
    let mut it = v.split('.').map(|x| x.parse::<u32>().ok());
    Some((it.next()??, it.next()??))
}

impl Checks {
    /// A column behind QEMU's AMD-Vi needs QEMU 10.2 or later.
    pub(super) fn check_qemu_iommu(&self, p: &mut Vec<Problem>) {
        let Some(tag) = self
            .guest
            .columns
            .values()
            .flatten()
            .find(|(_, i)| *i == Iommu::Amd)
            .map(|(t, _)| t)
        else {
            return;
        };
        let Some(qemu) = &self.qemu else { return };
        let line = crate::setup::host::version_line(qemu);
        let (maj, min) = AMD_IOMMU_VFIO_QEMU;
        match line.as_deref().and_then(parse_qemu_version) {
            Some(v) if v >= AMD_IOMMU_VFIO_QEMU => {}
            found => p.push(problem(
                format!(
                    "column {tag}: {} is {}, and QEMU's amd-iommu takes a VFIO device only from {maj}.{min} on (dma-remap=on)",
                    qemu.display(),
                    match found {
                        Some((a, b)) => format!("QEMU {a}.{b}"),
                        None => format!("of unknown version ({})", line.as_deref().unwrap_or("--version gave nothing")),
                    }
                ),
                format!("pass --qemu with QEMU {maj}.{min} or later, or drop column {tag} (IOMMU vtd works with older QEMU)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
