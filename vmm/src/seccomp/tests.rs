//! The filters build, and a filtered thread can do what every thread does.

use super::*;

const KINDS: [ThreadKind; 5] = [
    ThreadKind::Vcpu,
    ThreadKind::Device,
    ThreadKind::Api,
    ThreadKind::Signals,
    ThreadKind::Serial,
];

#[test]
fn every_kind_builds() {
    for k in KINDS {
        let f = build(k).unwrap();
        assert!(!f.is_empty(), "{k:?}");
    }
    assert_eq!(
        Policy { enabled: false }.filter(ThreadKind::Vcpu).unwrap(),
        None
    );
}

#[test]
fn conditional_calls_are_not_also_allowed_unconditionally() {
    // An unconditional entry for the same number would make the
    // conditions moot (or, merged, narrow the unconditional one).
    for k in KINDS {
        for (nr, args, why) in conditional(k) {
            assert!(!args.is_empty(), "{k:?} {nr}: {why}");
            assert!(
                !COMMON.iter().chain(extra(k)).any(|(n, _)| *n == nr),
                "{k:?}: {nr} is both conditional and unconditional"
            );
        }
    }
}

#[test]
fn ioctl_numbers_match_the_kernel_headers() {
    assert_eq!(ioctl::KVM_RUN(), 0xae80);
    assert_eq!(ioctl::KVM_SIGNAL_MSI(), 0x4020_aea5);
    assert_eq!(ioctl::KVM_IRQFD(), 0x4020_ae76);
    assert_eq!(ioctl::KVM_SET_GSI_ROUTING(), 0x4008_ae6a);
    assert_eq!(ioctl::VFIO_DEVICE_SET_IRQS(), 0x3b6e);
    assert_eq!(ioctl::VFIO_IOMMU_MAP_DMA(), 0x3b71);
    assert_eq!(ioctl::VFIO_IOMMU_UNMAP_DMA(), 0x3b72);
}

#[test]
fn a_filtered_thread_allocates_logs_locks_and_exits() {
    // A missing common syscall ends this test process through the SIGSYS
    // report (exit code 159): the test fails loudly.
    for k in KINDS {
        let filter = Policy::default().filter(k).unwrap();
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = shared.clone();
        let h = spawn("filtered", filter, move || {
            let big = vec![1u8; 8 << 20];
            let mut v = s2.lock().unwrap();
            v.push(big.len());
            let m: std::collections::HashMap<u32, u32> = (0..100).map(|i| (i, i)).collect();
            v.push(m.len());
            tracing::warn!("from a filtered thread");
            eprintln!("filtered thread of kind {k:?} ran");
            let (tx, rx) = std::sync::mpsc::channel();
            tx.send(1).unwrap();
            v.push(rx.recv().unwrap());
            let _ = std::time::Instant::now();
        })
        .unwrap();
        h.join().unwrap();
        assert_eq!(*shared.lock().unwrap(), vec![8 << 20, 100, 1]);
    }
}

#[test]
fn a_filtered_thread_that_opens_a_file_gets_eacces_and_lives() {
    // glibc's allocator opens /proc/sys/vm/overcommit_memory the first
    // time an arena shrinks (the lab's device thread did, after a burst of
    // unmaps, and the trap ended the VMM). Many medium blocks, freed, make
    // this thread's arena shrink; the explicit open checks the answer.
    for k in KINDS {
        let filter = Policy::default().filter(k).unwrap();
        let h = spawn("opener", filter, move || {
            let blocks: Vec<Vec<u8>> = (0..2048).map(|i| vec![i as u8; 48 << 10]).collect();
            drop(blocks);
            let e = std::fs::File::open("/proc/sys/vm/overcommit_memory").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{k:?}: {e}");
        })
        .unwrap();
        h.join().unwrap();
    }
}
