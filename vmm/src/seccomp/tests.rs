//! The filters build, and a filtered thread can do what every thread does.

use super::*;

const KINDS: [ThreadKind; 6] = [
    ThreadKind::Vcpu,
    ThreadKind::Device,
    ThreadKind::Api,
    ThreadKind::Signals,
    ThreadKind::Serial,
    ThreadKind::Main,
];

#[test]
fn every_kind_builds() {
    for k in KINDS {
        let f = build(k, &Known::default()).unwrap();
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
        let known = Known {
            vfio_devices: vec![7, 8],
            api_dir: Some(9),
            vcpu_serves_iommu: false,
            host_load: Some(10),
            dma_fds: vec![11],
            vm: Some(12),
            pinned_ram: true,
        };
        for (nr, args, why) in conditional(k, &known) {
            assert!(!args.is_empty(), "{k:?} {nr}: {why}");
            assert!(
                !COMMON.iter().chain(kind_syscalls(k)).any(|(n, _)| *n == nr),
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
    // include/uapi/linux/iommufd.h and vfio.h (6.x).
    assert_eq!(ioctl::IOMMU_DESTROY(), 0x3b80);
    assert_eq!(ioctl::IOMMU_IOAS_COPY(), 0x3b83);
    assert_eq!(ioctl::IOMMU_IOAS_MAP(), 0x3b85);
    assert_eq!(ioctl::IOMMU_IOAS_UNMAP(), 0x3b86);
    assert_eq!(ioctl::VFIO_DEVICE_DETACH_IOMMUFD_PT(), 0x3b78);
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
    in_filtered_child_with(kind, &Known::default(), f)
}

/// [`in_filtered_child`] with descriptor conditions on `known` (the
/// child inherits the descriptors).
fn in_filtered_child_with(kind: ThreadKind, known: &Known, f: fn()) -> i32 {
    install_handler().unwrap();
    // SAFETY: the child only builds and installs the filter (glibc's
    // allocator is fork-safe), runs `f` (raw system calls) and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = match build(kind, known) {
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

/// The descriptors a child's `f` (a plain fn) works on: fixed numbers,
/// dup2'd there before the fork.
const DIR_FD: RawFd = 900;
const OTHER_DIR_FD: RawFd = 901;
const EVENT_FD: RawFd = 904;

/// A fresh directory holding files `a` and `b`, and an fd to it at `fd`.
fn dir_at(fd: RawFd, tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vmm-seccomp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("a"), b"a").unwrap();
    std::fs::write(d.join("b"), b"b").unwrap();
    let f = std::fs::File::open(&d).unwrap();
    // SAFETY: duplicating a live fd onto a number this test owns.
    let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), fd) };
    assert_eq!(r, fd);
    d
}

