use super::*;

#[test]
fn vcpu_threads_are_known_by_both_vmms_names() {
    assert_eq!(vcpu_index("vcpu0"), Some(0));
    assert_eq!(vcpu_index("vcpu12\n"), Some(12));
    assert_eq!(vcpu_index("CPU 1/KVM"), Some(1));
    for other in [
        "viommu",
        "vcpu",
        "vcpux",
        "CPU /KVM",
        "CPU 1/TCG",
        "qemu-system-x86",
        "api",
        "",
    ] {
        assert_eq!(vcpu_index(other), None, "{other:?}");
    }
}

#[test]
fn layout_gives_each_vcpu_a_cpu_and_the_rest_what_is_left() {
    let l = Layout::new(&[0, 1], 1, "0000:00:04.0").unwrap();
    assert_eq!((l.vcpus.clone(), l.rest.clone()), (vec![1], vec![0]));
    assert_eq!(l.cpus_of("vcpu0"), &[1]);
    assert_eq!(l.cpus_of("CPU 0/KVM"), &[1]);
    assert_eq!(l.cpus_of("qemu-system-x86"), &[0]);
    // A vCPU number beyond the guest's goes with the rest.
    assert_eq!(l.cpus_of("vcpu1"), &[0]);
    assert_eq!(
        l.describe(),
        "vCPU 0 on CPU 1; the VMM's other threads and the drive's interrupts on CPUs 0"
    );
    let l = Layout::new(&[4, 5, 6, 7, 8], 2, "x").unwrap();
    assert_eq!((l.vcpus, l.rest), (vec![5, 6], vec![4, 7, 8]));
}

#[test]
fn too_few_cpus_names_the_need_and_the_fix() {
    let e = Layout::new(&[0, 1], 2, "x").unwrap_err();
    assert!(e.contains("--guest-cpus 2 needs 3 CPUs"), "{e}");
    assert!(e.contains("may use 2 (0,1)"), "{e}");
    assert!(e.contains("drop --pin-vcpus"), "{e}");
}

const INTERRUPTS: &str = "           CPU0       CPU1
  0:         38          0   IO-APIC   2-edge      timer
 24:          0          0   PCI-MSI 65536-edge      vfio-msix[0](0000:00:04.0)
 25:        120        311   PCI-MSI 65537-edge      vfio-msix[1](0000:00:04.0)
 26:          5          0   PCI-MSI 98304-edge      vfio-msix[0](0000:00:05.0)
 27:          0          0   PCI-MSI 65538-edge      nvme0q1
NMI:          0          0   Non-maskable interrupts
";

#[test]
fn the_drives_interrupts_are_its_vfio_vectors_only() {
    assert_eq!(drive_irqs(INTERRUPTS, "0000:00:04.0"), vec![24, 25]);
    assert_eq!(drive_irqs(INTERRUPTS, "0000:00:05.0"), vec![26]);
    assert!(drive_irqs(INTERRUPTS, "0000:00:06.0").is_empty());
}

/// A procfs stand-in whose task directory lists real threads of this
/// test, named as a VMM names them, and whose interrupt files are plain
/// files: apply() must pin the real threads and write the files.
#[test]
fn apply_pins_real_threads_and_writes_the_interrupts() {
    let cpus = crate::setup::host::affinity().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: this test needs 2 CPUs, the process may use {cpus:?}");
        return;
    }
    let layout = Layout::new(&cpus[..2], 1, "0000:00:04.0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proc = dir.path();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        // SAFETY: gettid has no arguments and cannot fail.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let task = proc.join("7").join("task");
    std::fs::create_dir_all(task.join(tid.to_string())).unwrap();
    std::fs::write(task.join(tid.to_string()).join("comm"), "vcpu0\n").unwrap();
    // A thread that ended: listed, no comm.
    std::fs::create_dir_all(task.join("999999999")).unwrap();
    std::fs::write(proc.join("interrupts"), INTERRUPTS).unwrap();
    for irq in [24, 25] {
        std::fs::create_dir_all(proc.join("irq").join(irq.to_string())).unwrap();
    }
    let mut placer = Placer::default();
    let missed = placer.shortfall(&layout).unwrap();
    assert!(missed.contains("no thread of vCPU 0"), "{missed}");
    assert!(
        missed.contains("no vfio-msi interrupt of 0000:00:04.0 was placed"),
        "{missed}"
    );
    placer.apply(&layout, 7, proc);
    assert_eq!(placer.shortfall(&layout), None);
    assert_eq!(
        crate::setup::host::thread_affinity(tid).unwrap(),
        vec![cpus[1]]
    );
    for irq in [24, 25] {
        let f = proc
            .join("irq")
            .join(irq.to_string())
            .join("smp_affinity_list");
        assert_eq!(std::fs::read_to_string(f).unwrap(), cpus[0].to_string());
    }
    // Renamed (QEMU names a thread after it starts): placed again.
    std::fs::write(task.join(tid.to_string()).join("comm"), "worker\n").unwrap();
    placer.apply(&layout, 7, proc);
    assert_eq!(
        crate::setup::host::thread_affinity(tid).unwrap(),
        vec![cpus[0]]
    );
    stop_tx.send(()).unwrap();
    worker.join().unwrap();
}

/// A VMM whose vCPU threads carry other names (an unknown VMM, or QEMU
/// without debug-threads) leaves its vCPUs unplaced: the shortfall says so.
#[test]
fn a_vcpu_never_found_by_name_is_reported() {
    let layout = Layout::new(&[0, 1, 2], 2, "0000:00:04.0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("7").join("task");
    // Thread 999999999 does not exist: vcpu1's placing fails (ESRCH) and
    // does not count as placed.
    std::fs::create_dir_all(task.join("999999999")).unwrap();
    std::fs::write(task.join("999999999").join("comm"), "vcpu1\n").unwrap();
    std::fs::write(dir.path().join("interrupts"), INTERRUPTS).unwrap();
    let mut placer = Placer::default();
    placer.apply(&layout, 7, dir.path());
    let missed = placer.shortfall(&layout).unwrap();
    assert!(missed.contains("no thread of vCPU 0, 1 "), "{missed}");
    // The interrupts' files could not be written here: not placed either.
    assert!(missed.contains("no vfio-msi interrupt"), "{missed}");
}
