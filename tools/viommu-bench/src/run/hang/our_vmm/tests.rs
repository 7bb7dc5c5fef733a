use super::*;

fn text(tx: u64, ier: u64, iir: u64, serving: u64, avail: u64, used: u64, next: u64) -> String {
    format!(
        "# TYPE vmm_serial_tx_bytes_total counter\nvmm_serial_tx_bytes_total {tx}\nvmm_serial_ier {ier}\nvmm_serial_iir {iir}\n\
         viommu_thread_serving_ms {serving}\nviommu_requestq_driver_avail {avail}\nviommu_requestq_used {used}\n\
         viommu_requestq_device_next_avail {next}\nviommu_requests_total{{type=\"map\"}} 3\n"
    )
}

#[test]
fn a_driver_waiting_for_untaken_requests_is_owed() {
    let map = "ffffffff81200000 t __viommu_sync_req\nffffffff81300000 T native_safe_halt\nffffffff81310000 T x\n";
    let syms = crate::run::hang::kernel_symbols::Symbols::parse(map);
    let body = r#"[{"vcpu":0,"rip":"0xffffffff81200010","interrupts_enabled":false,"stack_text":["0xffffffff81300004"]},
                   {"vcpu":1,"rip":"0xffffffff81300001","interrupts_enabled":true,"stack_text":[]}]"#;
    let v = vcpus(body, Some(&syms), None);
    assert_eq!(v[0].function.as_deref(), Some("__viommu_sync_req"));
    assert_eq!(
        v[0].to_string(),
        "vCPU0 at __viommu_sync_req+0x10 (interrupts off) <- native_safe_halt+0x4"
    );
    let g = parse(&text(10, 3, 2, 0, 7, 5, 6));
    let o = owed(&g, &v, true).unwrap();
    assert!(o.contains("vCPU0 in __viommu_sync_req+0x10"), "{o}");
    assert!(o.contains("took up to 6"), "{o}");
    // Nothing outstanding, no vCPU in the driver, or no symbols: not owed.
    assert!(owed(&parse(&text(10, 3, 2, 0, 7, 7, 7)), &v, true).is_none());
    assert!(owed(&g, &v[1..], true).is_none());
    assert!(owed(&g, &vcpus(body, None, None), false).is_none());
    assert!(vcpus("not json", Some(&syms), None).is_empty());
    // A rip the guest's symbols do not know, named by the host's.
    let host = crate::run::hang::kernel_symbols::Symbols::parse(
        "ffffffffc0500d30 T __svm_vcpu_run\t[kvm_amd]\n",
    );
    let body =
        r#"[{"vcpu":0,"rip":"0xffffffffc0500dcc","interrupts_enabled":false,"stack_text":[]}]"#;
    let v = vcpus(body, Some(&syms), Some(&host));
    assert_eq!(v[0].host_function.as_deref(), Some("__svm_vcpu_run+0x9c"));
    assert!(
        v[0].to_string()
            .contains("the host's __svm_vcpu_run+0x9c: not guest code"),
        "{}",
        v[0]
    );
    // A rip the guest knows is never looked up in the host's.
    let v = vcpus(
        r#"[{"vcpu":1,"rip":"0xffffffff81200010"}]"#,
        Some(&syms),
        Some(&host),
    );
    assert_eq!(v[0].host_function, None);
}

#[test]
fn tells_the_device_from_the_guest() {
    let g = parse(&text(10, 3, 2, 0, 7, 5, 5));
    assert_eq!(g.driver_avail, Some(7));
    let d = diagnose(&g, &g);
    assert!(
        d.contains("missed kick") && d.contains("not yet notified"),
        "{d}"
    );
    assert!(
        d.contains("does not take it (a vCPU with interrupts off)"),
        "{d}"
    );

    // With the types of the untaken requests (our VMM's gauge).
    let pending = |map: u64, unmap: u64| {
        parse(&format!(
            "{}viommu_requestq_pending_requests{{type=\"map\"}} {map}\nviommu_requestq_pending_requests{{type=\"unmap\"}} {unmap}\nviommu_requestq_pending_requests{{type=\"iotlb_flush\"}} 0\n",
            text(10, 3, 2, 0, 7, 5, 5)
        ))
    };
    let lazy = pending(0, 2);
    assert_eq!(lazy.pending[1], ("unmap".to_string(), 2));
    let d = diagnose(&lazy, &lazy);
    assert!(
        d.contains("only UNMAPs (2 unmap): a lazy guest's queue"),
        "{d}"
    );
    assert!(!d.contains("missed kick"), "{d}");
    let missed = pending(1, 1);
    let d = diagnose(&missed, &missed);
    assert!(
        d.contains("1 map, 1 unmap: not notified yet (Linux adds MAPs"),
        "{d}"
    );
    let unknown = parse(&format!(
        "{}viommu_requestq_pending_requests{{type=\"unreadable\"}} 2\n",
        text(10, 3, 2, 0, 7, 5, 5)
    ));
    assert!(diagnose(&unknown, &unknown).contains("2 unreadable: their types could not be read"));

    let stuck = parse(&text(10, 1, 1, 2500, 7, 5, 5));
    let d = diagnose(&stuck, &stuck);
    assert!(d.contains("2500 ms"), "{d}");
    assert!(d.contains("writes nothing"), "{d}");

    let idle = parse(&text(10, 3, 1, 0, 9, 9, 9));
    let later = parse(&text(30, 3, 1, 0, 9, 9, 9));
    let d = diagnose(&idle, &later);
    assert!(d.contains("no request outstanding"), "{d}");
    assert!(d.contains("20 in 1 s"), "{d}");

    assert_eq!(
        diagnose(&parse(""), &parse("")),
        "the VMM reported no liveness gauges"
    );

    let cpu = |a: u64, b: u64| {
        parse(&format!(
            "vmm_vcpu_cpu_ms_total{{vcpu=\"0\"}} {a}\nvmm_vcpu_cpu_ms_total{{vcpu=\"1\"}} {b}\n"
        ))
    };
    assert_eq!(cpu(5, 7).vcpu_cpu_ms, vec![5, 7]);
    let d = diagnose(&cpu(100, 200), &cpu(1090, 201));
    assert!(d.contains("990/1 ms") && d.contains("spins"), "{d}");
    let d = diagnose(&cpu(100, 200), &cpu(102, 201));
    assert!(d.contains("halted"), "{d}");
}
