use super::*;

const MAP: &str = "ffffffff81000000 T _stext\nffffffff81200000 t __viommu_sync_req\n\
                   ffffffff81200100 T virtqueue_get_buf_ctx\nffffffff81300000 D some_data\n\
                   ffffffff81400000 T native_safe_halt\n";

#[test]
fn names_text_addresses_only() {
    let s = Symbols::parse(MAP);
    assert_eq!(s.name(0xffff_ffff_8120_0010), "__viommu_sync_req+0x10");
    assert_eq!(s.name(0xffff_ffff_8120_0104), "virtqueue_get_buf_ctx+0x4");
    // Data symbols are not functions: the address stays in the text
    // symbol before it, and far beyond it is unnamed.
    assert_eq!(s.lookup(0xffff_ffff_8130_0000).map(|x| x.0), None);
    assert_eq!(s.name(0x1000), "0x1000");
    assert!(waits_for_viommu("__viommu_sync_req"));
    assert!(waits_for_viommu("virtqueue_get_buf_ctx"));
    assert!(!waits_for_viommu("native_safe_halt"));
}

#[test]
fn finds_the_map_beside_the_kernel() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("patched.bzImage");
    std::fs::write(&k, b"").unwrap();
    assert!(Symbols::beside(&k).is_none());
    std::fs::write(d.path().join("patched.System.map"), MAP).unwrap();
    let s = Symbols::beside(&k).unwrap();
    assert_eq!(s.name(0xffff_ffff_8140_0000), "native_safe_halt+0x0");
    let v = d.path().join("vmlinuz-6.12.0");
    std::fs::write(&v, b"").unwrap();
    std::fs::write(d.path().join("System.map-6.12.0"), "ffffffff81000000 T x\n").unwrap();
    assert_eq!(
        Symbols::beside(&v).unwrap().name(0xffff_ffff_8100_0001),
        "x+0x1"
    );
}
