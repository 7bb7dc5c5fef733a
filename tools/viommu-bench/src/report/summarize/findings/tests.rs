use super::*;

#[test]
fn retry_warnings_old_and_new() {
    assert!(is_retry_warning(
        "first attempt failed (x); ran it again (log y)"
    ));
    let w = format!("{} (x); ran it again (log y)", retry_warning_head(3));
    assert!(w.starts_with("attempt 3 failed (") && is_retry_warning(&w));
    assert!(!is_retry_warning("attempt to map failed (x)"));
    assert!(!is_retry_warning("the guest may use IOVAs 0x1-0x2"));
}

#[test]
fn the_guests_iommu_and_domain_are_one_line_per_column() {
    use crate::columns::parse_column;
    use crate::run::guest::BootInfo;
    let col = parse_column("vtd:qemu:vtd:stock").unwrap();
    let booted = |units: &str, domain: &str| CellResult {
        boot: Some(BootInfo {
            iommus: Some(units.into()),
            nvme_domain: Some(domain.into()),
            ..Default::default()
        }),
        ..CellResult::test_ok("vtd", 1)
    };
    let cells = [
        booted("dmar0", "DMA"),
        booted("dmar0", "DMA"),
        booted("virtio0", "DMA-FQ"),
    ];
    let mine: Vec<&CellResult> = cells.iter().collect();
    assert_eq!(
        guest_iommu(&col, &mine).unwrap(),
        "vtd: the guest's IOMMU and its NVMe's domain: dmar0: DMA (strict) in 2 of 3 VM(s); virtio0: DMA-FQ (lazy) in 1 of 3 VM(s)"
    );
    // Older guests do not report it: no line.
    let old = [CellResult::test_ok("vtd", 1)];
    assert_eq!(guest_iommu(&col, &old.iter().collect::<Vec<_>>()), None);
}
