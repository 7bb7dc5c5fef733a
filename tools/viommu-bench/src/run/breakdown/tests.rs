use super::*;
use std::collections::BTreeMap;

use super::parse::{parse_switch, parse_sys_enter, parse_sys_exit, parse_wake};

/// Linux 6.12's `trace` header and lines (irq-info on: five flag
/// characters; a vCPU thread's name with a space and a slash).
const HEAD_612: &str = "# tracer: nop
#
# entries-in-buffer/entries-written: 20/20   #P:2
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
";

pub(crate) fn names() -> BTreeMap<u32, String> {
    [(1234, "viommu"), (1236, "CPU 0/KVM")]
        .into_iter()
        .map(|(t, n)| (t, n.to_string()))
        .collect()
}

/// One request served by our device thread (tid 1234), kicked by vCPU
/// 1236: waking, switch-in 5 us later, one MAP_DMA ioctl of 20 us with
/// pinning of 8 us, then sleep 40 us after the switch-in.
pub(crate) fn one_request(t0: u64) -> String {
    let us = |d: u64| {
        let t = t0 + d;
        format!("{}.{:06}", t / 1_000_000, t % 1_000_000)
    };
    format!(
            "       CPU 0/KVM-1236    [000] d..5.   {}: kvm_fast_mmio: fast mmio at gpa 0xfe003000
       CPU 0/KVM-1236    [000] d..5.   {}: sched_waking: comm=viommu pid=1234 prio=120 target_cpu=001
          <idle>-0       [001] dNh4.   {}: sched_wakeup: comm=viommu pid=1234 prio=120 target_cpu=001
          <idle>-0       [001] d..2.   {}: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=viommu next_pid=1234 next_prio=120
           <...>-1234    [001] .....   {}: sys_enter: NR 16 (9, 3b71, 7ffd6c8a8f30, 0, 0, 0)
          viommu-1234    [001] .....   {}: vb_pin_remote: (pin_user_pages_remote+0x0/0x70)
          viommu-1234    [001] .....   {}: vb_pin_remote_ret: (vaddr_get_pfns+0x7e/0x2a0 <- pin_user_pages_remote)
          viommu-1234    [001] .....   {}: sys_exit: NR 16 = 0
          viommu-1234    [001] d..2.   {}: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
",
            us(0),
            us(1),
            us(3),
            us(6),
            us(10),
            us(12),
            us(20),
            us(30),
            us(46),
        )
}

#[test]
fn lines_of_6_1_and_6_12_parse() {
    // 6.12 and 6.1 print the same; 6.1 without irq-info has no flags,
    // record-tgid adds a (TGID).
    for l in [
            "          viommu-1234    [001] d..2.   100.000100: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
            "          viommu-1234    [001]   100.000100: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
            "          viommu-1234    (   1230) [001] d..2.   100.000100: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        ] {
            let Some(Line::Event(e)) = parse_line(l) else {
                panic!("{l}")
            };
            assert_eq!((e.tid, e.cpu, e.ts_ns, e.name), (1234, 1, 100_000_100_000, "sched_switch"));
            let sw = parse_switch(e.fields).unwrap();
            assert_eq!((sw.prev, sw.prev_state, sw.next, sw.next_comm), (1234, "S", 0, "swapper/1"));
        }
    let Some(Line::Event(e)) = parse_line(
            "       CPU 0/KVM-1236    [000] d..5.   5.123456789: sched_waking: comm=CPU 1/KVM pid=1237 prio=120 target_cpu=000",
        ) else {
            panic!()
        };
    assert_eq!((e.tid, e.ts_ns), (1236, 5_123_456_789));
    assert_eq!(parse_wake(e.fields), Some(("CPU 1/KVM", 1237)));
    assert_eq!(
        parse_line("CPU:1 [LOST 12 EVENTS]"),
        Some(Line::Lost { cpu: 1, events: 12 })
    );
    assert_eq!(
        parse_line("# entries-in-buffer/entries-written: 40/52   #P:2"),
        Some(Line::Entries {
            in_buffer: 40,
            written: 52
        })
    );
    assert_eq!(
        parse_sys_enter("NR 16 (9, 3b71, 7ffd, 0, 0, 0)"),
        Some((16, vec![9, 0x3b71, 0x7ffd, 0, 0, 0]))
    );
    assert_eq!(parse_sys_exit("NR 16 = -14"), Some(16));
    for junk in [
        "",
        "#",
        "##### CPU 2 buffer started ####",
        "garbage [x] 1.0: y",
        "a-1 [0] notatime: x: y",
    ] {
        assert_eq!(parse_line(junk), None, "{junk:?}");
    }
    assert_eq!(ioctl_name(0x3b85), "IOMMU_IOAS_MAP");
    assert_eq!(ioctl_name(0x3b72), "VFIO_IOMMU_UNMAP_DMA");
    assert!(!is_dma_ioctl(ioctl_name(0x3b70)));
}

