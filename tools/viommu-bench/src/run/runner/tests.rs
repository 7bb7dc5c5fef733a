use super::*;
use crate::columns::Launch;

fn script_launch(dir: &Path, body: &str) -> Launch {
    let p = dir.join("fake-vmm.sh");
    std::fs::write(&p, body).unwrap();
    Launch {
        program: "/bin/sh".into(),
        args: vec![p.to_string_lossy().into_owned()],
        trace: None,
        qmp: None,
        monitor: None,
        api_socket: None,
        kernel: None,
        counting: Counting::None,
        breakdown: false,
    }
}

fn ctx<'a>(dir: &'a Path, rx: watch::Receiver<bool>, stall: u64) -> CellCtx<'a> {
    CellCtx {
        stall: Duration::from_secs(stall),
        bound: Duration::from_secs(60),
        log_dir: dir,
        cancel: rx,
        kvm_exits: None,
        breakdown: None,
        stuck: None,
        placement: None,
    }
}

const GOOD: &str = r#"echo 'Linux booting'
echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1","nvme":true,"iommu_groups":"DMA:1","cmdline":"x"}'
echo '@@LAB-PHASE@@ begin verify-4k'
echo '@@LAB-PHASE@@ end verify-4k'
echo '@@LAB-GUEST@@ {"event":"fio","phase":"verify-4k","error":0,"read_kib":8192,"read_bw_kib":1,"read_iops":1,"read_ms":1,"write_kib":8192,"write_bw_kib":1,"write_iops":1,"write_ms":1,"counters":{}}'
echo '@@LAB-PHASE@@ begin randread-4k'
echo '@@LAB-PROGRESS@@ 100 0'
echo '@@LAB-PHASE@@ end randread-4k'
echo '@@LAB-GUEST@@ {"event":"fio","phase":"randread-4k","error":0,"read_kib":40960,"read_bw_kib":4096,"read_iops":1024,"read_ms":10000,"write_kib":0,"write_bw_kib":0,"write_iops":0,"write_ms":0,"counters":{}}'
echo '@@LAB-GUEST-DONE@@ rc=0'
echo 'vmm log line' >&2
"#;

#[tokio::test]
async fn a_good_guest() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    let l = script_launch(d.path(), GOOD);
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(&l, "fake", 0, &mut ctx(d.path(), rx, 15), &p)
        .await
        .unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    assert_eq!(
        r.phases["randread-4k"].fio.as_ref().unwrap().read_iops,
        1024
    );
    assert_eq!(r.vmm_rc, Some(0));
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(log.contains("[vmm] vmm log line") && log.contains("Linux booting"));
}

#[tokio::test]
async fn the_next_cell_waits_for_a_stuck_vmm_and_stops_if_it_stays() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    let l = script_launch(d.path(), GOOD);
    let p = Progress::new(2, 1, Duration::from_secs(10));
    // A VMM that leaves while the next cell waits: the cell runs.
    let mut c = ctx(d.path(), rx.clone(), 15);
    let gone = tokio::process::Command::new("true").spawn().unwrap();
    c.stuck = Some(StuckVmm::new("a round 1".into(), gone, Instant::now()));
    let r = run_cell(&l, "fake", 0, &mut c, &p).await.unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    assert!(c.stuck.is_none());
    // One that stays past STUCK_WAIT: the cell is not run, the error
    // names the cell whose VMM holds the device.
    let stays = tokio::process::Command::new("sleep")
        .arg("30")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    c.stuck = Some(StuckVmm::new("b round 1".into(), stays, Instant::now()));
    let e = run_cell(&l, "fake", 1, &mut c, &p).await.unwrap_err();
    assert!(
        matches!(&e, RunError::StuckVmm { cell, .. } if cell == "b round 1"),
        "{e}"
    );
    assert!(e.to_string().contains("holds the device"), "{e}");
}

#[tokio::test]
async fn a_hostile_guests_attacks_and_the_vmms_footprint_are_kept() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    // Runs long enough for a memory sample; logs a flood cut by the
    // rate limiter while the guest runs and one error after its end.
    let body = r#"echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1","nvme":true,"iommu_groups":"DMA:1","cmdline":"x"}'
