use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::setup::preflight::tests::Fake;

/// `-d help` of a QEMU with the log backend (Debian 12's 7.2, shortened).
const D_HELP_LOG: &str = "Log items (comma separated):
out_asm         show generated host assembly code for each compiled TB
guest_errors    log when the guest OS does something invalid (eg accessing a
non-existent register)
tid             open a separate log file per thread; filename must contain '%d'
trace:PATTERN   enable trace events

Use \"-d trace:help\" to get a list of trace events.

";

/// The same without the log backend (Fedora's: dtrace only).
const D_HELP_NO_LOG: &str = "Log items (comma separated):
out_asm         show generated host assembly code for each compiled TB
tid             open a separate log file per thread; filename must contain '%d'
";

/// `-trace help` with the dtrace backend: the events, then its note.
const TRACE_HELP_DTRACE: &str = "virtio_iommu_map
virtio_iommu_unmap
This list of names of trace points may be incomplete when using the DTrace/SystemTap backends.
Run 'qemu-trace-stap list qemu-system-x86_64' to print the full list.
";

/// `-trace help` of any other backend: the events alone.
const TRACE_HELP_PLAIN: &str = "virtio_iommu_map\nvirtio_iommu_unmap\n";

#[test]
fn the_log_backend_is_told_by_d_help() {
    assert_eq!(parse(D_HELP_LOG, TRACE_HELP_PLAIN), TraceBackends::Log);
    // log and dtrace both built in (--enable-trace-backends=log,dtrace).
    assert_eq!(parse(D_HELP_LOG, TRACE_HELP_DTRACE), TraceBackends::Log);
    assert_eq!(
        parse(D_HELP_NO_LOG, TRACE_HELP_DTRACE),
        TraceBackends::NoLog { dtrace: true }
    );
    // nop, simple, ftrace, syslog or ust: no log, no dtrace note.
    assert_eq!(
        parse(D_HELP_NO_LOG, TRACE_HELP_PLAIN),
        TraceBackends::NoLog { dtrace: false }
    );
}

#[test]
fn output_that_is_no_list_of_log_items_settles_nothing() {
    assert!(matches!(parse("", ""), TraceBackends::Unknown(w) if w.contains("printed nothing")));
    assert!(matches!(
        parse("qemu-wrapper: usage: ...\n", TRACE_HELP_DTRACE),
        TraceBackends::Unknown(w) if w.contains("qemu-wrapper: usage")
    ));
}

#[test]
fn the_line_names_the_binary_the_backend_and_what_to_do() {
    let q = Path::new("/usr/bin/qemu-system-x86_64");
    assert_eq!(no_trace_line(q, &TraceBackends::Log), None);
    assert_eq!(no_trace_line(q, &TraceBackends::Unknown("x".into())), None);
    let l = no_trace_line(q, &TraceBackends::NoLog { dtrace: true }).unwrap();
    assert!(!l.contains('\n'), "{l}");
    for want in [
        "/usr/bin/qemu-system-x86_64",
        "no `log` trace backend",
        "found: dtrace only",
        "skipped",
        "--qemu",
        "--count-runtime 0",
    ] {
        assert!(l.contains(want), "{want:?} in {l}");
    }
    let l = no_trace_line(q, &TraceBackends::NoLog { dtrace: false }).unwrap();
    assert!(l.contains("found: neither log nor dtrace"), "{l}");
}

/// A fake QEMU under `f` answering `-d help` and `-trace help` as given.
fn fake_qemu(f: &Fake, d_help: &str, trace_help: &str) {
    f.file("d-help", d_help);
    f.file("trace-help", trace_help);
    let script = format!(
        "#!/bin/sh\ncase \"$1 $2\" in\n'-d help') cat {}; exit 1 ;;\n'-trace help') cat {} ;;\nesac\n",
        f.p("d-help").display(),
        f.p("trace-help").display()
    );
    f.file("bin/qemu-system-x86_64", &script);
    std::fs::set_permissions(
        f.p("bin/qemu-system-x86_64"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

/// Preflight asks the QEMU it found, only when counting runs are
/// planned, and a QEMU without the log backend is a line, not a problem.
#[test]
fn preflight_says_so_before_any_vm_for_a_dtrace_only_qemu() {
    let f = Fake::healthy();
    fake_qemu(&f, D_HELP_NO_LOG, TRACE_HELP_DTRACE);
    let mut c = f.checks();
    c.qemu_counts = true;
    let out = c.run();
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    let line = out.qemu_no_trace.expect("a line about the trace backend");
    assert!(
        line.contains(&f.p("bin/qemu-system-x86_64").display().to_string())
            && line.contains("found: dtrace only"),
        "{line}"
    );
    // No counting runs planned (--count-runtime 0, no stock vIOMMU column):
    // QEMU is not asked.
    c.qemu_counts = false;
    assert_eq!(c.run().qemu_no_trace, None);
    // The log backend: nothing to say.
    fake_qemu(&f, D_HELP_LOG, TRACE_HELP_PLAIN);
    c.qemu_counts = true;
    assert_eq!(c.run().qemu_no_trace, None);
}
