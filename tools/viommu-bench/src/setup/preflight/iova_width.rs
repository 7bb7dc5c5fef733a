//! How many bits of IOVA the host's IOMMU translates for the drive: what
//! an emulated vIOMMU in front of it may promise its guest. QEMU's VT-d
//! defaults to 48 bits (`aw-bits`) since 9.0 and refuses a VFIO device
//! whose host IOMMU has fewer ("aw-bits 48 > host aw-bits 39"): Intel's
//! client parts have 39-bit units, and so does a host that is itself a
//! guest behind a virtio-iommu (the lab's: QEMU's gives q35 39 bits).
use crate::setup::sysfs::{pci_dev, Root};

/// The kind of IOMMU unit that translates for the drive, as sysfs shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit<'a> {
    /// Intel VT-d, with its `cap` register (hex).
    Intel(Option<&'a str>),
    /// AMD-Vi: 4-level tables or more, 48 bits at least.
    Amd,
    /// Another kind (a virtio-iommu: the lab host's, a cloud host's).
    Other,
}

/// The width, in bits, of the IOVA space the drive's IOMMU translates
/// (see [`iova_bits_of`]); `None` where the drive shows no IOMMU unit.
pub fn iova_bits(r: &Root, bdf: &str, group: Option<&str>) -> Option<u32> {
    let regions = group.and_then(|g| {
        r.read_trim(format!("/sys/kernel/iommu_groups/{g}/reserved_regions"))
            .ok()
    });
    let unit = r.link_name(pci_dev(bdf).join("iommu"))?;
    let dir = format!("/sys/class/iommu/{unit}");
    let cap = r.read_trim(format!("{dir}/intel-iommu/cap")).ok();
    let kind = if r.exists(format!("{dir}/intel-iommu")) {
        Unit::Intel(cap.as_deref())
    } else if r.exists(format!("{dir}/amd-iommu")) {
        Unit::Amd
    } else {
        Unit::Other
    };
    iova_bits_of(kind, regions.as_deref())
}

/// The IOVA width of a unit of kind `unit` whose group lists
/// `reserved_regions`: VT-d's MGAW (`cap` bits 21:16, plus 1); for AMD-Vi
/// `None` (QEMU's default suits it); for any other unit a `reserved`
/// region from 2^N to the top of the 64-bit space (how a virtio-iommu's
/// input range may show), else 39 bits, the narrowest width VT-d offers:
/// QEMU's virtio-iommu gives q35 guests 39 bits since 9.0, and Linux does
/// not show that range in sysfs.
pub fn iova_bits_of(unit: Unit<'_>, reserved_regions: Option<&str>) -> Option<u32> {
    let from_regions = reserved_regions.and_then(|text| {
        text.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let hex = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok();
                let (start, end) = (hex(f.next()?)?, hex(f.next()?)?);
                (end == u64::MAX && start.is_power_of_two() && start >= 1 << 32)
                    .then(|| start.trailing_zeros())
            })
            .min()
    });
    match unit {
        Unit::Intel(cap) => cap
            .and_then(|c| u64::from_str_radix(c.trim().trim_start_matches("0x"), 16).ok())
            .map(|cap| (((cap >> 16) & 0x3f) + 1) as u32),
        Unit::Amd => from_regions,
        Unit::Other => Some(from_regions.unwrap_or(39)),
    }
}

#[cfg(test)]
mod tests;