echo '@@LAB-PHASE@@ begin verify-mixed'
echo '@@LAB-PHASE@@ end verify-mixed'
echo '@@LAB-GUEST@@ {"event":"fio","phase":"verify-mixed","error":0,"read_kib":8192,"read_bw_kib":1,"read_iops":1,"read_ms":1,"write_kib":8192,"write_bw_kib":1,"write_iops":1,"write_ms":1,"counters":{}}'
echo 'WARN driver wrote a read-only config field' >&2
echo 'WARN guest-triggered warnings dropped (more than 10 a second) dropped=5000' >&2
echo 'ERROR VFIO MSI route: EINVAL' >&2
echo '@@LAB-GUEST@@ {"event":"attack","name":"viommu-config","ok":true,"ops":5010,"seconds":2,"detail":"BAR4+0x2000"}'
echo '@@LAB-GUEST@@ {"event":"attack","name":"avail-index","ok":false,"detail":"no /dev/mem"}'
sleep 2.5
echo '@@LAB-GUEST-DONE@@ rc=0'
echo 'ERROR release: VFIO_GROUP_UNSET_CONTAINER failed' >&2
"#;
    let l = script_launch(d.path(), body);
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(&l, "fake", 0, &mut ctx(d.path(), rx, 15), &p)
        .await
        .unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    let names: Vec<_> = r
        .attacks
        .iter()
        .map(|a| (a.name.as_str(), a.ok, a.ops))
        .collect();
    assert_eq!(
        names,
        [("viommu-config", true, 5010), ("avail-index", false, 0)]
    );
    // The cell's JSON (the lab's @@LAB-CELL@@ line) carries both.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["attacks"][0]["ops"], 5010, "{json}");
    assert_eq!(json["footprint"]["rate_limited_lines"], 1, "{json}");
    let f = r.footprint.expect("a footprint");
    assert_eq!(
        (f.log_lines, f.rate_limited_lines, f.errors_after_done),
        (4, 1, 1),
        "{f:?}"
    );
    assert!(f.samples >= 1 && f.peak_own_rss_kib > 0, "{f:?}");
}

#[tokio::test]
async fn a_hung_guest_is_killed_and_reported() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    // Boots, starts a phase, repeats the same I/O count, never finishes.
    let body = r#"echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1","nvme":true,"iommu_groups":"","cmdline":""}'
echo '@@LAB-PHASE@@ begin randread-4k'
while :; do echo '@@LAB-PROGRESS@@ 5 0'; sleep 0.2; done
"#;
    let l = script_launch(d.path(), body);
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let mut c = ctx(d.path(), rx, 1);
    c.stall = Duration::from_millis(800);
    let t = Instant::now();
    let r = run_cell(&l, "fake", 0, &mut c, &p).await.unwrap();
    assert!(
        matches!(&r.status, CellStatus::Hung { phase, .. } if phase == "randread-4k"),
        "{:?}",
        r.status
    );
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_hung_qemu_guest_says_where_its_vcpus_are() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    let started = d.path().join("started");
    let body = format!(
        r#"touch {}
echo '@@LAB-GUEST@@ {{"event":"boot","kernel":"6.1","nvme":true,"iommu_groups":"","cmdline":""}}'
echo '@@LAB-PHASE@@ begin randread-4k'
while :; do echo '@@LAB-PROGRESS@@ 5 0'; sleep 0.2; done
"#,
        started.display()
    );
    let mut l = script_launch(d.path(), &body);
    let mon = d.path().join("q.mon");
    l.monitor = Some(mon.clone());
    let _server = crate::run::qmp::tests::serve_after(
        &mon,
        Some(started),
        Some(crate::run::qmp::tests::GREETING),
        |cmd, _| {
            Some(match cmd {
                    "query-cpus-fast" => r#"{"return": [{"cpu-index": 0}]}"#.into(),
                    "human-monitor-command" => {
                        r#"{"return": "RIP=0000000000401000 RSP=00007ffc00000000 RFL=00000002 CPL=3 HLT=0"}"#.into()
                    }
                    _ => r#"{"return": {}}"#.into(),
                })
        },
    );
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let mut c = ctx(d.path(), rx, 1);
    c.stall = Duration::from_millis(800);
    let r = run_cell(&l, "qemu", 0, &mut c, &p).await.unwrap();
    assert!(
        matches!(
            &r.status,
            CellStatus::Hung {
                device_owes: false,
                ..
            }
        ),
        "{:?}",
        r.status
    );
    let w = r.warnings.join("\n");
    assert!(
        w.contains("state at the hang: stock QEMU: ")
            && w.contains("vCPUs: vCPU0 at 0x401000 (interrupts off)"),
        "{w}"
    );
}