fn name(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

/// The main thread after setup: it may wait for the exit (a futex), kick
/// and join the vCPUs, make the release's ioctls, read a device's group
/// link, close fds and remove the API socket in its directory; anything
/// else ends the VMM.
#[test]
fn the_main_thread_may_wait_stop_and_release_and_nothing_else() {
    let dir = dir_at(DIR_FD, "main");
    let other = dir_at(OTHER_DIR_FD, "main-other");
    let ev = vmm_sys_util::eventfd::EventFd::new(0).unwrap();
    ev.write(1).unwrap();
    // SAFETY: duplicating a live fd onto a number this test owns.
    let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&ev), EVENT_FD) };
    assert_eq!(r, EVENT_FD);
    let known = Known {
        vfio_devices: vec![],
        api_dir: Some(DIR_FD),
        vcpu_serves_iommu: false,
        host_load: None,
        dma_fds: vec![UNOPENED_DMA_FD],
        ..Known::default()
    };
    let main = |f: fn()| in_filtered_child_with(ThreadKind::Main, &known, f);
    let allowed = main(|| {
        // SAFETY: raw system calls on this test's fds and buffers; the
        // ioctls go to fd -1 (EBADF after the filter let them through).
        unsafe {
            // VmExit::wait: a condition variable (futex), no poll.
            let m = std::sync::Mutex::new(());
            let c = std::sync::Condvar::new();
            let g = m.lock().unwrap();
            drop(
                c.wait_timeout(g, std::time::Duration::from_millis(1))
                    .unwrap(),
            );
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGRTMIN());
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            let me = libc::getpid();
            assert_eq!(libc::syscall(libc::SYS_tgkill, me, me, libc::SIGRTMIN()), 0);
            std::thread::sleep(std::time::Duration::from_millis(1));
            let mut buf = [0u8; 64];
            let link = name("/proc/self/exe");
            assert!(libc::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) > 0);
            for req in [
                ioctl::KVM_IRQFD(),
                ioctl::VFIO_DEVICE_SET_IRQS(),
                ioctl::VFIO_DEVICE_RESET(),
                ioctl::KVM_SET_USER_MEMORY_REGION(),
                ioctl::KVM_SET_DEVICE_ATTR(),
                ioctl::VFIO_GROUP_UNSET_CONTAINER(),
                ioctl::VFIO_DEVICE_DETACH_IOMMUFD_PT(),
                ioctl::IOMMU_DESTROY(),
            ] {
                assert_eq!(libc::ioctl(-1, req as _, 0), -1);
            }
            // The unmap-all, on the container or iommufd only.
            for req in [ioctl::VFIO_IOMMU_UNMAP_DMA(), ioctl::IOMMU_IOAS_UNMAP()] {
                assert_eq!(libc::ioctl(UNOPENED_DMA_FD, req as _, 0), -1);
            }
            assert!(libc::fcntl(DIR_FD, libc::F_GETFD) >= 0);
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(
                libc::fstatat(
                    DIR_FD,
                    name("a").as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW
                ),
                0
            );
            assert_eq!(libc::unlinkat(DIR_FD, name("a").as_ptr(), 0), 0);
            assert_eq!(libc::close(EVENT_FD), 0);
        }
    });
    assert_eq!(allowed, 0, "what main does after setup");
    assert!(!dir.join("a").exists(), "the unlink happened");
    let denied: [(&str, fn()); 7] = [
        ("unlink in another directory", || {
            // SAFETY: a valid name; the call is denied.
            unsafe { libc::unlinkat(OTHER_DIR_FD, name("a").as_ptr(), 0) };
        }),
        ("rmdir in its directory", || {
            // SAFETY: as above.
            unsafe { libc::unlinkat(DIR_FD, name("b").as_ptr(), libc::AT_REMOVEDIR) };
        }),
        ("unlink by path", || {
            // SAFETY: as above.
            unsafe { libc::unlink(name("/nonexistent/x").as_ptr()) };
        }),
        ("a socket", || {
            // SAFETY: no side effect; the call is denied.
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
        }),
        ("KVM_RUN", || {
            // SAFETY: an ioctl on no file; denied.
            unsafe { libc::ioctl(-1, ioctl::KVM_RUN() as _, 0) };
        }),
        ("fcntl other than F_GETFD", || {
            // SAFETY: on this test's fd; denied.
            unsafe { libc::fcntl(DIR_FD, libc::F_SETFD, 0) };
        }),
        ("a poll, even of the exit eventfd alone", || {
            let mut pfd = libc::pollfd {
                fd: EVENT_FD,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; denied.
            unsafe { libc::poll(&mut pfd, 1, 0) };
        }),
    ];
    for (what, f) in denied {
        assert_eq!(main(f), DENIED_EXIT_CODE, "{what}");
    }
    // Without an API socket, no unlink at all.
    let none = in_filtered_child_with(ThreadKind::Main, &Known::default(), || {
        // SAFETY: a valid name; the call is denied.
        unsafe { libc::unlinkat(DIR_FD, name("b").as_ptr(), 0) };
    });
    assert_eq!(none, DENIED_EXIT_CODE, "no API socket, no unlink");
    assert!(dir.join("b").exists() && other.join("a").exists());
    // SAFETY: closing this test's fds.
    unsafe {
        libc::close(DIR_FD);
        libc::close(OTHER_DIR_FD);
        libc::close(EVENT_FD);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other).unwrap();
}

