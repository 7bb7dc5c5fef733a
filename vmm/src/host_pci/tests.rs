use super::*;

const IOMEM: &str = "\
00000000-00000fff : Reserved
00001000-0009fbff : System RAM
000c0000-000dffff : PCI Bus 0000:00
80000000-afffffff : PCI Bus 0000:00
  80000000-8000ffff : 0000:00:02.0
b0000000-bfffffff : PCI MMCONFIG 0000 [bus 00-ff]
c0000000-febfffff : PCI Bus 0000:00
  febf0000-febf3fff : 0000:00:01.0
    febf0000-febf3fff : vfio-pci
fee00000-fee00fff : Local APIC
100000000-17fffffff : System RAM
7000000000-77ffffffff : PCI Bus 0000:00
";

#[test]
fn bus_windows_are_the_top_level_pci_bus_entries() {
    assert_eq!(
        pci_bus_windows(IOMEM),
        vec![
            (0xc0000, 0xdffff),
            (0x8000_0000, 0xafff_ffff),
            (0xc000_0000, 0xfebf_ffff),
            (0x70_0000_0000, 0x77_ffff_ffff)
        ]
    );
    // What a non-root reader sees.
    assert!(pci_bus_windows("00000000-00000000 : PCI Bus 0000:00\n").is_empty());
}

#[test]
fn bars_skip_io_ports_and_unused_entries() {
    let res = "\
0x00000000febf0000 0x00000000febf3fff 0x0000000000140204
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x000000000000c000 0x000000000000c03f 0x0000000000040101
0x0000007000000000 0x0000007000003fff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000fe000000 0x00000000fe07ffff 0x0000000000046200
";
    assert_eq!(
        function_bars(res),
        vec![(0xfebf_0000, 0xfebf_3fff), (0x70_0000_0000, 0x70_0000_3fff)],
        "the expansion ROM (7th line) and the I/O BAR are not DMA targets here"
    );
}

#[test]
fn p2p_ranges_read_the_sysfs_resource_file() {
    let dir = std::env::temp_dir().join(format!("host-pci-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("resource"),
        "0x00000000febf0000 0x00000000febf3fff 0x0000000000140204\n",
    )
    .unwrap();
    let got = p2p_ranges(&[dir.as_path()], Some(IOMEM));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(got.contains(&(0xc000_0000, 0xfebf_ffff)), "{got:x?}");
    assert!(
        got.contains(&(0xfebf_0000, 0xfebf_3fff)),
        "the BAR itself: {got:x?}"
    );
    assert_eq!(p2p_ranges(&[], None), vec![]);
}
