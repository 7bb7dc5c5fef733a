//! A denied system call is reported on stderr with the thread's name and
//! the call's number, and ends the VMM with exit code 159. Runs the `vmm`
//! binary's hidden self-test hook (no /dev/kvm needed).

use std::process::Command;

fn selftest(kind: &str, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmm"))
        .args(["--kernel", "/dev/null", "--seccomp-selftest", kind])
        .args(extra)
        .output()
        .expect("run vmm")
}

#[test]
fn a_denied_syscall_is_reported_with_thread_and_number() {
    for (kind, thread) in [
        ("vcpu", "vcpu0"),
        ("device", "viommu"),
        ("api", "api"),
        ("signals", "signals"),
        ("serial", "serial-in"),
        ("main", "main"),
    ] {
        let out = selftest(kind, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        let want = if kind == "vcpu" {
            format!(
                "vmm: seccomp: thread {thread} made a denied system call (number {}, ioctl request 0x{:016x}) at 0x",
                libc::SYS_ioctl,
                vmm::seccomp::SELFTEST_IOCTL
            )
        } else {
            format!(
                "vmm: seccomp: thread {thread} made a denied system call (number {}) at 0x",
                libc::SYS_getppid
            )
        };
        assert!(err.contains(&want), "{kind}: {err}");
        assert_eq!(out.status.code(), Some(159), "{kind}: {err}");
    }
}

#[test]
fn seccomp_false_installs_no_filter() {
    let out = selftest("device", &["--seccomp=false"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the denied call ran"), "{err}");
}
