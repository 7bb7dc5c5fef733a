use super::*;

/// A fake tracefs instance as the kernel makes it (the files the
/// recorder writes), the kprobe group's directory as the kernel adds it
/// once the kprobes are defined, and a fake /proc with a VMM of two
/// threads.
fn fake(d: &Path) -> (Settings, PathBuf) {
    let inst = d.join("tracefs/instances/x");
    let group = format!("events/viommu_bench_{}", std::process::id());
    let mut files = vec![
        "tracing_on".to_string(),
        "buffer_size_kb".into(),
        "options/overwrite".into(),
        "options/event-fork".into(),
        "set_event_pid".into(),
        "trace_marker".into(),
        "events/enable".into(),
        format!("{group}/enable"),
        "per_cpu/cpu0/stats".into(),
        "per_cpu/cpu1/stats".into(),
    ];
    for (ev, _, _) in EVENTS.iter().filter(|(e, _, _)| !e.starts_with("kvm/")) {
        files.push(format!("events/{ev}/enable"));
        files.push(format!("events/{ev}/filter"));
    }
    for f in files {
        let p = inst.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }
    std::fs::write(d.join("tracefs/kprobe_events"), "").unwrap();
    for (tid, comm) in [(4242, "vmm"), (4250, "viommu")] {
        let t = d.join(format!("proc/4242/task/{tid}"));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("comm"), format!("{comm}\n")).unwrap();
    }
    let s = Settings {
        tracefs: d.join("tracefs"),
        proc: d.join("proc"),
        ..Settings::new(4)
    };
    (s, inst)
}

#[test]
fn the_instance_records_the_vmm_only_and_is_cleaned_up() {
    let d = tempfile::tempdir().unwrap();
    let (s, inst) = fake(d.path());
    assert_eq!(
        (s.delay, s.window),
        (Duration::from_secs(1), Duration::from_secs(2))
    );
    let read = |f: &str| std::fs::read_to_string(inst.join(f)).unwrap();
    let mut r = Recorder::in_dir(&s, &inst, 4242).unwrap();
    assert_eq!(read("set_event_pid"), "4242 4250");
    assert_eq!(read("buffer_size_kb"), "16384", "32 MiB over 2 CPUs");
    assert_eq!(
        read("options/overwrite"),
        "0",
        "a full buffer drops, counted"
    );
    assert_eq!(read("tracing_on"), "0", "not before the window");
    assert_eq!(
        read("events/raw_syscalls/sys_enter/filter"),
        format!("id == {}", breakdown::IOCTL_NR)
    );
    assert_eq!(read("events/sched/sched_switch/enable"), "1");
    let defs = std::fs::read_to_string(s.tracefs.join("kprobe_events")).unwrap();
    let group = format!("viommu_bench_{}", std::process::id());
    assert!(
        defs.contains(&format!("p:{group}/vb_pin_remote pin_user_pages_remote\n")),
        "{defs}"
    );
    assert!(
        defs.contains(&format!("r:{group}/vb_pin_fast_ret pin_user_pages_fast\n")),
        "{defs}"
    );
    r.start().unwrap();
    assert_eq!(read("tracing_on"), "1");
    std::fs::write(
            inst.join("trace"),
            "# entries-in-buffer/entries-written: 4/4   #P:2
       CPU 0/KVM-4242    [000] d..5.   10.000001: sched_waking: comm=viommu pid=4250 prio=120 target_cpu=001
          <idle>-0       [001] d..2.   10.000004: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=viommu next_pid=4250 next_prio=120
          viommu-4250    [001] .....   10.000005: sys_enter: NR 16 (9, 3b71, 0, 0, 0, 0)
          viommu-4250    [001] .....   10.000015: sys_exit: NR 16 = 0
          viommu-4250    [001] d..2.   10.000020: sched_switch: prev_comm=viommu prev_pid=4250 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
",
        )
        .unwrap();
    std::fs::write(
        inst.join("per_cpu/cpu0/stats"),
        "entries: 2\noverrun: 0\ndropped events: 0\n",
    )
    .unwrap();
    r.stop().unwrap();
    assert_eq!(read("tracing_on"), "0");
    assert!(read("trace_marker").ends_with(&format!("{}\n", breakdown::MARK_END)));
    let b = r.collect(Serving::Named("viommu".into()), None).unwrap();
    assert_eq!(b.server_tid, Some(4250));
    assert_eq!(b.pins_missing, None);
    assert!(!b.cut && b.missing_events() == 0);
    let sv = b.server().unwrap();
    assert_eq!(
        (sv.wakeups_timed, sv.wake_latency_ns, sv.run_ns),
        (1, 3_000, 16_000)
    );
    assert_eq!(Serving::DmaCaller.pick(&b.analysis).unwrap().tid, 4250);
    drop(r);
    assert_eq!(read("events/enable"), "0");
    assert_eq!(read("set_event_pid"), "");
    let defs = std::fs::read_to_string(s.tracefs.join("kprobe_events")).unwrap();
    assert!(
        defs.contains(&format!("-:{group}/vb_pin_remote_ret\n")),
        "{defs}"
    );
    assert!(inst.is_dir(), "not made by it: left");
}