#[test]
fn a_request_is_broken_down() {
    let text = format!(
        "{HEAD_612}{}{}",
        one_request(100_000_000),
        one_request(100_001_000)
    );
    let a = analyze(text.lines(), &names(), None);
    assert_eq!(a.lost_events, 0);
    assert_eq!(a.write_exits, Some(2));
    let s = Serving::Named("viommu".into()).pick(&a).unwrap();
    assert_eq!(s.tid, 1234);
    assert_eq!(
        (s.wakeups, s.wakeups_timed, s.wakeups_unanswered),
        (2, 2, 0)
    );
    assert_eq!(s.wake_latency_ns, 2 * 5_000, "waking to switch-in");
    assert_eq!(s.run_ns, 2 * 40_000);
    assert_eq!((s.sleeps, s.preemptions), (2, 0));
    let m = s.ioctls["VFIO_IOMMU_MAP_DMA"];
    assert_eq!((m.count, m.ns, m.on_cpu_ns), (2, 2 * 20_000, 2 * 20_000));
    assert_eq!((s.pins.count, s.pins.ns), (2, 2 * 8_000));
    // The DMA caller is the same thread; the vCPU has no run time seen.
    assert_eq!(Serving::DmaCaller.pick(&a).unwrap().tid, 1234);
    assert_eq!(a.thread(1236).unwrap().comm, "CPU 0/KVM");
    assert_eq!(a.window_ns(), 1_046_000);
}

#[test]
fn lost_events_are_counted_and_nothing_open_across_them() {
    let mut text = format!("{HEAD_612}{}", one_request(100_000_000));
    // The second request loses its sys_exit and switch-out.
    let second: Vec<String> = one_request(100_001_000).lines().map(String::from).collect();
    text += &second[..5].join("\n");
    text += "\nCPU:1 [LOST 3 EVENTS]\n";
    text += &one_request(100_002_000);
    let a = analyze(text.lines(), &names(), None);
    assert_eq!(a.lost_events, 3);
    let s = a.thread(1234).unwrap();
    assert_eq!(
        s.ioctls["VFIO_IOMMU_MAP_DMA"].count, 2,
        "the cut one is not counted"
    );
    assert_eq!(s.ioctls_cut, 1);
    assert_eq!(s.wakeups_timed, 3);
    // Run time of the cut request: switch-in to the loss only.
    assert_eq!(s.run_ns, 2 * 40_000 + 4_000);
    // The header's written-but-gone entries count as lost too.
    let a = analyze(
        "# entries-in-buffer/entries-written: 40/52   #P:2\n".lines(),
        &names(),
        None,
    );
    assert_eq!(a.lost_events, 12);
}

#[test]
fn a_thread_that_never_sleeps_runs_the_whole_window() {
    // A polling device thread: system calls only, never switched.
    let text = "          viommu-1234    [001] .....   10.000000: sys_enter: NR 16 (9, 3b72, 0, 0, 0, 0)
          viommu-1234    [001] .....   10.000010: sys_exit: NR 16 = 0
       CPU 0/KVM-1236    [000] d..5.   10.000500: kvm_mmio: mmio write len 2 gpa 0xfe003000 val 0x0
       CPU 0/KVM-1236    [000] d..5.   10.000600: kvm_mmio: mmio read len 4 gpa 0xfe003004 val 0x0
       CPU 0/KVM-1236    [000] d..5.   10.000700: kvm_pio: pio_write at 0x1000 size 2 count 1 val 0x0 
       CPU 0/KVM-1236    [000] d..5.   10.000800: kvm_pio: pio_read at 0x1000 size 2 count 1 val 0x0 
       CPU 0/KVM-1236    [000] d..5.   10.000900: kvm_pio: pio_write at 0x3f8 size 1 count 1 val 0x41 
          viommu-1234    [001] .....   10.001000: sys_enter: NR 16 (9, 3b72, 0, 0, 0, 0)
";
    let begin = format!(
        "           <...>-99      [000] .....    9.999000: tracing_mark_write: {MARK_BEGIN}\n"
    );
    let end = format!(
        "           <...>-99      [000] .....   10.002000: tracing_mark_write: {MARK_END}\n"
    );
    let a = analyze(format!("{begin}{text}{end}").lines(), &names(), None);
    assert_eq!((a.start_ns, a.end_ns), (9_999_000_000, 10_002_000_000));
    assert_eq!(
        a.write_exits,
        Some(2),
        "an MMIO and a port write; reads and console output are not notifications"
    );
    let s = a.thread(1234).unwrap();
    assert_eq!(
        s.run_ns, 3_000_000,
        "on a CPU from the window's start to its end"
    );
    assert_eq!((s.wakeups, s.sleeps), (0, 0));
    assert_eq!(s.ioctls["VFIO_IOMMU_UNMAP_DMA"].count, 1);
    assert_eq!(s.ioctls_cut, 1, "the last one had not returned");
    assert!(!s.run_lower_bound);
    // No MMIO events at all: not measured, not 0.
    assert_eq!(
        analyze(text.lines().take(2), &names(), None).write_exits,
        None
    );
}

