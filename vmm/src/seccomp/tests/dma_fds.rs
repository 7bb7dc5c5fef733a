//! The ioctls pinned to a known descriptor: the DMA ioctls reach the
//! kernel on the known containers and iommufds only, a vCPU's memory slot
//! update on the VM only; on any other descriptor the filter denies them.

use super::super::*;
use super::in_filtered_child_with;

/// The known descriptor (a container or iommufd in the VMM; `/dev/null`
/// here, so the kernel answers `ENOTTY`).
const DMA_FD: RawFd = 930;
/// Another open descriptor (`/dev/null` too).
const OTHER_FD: RawFd = 931;
/// The child's exit code when the kernel's answer was not `ENOTTY`.
const NOT_THE_KERNEL: i32 = 10;

vmm_sys_util::ioctl_io_nr!(VFIO_IOMMU_GET_INFO, b';' as u32, 100 + 12);

/// `ioctl(fd, req, 0)`; exits the child with [`NOT_THE_KERNEL`] unless it
/// failed with `ENOTTY` (the kernel's answer for `/dev/null`).
fn call(fd: RawFd, req: u64) {
    // SAFETY: an ioctl with a null argument on /dev/null, which has no
    // ioctls: it reads and writes no memory.
    let r = unsafe { libc::ioctl(fd, req as _, 0usize) };
    let e = std::io::Error::last_os_error().raw_os_error();
    if r != -1 || e != Some(libc::ENOTTY) {
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(NOT_THE_KERNEL) };
    }
}

fn open_dev_null_at(fd: RawFd) {
    let f = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: duplicating a live fd onto a number this test owns.
    let r = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), fd) };
    assert_eq!(r, fd);
}

#[test]
fn dma_ioctls_reach_the_kernel_on_the_known_descriptors_only() {
    open_dev_null_at(DMA_FD);
    open_dev_null_at(OTHER_FD);
    let known = Known {
        dma_fds: vec![DMA_FD],
        vcpu_serves_iommu: true,
        ..Known::default()
    };
    let pinned = Known {
        pinned_ram: true,
        ..known.clone()
    };
    for kind in [ThreadKind::Device, ThreadKind::Vcpu] {
        let run = |k: &Known, f: fn()| in_filtered_child_with(kind, k, f);
        // The filter's default action is SECCOMP_RET_TRAP: SIGSYS, and the
        // handler ends the process with 159.
        assert_eq!(DENIED_EXIT_CODE, 159);
        let on_known: [(&str, fn()); 4] = [
            ("VFIO_IOMMU_MAP_DMA", || {
                call(DMA_FD, ioctl::VFIO_IOMMU_MAP_DMA())
            }),
            ("VFIO_IOMMU_UNMAP_DMA", || {
                call(DMA_FD, ioctl::VFIO_IOMMU_UNMAP_DMA())
            }),
            ("IOMMU_IOAS_MAP", || call(DMA_FD, ioctl::IOMMU_IOAS_MAP())),
            ("IOMMU_IOAS_UNMAP", || {
                call(DMA_FD, ioctl::IOMMU_IOAS_UNMAP())
            }),
        ];
        for (what, f) in on_known {
            assert_eq!(run(&known, f), 0, "{kind:?}: {what} on the known fd");
        }
        let on_other: [(&str, fn()); 4] = [
            ("VFIO_IOMMU_MAP_DMA", || {
                call(OTHER_FD, ioctl::VFIO_IOMMU_MAP_DMA())
            }),
            ("VFIO_IOMMU_UNMAP_DMA", || {
                call(OTHER_FD, ioctl::VFIO_IOMMU_UNMAP_DMA())
            }),
            ("IOMMU_IOAS_MAP", || call(OTHER_FD, ioctl::IOMMU_IOAS_MAP())),
            ("IOMMU_IOAS_UNMAP", || {
                call(OTHER_FD, ioctl::IOMMU_IOAS_UNMAP())
            }),
        ];
        for (what, f) in on_other {
            assert_eq!(
                run(&pinned, f),
                DENIED_EXIT_CODE,
                "{kind:?}: {what} on another fd"
            );
        }
        // IOAS_COPY only with --pin-guest-ram, and on the known fd only.
        let copy = || call(DMA_FD, ioctl::IOMMU_IOAS_COPY());
        assert_eq!(run(&known, copy), DENIED_EXIT_CODE, "{kind:?}: copy");
        assert_eq!(run(&pinned, copy), 0, "{kind:?}: copy, pinned");
        let copy_other = || call(OTHER_FD, ioctl::IOMMU_IOAS_COPY());
        assert_eq!(
            run(&pinned, copy_other),
            DENIED_EXIT_CODE,
            "{kind:?}: copy on another fd"
        );
        // GET_INFO is setup's (unfiltered), never a filtered thread's.
        let info = || call(DMA_FD, VFIO_IOMMU_GET_INFO());
        assert_eq!(run(&pinned, info), DENIED_EXIT_CODE, "{kind:?}: get info");
    }
    // The main thread's unmap-all: the known fd only, and no map.
    let main = |f: fn()| in_filtered_child_with(ThreadKind::Main, &known, f);
    assert_eq!(
        main(|| call(DMA_FD, ioctl::IOMMU_IOAS_UNMAP())),
        0,
        "main: unmap-all"
    );
    assert_eq!(
        main(|| call(OTHER_FD, ioctl::VFIO_IOMMU_UNMAP_DMA())),
        DENIED_EXIT_CODE,
        "main: unmap on another fd"
    );
    assert_eq!(
        main(|| call(DMA_FD, ioctl::IOMMU_IOAS_MAP())),
        DENIED_EXIT_CODE,
        "main: map"
    );
    // SAFETY: closing this test's fds.
    unsafe {
        libc::close(DMA_FD);
        libc::close(OTHER_FD);
    }
}

/// A guest that turns the passed-through device's Memory Space off or on
/// makes its vCPU remove or restore the BAR slots: on the VM only, and
/// only with a passed-through device.
#[test]
fn vcpus_update_memory_slots_on_the_vm_only() {
    const VM_FD: RawFd = 932;
    const NOT_VM_FD: RawFd = 933;
    open_dev_null_at(VM_FD);
    open_dev_null_at(NOT_VM_FD);
    let known = Known {
        vfio_devices: vec![7],
        vm: Some(VM_FD),
        ..Known::default()
    };
    let vcpu = |k: &Known, f: fn()| in_filtered_child_with(ThreadKind::Vcpu, k, f);
    let on_vm = || call(VM_FD, ioctl::KVM_SET_USER_MEMORY_REGION());
    assert_eq!(vcpu(&known, on_vm), 0, "on the VM");
    assert_eq!(
        vcpu(&known, || call(
            NOT_VM_FD,
            ioctl::KVM_SET_USER_MEMORY_REGION()
        )),
        DENIED_EXIT_CODE,
        "on another fd"
    );
    let no_device = Known {
        vfio_devices: vec![],
        ..known.clone()
    };
    assert_eq!(vcpu(&no_device, on_vm), DENIED_EXIT_CODE, "no device");
    assert_eq!(
        in_filtered_child_with(ThreadKind::Device, &known, on_vm),
        DENIED_EXIT_CODE,
        "the device thread"
    );
    // SAFETY: closing this test's fds.
    unsafe {
        libc::close(VM_FD);
        libc::close(NOT_VM_FD);
    }
}