/// What keeps a VMM that shares its `--user` uid with another from using
/// the uid against it (vmm/README.md): no thread may make a socket or
/// connect, signal another process, trace or write another's memory
/// (opening /proc files fails with EACCES, above).
#[test]
fn no_thread_can_reach_another_process_of_its_uid() {
    let known = Known {
        vfio_devices: vec![7],
        api_dir: Some(9),
        vcpu_serves_iommu: false,
        host_load: None,
        ..Known::default()
    };
    for k in KINDS {
        let allowed: Vec<libc::c_long> = COMMON
            .iter()
            .chain(kind_syscalls(k))
            .map(|(nr, _)| *nr)
            .chain(conditional(k, &known).into_iter().map(|(nr, _, _)| nr))
            .collect();
        for (nr, what) in [
            (libc::SYS_socket, "socket"),
            (libc::SYS_connect, "connect"),
            (libc::SYS_kill, "kill"),
            (libc::SYS_tkill, "tkill"),
            (libc::SYS_rt_sigqueueinfo, "rt_sigqueueinfo"),
            (libc::SYS_rt_tgsigqueueinfo, "rt_tgsigqueueinfo"),
            (libc::SYS_pidfd_open, "pidfd_open"),
            (libc::SYS_pidfd_send_signal, "pidfd_send_signal"),
            (libc::SYS_ptrace, "ptrace"),
            (libc::SYS_process_vm_writev, "process_vm_writev"),
            (libc::SYS_process_vm_readv, "process_vm_readv"),
        ] {
            assert!(!allowed.contains(&nr), "{k:?} allows {what}");
        }
    }
}

/// A vCPU reads and writes the passed-through devices' files only: any
/// other descriptor (guest memory's backing file, /dev/kvm, a socket)
/// ends the VMM, and without a passed-through device neither call is
/// allowed at all.
#[test]
fn vcpus_read_and_write_only_the_passed_through_devices() {
    const DEVICE_FD: RawFd = 910;
    const OTHER_FD: RawFd = 911;
    let d = std::env::temp_dir().join(format!("vmm-seccomp-pread-{}", std::process::id()));
    std::fs::write(&d, [7u8; 64]).unwrap();
    for fd in [DEVICE_FD, OTHER_FD] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&d)
            .unwrap();
        // SAFETY: duplicating a live fd onto a number this test owns.
        let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), fd) };
        assert_eq!(r, fd);
    }
    let known = Known {
        vfio_devices: vec![DEVICE_FD],
        api_dir: None,
        vcpu_serves_iommu: false,
        host_load: None,
        ..Known::default()
    };
    let vcpu = |f: fn()| in_filtered_child_with(ThreadKind::Vcpu, &known, f);
    let device = vcpu(|| {
        let mut b = [0u8; 4];
        // SAFETY: valid buffers of the given lengths on this test's fd.
        unsafe {
            assert_eq!(libc::pread64(DEVICE_FD, b.as_mut_ptr().cast(), 4, 8), 4);
            assert_eq!(libc::pwrite64(DEVICE_FD, b.as_ptr().cast(), 4, 8), 4);
        }
        assert_eq!(b, [7; 4]);
    });
    assert_eq!(device, 0, "the device's file");
    let other_read = vcpu(|| {
        let mut b = [0u8; 4];
        // SAFETY: as above; the call is denied.
        unsafe { libc::pread64(OTHER_FD, b.as_mut_ptr().cast(), 4, 0) };
    });
    assert_eq!(other_read, DENIED_EXIT_CODE, "pread64 of another file");
    let other_write = vcpu(|| {
        let b = [0u8; 4];
        // SAFETY: as above; the call is denied.
        unsafe { libc::pwrite64(OTHER_FD, b.as_ptr().cast(), 4, 0) };
    });
    assert_eq!(other_write, DENIED_EXIT_CODE, "pwrite64 of another file");
    let no_device = in_filtered_child_with(ThreadKind::Vcpu, &Known::default(), || {
        let mut b = [0u8; 4];
        // SAFETY: as above; the call is denied.
        unsafe { libc::pread64(DEVICE_FD, b.as_mut_ptr().cast(), 4, 0) };
    });
    assert_eq!(no_device, DENIED_EXIT_CODE, "no passed-through device");
    // SAFETY: closing this test's fds.
    unsafe {
        libc::close(DEVICE_FD);
        libc::close(OTHER_FD);
    }
    std::fs::remove_file(&d).unwrap();
}

