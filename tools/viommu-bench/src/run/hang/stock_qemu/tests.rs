use super::*;
use crate::run::qmp::tests::{serve, GREETING};

/// QEMU 11.1's `info registers` on a KVM x86-64 guest (abridged).
const REGS: &str = "\r\nCPU#1\r\nRAX=0000000000000000 RBX=ffff888003a8c000 RCX=0000000000000001 RDX=0000000000000000\r\n\
    RSI=0000000000000087 RDI=0000000000000001 RBP=ffffc90000093e80 RSP=ffffc90000093e58\r\n\
    R8 =0000000000000000 R9 =0000000000000000 R10=0000000000000000 R11=0000000000000000\r\n\
    RIP=ffffffffc0500dcc RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0\r\n\
    ES =0000 0000000000000000 ffffffff 00c00000\r\n";

#[test]
fn reads_registers_stack_words_and_thread_time() {
    let r = parse_registers(REGS);
    assert_eq!(r.rip, Some(0xffff_ffff_c050_0dcc));
    assert_eq!(r.rsp, Some(0xffff_c900_0009_3e58));
    assert_eq!(r.rflags, Some(0x46));
    assert_eq!((r.cpl, r.halted), (Some(0), Some(false)));
    assert_eq!(parse_registers("garbage = RIP=zz"), Registers::default());
    // QEMU 7.2's answer for a vCPU at reset (real mode).
    let reset = parse_registers("\r\nCPU#1\r\nEAX=00000000 ESP=00000000\r\nEIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n");
    assert_eq!(
        (reset.rip, reset.rflags, reset.halted),
        (Some(0xfff0), Some(2), Some(true))
    );

    let x = "ffffc90000093e58: 0xffffffff81200010 0x0000000000000000\r\n\
             ffffc90000093e68: 0xffff888003a8c000 0xffffffff81300004\r\n";
    assert_eq!(
        parse_stack_text(x),
        vec![0xffff_ffff_8120_0010, 0xffff_ffff_8130_0004]
    );
    assert!(parse_stack_text("Cannot access memory\r\n").is_empty());

    let stat = "4242 (CPU 0/KVM) S 1 4242 4242 0 -1 4194368 0 0 0 0 150 37 0 0 20 0 3 0 100 0 0";
    assert_eq!(parse_thread_stat(stat), Some(1870));
    assert_eq!(parse_thread_stat("4242 (x) S 1"), None);
}

#[tokio::test]
async fn answers_in_the_shape_of_our_vmms_vcpus() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.mon");
    let server = serve(&p, Some(GREETING), |cmd, args| {
        Some(match cmd {
            "query-cpus-fast" => r#"{"return": [{"cpu-index": 0, "thread-id": 4243}, {"cpu-index": 1, "thread-id": 4244}]}"#.into(),
            "human-monitor-command" => {
                let line = args["command-line"].as_str().unwrap();
                let text = match (args["cpu-index"].as_u64(), line) {
                    (Some(1), "info registers") => REGS.to_string(),
                    // vCPU 0 halted in user space: no stack read.
                    (Some(0), "info registers") => "RIP=0000000000401000 RSP=00007ffc00000000 RFL=00000202 CPL=3 HLT=1".into(),
                    (Some(1), l) if l.starts_with("x /64gx 0xffffc90000093e58") => "ffffc90000093e58: 0xffffffff81200010 0x0000000000000001".into(),
                    // The driver's avail index: vring-avail + 2.
                    (None, "xp /1hx 0x7f002") => "000000000007f002: 0x0009\r\n".into(),
                    _ => "unexpected".into(),
                };
                json!({ "return": text }).to_string()
            }
            "x-query-virtio" => r#"{"return": [{"path": "/machine/peripheral-anon/device[0]/virtio-backend", "name": "virtio-net"}, {"path": "/machine/peripheral-anon/device[1]/virtio-backend", "name": "virtio-iommu"}]}"#.into(),
            "x-query-virtio-queue-status" if args["path"] == "/machine/peripheral-anon/device[1]/virtio-backend" && args["queue"] == 0 => {
                r#"{"return": {"device-name": "virtio-iommu", "queue-index": 0, "inuse": 2, "last-avail-idx": 7, "shadow-avail-idx": 7, "used-idx": 5, "vring-avail": 520192, "vring-num": 256}}"#.into()
            }
            _ => r#"{"return": {}}"#.into(),
        })
    });
    let r = read(&p, None).await.unwrap();
    // The request queue as our gauges: 9 published, 7 taken, 5 used.
    let g = &r.gauges;
    assert_eq!(
        (g.driver_avail, g.device_next_avail, g.used),
        (Some(9), Some(7), Some(5))
    );
    let v = r.vcpus;
    assert_eq!(v[0]["rip"], "0x401000");
    assert_eq!(v[0]["interrupts_enabled"], true);
    assert_eq!(v[0]["halted"], true);
    assert_eq!(v[0]["stack_text"], json!([]));
    assert_eq!(v[1]["interrupts_enabled"], false);
    assert_eq!(v[1]["stack_text"], json!(["0xffffffff81200010"]));
    // No process: no CPU times (a partial list is no list).
    assert!(cpu_ms(&v).is_empty());
    // Named as ours: a rip only the host's symbols know is not guest code.
    let host = crate::run::hang::kernel_symbols::Symbols::parse(
        "ffffffffc0500d30 T __svm_vcpu_run\t[kvm_amd]\n",
    );
    let guest =
        crate::run::hang::kernel_symbols::Symbols::parse("ffffffff81200000 t __viommu_sync_req\n");
    let w = crate::run::hang::our_vmm::vcpus(&v.to_string(), Some(&guest), Some(&host));
    assert!(
        w[1].to_string()
            .contains("__svm_vcpu_run+0x9c: not guest code")
            && w[1].to_string().contains("<- __viommu_sync_req+0x10"),
        "{}",
        w[1]
    );
    drop(server);
}

#[tokio::test]
async fn a_vcpu_that_does_not_answer_ends_the_reading() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.mon");
    let _server = serve(&p, Some(GREETING), |cmd, _| match cmd {
        "query-cpus-fast" => Some(r#"{"return": [{"cpu-index": 0}, {"cpu-index": 1}]}"#.into()),
        "human-monitor-command" => None,
        _ => Some(r#"{"return": {}}"#.into()),
    });
    let r = read(&p, Some(std::process::id())).await.unwrap();
    let v = &r.vcpus;
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert!(v[0]["rip"].is_null() && v[1]["rip"].is_null());
    assert!(cpu_ms(v).is_empty());
    // Nothing more was asked: no queue.
    assert_eq!(r.gauges.driver_avail, None);
}

#[tokio::test]
async fn a_qemu_without_the_queue_commands_has_no_queue() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.mon");
    let _server = serve(&p, Some(GREETING), |cmd, _| {
        Some(match cmd {
            "query-cpus-fast" => r#"{"return": []}"#.into(),
            "x-query-virtio" => r#"{"error": {"class": "CommandNotFound", "desc": "The command x-query-virtio has not been found"}}"#.into(),
            _ => r#"{"return": {}}"#.into(),
        })
    });
    let r = read(&p, None).await.unwrap();
    assert_eq!(r.gauges, crate::run::hang::our_vmm::Gauges::default());
}
