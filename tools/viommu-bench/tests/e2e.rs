//! The whole program against a fake host: a fake sysfs/procfs tree
//! (`--root`), a drive already on vfio-pci (`--no-bind`), and a fake QEMU
//! that speaks the guest protocol, answers QMP (served by the test) and
//! writes trace lines while its events are on (`support/fake_host.rs`).
//! Checks the exit code, the table on stdout and the three files in
//! --out. Stock QEMU's counts without a trace: `e2e_counting.rs`;
//! `--pin-vcpus`: `e2e_placement.rs`.

#[path = "support/fake_host.rs"]
mod fake_host;

use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::path::Path;
use std::process::Command;

use fake_host::{bench_run, fake_host, file, qmp_broker, Dir, BDF};
use viommu_bench::columns::Counting;
use viommu_bench::report::document::Results;
use viommu_bench::run::results::CellStatus;

#[test]
fn a_whole_run_on_a_fake_host() {
    // E2E_KEEP=1 keeps the directory (printed) for a look after a failure.
    let tmp = tempfile::tempdir().unwrap();
    let (_guard, d) = if std::env::var_os("E2E_KEEP").is_some() {
        let kept = tmp.keep();
        eprintln!("keeping {}", kept.display());
        (None, kept)
    } else {
        let p = tmp.path().to_path_buf();
        (Some(tmp), p)
    };
    let d = Dir(d);
    let (root, qemu) = fake_host(d.path());
    let out = d.path().join("out");
    let p = |n: &str| d.path().join(n).to_string_lossy().into_owned();
    qmp_broker(&d.path().join("qmp"));
    let o = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .env("FAKE_QMP_DIR", d.path().join("qmp"))
        .args([
            "--device",
            BDF,
            "--destroy-data",
            BDF,
            "--no-bind",
            "--root",
        ])
        .arg(&root)
        .args(["--qemu"])
        .arg(&qemu)
        .args([
            "--kernel-stock",
            &p("stock.bzImage"),
            "--kernel-patched",
            &p("patched.bzImage"),
        ])
        .args(["--initramfs", &p("initramfs.cpio"), "--out"])
        .arg(&out)
        .args([
            "--columns",
            "qemu+stock,qemu+patched,no-viommu",
            "--bs",
            "4k",
            "--rounds",
            "2",
            "--pin",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // A failed column is a result, but not a clean run: exit 1.
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let q = stdout
        .lines()
        .find(|l| l.starts_with("qemu+stock"))
        .expect("qemu+stock row");
    // Untraced in the timed phase (1000 IOPS, not the traced 700); its
    // counts from the untimed counting run, marked so.
    assert!(
        q.contains("1000 [1000-1000]") && q.contains("0.25") && q.contains(">=2.00 untimed"),
        "{q}"
    );
    assert!(
        stderr.contains(
            "qemu+stock: count-randread-4k, untimed: counting with QEMU's trace events on"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "stock QEMU's vIOMMU VMs then run each again for 3 s, untimed, with its trace on"
        ),
        "{stderr}"
    );
    let patched = stdout
        .lines()
        .find(|l| l.starts_with("qemu+patched"))
        .unwrap();
    assert!(patched.contains("failed"), "{patched}");
    assert!(
        stderr.contains("cell 1/6 round 1/2 qemu+stock: booting"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cell 4/6 round 2/2 no-viommu")
            && stderr.contains("cell 6/6 round 2/2 qemu+stock"),
        "balanced order: round 2 runs the columns backwards\n{stderr}"
    );

    let json = std::fs::read_to_string(out.join("results.json")).unwrap();
    let doc: Results = serde_json::from_str(&json).unwrap();
    assert_eq!(
        serde_json::to_string_pretty(&doc).unwrap(),
        json,
        "JSON round trip"
    );
    assert_eq!(doc.cells.len(), 6);
    assert_eq!(doc.host_kernel, "6.1.0-fake");
    assert_eq!(
        doc.provenance.kernel_cmdline.as_deref(),
        Some("intel_iommu=on fake")
    );
    assert_eq!(doc.provenance.thp_enabled.as_deref(), Some("madvise"));
    assert!(stdout.contains("cmdline: intel_iommu=on fake"), "{stdout}");
    // The default preconditioning (the drive's size is unknown on vfio-pci:
    // the 4 GiB span, capped by the guest).
    assert_eq!(doc.settings["precondition"], "span");
    assert_eq!(doc.settings["precondition_bytes"], "4294967296");
    assert!(
        doc.settings["guest_cmdline"].contains("lab.precondition=span lab.span=4294967296"),
        "{:?}",
        doc.settings
    );
    assert_eq!(
        doc.host,
        viommu_bench::setup::host::HostInfo {
            qemu_version: Some("QEMU emulator version 9.9.9 (fake)".into()),
            cpu_model: Some("Fake CPU @ 1.00GHz".into()),
            iommu: Some("intel".into()),
            numa_node: Some(0),
            pinned_cpus: Some("0".into()),
        }
    );
    assert!(
        stderr.contains("every VMM pinned to CPUs 0 (NUMA node 0 of the drive)"),
        "{stderr}"
    );
    let failed = doc
        .cells
        .iter()
        .find(|c| c.column == "qemu+patched")
        .unwrap();
    assert!(
        matches!(&failed.status, CellStatus::Failed { reason, .. } if reason.contains("exited 1")),
        "{:?}",
        failed.status
    );
    let ok = doc.cells.iter().find(|c| c.column == "qemu+stock").unwrap();
    assert_eq!(
        ok.phases["randread-4k"].device, None,
        "nothing counted while timed"
    );
    let dev = ok.phases["count-randread-4k"].device.unwrap();
    assert_eq!(
        (dev.map_requests, dev.unmap_requests, dev.vfio_calls),
        (4, 4, 8)
    );
    assert_eq!(ok.counting, Some(Counting::Pass));
    assert!(
        ok.command.contains(" -qmp unix:") && !ok.command.contains("-trace"),
        "{}",
        ok.command
    );
    assert_eq!(doc.settings["count_runtime_s"], "3");
    // The ceiling: nothing to count, no counting run.
    let ceiling = doc.cells.iter().find(|c| c.column == "no-viommu").unwrap();
    assert_eq!(ceiling.counting, Some(Counting::None));
    assert!(!ceiling.phases.contains_key("count-randread-4k"));
    assert!(!ceiling.command.contains("lab.count="));
    // Each cell knows where it ran: one host boot, places 0-5 in run order.
    let places: Vec<u32> = doc
        .cells
        .iter()
        .map(|c| c.place.as_ref().expect("a place").index)
        .collect();
    assert_eq!(places, [0, 1, 2, 3, 4, 5]);
    assert!(doc
        .cells
        .windows(2)
        .all(|w| w[0].place.as_ref().unwrap().boot == w[1].place.as_ref().unwrap().boot));
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("| 4k | 1 | qemu+stock |"), "{table}");
    assert!(table.contains("THP madvise/? (enabled/defrag)"), "{table}");
    assert!(
        table.contains("| >=2.00 untimed | >=2.00 untimed |")
            && table
                .contains("`>=N untimed` = stock QEMU's trace events over an untimed counting run"),
        "{table}"
    );
    // The ceiling ran after the baseline in round 1, before it in round 2.
    assert!(table.contains("By order on the host"), "{table}");
    let by_order = table
        .lines()
        .skip_while(|l| !l.starts_with("By order on the host"))
        .find(|l| l.starts_with("| randread-4k | no-viommu |"))
        .expect("an order row for the ceiling");
    assert!(
        by_order.contains("4.00 [4.00-4.00] (1) | 4.00 [4.00-4.00] (1)"),
        "{by_order}"
    );
    assert!(std::fs::read(out.join("chart.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    assert!(out.join("logs/qemu+patched-r1.log").is_file());
}

/// The lab's way: a crashed guest runs again (`--retries`), a round of its
/// own (`--first-round`), cells and failed logs on stdout
/// (`--serial-report`), then the table from those lines (`--report-from`).
#[test]
fn retries_serial_report_and_report_from() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    qmp_broker(&d.join("qmp"));
    let common = [
        "--device",
        BDF,
        "--columns",
        "qemu+stock,qemu+patched,no-viommu",
        "--bs",
        "4k",
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .env("FAKE_QMP_DIR", d.join("qmp"))
        .args(common)
        .args(["--destroy-data", BDF, "--no-bind", "--root"])
        .arg(&root)
        .arg("--qemu")
        .arg(&qemu)
        .args(["--kernel-stock", &p("stock.bzImage"), "--kernel-patched"])
        .args([&p("patched.bzImage"), "--initramfs", &p("initramfs.cpio")])
        .args(["--out", &p("out"), "--rounds", "1", "--first-round", "3"])
        .args(["--retries", "1", "--serial-report"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("@@LAB-CELL@@ "))
        .collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let cells: Vec<viommu_bench::run::results::CellResult> = lines
        .iter()
        .map(|l| serde_json::from_str(&l[13..]).unwrap())
        .collect();
    // Round 3 alone runs forwards from column 2 (round 2 went backwards).
    assert_eq!(
        cells
            .iter()
            .map(|c| (c.column.as_str(), c.round))
            .collect::<Vec<_>>(),
        [("qemu+patched", 2), ("no-viommu", 2), ("qemu+stock", 2)]
    );
    let patched = &cells[0];
    assert_eq!(
        patched.guest_crash.as_deref(),
        Some("Kernel panic - not syncing: fake")
    );
    assert!(
        patched
            .warnings
            .iter()
            .any(|w| w.starts_with("attempt 1 failed (guest kernel crashed: Kernel panic")),
        "{:?}",
        patched.warnings
    );
    assert!(
        stdout.contains("---- guest qemu+patched-r3 attempt 1 failed;"),
        "{stdout}"
    );
    assert!(
        stderr.contains("cell 1/3 round 3 qemu+patched: booting"),
        "{stderr}"
    );
    assert!(
        stdout.contains("---- end of guest qemu+patched-r3 log ----"),
        "{stdout}"
    );
    assert!(d.join("out/logs/qemu+patched-r3-attempt1.log").is_file());
    // Behind stock QEMU's virtio-iommu the fake guest reserves only the
    // MSI window: the drive's BAR0 is usable, a warning for stock QEMU.
    let stock = &cells[2];
    assert_eq!(stock.status, CellStatus::Ok);
    assert_eq!(stock.bar0_reserved, Some(false));
    assert!(
        stock.warnings[0].contains("0x00000000febf0000-0x00000000febf3fff"),
        "{:?}",
        stock.warnings
    );

    // The same cells, read back as a report: no host needed.
    std::fs::write(d.join("serial.txt"), stdout.as_bytes()).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .args(common)
        .args([
            "--rounds",
            "1",
            "--report-from",
            &p("serial.txt"),
            "--out",
            &p("report"),
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{table}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let q = table.lines().find(|l| l.starts_with("qemu+stock")).unwrap();
    assert!(q.contains("1000") && q.contains("0.25"), "{q}");
    assert!(
        table.contains(
            "qemu+stock: the guest's reserved IOVA regions left the drive's host BAR0 usable"
        ),
        "{table}"
    );
    assert!(
        table.contains("qemu+patched: 1 failed attempt(s) in 1 of "),
        "{table}"
    );
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("report/results.json")).unwrap())
            .unwrap();
    assert_eq!(doc.cells.len(), 3);
    // The run's provenance came with the cells (its own line), so the
    // table drawn from them names the code and host they ran on.
    assert!(stdout.contains("@@LAB-PROVENANCE@@ {"), "{stdout}");
    assert!(!doc.provenance.tool_revision.is_empty());
    assert_eq!(doc.provenance.vmm_version, None, "no column ran our VMM");
    assert!(
        table.contains(&format!(
            "code: viommu-bench {},",
            doc.provenance.tool_revision
        )),
        "{table}"
    );

    // Two files pooled: the second file's rounds follow the first's, and
    // the round-by-round table has two rounds to pair. Cells without
    // their provenance line (as the lab saved them before it had one).
    let bare: String = stdout
        .lines()
        .filter(|l| !l.starts_with("@@LAB-PROVENANCE@@"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(d.join("bare.txt"), bare).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .args(common)
        .args(["--rounds", "2", "--report-from", &p("bare.txt")])
        .args(["--report-from", &p("bare.txt")])
        .args(["--out", &p("pooled"), "--hugepages"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&r.stdout);
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("pooled/results.json")).unwrap())
            .unwrap();
    let mut rounds: Vec<u32> = doc.cells.iter().map(|c| c.round).collect();
    rounds.sort();
    assert_eq!(rounds, [2, 2, 2, 5, 5, 5], "{table}");
    // Cells that carry no provenance: the --hugepages given again is the
    // report's, and the table says the rest was not recorded.
    assert!(doc.provenance.hugepages, "{table}");
    assert!(
        table.contains("code and host: not recorded with these cells; guest RAM: 2 MiB huge pages"),
        "{table}"
    );
    let single: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("report/results.json")).unwrap())
            .unwrap();
    assert!(!single.provenance.hugepages);
    assert!(table.contains("== round by round"), "{table}");
    let q = table
        .lines()
        .skip_while(|l| !l.contains("== round by round"))
        .find(|l| l.contains("qemu+stock"))
        .unwrap();
    assert!(q.contains("0.25, 0.25 [0.25, 0.25], 2/2"), "{q}");
}

/// Waits until `d/out/results.partial.jsonl` holds its header and `n` cells.
fn wait_for_cells(d: &Path, n: usize) {
    let f = d.join("out/results.partial.jsonl");
    for _ in 0..1200 {
        let lines = std::fs::read_to_string(&f)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines > n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{} never held {n} cells", f.display());
}

/// Waits for `child` at most a minute.
fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..1200 {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the tool did not end within a minute");
}

/// A SIGKILL mid-run leaves results.partial.jsonl, synced cell by cell,
/// which `--report-from` (given the directory) draws a table from,
/// saying it is partial.
#[test]
fn a_run_killed_mid_way_leaves_a_partial_file_report_from_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    qmp_broker(&d.join("qmp"));
    let mut child = bench_run(d, &root, &qemu, 8)
        .arg("--no-bind")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_cells(d, 2);
    child.kill().unwrap();
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), None, "killed, not ended");
    assert!(!d.join("out/results.json").exists());
    let r = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .args([
            "--device",
            BDF,
            "--columns",
            "qemu+stock,no-viommu",
            "--bs",
            "4k",
        ])
        .args(["--rounds", "8", "--report-from"])
        .arg(d.join("out"))
        .arg("--out")
        .arg(d.join("report"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("cell(s) that finished of the 16 its run planned")
            && stdout.contains("PARTIAL: "),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("qemu+stock") || l.starts_with("no-viommu")),
        "{stdout}"
    );
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("report/results.json")).unwrap())
            .unwrap();
    assert!(
        doc.cells.len() >= 2 && doc.interrupted,
        "{}",
        doc.cells.len()
    );
    assert!(
        doc.tool.starts_with("viommu-bench ") && doc.tool.ends_with(')'),
        "{}",
        doc.tool
    );
}

/// SIGHUP (an SSH session gone) stops the run as SIGTERM does, with its
/// terminal gone: stdout and stderr closed, the tool still writes its
/// results, and its last words go to hangup.log.
#[test]
fn sighup_with_the_terminal_gone_stops_the_run_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    qmp_broker(&d.join("qmp"));
    let mut child = bench_run(d, &root, &qemu, 8)
        .arg("--no-bind")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_cells(d, 1);
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The terminal is gone: nobody reads what it writes.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(130), "{status:?}");
    let doc: Results =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap())
            .unwrap();
    assert!(doc.interrupted && !doc.cells.is_empty());
    let log = std::fs::read_to_string(d.join("out/hangup.log")).unwrap();
    assert!(
        log.contains("wrote ") && log.contains("results.json"),
        "{log}"
    );
}