#[tokio::test]
async fn failures_are_named() {
    let d = tempfile::tempdir().unwrap();
    let (_tx, rx) = watch::channel(false);
    let body = r#"echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1","nvme":true,"iommu_groups":"","cmdline":""}'
echo '@@LAB-GUEST@@ {"event":"error","message":"fio verify-4k exited 1: verify failed"}'
echo '@@LAB-GUEST-DONE@@ rc=1'
"#;
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(
        &script_launch(d.path(), body),
        "fake",
        0,
        &mut ctx(d.path(), rx.clone(), 15),
        &p,
    )
    .await
    .unwrap();
    assert!(
        matches!(
            &r.status,
            CellStatus::Failed {
                verify_failed: true,
                ..
            }
        ),
        "{:?}",
        r.status
    );
    // A kernel with NVMe as a module: booted, no NVMe, the options named.
    let body = r#"echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.12.48+deb13-amd64","nvme":false,"iommu_groups":"","cmdline":""}'
echo '@@LAB-GUEST-DONE@@ rc=1'
"#;
    let r = run_cell(
        &script_launch(d.path(), body),
        "fake",
        0,
        &mut ctx(d.path(), rx.clone(), 15),
        &p,
    )
    .await
    .unwrap();
    assert!(
        matches!(&r.status, CellStatus::Failed { reason, .. }
                if reason.contains("6.12.48+deb13-amd64") && reason.contains("CONFIG_BLK_DEV_NVME") && reason.contains("loads no modules")),
        "{:?}",
        r.status
    );
    let r = run_cell(
        &script_launch(d.path(), "echo booting; exit 3\n"),
        "fake",
        0,
        &mut ctx(d.path(), rx, 15),
        &p,
    )
    .await
    .unwrap();
    assert!(
        matches!(&r.status, CellStatus::Failed { reason, .. } if reason.contains("exited 3")),
        "{:?}",
        r.status
    );
    // A good run whose VMM then dies (a seccomp kill: 159) failed; a
    // rebooting guest's VMM may exit 3 or 4.
    for (code, ok) in [(159, false), (3, true), (0, true)] {
        let r = run_cell(
            &script_launch(d.path(), &format!("{GOOD}exit {code}\n")),
            "fake",
            0,
            &mut ctx(d.path(), watch::channel(false).1, 15),
            &p,
        )
        .await
        .unwrap();
        assert_eq!(
            r.status == CellStatus::Ok,
            ok,
            "exit {code}: {:?}",
            r.status
        );
        if !ok {
            assert!(
                matches!(&r.status, CellStatus::Failed { reason, .. } if reason.contains("the VMM exited 159")),
                "{:?}",
                r.status
            );
        }
    }
}

