//! How many bits of IOVA the host's IOMMU translates for the drive: what
//! an emulated vIOMMU in front of it may promise its guest. QEMU's VT-d
//! defaults to 48 bits (`aw-bits`) since 9.0 and refuses a VFIO device
//! whose host IOMMU has fewer ("aw-bits 48 > host aw-bits 39"): Intel's
//! client parts have 39-bit units, and so does a host that is itself a
//! guest behind a virtio-iommu (the lab's).
use crate::setup::sysfs::{pci_dev, Root};

/// The width, in bits, of the IOVA space the drive's IOMMU translates,
/// read from its group's `reserved_regions` and, on Intel, its unit's
/// `cap` register; `None` where neither says.
pub fn iova_bits(r: &Root, bdf: &str, group: Option<&str>) -> Option<u32> {
    let regions = group.and_then(|g| {
        r.read_trim(format!("/sys/kernel/iommu_groups/{g}/reserved_regions"))
            .ok()
    });
    let cap = r.link_name(pci_dev(bdf).join("iommu")).and_then(|unit| {
        r.read_trim(format!("/sys/class/iommu/{unit}/intel-iommu/cap"))
            .ok()
    });
    iova_bits_of(regions.as_deref(), cap.as_deref())
}

/// The narrower of the two sources (see [`iova_bits`]): a `reserved`
/// region from 2^N to the top of the 64-bit space (a virtio-iommu's input
/// range, as Linux reports it), and VT-d's MGAW (`cap` bits 21:16, plus 1).
pub fn iova_bits_of(reserved_regions: Option<&str>, intel_cap: Option<&str>) -> Option<u32> {
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
    let from_cap = intel_cap
        .and_then(|c| u64::from_str_radix(c.trim().trim_start_matches("0x"), 16).ok())
        .map(|cap| (((cap >> 16) & 0x3f) + 1) as u32);
    match (from_regions, from_cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