/// The kernel's part for a drive bound by hand: an unbind from vfio-pci
/// leaves it driverless, a probe with no override gives it to nvme.
fn fake_kernel(root: &Path) -> std::thread::JoinHandle<()> {
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let dev = root.join(format!("sys/bus/pci/devices/{BDF}"));
        let unbind = root.join("sys/bus/pci/drivers/vfio-pci/unbind");
        let probe = root.join("sys/bus/pci/drivers_probe");
        for _ in 0..1000 {
            if unbind.exists() {
                let _ = std::fs::remove_file(&unbind);
                let _ = std::fs::remove_file(dev.join("driver"));
            }
            let over = std::fs::read_to_string(dev.join("driver_override")).unwrap_or_default();
            if probe.exists() && over.trim().is_empty() {
                std::fs::create_dir_all(root.join("sys/bus/pci/drivers/nvme")).unwrap();
                symlink("../../../../bus/pci/drivers/nvme", dev.join("driver")).unwrap();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    })
}

/// After a SIGKILL the drive stays on vfio-pci with the state file: a
/// rerun names it and offers `--restore` instead of taking it, and
/// `--restore` gives it back to the driver the state file names.
#[test]
fn after_a_kill_a_rerun_names_the_drive_and_restore_gives_it_back() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    // What a run killed after binding leaves (pid 999999 runs no more).
    file(
        &root,
        &format!("run/viommu-bench/{BDF}.json"),
        &format!(
            r#"{{"bdf":"{BDF}","original_driver":"nvme","driver_override":null,"bound_at_unix":1700000000,"pid":999999}}"#
        ),
    );
    let o = bench_run(d, &root, &qemu, 1).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{BDF} is still on vfio-pci, left there by viommu-bench (pid 999999"
        )) && stderr.contains(&format!("`viommu-bench --restore {BDF}`")),
        "{stderr}"
    );
    let k = fake_kernel(&root);
    let o = Command::new(env!("CARGO_BIN_EXE_viommu-bench"))
        .args(["--restore", BDF, "--root"])
        .arg(&root)
        .output()
        .unwrap();
    k.join().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains(&format!("{BDF} is back on nvme")),
        "{stdout}"
    );
    assert!(
        stdout.contains("/sys/bus/pci/drivers/vfio-pci/unbind"),
        "{stdout}"
    );
    let link = std::fs::read_link(root.join(format!("sys/bus/pci/devices/{BDF}/driver"))).unwrap();
    assert!(link.ends_with("nvme"), "{}", link.display());
    assert!(!root.join(format!("run/viommu-bench/{BDF}.json")).exists());
}