/// A fake stock QEMU for a counting guest: its QMP socket (served by
/// the test) and trace file in `dir`, and a script that runs a timed
/// phase, then the counting phases `counts`, answering them as the
/// guest's init does. Trace lines are written only while the fake's
/// `virtio_iommu_map` is on (a file beside the trace says so), and, with
/// `log_backend`, one line per QMP command once the canary is on, as
/// QEMU's `log` backend does; without it nothing is ever written.
fn counting_qemu(
    dir: &Path,
    log_backend: bool,
    counts: &[&str],
) -> (Launch, tokio::task::JoinHandle<Vec<serde_json::Value>>) {
    let trace = dir.join("q.trace");
    let on = dir.join("q.trace.on");
    let qmp = dir.join("q.qmp");
    let (t, o) = (trace.clone(), on.clone());
    let canary = std::sync::atomic::AtomicBool::new(false);
    let started = dir.join("q.started");
    let server = crate::run::qmp::tests::serve_after(
        &qmp,
        Some(started.clone()),
        Some(crate::run::qmp::tests::GREETING),
        move |cmd, args| {
            use std::sync::atomic::Ordering::SeqCst;
            if log_backend && canary.load(SeqCst) {
                let mut f = std::fs::OpenOptions::new().append(true).open(&t).unwrap();
                writeln!(f, "4242@1700000000.000001:handle_qmp_command mon 0x55d0 req: {{\"execute\": \"{cmd}\"}}").unwrap();
            }
            if cmd == "trace-event-set-state" {
                let enable = args["enable"] == true;
                match args["name"].as_str() {
                    Some(crate::run::trace::CANARY) => canary.store(enable, SeqCst),
                    Some("virtio_iommu_map") if enable => std::fs::write(&o, "").unwrap(),
                    Some("virtio_iommu_map") => std::fs::remove_file(&o).unwrap(),
                    _ => {}
                }
            }
            Some(r#"{"return": {}}"#.into())
        },
    );
    let mut body = format!(
        r#"trace={} on={}
: >{}
{}
echo '@@LAB-GUEST@@ {{"event":"boot","kernel":"6.12","nvme":true,"iommu_groups":"DMA-FQ:1","cmdline":"lab.count=3"}}'
echo '@@LAB-PHASE@@ begin verify-4k'
echo '@@LAB-PHASE@@ end verify-4k'
echo '@@LAB-GUEST@@ {{"event":"fio","phase":"verify-4k","error":0,"read_kib":8192,"write_kib":8192,"read_iops":1,"write_iops":1}}'
io() {{ [ -n "$log" ] && [ -e "$on" ] && printf 'virtio_iommu_map domain=1
virtio_iommu_unmap domain=1
vfio_iommu_map_notify iommu map
vfio_iommu_map_notify iommu unmap
' >>"$trace"; }}
echo '@@LAB-PHASE@@ begin randread-4k'
sleep 0.2
io
echo '@@LAB-PHASE@@ end randread-4k'
echo '@@LAB-GUEST@@ {{"event":"fio","phase":"randread-4k","error":0,"read_kib":40960,"read_iops":1024,"read_ms":10000}}'
"#,
        trace.display(),
        on.display(),
        started.display(),
        if log_backend {
            r#"log=1; : >"$trace""#
        } else {
            "log="
        },
    );
    for c in counts {
        body += &format!(
            r#"echo '@@LAB-PHASE@@ begin count-{c}'
read -r ack
echo "ack=$ack"
if [ "$ack" = go ]; then
	io; io
	echo '@@LAB-PHASE@@ end count-{c}'
	echo '@@LAB-GUEST@@ {{"event":"fio","phase":"count-{c}","error":0,"read_kib":8,"read_iops":700,"read_ms":3000}}'
else
	echo '@@LAB-PHASE@@ end count-{c}'
fi
"#
        );
    }
    body += "echo '@@LAB-GUEST-DONE@@ rc=0'\n";
    let mut l = script_launch(dir, &body);
    l.trace = Some(trace);
    l.qmp = Some(qmp);
    l.counting = Counting::Pass;
    (l, server)
}

#[tokio::test]
async fn stock_qemu_is_counted_in_the_untimed_phase_only() {
    let d = tempfile::tempdir().unwrap();
    let (l, server) = counting_qemu(d.path(), true, &["randread-4k"]);
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(
        &l,
        "qemu",
        0,
        &mut ctx(d.path(), watch::channel(false).1, 15),
        &p,
    )
    .await
    .unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    // The timed phase: nothing on, nothing counted (not a zero).
    assert_eq!(r.phases["randread-4k"].device, None);
    // The counting phase: 2 I/Os' worth of events, nothing else (the
    // canary's lines are not events).
    let dev = r.phases["count-randread-4k"].device.unwrap();
    assert_eq!(
        (dev.map_requests, dev.unmap_requests, dev.vfio_calls),
        (2, 2, 4)
    );
    assert_eq!(r.counting, Some(Counting::Pass));
    assert!(r.lower_bound && r.warnings.is_empty(), "{:?}", r.warnings);
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(log.contains("ack=go"), "{log}");
    // Canary first, then the events on; at the end the events off.
    let cmds: Vec<(String, bool)> = server
        .await
        .unwrap()
        .iter()
        .filter(|v| v["execute"] == "trace-event-set-state")
        .map(|v| {
            (
                v["arguments"]["name"].as_str().unwrap().to_string(),
                v["arguments"]["enable"] == true,
            )
        })
        .collect();
    let want: Vec<(String, bool)> = std::iter::once((crate::run::trace::CANARY, true))
        .chain(crate::run::trace::EVENTS.iter().map(|e| (*e, true)))
        .chain(crate::run::trace::EVENTS.iter().map(|e| (*e, false)))
        .map(|(n, on)| (n.to_string(), on))
        .collect();
    assert_eq!(cmds, want);
}

#[tokio::test]
async fn a_qemu_without_the_log_backend_is_said_not_zero() {
    let d = tempfile::tempdir().unwrap();
    let (l, _server) = counting_qemu(d.path(), false, &["randread-4k", "randread-16k"]);
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(
        &l,
        "qemu",
        0,
        &mut ctx(d.path(), watch::channel(false).1, 15),
        &p,
    )
    .await
    .unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    assert!(
        matches!(&r.counting, Some(Counting::NoTrace { why }) if why.contains("no `log` trace backend")),
        "{:?}",
        r.counting
    );
    assert_eq!(r.phases["count-randread-4k"].device, None, "not a zero");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("no `log` trace backend")),
        "{:?}",
        r.warnings
    );
    // Once the trace is known empty, the next counting run is skipped.
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(log.contains("ack=go") && log.contains("ack=skip"), "{log}");
    assert!(
        !r.phases.contains_key("count-randread-16k")
            || r.phases["count-randread-16k"].fio.is_none()
    );
}

#[tokio::test]
async fn a_qemu_whose_qmp_does_not_answer_is_not_counted() {
    let d = tempfile::tempdir().unwrap();
    let (mut l, _server) = counting_qemu(d.path(), true, &["randread-4k"]);
    l.qmp = Some(d.path().join("elsewhere.qmp"));
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let r = run_cell(
        &l,
        "qemu",
        0,
        &mut ctx(d.path(), watch::channel(false).1, 15),
        &p,
    )
    .await
    .unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    assert!(
        matches!(&r.counting, Some(Counting::NotCounted { why }) if why.contains("elsewhere.qmp")),
        "{:?}",
        r.counting
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("QEMU's counting pass failed")),
        "{:?}",
        r.warnings
    );
    assert!(std::fs::read_to_string(&r.log)
        .unwrap()
        .contains("ack=skip"));
}

