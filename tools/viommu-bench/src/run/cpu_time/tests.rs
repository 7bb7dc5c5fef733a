use super::*;

#[test]
fn proc_stat_lines() {
    let t =
        CpuTimes::parse("cpu  100 5 30 400 10 2 3 0 60 0\ncpu0 50 2 15 200 5 1 1 0 30 0\nintr 1\n")
            .unwrap();
    assert_eq!(
        t,
        CpuTimes {
            user: 45,
            system: 30,
            irq: 5,
            idle: 410,
            guest: 60
        }
    );
    // An old kernel's shorter line, and nonsense.
    assert_eq!(CpuTimes::parse("cpu 1 2 3 4").unwrap().idle, 4);
    assert_eq!(CpuTimes::parse("intr 1 2\n"), None);
    let later = CpuTimes { idle: 500, ..t };
    assert_eq!(later.since(&t).idle, 90);
    assert_eq!(
        t.since(&later).idle,
        0,
        "a counter going back is 0, not a wrap"
    );
}
