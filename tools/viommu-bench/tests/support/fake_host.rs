//! The fake host the end-to-end tests run the whole program against: a
//! sysfs/procfs tree (`--root`) with the drive already on vfio-pci, a
//! fake QEMU that speaks the guest protocol and writes trace lines while
//! its events are on, and the QMP server it asks for (served by the
//! test). Included by each end-to-end test file (`#[path]`); not every
//! file uses every part.
#![allow(dead_code)]

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// A directory path with the `path()` of a TempDir.
pub struct Dir(pub std::path::PathBuf);

impl Dir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

pub const BDF: &str = "0000:01:00.0";

pub fn file(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// A fake stock QEMU: with a virtio-iommu 1000 IOPS untraced (700 while its
/// trace events are on: the observer's cost), without 4000 IOPS; the
/// patched kernel "crashes" (exit 1 before finishing). Its guest runs the
/// untimed counting run the tool asks for (`lab.count`) on the console's
/// `go`, doing 4 I/Os with 2 MAP/UNMAP + 2 VFIO trace lines each, written
/// only while the events are on. Its QMP socket is served by the test
/// ([`qmp_broker`]): the script asks for it in $FAKE_QMP_DIR and waits.
/// FAKE_QEMU_NO_LOG=1: a QEMU without the `log` trace backend (no trace
/// file, no line ever; `-d help` lists no trace:PATTERN, `-trace help`
/// ends with the dtrace note). FAKE_QEMU_HELP=none: `-d help` and
/// `-trace help` print nothing (a wrapper: its backends unknown).
pub const FAKE_QEMU: &str = r#"#!/bin/sh
[ "$1" = --version ] && echo 'QEMU emulator version 9.9.9 (fake)' && exit 0
if [ "$2" = help ]; then
	[ "$FAKE_QEMU_HELP" = none ] && exit 1
	case "$1" in
	-d)
		echo 'Log items (comma separated):'
		echo 'out_asm         show generated host assembly code for each compiled TB'
		[ "$FAKE_QEMU_NO_LOG" = 1 ] || echo 'trace:PATTERN   enable trace events'
		exit 1 ;;
	-trace)
		echo virtio_iommu_map
		[ "$FAKE_QEMU_NO_LOG" = 1 ] && echo 'This list of names of trace points may be incomplete when using the DTrace/SystemTap backends.'
		exit 0 ;;
	esac
fi
trace= kernel= viommu= qmp= append=
while [ $# -gt 0 ]; do
	case "$1" in
	-D) trace=$2; shift ;;
	# The counting runs' socket; the monitor (.mon) is read only at a hang.
	-qmp) case $2 in *.qmp,*) qmp=${2#unix:}; qmp=${qmp%%,*} ;; esac; shift ;;
	-kernel) kernel=$2; shift ;;
	-append) append=$2; shift ;;
	-trace) echo "fake QEMU: started with -trace $2: its timed phases would be traced" >&2; exit 1 ;;
	virtio-iommu-pci) viommu=1 ;;
	esac
	shift
done
log=1
[ "$FAKE_QEMU_NO_LOG" = 1 ] && log=
[ -n "$trace" ] && [ -n "$log" ] && : >"$trace"
if [ -n "$qmp" ]; then
	echo "$qmp $trace ${log:-0}" >"$FAKE_QMP_DIR/tmp.$$" && mv "$FAKE_QMP_DIR/tmp.$$" "$FAKE_QMP_DIR/req.$$"
	i=0
	while [ ! -S "$qmp" ]; do
		i=$((i + 1)); [ $i -gt 200 ] && echo "fake QEMU: nobody served $qmp" >&2 && exit 1
		sleep 0.05
	done
fi
echo '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1-fake","nvme":true,"iommu_groups":"DMA:1","resv":"0x00000000fee00000 0x00000000feefffff msi;","cmdline":"x"}'
case "$kernel" in *patched*) echo 'Kernel panic - not syncing: fake'; exit 1 ;; esac
fio() {
	echo "@@LAB-GUEST@@ {\"event\":\"fio\",\"phase\":\"$1\",\"error\":0,\"read_kib\":$2,\"read_bw_kib\":1,\"read_iops\":$3,\"read_ms\":1,\"write_kib\":0,\"write_bw_kib\":0,\"write_iops\":0,\"write_ms\":0,\"counters\":{}}"
}
# 4 I/Os behind the virtio-iommu; traced only while the events are on.
io() {
	[ -n "$viommu" ] && [ -n "$log" ] && [ -e "$trace.on" ] || return 0
	for i in 1 2 3 4; do
		printf 'virtio_iommu_map domain=1\nvirtio_iommu_unmap domain=1\nvfio_iommu_map_notify iommu map\nvfio_iommu_map_notify iommu unmap\n' >>"$trace"
	done
}
iops() {
	if [ -z "$viommu" ]; then echo 4000; elif [ -e "$trace.on" ]; then echo 700; else echo 1000; fi
}
echo '@@LAB-PHASE@@ begin verify-4k'
echo '@@LAB-PHASE@@ end verify-4k'
fio verify-4k 8192 10
echo '@@LAB-PHASE@@ begin randread-4k'
# fio takes a while: the host reads the counters at the begin marker first.
sleep 0.3
io
iops=$(iops)
echo '@@LAB-PROGRESS@@ 4 0'
echo '@@LAB-PHASE@@ end randread-4k'
fio randread-4k 16 $iops
case " $append " in
*" lab.count="*)
	echo '@@LAB-PHASE@@ begin count-randread-4k'
	read -r ack
	echo "fake guest: the host said $ack"
	if [ "$ack" = go ]; then
		io
		iops=$(iops)
		echo '@@LAB-PHASE@@ end count-randread-4k'
		fio count-randread-4k 16 $iops
	else
		echo '@@LAB-PHASE@@ end count-randread-4k'
	fi
	;;