#[test]
fn a_wakeup_without_a_switch_in_is_unanswered() {
    let text = "       CPU 0/KVM-1236    [000] d..5.   10.000000: sched_waking: comm=viommu pid=1234 prio=120 target_cpu=001
          <idle>-0       [001] dNh4.   10.000002: sched_wakeup: comm=viommu pid=1234 prio=120 target_cpu=001
       CPU 0/KVM-1236    [000] d..5.   10.000010: sched_waking: comm=viommu pid=1234 prio=120 target_cpu=001
";
    let a = analyze(text.lines(), &names(), None);
    let s = a.thread(1234).unwrap();
    assert_eq!(
        (s.wakeups, s.wakeups_timed, s.wakeups_unanswered),
        (1, 0, 1)
    );
    assert_eq!(s.run_ns, 0);
    // A thread preempted, then back: one run, no wake-up, no sleep.
    let text = "          viommu-1234    [001] d..2.   10.000000: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=R+ ==> next_comm=kworker/1:1 next_pid=77 next_prio=120
     kworker/1:1-77      [001] d..2.   10.000100: sched_switch: prev_comm=kworker/1:1 prev_pid=77 prev_prio=120 prev_state=I ==> next_comm=viommu next_pid=1234 next_prio=120
          viommu-1234    [001] d..2.   10.000300: sched_switch: prev_comm=viommu prev_pid=1234 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
";
    let begin = format!(
        "           <...>-99      [000] .....    9.999900: tracing_mark_write: {MARK_BEGIN}\n"
    );
    let a = analyze(format!("{begin}{text}").lines(), &names(), None);
    let s = a.thread(1234).unwrap();
    assert_eq!((s.preemptions, s.sleeps, s.wakeups), (1, 1, 0));
    assert_eq!(
        s.run_ns,
        100_000 + 200_000,
        "from the window's start, and after the preemption"
    );
}

#[test]
fn the_window_stops_where_a_cpu_buffer_filled() {
    let text = format!("{}{}", one_request(100_000_000), one_request(100_001_000));
    // CPU 1's buffer filled: its last event is the first request's
    // switch-out; CPU 0 went on.
    let lines: Vec<&str> = text.lines().collect();
    let kept: Vec<&str> = lines[..9].iter().chain(&lines[9..11]).copied().collect();
    let cut = cutoff(kept.iter().copied(), &[1]).unwrap();
    assert_eq!(cut, 100_000_046_000);
    assert_eq!(cutoff(kept.iter().copied(), &[]), None);
    let a = analyze(kept.iter().copied(), &names(), Some(cut));
    assert_eq!(a.end_ns, cut);
    let s = a.thread(1234).unwrap();
    assert_eq!(
        (s.wakeups, s.wakeups_unanswered),
        (1, 0),
        "the later waking is past the cut"
    );
    assert_eq!(a.write_exits, Some(1));
}

#[test]
fn the_serving_thread_is_found_or_said_missing() {
    // A VMM's thread that left no event is there, idle.
    let a = analyze("".lines(), &names(), None);
    assert_eq!(Serving::Named("viommu".into()).pick(&a).unwrap().run_ns, 0);
    let a = analyze("".lines(), &BTreeMap::new(), None);
    let e = Serving::Named("viommu".into()).pick(&a).unwrap_err();
    assert!(e.contains("viommu"), "{e}");
    let e = Serving::DmaCaller.pick(&a).unwrap_err();
    assert!(e.contains("ioctl"), "{e}");
}