/// The device thread reads `/proc/loadavg` (its spare-CPU check before
/// polling) with `pread64` on that descriptor only, and only when it has
/// one; a vCPU only when it serves the request queue.
#[test]
fn the_device_thread_reads_the_host_load_file_only() {
    const LOAD_FD: RawFd = 912;
    const OTHER_FD: RawFd = 913;
    for (path, fd) in [("/proc/loadavg", LOAD_FD), ("/proc/version", OTHER_FD)] {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: duplicating a live fd onto a number this test owns.
        let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), fd) };
        assert_eq!(r, fd);
    }
    fn read(fd: RawFd) {
        let mut b = [0u8; 64];
        // SAFETY: a valid buffer of the given length.
        let n = unsafe { libc::pread64(fd, b.as_mut_ptr().cast(), b.len(), 0) };
        assert!(n > 0);
    }
    let known = Known {
        host_load: Some(LOAD_FD),
        ..Known::default()
    };
    let device = |f: fn()| in_filtered_child_with(ThreadKind::Device, &known, f);
    assert_eq!(device(|| read(LOAD_FD)), 0, "/proc/loadavg");
    assert_eq!(device(|| read(OTHER_FD)), DENIED_EXIT_CODE, "another file");
    assert_eq!(
        in_filtered_child_with(ThreadKind::Device, &Known::default(), || read(LOAD_FD)),
        DENIED_EXIT_CODE,
        "no check (polling off)"
    );
    // A vCPU reads it only when it serves the request queue (its
    // hand-over to the polling asks the same question).
    let serving = Known {
        vcpu_serves_iommu: true,
        ..known.clone()
    };
    let vcpu = |k: &Known, f: fn()| in_filtered_child_with(ThreadKind::Vcpu, k, f);
    assert_eq!(vcpu(&serving, || read(LOAD_FD)), 0, "a serving vCPU");
    assert_eq!(
        vcpu(&serving, || read(OTHER_FD)),
        DENIED_EXIT_CODE,
        "a serving vCPU, another file"
    );
    assert_eq!(
        vcpu(&known, || read(LOAD_FD)),
        DENIED_EXIT_CODE,
        "a vCPU of --viommu-kicks thread"
    );
    // SAFETY: closing this test's fds.
    unsafe {
        libc::close(LOAD_FD);
        libc::close(OTHER_FD);
    }
}

#[test]
fn vcpus_make_dma_calls_only_when_they_serve_the_iommu() {
    // On a known descriptor number that is not open: the call fails
    // (EBADF) once the filter lets it through; trapped, the child exits 159.
    fn map_dma() {
        // SAFETY: an ioctl on a closed descriptor number, no memory passed.
        unsafe { libc::ioctl(UNOPENED_DMA_FD, ioctl::VFIO_IOMMU_MAP_DMA() as _, 0usize) };
    }
    let serving = Known {
        vcpu_serves_iommu: true,
        dma_fds: vec![UNOPENED_DMA_FD],
        ..Known::default()
    };
    assert_eq!(
        in_filtered_child_with(ThreadKind::Vcpu, &Known::default(), map_dma),
        DENIED_EXIT_CODE,
        "a vCPU of --viommu-kicks thread"
    );
    assert_eq!(
        in_filtered_child_with(ThreadKind::Vcpu, &serving, map_dma),
        0,
        "a vCPU of --viommu-kicks vcpu"
    );
    assert_eq!(
        in_filtered_child_with(ThreadKind::Serial, &serving, map_dma),
        DENIED_EXIT_CODE,
        "only vCPUs"
    );
}

/// A descriptor number no test opens: an ioctl the filter lets through
/// fails there with `EBADF`.
const UNOPENED_DMA_FD: RawFd = 929;

#[test]
fn syscall_names_cover_old_and_new_calls() {
    assert_eq!(super::syscall_names::name(libc::SYS_ioctl), Some("ioctl"));
    assert_eq!(
        super::syscall_names::name(libc::SYS_getppid),
        Some("getppid")
    );
    assert_eq!(super::syscall_names::name(462), Some("mseal"));
    assert_eq!(super::syscall_names::name(400), None, "no call there");
    assert_eq!(super::syscall_names::name(-1), None);
    assert_eq!(super::syscall_names::name(1 << 40), None);
}

mod dma_fds;