esac
echo '@@LAB-GUEST-DONE@@ rc=0'
"#;

/// The fake QEMU's QMP sockets, served from this test's process: for each
/// request file `req.PID` ("SOCKET TRACE LOG") the fake writes in `dir`, a
/// server at SOCKET that answers every command `{"return": {}}`, as QEMU
/// does: `trace-event-set-state` of `virtio_iommu_map` makes TRACE.on
/// exist while it is on; with LOG=1, once the canary is on, each command
/// QEMU handles adds a `handle_qmp_command` line to TRACE (the `log`
/// backend), before its answer.
pub fn qmp_broker(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        loop {
            // The test is over once its directory is gone.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                return;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with("req.") || !seen.insert(name) {
                    continue;
                }
                let req = std::fs::read_to_string(e.path()).unwrap();
                let f: Vec<&str> = req.split_whitespace().collect();
                let (sock, trace, log) = (PathBuf::from(f[0]), PathBuf::from(f[1]), f[2] == "1");
                let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
                std::thread::spawn(move || {
                    for conn in l.incoming().flatten() {
                        serve_qmp(conn, &trace, log);
                    }
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
}

fn serve_qmp(conn: std::os::unix::net::UnixStream, trace: &Path, log: bool) {
    use std::io::{BufRead, Write};
    let mut w = conn.try_clone().unwrap();
    let say = |w: &mut std::os::unix::net::UnixStream, s: &str| {
        let _ = w.write_all(format!("{s}\r\n").as_bytes());
    };
    say(
        &mut w,
        r#"{"QMP": {"version": {"qemu": {"micro": 9, "minor": 9, "major": 9}, "package": ""}, "capabilities": []}}"#,
    );
    let mut canary = false;
    for line in std::io::BufReader::new(conn).lines().map_while(Result::ok) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if log && canary {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(trace)
                .unwrap();
            writeln!(
                f,
                "77@1700000000.000001:handle_qmp_command mon 0x1 req: {line}"
            )
            .unwrap();
        }
        if v["execute"] == "trace-event-set-state" {
            let on = v["arguments"]["enable"] == true;
            match v["arguments"]["name"].as_str().unwrap() {
                "handle_qmp_command" => canary = on,
                "virtio_iommu_map" => {
                    let flag = PathBuf::from(format!("{}.on", trace.display()));
                    if on {
                        std::fs::write(flag, "").unwrap();
                    } else {
                        std::fs::remove_file(flag).unwrap();
                    }
                }
                _ => {}
            }
        }
        say(&mut w, r#"{"return": {}}"#);
    }
}

/// A fake host under `d`: sysfs/procfs tree, fake QEMU, kernels, image.
pub fn fake_host(d: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = d.join("root");
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers/vfio-pci")).unwrap();
    std::fs::create_dir_all(root.join(format!("sys/kernel/iommu_groups/3/devices/{BDF}"))).unwrap();
    file(&root, "dev/kvm", "");
    file(&root, "dev/vfio/vfio", "");
    file(&root, "dev/vfio/3", "");
    // VT-d with interrupt remapping (ECAP bit 3).
    file(&root, "sys/class/iommu/dmar0/intel-iommu/ecap", "f050da\n");
    let dev = format!("sys/bus/pci/devices/{BDF}");
    file(&root, &format!("{dev}/class"), "0x010802\n");
    symlink(
        "../../../../bus/pci/drivers/vfio-pci",
        root.join(&dev).join("driver"),
    )
    .unwrap();
    symlink(
        "../../../../kernel/iommu_groups/3",
        root.join(&dev).join("iommu_group"),
    )
    .unwrap();
    file(
        &root,
        "proc/self/limits",
        "Max locked memory         unlimited            unlimited            bytes\n",
    );
    file(
        &root,
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0\n",
    );
    file(&root, "proc/mounts", "");
    file(&root, "proc/sys/kernel/osrelease", "6.1.0-fake\n");
    file(&root, "proc/cmdline", "intel_iommu=on fake\n");
    file(
        &root,
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    );
    file(
        &root,
        "proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Fake CPU @ 1.00GHz\n",
    );
    file(&root, &format!("{dev}/numa_node"), "0\n");
    file(&root, "sys/devices/system/node/node0/cpulist", "0\n");
    let qemu = d.join("qemu");
    std::fs::write(&qemu, FAKE_QEMU).unwrap();
    std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in ["stock.bzImage", "patched.bzImage", "initramfs.cpio"] {
        file(d, f, "x");
    }
    file(
        &root,
        &format!("{dev}/resource"),
        "0x00000000febf0000 0x00000000febf3fff 0x0000000000140204\n0x0 0x0 0x0\n",
    );
    (root, qemu)
}

/// The tool's command for a run of `rounds` rounds of two columns on the
/// fake host in `d`, results in `d/out`.
pub fn bench_run(d: &Path, root: &Path, qemu: &Path, rounds: u32) -> std::process::Command {
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_viommu-bench"));
    c.env("FAKE_QMP_DIR", d.join("qmp"))
        .args(["--device", BDF, "--destroy-data", BDF, "--root"])
        .arg(root)
        .arg("--qemu")
        .arg(qemu)
        .args(["--kernel-stock", &p("stock.bzImage"), "--kernel-patched"])
        .args([&p("patched.bzImage"), "--initramfs", &p("initramfs.cpio")])
        .args(["--columns", "qemu+stock,no-viommu", "--bs", "4k"])
        .args(["--rounds", &rounds.to_string(), "--out", &p("out")]);
    c
}
