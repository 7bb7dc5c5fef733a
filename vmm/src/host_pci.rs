//! Host PCI address ranges that a guest's IOVAs must stay clear of.
//!
//! Behind a virtual IOMMU the guest picks IOVAs, and a passed-through
//! device emits them as bus addresses on the *host's* PCI fabric before the
//! host IOMMU translates them. An IOVA that equals a host MMIO address of a
//! PCI function can be taken as peer-to-peer traffic (a switch without ACS
//! routes it to that function, never to the IOMMU) or refused by the device
//! itself: QEMU's emulated NVMe fails any command whose PRP entry lies in
//! its own BAR0 range with "Data Transfer Error", whatever the IOMMU says
//! (a multi-vCPU guest's I/O errors in the lab were exactly this). Linux keeps its
//! own DMA IOVAs off its host bridge windows for the same reason
//! (`iova_reserve_pci_windows`). The VMM does the same for its guest: it
//! reports the host's PCI windows and the BARs of the passed-through
//! functions as RESV_MEM reserved regions, which the guest's IOVA allocator
//! then never hands out.

use std::path::Path;

/// An inclusive range `(first, last)`.
pub type Range = (u64, u64);

/// The top-level `PCI Bus` windows of a `/proc/iomem` text. Lines of an
/// unprivileged reader (every address shown as 0) give nothing.
pub fn pci_bus_windows(iomem: &str) -> Vec<Range> {
    iomem
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let (range, name) = l.split_once(" : ")?;
            if !name.trim().starts_with("PCI Bus") {
                return None;
            }
            parse_hex_range(range.trim())
        })
        .filter(|&(s, e)| e > s)
        .collect()
}

fn parse_hex_range(s: &str) -> Option<Range> {
    let (a, b) = s.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

/// The memory BARs of a PCI function from its sysfs `resource` file: one
/// line per resource, `start end flags` in hex; unused ones are all zero.
/// Only the first six lines (the BARs) count; I/O port BARs are skipped
/// (flags bit 0x100 is IORESOURCE_IO).
pub fn function_bars(resource: &str) -> Vec<Range> {
    resource
        .lines()
        .take(6)
        .filter_map(|l| {
            let mut f = l
                .split_whitespace()
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok());
            let (s, e, flags) = (f.next()??, f.next()??, f.next()??);
            (e > s && flags & 0x100 == 0).then_some((s, e))
        })
        .collect()
}

/// The host ranges the guest's IOVAs must avoid for the functions at
/// `sysfs` (their BARs) on a host whose `/proc/iomem` reads `iomem` (its
/// PCI bus windows; `None` or an unprivileged read: BARs only), as read:
/// they may overlap (`ConfigBuilder::avoid` merges and cuts them).
pub fn p2p_ranges(sysfs: &[&Path], iomem: Option<&str>) -> Vec<Range> {
    let mut all = iomem.map(pci_bus_windows).unwrap_or_default();
    for dir in sysfs {
        match std::fs::read_to_string(dir.join("resource")) {
            Ok(text) => all.extend(function_bars(&text)),
            Err(e) => tracing::warn!(device = %dir.display(), "cannot read its BARs: {e}"),
        }
    }
    all
}

#[cfg(test)]
mod tests;
