use super::*;

#[test]
fn the_runnable_count_is_the_fourth_fields_numerator() {
    assert_eq!(runnable_of(b"0.52 0.58 0.59 3/467 12345\n"), Some(3));
    assert_eq!(runnable_of(b"12.00 9.10 8.00 17/2048 99"), Some(17));
    for bad in [
        &b""[..],
        b"0.1 0.2 0.3",
        b"0.1 0.2 0.3 x/4 1",
        b"0.1 0.2 0.3 34 1",
        b"\xff\xfe",
    ] {
        assert_eq!(runnable_of(bad), None, "{bad:?}");
    }
}

#[test]
fn one_more_task_needs_a_cpu_nobody_runs_on() {
    // Two CPUs: the poller itself and one vCPU fit; a vCPU asking for
    // the poller beside another running vCPU does not.
    assert!(fits(Some(2), 0, 2));
    assert!(!fits(Some(3), 0, 2));
    assert!(fits(Some(1), 1, 2));
    assert!(!fits(Some(2), 1, 2));
    assert!(!fits(Some(u32::MAX), 1, 2));
    assert!(fits(None, 1, 2));
}

#[test]
fn this_hosts_check_reads_a_count_and_keeps_it_a_while() {
    let mut s = SpareCpu::open();
    assert!(s.fd().is_some(), "/proc/loadavg opened");
    let Source::Proc { file, .. } = &s.0 else {
        panic!("{s:?}");
    };
    // This test's thread is running: at least one.
    assert!(runnable_in(file).is_some_and(|r| r >= 1));
    // Twice from the same descriptor (pread at 0, no seek).
    assert!(runnable_in(file).is_some());
    s.spare();
    let Source::Proc { last, .. } = &s.0 else {
        panic!("{s:?}");
    };
    let first = last.expect("a reading kept");
    assert!(first.1.is_some_and(|r| r >= 1));
    // Asked again within REFRESH: the same reading (checked only if
    // this thread was not held off the CPU for REFRESH in between).
    s.spare_for_another();
    let Source::Proc { last, .. } = &s.0 else {
        panic!("{s:?}");
    };
    if first.0.elapsed() < REFRESH {
        assert_eq!(last.map(|l| l.0), Some(first.0));
    }
}

#[test]
fn a_fixed_check_answers_as_told() {
    assert!(SpareCpu::fixed(true).spare());
    assert!(SpareCpu::fixed(true).spare_for_another());
    assert!(!SpareCpu::fixed(false).spare());
    assert!(!SpareCpu::fixed(false).spare_for_another());
    assert_eq!(SpareCpu::fixed(true).fd(), None);
}

#[test]
fn usable_cpus_follow_affinity_and_the_cgroup_quota() {
    // 64 online, nothing else: 64.
    assert_eq!(usable_cpus(64, None, None), 64);
    // A cpuset of 2.
    assert_eq!(usable_cpus(64, Some(2), None), 2);
    // cpu.max 150000 100000: 1.5 CPUs, rounded up.
    assert_eq!(usable_cpus(64, Some(8), Some((150_000, 100_000))), 2);
    // A quota under one CPU still counts one.
    assert_eq!(usable_cpus(64, None, Some((10_000, 100_000))), 1);
    // A bogus period or an empty mask changes nothing.
    assert_eq!(usable_cpus(4, Some(0), Some((1, 0))), 4);
    assert_eq!(parse_cpu_max("max 100000\n"), None);
    assert_eq!(parse_cpu_max("200000 100000\n"), Some((200_000, 100_000)));
    // This process: at most the online CPUs, at least one.
    let n = allowed_cpus().unwrap();
    assert!(n >= 1);
}