/// A VMM stuck in the kernel keeps the drive: the unbind from vfio-pci
/// blocks (here a FIFO nobody reads). results.json is written before the
/// drive is given back, and the give-back stops waiting, naming the
/// holder and `--restore`.
#[test]
fn a_stuck_unbind_does_not_keep_the_results() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (root, qemu) = fake_host(d);
    qmp_broker(&d.join("qmp"));
    // The drive on nvme, with a namespace; the tool as root.
    let dev = root.join(format!("sys/bus/pci/devices/{BDF}"));
    std::fs::remove_file(dev.join("driver")).unwrap();
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers/nvme")).unwrap();
    symlink("../../../../bus/pci/drivers/nvme", dev.join("driver")).unwrap();
    std::fs::create_dir_all(dev.join("nvme/nvme0/nvme0n1")).unwrap();
    file(&root, "sys/block/nvme0n1/queue/logical_block_size", "512\n");
    // The namespace's node, for the exclusive open of the in-use check.
    file(&root, "dev/nvme0n1", "");
    file(
        &root,
        "proc/self/status",
        "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
    );
    // A stuck VMM holds the group.
    file(&root, "proc/4242/comm", "vmm\n");
    std::fs::create_dir_all(root.join("proc/4242/fd")).unwrap();
    symlink("/dev/vfio/3", root.join("proc/4242/fd/9")).unwrap();
    let fifo = root.join("sys/bus/pci/drivers/vfio-pci/unbind");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // The kernel's bind: nvme's unbind and a probe with the override set.
    let k = {
        let root = root.clone();
        std::thread::spawn(move || {
            let dev = root.join(format!("sys/bus/pci/devices/{BDF}"));
            for _ in 0..1000 {
                let over = std::fs::read_to_string(dev.join("driver_override")).unwrap_or_default();
                if root.join("sys/bus/pci/drivers_probe").exists() && over.trim() == "vfio-pci" {
                    std::fs::remove_file(dev.join("driver")).unwrap();
                    symlink("../../../../bus/pci/drivers/vfio-pci", dev.join("driver")).unwrap();
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
    };
    let o = bench_run(d, &root, &qemu, 1)
        .args(["--restore-timeout", "1"])
        .output()
        .unwrap();
    k.join().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(d.join("out/results.json").is_file(), "{stderr}");
    assert!(
        stderr.contains("the unbind from vfio-pci did not return within 1 s: vmm (pid 4242)")
            && stderr.contains(&format!("`viommu-bench --restore {BDF}`")),
        "{stderr}"
    );
    assert!(root.join(format!("run/viommu-bench/{BDF}.json")).is_file());
    let _ = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
}
