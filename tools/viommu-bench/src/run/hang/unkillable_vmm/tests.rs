use super::*;

#[test]
fn frames_lose_prefix_and_size_and_keep_module() {
    let s = "[<0>] vfio_pci_core_disable+0x1c5/0x390 [vfio_pci_core]\n\
             [<0>] vfio_pci_core_close_device+0x62/0xe0 [vfio_pci_core]\n\
             [<0>] do_exit+0x2f1/0xa80\n";
    assert_eq!(
        stack_frames(s),
        vec![
            "vfio_pci_core_disable+0x1c5 [vfio_pci_core]",
            "vfio_pci_core_close_device+0x62 [vfio_pci_core]",
            "do_exit+0x2f1",
        ]
    );
    let deep: String = (0..20).map(|i| format!("[<0>] f{i}+0x1/0x2\n")).collect();
    assert_eq!(stack_frames(&deep).len(), MAX_FRAMES);
    assert!(stack_frames("").is_empty());
}

#[test]
fn state_after_a_name_with_parentheses() {
    assert_eq!(stat_state("42 (vcpu (0)) D 1 42 42 0"), Some('D'));
    assert_eq!(stat_state("garbage"), None);
}

#[test]
fn a_process_tree_in_a_directory() {
    let d = tempfile::tempdir().unwrap();
    for (tid, comm, state, stack, wchan) in [
        (
            7u32,
            "vmm",
            "D",
            "[<0>] vfio_pci_core_disable+0x1/0x2 [vfio_pci_core]\n",
            "",
        ),
        (9, "vcpu0", "S", "", "kvm_vcpu_block"),
    ] {
        let t = d.path().join("4242/task").join(tid.to_string());
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(t.join("stat"), format!("{tid} ({comm}) {state} 1 2")).unwrap();
        std::fs::write(t.join("stack"), stack).unwrap();
        std::fs::write(t.join("wchan"), wchan).unwrap();
    }
    assert_eq!(
        kernel_stacks_in(d.path(), 4242),
        "vmm(7) D: vfio_pci_core_disable+0x1 [vfio_pci_core]; vcpu0(9) S: waits in kvm_vcpu_block"
    );
    assert!(kernel_stacks_in(d.path(), 9999).contains("it has exited"));
}

#[test]
fn own_process_is_readable() {
    let s = kernel_stacks(std::process::id());
    assert!(s.contains(&format!("({})", std::process::id())), "{s}");
}

#[tokio::test]
async fn a_process_that_exits_is_waited_for_and_one_that_does_not_is_kept() {
    let quick = tokio::process::Command::new("true").spawn().unwrap();
    let s = StuckVmm::new("a round 1".into(), quick, Instant::now());
    assert!(s.wait(Duration::from_secs(10)).await.is_ok());
    let slow = tokio::process::Command::new("sleep")
        .arg("30")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let s = StuckVmm::new("b round 1".into(), slow, Instant::now());
    let kept = s.wait(Duration::from_millis(100)).await.unwrap_err();
    assert_eq!(kept.cell, "b round 1");
}

#[test]
fn warnings_hold_a_bounded_thread_listing() {
    assert_eq!(bounded("short"), "short");
    let long = "é".repeat(WARNING_STACKS);
    let b = bounded(&long);
    assert!(
        b.len() <= WARNING_STACKS + 3 && b.ends_with("..."),
        "{}",
        b.len()
    );
}