#[test]
fn dropped_events_cut_the_window_and_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let (s, inst) = fake(d.path());
    std::fs::remove_file(s.tracefs.join("kprobe_events")).unwrap();
    let r = Recorder::in_dir(&s, &inst, 4242).unwrap();
    assert!(r
        .pins_missing
        .as_deref()
        .unwrap()
        .contains("CONFIG_KPROBE_EVENTS"));
    std::fs::write(
            inst.join("trace"),
            "          viommu-4250    [001] .....   10.000005: sys_enter: NR 16 (9, 3b71, 0, 0, 0, 0)
          viommu-4250    [001] .....   10.000015: sys_exit: NR 16 = 0
       CPU 0/KVM-4242    [000] d..5.   10.000030: sched_waking: comm=viommu pid=4250 prio=120 target_cpu=001
",
        )
        .unwrap();
    std::fs::write(
        inst.join("per_cpu/cpu1/stats"),
        "entries: 2\noverrun: 0\ndropped events: 77\n",
    )
    .unwrap();
    let b = r.collect(Serving::Named("viommu".into()), None).unwrap();
    assert!(b.cut);
    assert_eq!(b.dropped_events, 77);
    assert_eq!(b.analysis.end_ns, 10_000_015_000, "CPU 1's last event");
    assert_eq!(
        b.server().unwrap().wakeups,
        0,
        "the waking after the cut is left out"
    );
}

#[test]
fn what_is_missing_is_named_with_its_fix() {
    let d = tempfile::tempdir().unwrap();
    let (s, inst) = fake(d.path());
    std::fs::remove_dir_all(inst.join("events/raw_syscalls")).unwrap();
    let e = Recorder::in_dir(&s, &inst, 4242).unwrap_err().to_string();
    assert!(
        e.contains("raw_syscalls/sys_enter") && e.contains("CONFIG_FTRACE_SYSCALLS"),
        "{e}"
    );
    let e = Recorder::in_dir(&s, &inst, 1).unwrap_err().to_string();
    assert!(e.contains("proc/1/task"), "{e}");
    let empty = Settings {
        tracefs: d.path().join("nothing"),
        ..s
    };
    let e = empty.check().unwrap_err().to_string();
    assert!(e.contains("mount -t tracefs"), "{e}");
    assert_eq!(cpu_buffer_kb(1), 16 * 1024);
    assert_eq!(cpu_buffer_kb(256), 256);
    assert_eq!(
        parse_cpu_stats("entries: 5\noverrun: 3\ncommit overrun: 0\ndropped events: 9\n"),
        (3, 9)
    );
}
