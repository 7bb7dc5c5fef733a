use super::*;

#[test]
fn hist_lines_are_parsed() {
    let text = "# event histogram\n#\n{ exit_reason:        124 } hitcount:         41\n\
                { ecx:       1760, write:          1 } hitcount:        548\n\nTotals:\n    Hits: 589\n";
    let h = parse_hist(text);
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].0["exit_reason"], 124);
    assert_eq!(h[0].1, 41);
    assert_eq!((h[1].0["ecx"], h[1].0["write"], h[1].1), (1760, 1, 548));
}

#[test]
fn reasons_are_named_per_vendor() {
    assert_eq!(exit_reason_name(0x7c, true), "MSR");
    assert_eq!(exit_reason_name(0x400, true), "NPF");
    assert_eq!(exit_reason_name(48, false), "EPT_VIOLATION");
    assert_eq!(exit_reason_name(0x999, true), "0x999");
}

#[test]
fn triggers_are_written_cleared_and_read_in_a_fake_tracefs() {
    let dir = tempfile::tempdir().unwrap();
    for (ev, _) in EVENTS {
        let d = dir.path().join("events").join(ev);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("trigger"), "").unwrap();
    }
    std::fs::write(
        dir.path().join("events/kvm/kvm_msr/hist"),
        "{ ecx:       1760, write:          1 } hitcount:          7\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("events/iommu/map/hist"),
        "{ size:       4096 } hitcount:         32\n{ size:     131072 } hitcount:          3\n",
    )
    .unwrap();
    let k = KvmExits::install(Some(dir.path())).unwrap();
    k.clear().unwrap();
    let trig = std::fs::read_to_string(dir.path().join("events/kvm/kvm_exit/trigger")).unwrap();
    assert!(trig.starts_with("hist:keys=exit_reason:size=256"), "{trig}");
    assert!(trig.ends_with(":clear"), "{trig}");
    let counts = k.read();
    assert_eq!(counts.get("msr.6e0.w"), Some(&7));
    assert_eq!(counts.get("iommu.map"), Some(&35));
    assert_eq!(counts.get("iommu.map_kib"), Some(&(32 * 4 + 3 * 128)));
    assert_eq!(counts.get("iommu.unmap"), None);
    drop(k);
    let trig = std::fs::read_to_string(dir.path().join("events/kvm/kvm_exit/trigger")).unwrap();
    assert!(trig.ends_with("!hist:keys=exit_reason:size=256"), "{trig}");
}

#[test]
fn missing_events_are_an_error_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let e = KvmExits::install(Some(dir.path())).unwrap_err().to_string();
    assert!(e.contains("mount -t tracefs"), "{e}");
}
