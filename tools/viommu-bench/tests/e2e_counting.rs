//! Stock QEMU without a trace on the fake host (`support/fake_host.rs`):
//! a QEMU whose help output shows it has no `log` trace backend is named
//! before any VM starts and runs no counting run; one whose help output
//! does not tell is caught by its empty trace file. Either way its counts
//! read `no trace`, never a 0 or a blank.

#[path = "support/fake_host.rs"]
mod fake_host;

use std::process::Command;

use fake_host::{fake_host, qmp_broker, BDF};
use viommu_bench::columns::Counting;
use viommu_bench::report::document::Results;

/// A QEMU without the `log` trace backend whose help output does not
/// tell (a wrapper): its trace file stays empty, and the table, the notes
/// and the warnings say so; no zero, no blank.
#[test]
fn a_qemu_that_writes_no_trace_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    qmp_broker(&d.join("qmp"));
    let o = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .env("FAKE_QMP_DIR", d.join("qmp"))
        .env("FAKE_QEMU_NO_LOG", "1")
        .env("FAKE_QEMU_HELP", "none")
        .args([
            "--device",
            BDF,
            "--destroy-data",
            BDF,
            "--no-bind",
            "--root",
        ])
        .arg(&root)
        .arg("--qemu")
        .arg(&qemu)
        .args(["--kernel-stock", &p("stock.bzImage"), "--kernel-patched"])
        .args([&p("patched.bzImage"), "--initramfs", &p("initramfs.cpio")])
        .args(["--columns", "qemu+stock,no-viommu", "--bs", "4k"])
        .args(["--rounds", "1", "--out", &p("out")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    let q = stdout
        .lines()
        .find(|l| l.starts_with("qemu+stock"))
        .expect("qemu+stock row");
    assert!(
        q.contains("1000") && q.matches("no trace").count() == 2 && !q.contains("0.00"),
        "{q}"
    );
    assert!(
        stdout.contains("- qemu+stock: QEMU wrote no trace in 1 of 1 VM(s): this QEMU has no `log` trace backend"),
        "{stdout}"
    );
    assert!(
        stderr.contains("qemu+stock round 1: QEMU wrote no line to its trace file"),
        "{stderr}"
    );
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap())
            .unwrap();
    let c = doc.cells.iter().find(|c| c.column == "qemu+stock").unwrap();
    assert!(
        matches!(&c.counting, Some(Counting::NoTrace { why }) if why.contains("no `log` trace backend")),
        "{:?}",
        c.counting
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("no `log` trace backend")),
        "{:?}",
        c.warnings
    );
    let table = std::fs::read_to_string(d.join("out/table.md")).unwrap();
    assert!(table.contains("| no trace | no trace |"), "{table}");
}

/// A QEMU whose `-d help` lists no trace:PATTERN (Fedora's: dtrace only)
/// is named in one line before any VM starts, and its counting runs are
/// skipped: its guest is asked for none, its counts read `no trace`.
#[test]
fn a_qemu_without_the_log_backend_is_named_before_any_vm() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    qmp_broker(&d.join("qmp"));
    let o = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .env("FAKE_QMP_DIR", d.join("qmp"))
        .env("FAKE_QEMU_NO_LOG", "1")
        .args([
            "--device",
            BDF,
            "--destroy-data",
            BDF,
            "--no-bind",
            "--root",
        ])
        .arg(&root)
        .arg("--qemu")
        .arg(&qemu)
        .args(["--kernel-stock", &p("stock.bzImage"), "--kernel-patched"])
        .args([&p("patched.bzImage"), "--initramfs", &p("initramfs.cpio")])
        .args(["--columns", "qemu+stock,no-viommu", "--bs", "4k"])
        .args(["--rounds", "1", "--out", &p("out")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    let line = format!(
        "viommu-bench: stock QEMU {} has no `log` trace backend (found: dtrace only",
        qemu.display()
    );
    let said = stderr
        .find(&line)
        .unwrap_or_else(|| panic!("{line:?} in {stderr}"));
    let booted = stderr.find("booting").expect("a VM booted");
    assert!(said < booted, "said after a VM started: {stderr}");
    assert_eq!(
        stderr.matches("has no `log` trace backend").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("QEMU wrote no line"), "{stderr}");
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap())
            .unwrap();
    let c = doc.cells.iter().find(|c| c.column == "qemu+stock").unwrap();
    assert!(
        matches!(&c.counting, Some(Counting::NoTraceBackend { why }) if why.contains("found: dtrace only")),
        "{:?}",
        c.counting
    );
    assert!(
        !c.phases.keys().any(|k| k.starts_with("count-")),
        "a counting run ran: {:?}",
        c.phases.keys()
    );
    assert!(
        !c.command.contains("lab.count=") && !c.command.contains(" -D "),
        "{}",
        c.command
    );
    let q = stdout
        .lines()
        .find(|l| l.starts_with("qemu+stock"))
        .expect("qemu+stock row");
    assert!(
        q.matches("no trace").count() == 2 && !q.contains("0.00"),
        "{q}"
    );
    assert!(
        stdout.contains("- qemu+stock: requests and VFIO calls per I/O unknown in 1 of 1 VM(s) (`no trace`), found before the run: stock QEMU"),
        "{stdout}"
    );
}
