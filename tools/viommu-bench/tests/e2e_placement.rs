//! `--pin-vcpus` on the fake host (`support/fake_host.rs`): too few CPUs
//! stop the run before the host is touched; enough place the threads and
//! record where.

#[path = "support/fake_host.rs"]
mod fake_host;

use fake_host::{bench_run, fake_host, qmp_broker};
use viommu_bench::report::document::Results;

/// `--pin-vcpus` over too few CPUs stops before anything changes, naming
/// the need; over enough it places the VMMs' threads and says where.
#[test]
fn pin_vcpus_needs_a_cpu_per_vcpu_and_records_its_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    qmp_broker(&d.join("qmp"));
    // --pin's CPUs are the fake drive's node's: CPU 0 only.
    let o = bench_run(d, &root, &qemu, 1)
        .args(["--no-bind", "--pin", "--pin-vcpus"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--pin-vcpus: --guest-cpus 1 needs 2 CPUs")
            && stderr.contains("may use 1 (0)"),
        "{stderr}"
    );
    assert!(!d.join("out/results.json").exists());

    let cpus = viommu_bench::setup::host::affinity().unwrap();
    if cpus.len() < 2 {
        eprintln!("the rest skipped: it needs 2 CPUs, this process may use {cpus:?}");
        return;
    }
    let o = bench_run(d, &root, &qemu, 1)
        .args(["--no-bind", "--pin-vcpus"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let want = format!(
        "vCPU 0 on CPU {}; the VMM's other threads and the drive's interrupts on CPUs {}",
        cpus[1],
        std::iter::once(cpus[0])
            .chain(cpus[2..].iter().copied())
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(
        stderr.contains(&format!("threads placed (--pin-vcpus): {want}")),
        "{stderr}"
    );
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap())
            .unwrap();
    assert_eq!(doc.provenance.vcpu_pinning.as_deref(), Some(want.as_str()));
}