#[tokio::test]
async fn a_breakdown_that_cannot_record_is_skipped_and_said() {
    let d = tempfile::tempdir().unwrap();
    let body = format!(
        r#"{}echo '@@LAB-PHASE@@ begin breakdown-randread-4k'
read -r ack
echo "ack=$ack"
echo '@@LAB-PHASE@@ end breakdown-randread-4k'
echo '@@LAB-GUEST-DONE@@ rc=0'
"#,
        GOOD.replace("echo '@@LAB-GUEST-DONE@@ rc=0'\n", "")
    );
    let mut l = script_launch(d.path(), &body);
    l.breakdown = true;
    // A tracefs without instances: nothing can be recorded.
    let s = crate::run::host_trace::Settings {
        tracefs: d.path().join("no-tracefs"),
        ..crate::run::host_trace::Settings::new(2)
    };
    let p = Progress::new(1, 1, Duration::from_secs(10));
    let (_tx, rx) = watch::channel(false);
    let mut c = ctx(d.path(), rx, 15);
    c.breakdown = Some(&s);
    let r = run_cell(&l, "ours", 0, &mut c, &p).await.unwrap();
    assert_eq!(r.status, CellStatus::Ok, "{r:#?}");
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(log.contains("ack=skip"), "{log}");
    assert!(
        r.warnings.iter().any(
            |w| w.starts_with("breakdown-randread-4k: not recorded: --breakdown: cannot write")
        ),
        "{:?}",
        r.warnings
    );
    assert!(r
        .phases
        .get("breakdown-randread-4k")
        .is_none_or(|p| p.breakdown.is_none()));
}

#[tokio::test]
async fn interrupt_stops_the_vm() {
    let d = tempfile::tempdir().unwrap();
    let (tx, rx) = watch::channel(false);
    let l = script_launch(
        d.path(),
        "while :; do echo '@@LAB-PROGRESS@@ 1 0'; sleep 0.1; done\n",
    );
    let p = Progress::new(1, 1, Duration::from_secs(10));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = tx.send(true);
    });
    let e = run_cell(&l, "fake", 0, &mut ctx(d.path(), rx, 15), &p)
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Interrupted));
}
