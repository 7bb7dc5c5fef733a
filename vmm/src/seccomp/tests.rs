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

/// Runs `f` in a child process whose only thread has the filter of
/// `kind` (built there: it names the child's pid) and returns its exit
/// code: 0 if `f` returned, [`DENIED_EXIT_CODE`] if a call was denied.
fn in_filtered_child(kind: ThreadKind, f: fn()) -> i32 {
    install_handler().unwrap();
    // SAFETY: the child only builds and installs the filter (glibc's
    // allocator is fork-safe), runs `f` (raw system calls) and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = match build(kind) {
            Ok(filter) => {
                for p in &filter {
                    if seccompiler::apply_filter(p).is_err() {
                        // SAFETY: _exit is always safe.
                        unsafe { libc::_exit(2) };
                    }
                }
                f();
                0
            }
            Err(_) => 3,
        };
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` outlives the call.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

fn mmap(prot: libc::c_int) {
    // SAFETY: an anonymous private mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
}

#[test]
fn no_thread_may_map_or_make_memory_executable() {
    for k in KINDS {
        assert_eq!(
            in_filtered_child(k, || mmap(libc::PROT_READ | libc::PROT_WRITE)),
            0,
            "{k:?}: plain mmap"
        );
        assert_eq!(
            in_filtered_child(k, || mmap(libc::PROT_READ | libc::PROT_EXEC)),
            DENIED_EXIT_CODE,
            "{k:?}: mmap PROT_EXEC"
        );
        assert_eq!(
            in_filtered_child(k, || {
                let p = [0u8; 8192].as_ptr() as usize & !0xfff;
                // SAFETY: a page of this stack frame; the call is denied.
                unsafe {
                    libc::mprotect(
                        p as *mut libc::c_void,
                        4096,
                        libc::PROT_READ | libc::PROT_EXEC,
                    )
                };
            }),
            DENIED_EXIT_CODE,
            "{k:?}: mprotect PROT_EXEC"
        );
    }
}

#[test]
fn the_api_thread_signals_only_its_own_process_with_the_kick() {
    // Blocked, so that the kick to itself stays pending.
    fn block_kick() {
        // SAFETY: a local signal set; sigprocmask is allowed.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGRTMIN());
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
    }
    let own = in_filtered_child(ThreadKind::Api, || {
        block_kick();
        // SAFETY: getpid and tgkill to this very thread (tid == pid for a
        // process's only thread), with the kick blocked.
        let r = unsafe {
            let me = libc::getpid();
            libc::syscall(libc::SYS_tgkill, me, me, libc::SIGRTMIN())
        };
        assert_eq!(r, 0);
    });
    assert_eq!(own, 0, "the kick to a thread of its own process");
    let other = in_filtered_child(ThreadKind::Api, || {
        // SAFETY: a process id no process has; the call is denied anyway.
        unsafe { libc::syscall(libc::SYS_tgkill, 0x7fff_fff0, 0x7fff_fff0, libc::SIGRTMIN()) };
    });
    assert_eq!(other, DENIED_EXIT_CODE, "another process");
    let signal = in_filtered_child(ThreadKind::Api, || {
        // SAFETY: SIGKILL to itself would end the child; the call is denied.
        unsafe {
            let me = libc::getpid();
            libc::syscall(libc::SYS_tgkill, me, me, libc::SIGKILL)
        };
    });
    assert_eq!(signal, DENIED_EXIT_CODE, "another signal");
}
