use super::*;
use crate::plan::{
    breakdown_phase_name, count_phase_name, is_count_phase, is_untimed_phase, phase_kind,
    run_phase_name, PhaseKind,
};
use crate::setup::image::INIT_SCRIPT;

#[test]
fn parses_markers() {
    assert_eq!(
        parse_line("@@LAB-PHASE@@ begin randread-4k\r").unwrap(),
        Some(Marker::PhaseBegin("randread-4k".into()))
    );
    assert_eq!(
        parse_line("[   3.1] nvme nvme0: ok@@LAB-PHASE@@ end verify-4k").unwrap(),
        Some(Marker::PhaseEnd("verify-4k".into()))
    );
    assert_eq!(
        parse_line("@@LAB-GUEST-DONE@@ rc=1").unwrap(),
        Some(Marker::Done(1))
    );
    assert_eq!(
        parse_line("@@LAB-PROGRESS@@ 1200 34").unwrap(),
        Some(Marker::Progress(1200, 34))
    );
    assert_eq!(parse_line("Linux version 6.1").unwrap(), None);
    let fio = r#"@@LAB-GUEST@@ {"event":"fio","phase":"randread-4k","numjobs":1,"error":0,"read_kib":32768,"read_bw_kib":4096,"read_iops":1024,"read_ms":8000,"write_kib":0,"write_bw_kib":0,"write_iops":0,"write_ms":0,"counters":{"iommu-dma-pool/hits":8190,"iommu-dma-pool/misses":2}}"#;
    match parse_line(fio).unwrap() {
        Some(Marker::Fio(r)) => {
            assert_eq!(r.read_iops, 1024);
            assert_eq!(r.counter_sum("/hits"), 8190);
            assert_eq!(r.hit_rate("iommu-dma-pool"), Some(8190.0 / 8192.0));
            assert_eq!(r.hit_rate("iommu-dma-reuse"), None);
            assert_eq!(r.iops(), 1024);
        }
        other => panic!("{other:?}"),
    }
    // The lab's guest sends no numjobs: it defaults to 1.
    let lab = r#"@@LAB-GUEST@@ {"event":"fio","phase":"randread-4k","error":0,"read_kib":1,"read_bw_kib":1,"read_iops":1,"read_ms":1,"write_kib":0,"write_bw_kib":0,"write_iops":0,"write_ms":0,"counters":{}}"#;
    assert!(matches!(parse_line(lab).unwrap(), Some(Marker::Fio(r)) if r.numjobs == 1));
    let boot = r#"@@LAB-GUEST@@ {"event":"boot","kernel":"6.1.0","nvme":true,"iommu_groups":"DMA:1","cmdline":"x"}"#;
    assert!(matches!(parse_line(boot).unwrap(), Some(Marker::Boot(b)) if b.nvme));
    let boot = r#"@@LAB-GUEST@@ {"event":"boot","kernel":"6.12","nvme":true,"max_hw_kb":256,"iommu_groups":"DMA-FQ:1","cmdline":"x"}"#;
    assert!(matches!(parse_line(boot).unwrap(), Some(Marker::Boot(b)) if b.max_hw_kb == Some(256)));
    // --guest-hugepages: the pages the guest reserved.
    let boot =
        r#"@@LAB-GUEST@@ {"event":"boot","kernel":"6.12","nvme":true,"hugebuf":18,"cmdline":"x"}"#;
    assert!(matches!(parse_line(boot).unwrap(), Some(Marker::Boot(b)) if b.hugebuf == Some(18)));
    assert_eq!(
        parse_line(r#"@@LAB-GUEST@@ {"event":"error","message":"fio verify-4k exited 1"}"#)
            .unwrap(),
        Some(Marker::Error("fio verify-4k exited 1".into()))
    );
    let attack = r#"@@LAB-GUEST@@ {"event":"attack","name":"msix-pba","ok":true,"ops":120000,"seconds":40,"detail":"BAR0+0x3000"}"#;
    assert_eq!(
        parse_line(attack).unwrap(),
        Some(Marker::Attack(AttackRecord {
            name: "msix-pba".into(),
            ok: true,
            ops: 120000,
            seconds: 40,
            detail: "BAR0+0x3000".into(),
        }))
    );
    let failed = r#"@@LAB-GUEST@@ {"event":"attack","name":"avail-index","ok":false,"detail":"no /dev/mem"}"#;
    assert!(matches!(parse_line(failed).unwrap(), Some(Marker::Attack(a)) if !a.ok && a.ops == 0));
}

#[test]
fn rejects_bad_markers() {
    assert!(parse_line("@@LAB-GUEST@@ {not json").is_err());
    assert!(parse_line("@@LAB-GUEST-DONE@@ rc=x").is_err());
    assert!(parse_line("@@LAB-PHASE@@ middle x").is_err());
    assert!(parse_line("@@LAB-PROGRESS@@ 1").is_err());
    assert!(parse_line(r#"@@LAB-GUEST@@ {"event":"attack","ops":1}"#).is_err());
    assert!(parse_line(r#"@@LAB-GUEST@@ {"event":"party"}"#).is_err());
}

#[test]
fn phase_names() {
    assert_eq!(phase_kind("verify-mixed"), Some(PhaseKind::Verify));
    assert_eq!(
        phase_kind("randread-4k"),
        Some(PhaseKind::Run {
            rw: "randread".into(),
            bs: "4k".into(),
            numjobs: 1
        })
    );
    assert_eq!(
        phase_kind("randrw-128k-j2"),
        Some(PhaseKind::Run {
            rw: "randrw".into(),
            bs: "128k".into(),
            numjobs: 2
        })
    );
    assert_eq!(
        phase_kind("randread-buffered-128k-j2"),
        Some(PhaseKind::Run {
            rw: "randread-buffered".into(),
            bs: "128k".into(),
            numjobs: 2
        })
    );
    assert_eq!(phase_kind("randread-4k-x2"), None);
    assert_eq!(phase_kind("randread-4k-j2x"), None);
    assert_eq!(phase_kind("idle"), None);
    assert_eq!(
        phase_kind("count-randread-4k-j2"),
        Some(PhaseKind::Count {
            run: "randread-4k-j2".into()
        })
    );
    assert_eq!(phase_kind("count-verify-4k"), None);
    assert_eq!(phase_kind("count-idle"), None);
    assert_eq!(count_phase_name("read-64k"), "count-read-64k");
    assert!(is_count_phase(&count_phase_name("read-64k")));
    assert!(!is_count_phase("randread-4k"));
    assert_eq!(
        phase_kind("breakdown-randread-128k-j2"),
        Some(PhaseKind::Breakdown {
            run: "randread-128k-j2".into()
        })
    );
    assert_eq!(phase_kind("breakdown-verify-4k"), None);
    assert!(is_untimed_phase(&breakdown_phase_name("read-4k")));
    assert!(is_untimed_phase("count-read-4k") && !is_untimed_phase("read-4k"));
    assert_eq!(run_phase_name("randread", "4k", 1), "randread-4k");
    assert_eq!(run_phase_name("read", "64k", 4), "read-64k-j4");
}

#[test]
fn the_guest_reports_its_fio_and_busybox() {
    // The image's programs as the guest init asks them, faked on PATH.
    let d = tempfile::tempdir().unwrap();
    let fake = |name: &str, body: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    fake("fio", r#"[ "$1" = --version ] && echo fio-3.39"#);
    fake(
        "busybox",
        "echo 'BusyBox v1.37.0 (Debian 1:1.37.0-6+b9) multi-call binary.'; echo 'Usage: busybox'",
    );
    let start = INIT_SCRIPT
        .find("tool_versions() {")
        .expect("tool_versions in guest/init");
    let end = INIT_SCRIPT[start..]
        .find("\n# end of tool_versions")
        .expect("end marker")
        + start;
    let script = format!("{}\ntool_versions\n", &INIT_SCRIPT[start..end]);
    let path = format!(
        "{}:{}",
        d.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let fields = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        fields,
        r#""fio":"fio-3.39","busybox":"v1.37.0 (Debian 1:1.37.0-6+b9)""#
    );
    // ... into the boot record the cell keeps.
    let line = format!(
        r#"@@LAB-GUEST@@ {{"event":"boot",{fields},"kernel":"6.1.0","nvme":true,"iommu_groups":"DMA:1","cmdline":"x"}}"#
    );
    match parse_line(&line).unwrap() {
        Some(Marker::Boot(b)) => {
            assert_eq!(b.fio.as_deref(), Some("fio-3.39"));
            assert_eq!(b.busybox.as_deref(), Some("v1.37.0 (Debian 1:1.37.0-6+b9)"));
        }
        other => panic!("{other:?}"),
    }
    assert!(INIT_SCRIPT.contains(r#"emit "{\"event\":\"boot\",$(tool_versions),"#));
}

/// The guest init's `min_bs` and `mixed_bsrange` functions, run by sh.
fn init_fn(call: &str) -> String {
    let start = INIT_SCRIPT
        .find("min_bs() {")
        .expect("min_bs in guest/init");
    let end = INIT_SCRIPT[start..]
        .find("\n# end of block-size helpers")
        .expect("end marker")
        + start;
    let script = format!("{}\n{call}\n", &INIT_SCRIPT[start..end]);
    let o = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {o:?}");
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

#[test]
fn the_guests_smallest_block_is_the_namespaces_logical_block() {
    let d = tempfile::tempdir().unwrap();
    let sysfs = d.path().join("logical_block_size");
    let f = sysfs.display();
    // The guest's own sysfs first, then lab.lbs from the host, then 512.
    std::fs::write(&sysfs, "4096\n").unwrap();
    assert_eq!(init_fn(&format!("min_bs {f} 512")), "4096");
    assert_eq!(init_fn("min_bs /nonexistent 4096"), "4096");
    assert_eq!(init_fn("min_bs /nonexistent ''"), "512");
    // fio mode verifies from the smallest block up; mixed from 4k
    // (or the logical block, when larger).
    assert_eq!(init_fn("mixed_bsrange fio 4096"), "4096-256k");
    assert_eq!(init_fn("mixed_bsrange fio 512"), "512-256k");
    assert_eq!(init_fn("mixed_bsrange mixed 512"), "4096-256k");
    assert_eq!(init_fn("mixed_bsrange mixed 8192"), "8192-256k");
    // Preconditioning: the span, capped at the namespace; reads inside it.
    assert_eq!(init_fn("precondition_bytes span 4096 1048576"), "4096");
    assert_eq!(init_fn("precondition_bytes span 4096 1024"), "1024");
    assert_eq!(init_fn("precondition_bytes full 4096 1024"), "1024");
    assert_eq!(init_fn("precondition_bytes none 4096 1024"), "0");
    // Job k starts at k * stride: the last job ends at the span's end.
    assert_eq!(init_fn("read_size span 1000 1 8"), "1000");
    assert_eq!(init_fn("read_size span 1000 3 8"), "984");
    assert_eq!(init_fn("read_size span 16 3 8"), "5");
    assert_eq!(init_fn("read_size full 1000 3 8"), "");
    assert_eq!(init_fn("read_size none 1000 1 8"), "");
    // No fixed 512 left in what the guest runs.
    assert!(!INIT_SCRIPT.contains("=512-"), "a fixed 512-byte bsrange");
}

/// The guest init's `host_go` run by busybox sh (the guest's shell:
/// its `read -t`) with `input` on stdin; its exit status.
fn host_go(input: &str) -> i32 {
    let start = INIT_SCRIPT
        .find("host_go() {")
        .expect("host_go in guest/init");
    let end = INIT_SCRIPT[start..].find("\n}\n").expect("its end") + start + 3;
    let script = format!("{}host_go\n", &INIT_SCRIPT[start..end]);
    let mut child = std::process::Command::new("busybox")
        .args(["sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("busybox, the guest's shell (apt-get install busybox-static)");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    drop(child.stdin.take());
    child.wait().unwrap().code().unwrap()
}

#[test]
fn a_counting_run_starts_on_the_hosts_go_only() {
    assert_eq!(host_go("go\n"), 0);
    assert_eq!(host_go("go\r\n"), 0, "a serial line may end in CR LF");
    assert_eq!(host_go("skip\n"), 1);
    assert_eq!(host_go("gone\n"), 1);
    assert_eq!(host_go(""), 1, "no answer");
    // The counting runs are the measured runs again, gated, after
    // everything else and only after a clean run.
    let tail = &INIT_SCRIPT[INIT_SCRIPT
        .find("\tmeasured_runs \"\" \"\" 0")
        .expect("the measured runs")..];
    let idle = tail.find("idle_phase").unwrap();
    let count = tail
        .find("[ $rc -eq 0 ] && measured_runs count- \"$count\" 1")
        .expect("the counting runs");
    assert!(idle < count, "{tail}");
    assert!(INIT_SCRIPT.contains("lab.count=*) count=${arg#*=} ;;"));
}

/// The guest init's `fio_run` of a counting run (fio_gate=1), run by
/// busybox sh with `answer` on the console and a fake fio that notes
/// it ran; the console output, and whether fio ran.
fn gated_run(answer: &str) -> (String, bool) {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().display().to_string();
    let start = INIT_SCRIPT.find("emit() {").expect("emit in guest/init");
    let end = INIT_SCRIPT
        .find("# idle_phase:")
        .expect("idle_phase after fio_run");
    // The init's scratch files, in the test's directory.
    let fns = INIT_SCRIPT[start..end].replace("/tmp/", &format!("{dir}/"));
    // fio's JSON output (Debian 12's fio 3.33), after the arguments it
    // was given.
    std::fs::write(
        d.path().join("fio.json"),
        crate::run::fio_json::tests::fixture("fio-3.33-randread-j1"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("fio"),
        format!("#!/bin/sh\necho \"$*\" >{dir}/fio.ran\ncat {dir}/fio.json\n"),
    )
    .unwrap();
    let script = format!(
        "PATH={dir}:$PATH dev=/dev/null verify=8M rc=0 counters=\n{fns}\nfio_gate=1\nfio_run count-randread-4k 1 --rw=randread --bs=4k\n"
    );
    std::fs::set_permissions(
        d.path().join("fio"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut child = std::process::Command::new("busybox")
        .args(["sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("busybox, the guest's shell (apt-get install busybox-static)");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), answer.as_bytes()).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let args = std::fs::read_to_string(d.path().join("fio.ran")).ok();
    if let Some(a) = &args {
        assert!(
            a.contains("--output-format=json --percentile_list=50:99:99.9"),
            "{a}"
        );
        assert!(a.contains("--group_reporting"), "{a}");
    }
    (String::from_utf8(out.stdout).unwrap(), args.is_some())
}

#[test]
fn the_guest_runs_a_counting_run_after_the_hosts_go_and_not_before() {
    let (out, ran) = gated_run("go\n");
    assert!(ran, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "@@LAB-PHASE@@ begin count-randread-4k", "{out}");
    assert_eq!(lines[1], "@@LAB-PHASE@@ end count-randread-4k", "{out}");
    // fio's JSON in chunks, then the record: the host's figures.
    let mut json = crate::run::fio_chunks::Assembler::default();
    for l in &lines[2..lines.len() - 1] {
        match parse_line(l).unwrap() {
            Some(Marker::FioChunk(c)) => json.chunk(c),
            other => panic!("{other:?} in {out}"),
        }
    }
    match parse_line(lines[lines.len() - 1]).unwrap() {
        Some(Marker::Fio(r)) => {
            let r = json.complete(r).unwrap();
            assert_eq!(
                (r.phase.as_str(), r.read_iops, r.read_kib),
                ("count-randread-4k", 8207, 65692)
            );
            assert_eq!(r.read_lat.unwrap().p99_ns, Some(2932736));
        }
        other => panic!("{other:?} in {out}"),
    }
    let (out, ran) = gated_run("skip\n");
    assert!(!ran, "fio ran without the host's go: {out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "@@LAB-PHASE@@ begin count-randread-4k",
            "@@LAB-PHASE@@ end count-randread-4k"
        ]
    );
}

#[test]
fn init_script_speaks_the_protocol() {
    for m in [
        "@@LAB-PHASE@@ begin",
        "@@LAB-GUEST@@",
        "@@LAB-GUEST-DONE@@ rc=",
        "@@LAB-PROGRESS@@",
    ] {
        assert!(INIT_SCRIPT.contains(m), "{m}");
    }
}
