use super::*;

fn inputs() -> LaunchInputs {
    LaunchInputs {
        qemu: "/usr/bin/qemu-system-x86_64".into(),
        vmm: "/opt/vmm".into(),
        kernel_stock: "/k/stock".into(),
        kernel_patched: "/k/patched".into(),
        kernels_named: [("stock-7.3".to_string(), PathBuf::from("/k/7.3"))].into(),
        initramfs: "/c/initramfs.cpio".into(),
        initramfs_for: BTreeMap::new(),
        bdf: "0000:01:00.0".into(),
        cpus: 2,
        memory_mib: 1024,
        count_runtime: 3,
        qemu_no_trace: None,
        breakdown: false,
        hugepages: false,
        name_threads: false,
        host_iova_bits: None,
    }
}

#[test]
fn pin_vcpus_names_qemus_threads_and_leaves_ours_alone() {
    let named = LaunchInputs {
        name_threads: true,
        ..inputs()
    };
    let has_name = |l: &Launch| {
        l.args
            .windows(2)
            .any(|w| w[0] == "-name" && w[1] == "viommu-bench,debug-threads=on")
    };
    for name in ["qemu+stock", "no-viommu"] {
        let c = builtin(name).unwrap();
        assert!(
            has_name(&launch(&c, &named, "c", Path::new("/run"), "x")),
            "{name}"
        );
        assert!(
            !has_name(&launch(&c, &inputs(), "c", Path::new("/run"), "x")),
            "{name}"
        );
    }
    let ours = builtin("ours+stock").unwrap();
    assert_eq!(
        launch(&ours, &named, "c", Path::new("/run"), "x").args,
        launch(&ours, &inputs(), "c", Path::new("/run"), "x").args
    );
}

#[test]
fn a_named_kernel_column_boots_its_kernel() {
    let c = parse_column("q73:qemu:viommu:stock-7.3:noxsave").unwrap();
    assert_eq!(c.kernel, Kernel::Named("stock-7.3".into()));
    let l = launch(&c, &inputs(), "c", Path::new("/run"), "x");
    assert_eq!(l.kernel.as_deref(), Some(Path::new("/k/7.3")));
    assert!(l.args.iter().any(|a| a == "/k/7.3"), "{:?}", l.args);
    for bad in ["a b", "x/y", "", "../k"] {
        assert!(
            matches!(
                parse_column(&format!("t:qemu:viommu:{bad}")),
                Err(ColumnError::BadField { .. } | ColumnError::Unknown(_))
            ),
            "{bad:?}"
        );
    }
    assert!(!valid_kernel_name("patched") && valid_kernel_name("baseline-7.3"));
}

