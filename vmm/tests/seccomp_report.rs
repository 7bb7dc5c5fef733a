//! A denied system call is reported on stderr with the thread's name, the
//! call's number and name, the workaround and what to report, and ends the VMM with exit code 159. Runs the `vmm`
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
fn a_denied_syscall_is_reported_with_thread_number_name_and_workaround() {
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
                "vmm: seccomp: thread {thread} made a denied system call (number {}, ioctl, ioctl request 0x{:016x}) at 0x",
                libc::SYS_ioctl,
                vmm::seccomp::SELFTEST_IOCTL
            )
        } else {
            format!(
                "vmm: seccomp: thread {thread} made a denied system call (number {}, getppid) at 0x",
                libc::SYS_getppid
            )
        };
        assert!(err.contains(&want), "{kind}: {err}");
        // One line, with the workaround and what to report.
        let line = err.lines().find(|l| l.contains(&want)).unwrap();
        assert!(
            line.contains("Workaround: run with --seccomp=false"),
            "{line}"
        );
        assert!(line.contains("Please report this line"), "{line}");
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
