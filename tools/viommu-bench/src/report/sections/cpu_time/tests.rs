use super::*;
use crate::report::tests::cell;
use crate::run::cpu_time::CpuTimes;

#[test]
fn per_io_medians_of_guest_and_host() {
    let cols = crate::report::tests::cols(&["ours+patched-lazy", "no-viommu"]);
    let ph = crate::report::tests::phase_4k();
    // The fixture's phase did 1000 I/Os (4000 KiB at 4k).
    let mk = |col: &str, round: u32, guest_busy: i64, host_guest: u64| {
        let mut c = cell(col, round, 100, None, false);
        let p = c.phases.get_mut("randread-4k").unwrap();
        let f = p.fio.as_mut().unwrap();
        assert_eq!(f.read_kib, 4000, "the fixture's I/O count changed");
        f.counters.insert("cpu/user".into(), guest_busy / 2);
        f.counters.insert("cpu/system".into(), guest_busy / 2);
        f.counters.insert("cpu/idle".into(), 100 - guest_busy);
        p.host_cpu = Some(CpuTimes {
            user: 10,
            system: 20,
            irq: 0,
            idle: 0,
            guest: host_guest,
        });
        c
    };
    let all = vec![
        mk("ours+patched-lazy", 0, 40, 160),
        mk("ours+patched-lazy", 1, 60, 170),
        mk("ours+patched-lazy", 2, 80, 180),
        // The ceiling's guest without the cpu/* counters (an old init).
        {
            let mut c = mk("no-viommu", 0, 0, 100);
            let f = crate::report::tests::fio_4k(&mut c);
            f.counters.retain(|k, _| !k.starts_with("cpu/"));
            c
        },
    ];
    let rows = rows(&cols, &[ph], &all);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.column, "ours+patched-lazy");
    // 60 ticks of 10 ms over 1000 I/Os: 600 us per I/O.
    assert!((r.guest_busy_us.unwrap() - 600.0).abs() < 1e-6, "{r:?}");
    assert!((r.guest_idle.unwrap() - 0.4).abs() < 1e-9, "{r:?}");
    assert!((r.host_guest_us.unwrap() - 1700.0).abs() < 1e-6, "{r:?}");
    assert!((r.host_kernel_us.unwrap() - 200.0).abs() < 1e-6, "{r:?}");
    assert_eq!(r.host_idle, Some(0.0));
    let c = &rows[1];
    assert_eq!(c.guest_busy_us, None, "{c:?}");
    assert_eq!(cells(c)[2], "-");
    assert_eq!(cells(c)[4], "1000");
}