#[test]
fn breakdown_runs_are_asked_of_every_viommu_guest() {
    let on = LaunchInputs {
        breakdown: true,
        ..inputs()
    };
    for name in ["qemu+stock", "ours+stock", "ours+patched-lazy"] {
        let l = launch(&builtin(name).unwrap(), &on, "c", Path::new("/run"), "x");
        assert!(l.breakdown && l.console_input(), "{name}");
        let cmdline = l.args.last().unwrap();
        assert!(cmdline.contains(" lab.breakdown=3"), "{cmdline}");
    }
    // Stock QEMU counts first, then breaks down; its trace stays off
    // in the breakdown runs (the runner turns it on only in count-*).
    let q = launch(
        &builtin("qemu+stock").unwrap(),
        &on,
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(q
        .args
        .last()
        .unwrap()
        .ends_with("lab.count=3 lab.breakdown=3"));
    let none = launch(
        &builtin("no-viommu").unwrap(),
        &on,
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(!none.breakdown && !none.console_input());
    assert!(!none.display().contains("lab.breakdown"));
    let ours = launch(
        &builtin("ours+stock").unwrap(),
        &inputs(),
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(
        !ours.breakdown && !ours.console_input(),
        "off without --breakdown"
    );
}

#[test]
fn default_columns_parse() {
    let specs: Vec<String> = DEFAULT_COLUMNS.split(',').map(String::from).collect();
    let cols = parse_columns(&specs).unwrap();
    assert_eq!(cols.len(), 7);
    // The first column is the baseline: what an x86 user runs today.
    assert_eq!((cols[0].vmm, cols[0].iommu), (Vmm::Qemu, Iommu::Vtd));
    assert_eq!(cols[5].guest_params, vec!["iommu.strict=0"]);
    assert_eq!(cols[6].iommu, Iommu::None);
}

#[test]
fn custom_specs_and_errors() {
    let c = parse_column("t128:ours:viommu:patched:lazy+--pool-threshold=128K").unwrap();
    assert_eq!(c.vmm, Vmm::Ours);
    assert_eq!(c.guest_params, vec!["iommu.strict=0"]);
    assert_eq!(c.vmm_flags, vec!["--pool-threshold=128K"]);
    assert_eq!(
        parse_column("ours+fast"),
        Err(ColumnError::Unknown("ours+fast".into()))
    );
    let e = parse_column("x:kvmtool:viommu:stock").unwrap_err();
    assert!(e.to_string().contains("\"kvmtool\""), "{e}");
    let dup = vec!["no-viommu".to_string(), "no-viommu".to_string()];
    assert_eq!(
        parse_columns(&dup),
        Err(ColumnError::Duplicate("no-viommu".into()))
    );
    assert_eq!(parse_columns(&[]), Err(ColumnError::Empty));
}

#[test]
fn qemu_command_matches_the_lab() {
    let c = builtin("qemu+stock").unwrap();
    let l = launch(
        &c,
        &inputs(),
        "console=ttyS0",
        Path::new("/run"),
        "qemu+stock-r1",
    );
    let line = l.display();
    assert!(
        line.starts_with(
            "/usr/bin/qemu-system-x86_64 -accel kvm -M q35 -cpu host -smp 2 -m 1024 -nodefaults"
        ),
        "{line}"
    );
    // Untraced: the log file open, no event on, a QMP socket to turn
    // them on in the counting runs the guest is asked for.
    assert!(line.contains("-kernel /k/stock -initrd /c/initramfs.cpio -qmp unix:/run/qemu+stock-r1.mon,server=on,wait=off -device virtio-iommu-pci -D /run/qemu+stock-r1.trace -qmp unix:/run/qemu+stock-r1.qmp,server=on,wait=off -device vfio-pci,host=0000:01:00.0 -append 'console=ttyS0 lab.count=3'"), "{line}");
    assert!(!line.contains("-trace"), "{line}");
    assert_eq!(l.trace, Some(PathBuf::from("/run/qemu+stock-r1.trace")));
    assert_eq!(l.qmp, Some(PathBuf::from("/run/qemu+stock-r1.qmp")));
    assert_eq!(l.monitor, Some(PathBuf::from("/run/qemu+stock-r1.mon")));
    assert_eq!(l.counting, Counting::Pass);
    let none = launch(
        &builtin("no-viommu").unwrap(),
        &inputs(),
        "c",
        Path::new("/run"),
        "n",
    );
    let line = none.display();
    assert!(
        !line.contains("virtio-iommu") && !line.contains(" -D ") && !line.contains(".qmp"),
        "{line}"
    );
    // Every QEMU column has the monitor for a hang's vCPU registers.
    assert_eq!(none.monitor, Some(PathBuf::from("/run/n.mon")));
    assert!(!line.contains("lab.count="), "{line}");
    assert_eq!((none.trace, none.qmp), (None, None));
    assert_eq!(none.counting, Counting::None);
    // --count-runtime 0: no counting runs, nothing to trace with.
    let off = LaunchInputs {
        count_runtime: 0,
        ..inputs()
    };
    let l = launch(&c, &off, "console=ttyS0", Path::new("/run"), "q");
    let line = l.display();
    assert!(
        !line.contains(" -D ") && !line.contains(".qmp") && !line.contains("lab.count="),
        "{line}"
    );
    assert!(
        matches!(&l.counting, Counting::NotCounted { why } if why.contains("--count-runtime 0")),
        "{:?}",
        l.counting
    );
    // A QEMU without the log trace backend (found by preflight): no
    // counting runs, nothing to trace with, the reason kept.
    let no_log = LaunchInputs {
        qemu_no_trace: Some("no `log` trace backend".into()),
        ..inputs()
    };
    let l = launch(&c, &no_log, "console=ttyS0", Path::new("/run"), "q");
    let line = l.display();
    assert!(
        !line.contains(" -D ") && !line.contains(".qmp") && !line.contains("lab.count="),
        "{line}"
    );
    assert!(!l.console_input());
    assert!(
        matches!(&l.counting, Counting::NoTraceBackend { why } if why == "no `log` trace backend"),
        "{:?}",
        l.counting
    );
}

#[test]
fn our_command_matches_the_lab() {
    let c = builtin("ours+patched-lazy").unwrap();
    let l = launch(
        &c,
        &inputs(),
        "console=ttyS0 lab.mode=fio",
        Path::new("/run"),
        "x",
    );
    assert_eq!(
        l.display(),
        "/opt/vmm --kernel /k/patched --initrd /c/initramfs.cpio --memory 1024M --cpus 2 --api-socket /run/x.sock --vfio /sys/bus/pci/devices/0000:01:00.0 --on-reboot exit --viommu --cmdline 'console=ttyS0 lab.mode=fio iommu.strict=0'"
    );
    assert_eq!(l.api_socket, Some(PathBuf::from("/run/x.sock")));
    // Our VMM's counters are always on: nothing more to start, exact.
    assert_eq!(l.counting, Counting::Exact);
    let plain = launch(
        &parse_column("p:ours:none:stock").unwrap(),
        &inputs(),
        "c",
        Path::new("/run"),
        "p",
    );
    assert_eq!(plain.counting, Counting::None);
    assert!(!plain.display().contains("lab.count="));
}

#[test]
fn stock_qemu_puts_its_emulated_iommu_before_the_drive() {
    let c = parse_column("vtd:qemu:vtd:stock").unwrap();
    assert_eq!(c.iommu, Iommu::Vtd);
    let l = launch(&c, &inputs(), "c", Path::new("/run"), "x");
    let at = |x: &str| l.args.iter().position(|a| a == x);
    let iommu = at("intel-iommu,intremap=on,caching-mode=on").unwrap();
    assert!(iommu < at("vfio-pci,host=0000:01:00.0").unwrap());
    assert!(at("q35,kernel-irqchip=split").is_some());
    assert!(at("virtio-iommu-pci").is_none());
    assert!(l.args.last().unwrap().ends_with(" intel_iommu=on"));
    assert_eq!(l.counting, Counting::None);
    // A host IOMMU narrower than QEMU's default 48 bits: a 39-bit VT-d;
    // a 48-bit one keeps QEMU's default.
    for (bits, dev) in [
        (
            Some(39),
            "intel-iommu,intremap=on,caching-mode=on,aw-bits=39",
        ),
        (Some(48), "intel-iommu,intremap=on,caching-mode=on"),
    ] {
        let narrow = LaunchInputs {
            host_iova_bits: bits,
            ..inputs()
        };
        let l = launch(&c, &narrow, "c", Path::new("/run"), "x");
        assert!(l.args.iter().any(|a| a == dev), "{bits:?}: {:?}", l.args);
    }

    let a = launch(
        &builtin("qemu-amd+stock").unwrap(),
        &inputs(),
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(a
        .args
        .iter()
        .any(|x| x == "amd-iommu,dma-remap=on,intremap=on"));
    assert!(a.args.iter().any(|x| x == "q35,kernel-irqchip=split"));
    // The plain columns keep their machine.
    let q = launch(
        &builtin("qemu+stock").unwrap(),
        &inputs(),
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(q.args.iter().any(|x| x == "q35") && !q.args.last().unwrap().contains("intel_iommu"));
}

#[test]
fn our_vmm_with_an_emulated_iommu_is_refused_in_one_line() {
    for (spec, iommu) in [("v:ours:vtd:stock", "vtd"), ("a:vmm:amd:patched", "amd")] {
        let e = parse_column(spec).unwrap_err();
        assert_eq!(
            e,
            ColumnError::OursWithout {
                spec: spec.into(),
                iommu
            }
        );
        let line = e.to_string();
        assert!(
            line.contains(spec) && line.contains("virtio-iommu") && !line.contains('\n'),
            "{line}"
        );
    }
}

#[test]
fn a_kernel_with_its_modules_boots_its_own_initramfs() {
    let mut inp = inputs();
    inp.initramfs_for
        .insert("/k/7.3".into(), "/c/initramfs-mods.cpio".into());
    let c = parse_column("q73:qemu:vtd:stock-7.3").unwrap();
    let l = launch(&c, &inp, "c", Path::new("/run"), "x");
    assert!(l.args.iter().any(|a| a == "/c/initramfs-mods.cpio"));
    let o = launch(
        &builtin("ours+stock").unwrap(),
        &inp,
        "c",
        Path::new("/run"),
        "x",
    );
    assert!(o.args.iter().any(|a| a == "/c/initramfs.cpio"));
}

#[test]
fn hugepages_back_every_columns_ram_alike() {
    let on = LaunchInputs {
        hugepages: true,
        ..inputs()
    };
    let args = |name: &str, inp: &LaunchInputs| {
        launch(&builtin(name).unwrap(), inp, "c", Path::new("/run"), "x").args
    };
    let backend = "memory-backend-memfd,id=ram0,size=1024M,hugetlb=on,hugetlbsize=2M,share=off";
    // Stock QEMU, the ceiling and the emulated VT-d alike: the backend
    // as the machine's RAM, its size the guest's.
    for (name, machine) in [
        ("qemu+stock", "q35,memory-backend=ram0"),
        ("no-viommu", "q35,memory-backend=ram0"),
        (
            "qemu-vtd+stock",
            "q35,kernel-irqchip=split,memory-backend=ram0",
        ),
    ] {
        let a = args(name, &on);
        let after = |flag: &str| a.iter().position(|x| x == flag).map(|i| a[i + 1].as_str());
        assert_eq!(after("-M"), Some(machine), "{name}: {a:?}");
        assert_eq!(after("-object"), Some(backend), "{name}: {a:?}");
        assert_eq!(after("-m"), Some("1024"), "{name}: {a:?}");
        let off = args(name, &inputs());
        assert!(
            !off.iter()
                .any(|x| x == "-object" || x.contains("memory-backend")),
            "{name}: {off:?}"
        );
    }
    // Our VMM: its own flag, once, even when the column already has it.
    for spec in ["ours+stock", "ours+patched-lazy"] {
        let a = args(spec, &on);
        assert_eq!(
            a.iter().filter(|x| *x == "--hugepages").count(),
            1,
            "{spec}: {a:?}"
        );
        assert!(!args(spec, &inputs()).iter().any(|x| x == "--hugepages"));
    }
    let own = parse_column("h:ours:viommu:stock:--hugepages").unwrap();
    let a = launch(&own, &on, "c", Path::new("/run"), "x").args;
    assert_eq!(a.iter().filter(|x| *x == "--hugepages").count(), 1, "{a:?}");
}

#[test]
fn our_vmm_always_exits_on_a_guest_reboot() {
    // Every column of ours, whatever its flags: a rebooting guest ends
    // the VMM (exit code 3) instead of running again in it.
    for spec in [
        "ours+stock",
        "p:ours:none:stock",
        "f:ours:viommu:patched:lazy+--pool-threshold=128K",
    ] {
        let c = parse_column(spec).unwrap();
        let l = launch(&c, &inputs(), "c", Path::new("/run"), "x");
        let at = l
            .args
            .iter()
            .position(|a| a == "--on-reboot")
            .unwrap_or_else(|| panic!("{spec}: {}", l.display()));
        assert_eq!(l.args[at + 1], "exit", "{spec}");
        assert_eq!(
            l.args
                .iter()
                .filter(|a| a.starts_with("--on-reboot"))
                .count(),
            1,
            "{spec}"
        );
    }
    // A column cannot ask for another reboot policy.
    for flag in ["--on-reboot=restart", "--on-reboot=exit"] {
        let spec = format!("r:ours:viommu:stock:{flag}");
        match parse_column(&spec) {
            Err(e @ ColumnError::ToolsFlag { .. }) => {
                assert!(e.to_string().contains("--on-reboot"), "{e}")
            }
            r => panic!("{spec}: {r:?}"),
        }
    }
    // Other flags of its own stay the column's.
    let c = parse_column("t:ours:viommu:stock:--on-triple-fault=exit").unwrap();
    assert_eq!(c.vmm_flags, vec!["--on-triple-fault=exit"]);
}
