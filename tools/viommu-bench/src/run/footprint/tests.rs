use super::*;

const SMAPS: &str = "\
55d0c0a00000-55d0c0b00000 r-xp 00000000 08:01 1234 /lab/bin/vmm
Size:               1024 kB
Rss:                 800 kB
55d0c2000000-55d0c6000000 rw-p 00000000 00:00 0 [heap]
Size:              65536 kB
Rss:               40000 kB
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 
Size:            1048576 kB
Rss:              300000 kB
AnonHugePages:    204800 kB
7f0040000000-7f0044000000 rw-p 00000000 00:00 0 
Size:              65536 kB
Rss:                1200 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
Size:                132 kB
Rss:                  16 kB
VmFlags: rd wr mr mw me gd ac
";

#[test]
fn guest_ram_is_left_out_and_the_heap_is_not() {
    // 800 + 40000 (heap) + 1200 (an arena) + 16: not the 1 GiB of RAM.
    assert_eq!(smaps_kib(SMAPS).own_rss, 42016);
}

#[test]
fn guest_rams_resident_and_huge_parts_are_summed_apart() {
    // The 64 MiB arena's AnonHugePages would not count: it is not RAM.
    let with_arena_thp = SMAPS.replace(
        "Rss:                1200 kB\n",
        "Rss:                1200 kB\nAnonHugePages:      2048 kB\n",
    );
    let m = smaps_kib(&with_arena_thp);
    assert_eq!(
        m,
        SmapsKib {
            own_rss: 42016,
            guest_rss: 300000,
            guest_thp: 204800
        }
    );
    let mut f = Footprint::default();
    f.add_sample(&m, Some(400000));
    f.add_sample(&SmapsKib { guest_thp: 0, ..m }, None);
    assert_eq!(
        (
            f.peak_guest_rss_kib,
            f.peak_guest_thp_kib,
            f.peak_rss_kib,
            f.samples
        ),
        (300000, 204800, 400000, 2)
    );
}

#[test]
fn a_heap_bigger_than_guest_ram_still_counts() {
    let big_heap = "\
55d0c2000000-55d102000000 rw-p 00000000 00:00 0                          [heap]
Rss:              900000 kB
";
    assert_eq!(smaps_kib(big_heap).own_rss, 900000);
    assert_eq!(smaps_kib("garbage\nRss: x kB\n").own_rss, 0);
}

#[test]
fn status_values_are_read_by_key() {
    let s = "Name:\tvmm\nVmHWM:\t  1331200 kB\nVmRSS:\t  1300000 kB\nHugetlbPages:\t 1048576 kB\n";
    assert_eq!(status_kib(s, "VmHWM:"), Some(1331200));
    assert_eq!(status_kib(s, "HugetlbPages:"), Some(1048576));
    assert_eq!(status_kib(s, "VmRSS:"), Some(1300000));
    assert_eq!(status_kib(s, "VmSwap:"), None);
}

#[test]
fn lines_are_counted_by_kind() {
    let mut f = Footprint::default();
    f.log_line("2026 WARN viommu_device: guest-triggered warnings dropped (more than 10 a second) dropped=12", false);
    f.log_line("2026 ERROR vmm: VFIO MSI route: EINVAL", false);
    f.log_line(
        "2026 ERROR vmm: release: VFIO_GROUP_UNSET_CONTAINER: EBUSY",
        true,
    );
    f.log_line("2026 WARN vmm: something", true);
    assert_eq!(
        (f.log_lines, f.rate_limited_lines, f.errors_after_done),
        (4, 1, 1)
    );
}

#[test]
fn peaks_are_the_largest_samples() {
    let mut f = Footprint::default();
    let own = |own_rss| SmapsKib {
        own_rss,
        ..Default::default()
    };
    f.add_sample(&own(100), Some(5000));
    f.add_sample(&own(300), None);
    f.add_sample(&own(200), Some(4000));
    assert_eq!(
        (f.peak_own_rss_kib, f.peak_rss_kib, f.samples),
        (300, 5000, 3)
    );
}

#[test]
fn this_process_can_be_sampled() {
    let mut f = Footprint::default();
    assert!(f.sample(std::process::id()));
    assert!(f.peak_own_rss_kib > 0 && f.peak_rss_kib > 0, "{f:?}");
    assert!(!f.sample(u32::MAX));
}
