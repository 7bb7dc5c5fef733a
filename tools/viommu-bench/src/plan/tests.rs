use super::*;
use crate::cli::Args;
use clap::Parser;

#[test]
fn preconditioning_is_planned_and_estimated() {
    let cfg = |extra: &[&str]| {
        let mut argv = vec![
            "viommu-bench",
            "--device",
            "01:00.0",
            "--dry-run",
            "--bs",
            "4k",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap().validate().unwrap()
    };
    let base = |c: &Config| estimate_cell(c).as_secs();
    let none = cfg(&["--precondition", "none"]);
    assert_eq!(precondition_bytes(&none), None);
    assert!(!guest_cmdline(&none, None).contains("lab.precondition"));
    assert!(precondition_note(&none).contains("never-written"));
    let mut span = cfg(&["--span", "8G"]);
    assert_eq!(precondition_bytes(&span), Some(8 << 30));
    assert_eq!(base(&span), base(&none) + 8);
    assert!(guest_cmdline(&span, None).contains(" lab.precondition=span lab.span=8589934592"));
    // A drive smaller than the span: the whole drive, no more.
    span.drive_bytes = Some(2 << 30);
    assert_eq!(precondition_bytes(&span), Some(2 << 30));
    assert_eq!(base(&span), base(&none) + 2);
    let note = precondition_note(&span);
    assert!(
        note.contains("first 2 GiB") && note.contains("about 2 s per VM"),
        "{note}"
    );
    // Stock QEMU's VMs count in untimed runs: 3 s + 2 s per measured run.
    assert_eq!(count_pass(&none), Duration::from_secs(5));
    let cells = rotation(none.columns.len(), 1);
    let counting = none.columns.iter().filter(|c| c.counts_in_pass()).count();
    assert_eq!(counting, 2, "qemu+stock and qemu+patched");
    assert_eq!(
        estimate_cells(&none, &cells).as_secs(),
        7 * base(&none) + 2 * 5
    );
    assert_eq!(
        cell_bound(&none).as_secs(),
        (base(&none) + 5) * 4 + none.args.stall_seconds
    );
    // --breakdown: every virtio-iommu column (5 of 7) one more untimed run
    // per measured run, 3 s + 3 s.
    let brk = cfg(&["--precondition", "none", "--breakdown"]);
    assert_eq!(breakdown_pass(&brk), Duration::from_secs(6));
    assert_eq!(breakdown_pass(&none), Duration::ZERO);
    assert_eq!(
        estimate_cells(&brk, &cells).as_secs(),
        7 * base(&brk) + 2 * 5 + 5 * 6
    );
    assert_eq!(
        cell_bound(&brk).as_secs(),
        (base(&brk) + 5 + 6) * 4 + brk.args.stall_seconds
    );
    let off = cfg(&["--precondition", "none", "--count-runtime", "0"]);
    assert_eq!(count_pass(&off), Duration::ZERO);
    assert_eq!(estimate_cells(&off, &cells).as_secs(), 7 * base(&off));
    // A QEMU without the log trace backend: its counting runs are skipped.
    let mut untraced = cfg(&["--precondition", "none"]);
    untraced.qemu_no_trace = Some("no `log` trace backend".into());
    assert_eq!(count_pass(&untraced), Duration::ZERO);
    assert_eq!(
        estimate_cells(&untraced, &cells).as_secs(),
        7 * base(&untraced)
    );
    let mut full = cfg(&["--precondition", "full"]);
    assert!(guest_cmdline(&full, None).ends_with(" lab.precondition=full"));
    assert!(precondition_note(&full).contains("size is unknown"));
    full.drive_bytes = Some(100 << 30);
    assert_eq!(base(&full), base(&none) + 100);
}

#[test]
fn rounds_go_forwards_then_backwards() {
    let order: Vec<(u32, usize)> = rotation(3, 4).iter().map(|c| (c.round, c.column)).collect();
    assert_eq!(
        order,
        [
            (0, 0),
            (0, 1),
            (0, 2),
            (1, 2),
            (1, 1),
            (1, 0),
            (2, 1),
            (2, 2),
            (2, 0),
            (3, 0),
            (3, 2),
            (3, 1)
        ]
    );
    for n in 1..=6usize {
        let cells = rotation(n, 2 * n as u32);
        let mut before = vec![vec![0u32; n]; n];
        let mut at = vec![vec![0u32; n]; n];
        for r in 0..2 * n as u32 {
            let cols: Vec<usize> = cells
                .iter()
                .filter(|c| c.round == r)
                .map(|c| c.column)
                .collect();
            // Every column runs once per round.
            let mut sorted = cols.clone();
            sorted.sort();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n} round {r}");
            for (i, &a) in cols.iter().enumerate() {
                at[a][i] += 1;
                for &b in &cols[i + 1..] {
                    before[a][b] += 1;
                }
            }
            // Every pair of rounds: each column before each other once.
            if r % 2 == 1 {
                for (a, row) in before.iter().enumerate() {
                    for (b, &k) in row.iter().enumerate() {
                        assert_eq!(k, before[b][a], "n={n} after round {r}: {a} before {b}");
                    }
                }
            }
        }
        // Over 2n rounds: each column twice at each place.
        assert!(at.iter().flatten().all(|&k| k == 2), "n={n}: {at:?}");
    }
    assert_eq!(rotation(4, 7).len(), 28);
    // Round 3 alone (as the lab runs it, one host boot per round).
    assert_eq!(
        rotation_from(3, 2, 1)
            .iter()
            .map(|c| (c.round, c.column))
            .collect::<Vec<_>>(),
        [(2, 1), (2, 2), (2, 0)]
    );
    assert_eq!(
        rotation(1, 2).iter().map(|c| c.column).collect::<Vec<_>>(),
        [0, 0]
    );
}

#[test]
fn cmdline_and_phases() {
    let cfg = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--dry-run",
        "--bs",
        "4k,128k",
        "--numjobs",
        "1,2",
        "--rw",
        "randrw",
    ])
    .unwrap()
    .validate()
    .unwrap();
    let names: Vec<String> = phases(&cfg).into_iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        ["randrw-4k", "randrw-128k", "randrw-4k-j2", "randrw-128k-j2"]
    );
    let c = guest_cmdline(&cfg, None);
    assert!(!c.contains("lab.lbs"), "{c}");
    assert!(guest_cmdline(&cfg, Some(4096)).contains(" lab.lbs=4096 "));
    assert!(c.contains("lab.rw=randrw lab.bs=4k,128k lab.runtime=10 lab.iodepth=64 lab.verify=8M lab.numjobs=1,2"), "{c}");
    assert!(!c.contains("lab.ramp"), "no ramp unless asked: {c}");
    assert!(
        !c.contains("lab.idle_ms"),
        "no idle phase unless asked: {c}"
    );
    // The default: a 4 GiB span, 4 s at 1 GiB/s.
    assert!(
        c.ends_with(" lab.precondition=span lab.span=4294967296"),
        "{c}"
    );
    assert_eq!(
        estimate_cell(&cfg),
        Duration::from_secs(15 + 9 + 4 + 4 * 12)
    );
    let idle = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--dry-run",
        "--idle-ms",
        "3000",
        "--precondition",
        "none",
    ])
    .unwrap()
    .validate()
    .unwrap();
    assert!(guest_cmdline(&idle, None).ends_with(" lab.idle_ms=3000"));
    let ramp = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--dry-run",
        "--ramp",
        "2",
        "--runtime",
        "3",
        "--bs",
        "4k",
        "--precondition",
        "none",
    ])
    .unwrap()
    .validate()
    .unwrap();
    assert!(guest_cmdline(&ramp, None).ends_with(" lab.ramp=2"));
    // one verify size + mixed, one measured run of ramp + runtime
    assert_eq!(
        estimate_cell(&ramp),
        Duration::from_secs(15 + 2 * 3 + (5 + 2))
    );
}

#[test]
fn guest_hugepages_reserves_the_largest_fio_runs_buffers() {
    let cfg = |extra: &[&str]| {
        let mut argv = vec!["viommu-bench", "--device", "01:00.0", "--dry-run"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap().validate()
    };
    // Off: no reservation, nothing on the guest's command line.
    let off = cfg(&["--precondition", "none"]).unwrap();
    assert_eq!(off.guest_huge_buffers(), None);
    assert!(!guest_cmdline(&off, None).contains("lab.hugebuf"));
    // 64 x 256 KiB = 8 pages and the 2 more fio 3.33 takes, per job of
    // the largest numjobs (20 is what fio needed for 2 such jobs).
    let on = cfg(&[
        "--guest-hugepages",
        "--precondition",
        "none",
        "--numjobs",
        "1,2",
    ])
    .unwrap();
    assert_eq!(on.guest_huge_buffers(), Some(20));
    assert!(guest_cmdline(&on, None).ends_with(" lab.hugebuf=20"));
    // Small blocks: the verify passes' 16 x 256 KiB decide (2 + 2).
    let small = cfg(&["--guest-hugepages", "--precondition", "none", "--bs", "4k"]).unwrap();
    assert_eq!(small.guest_huge_buffers(), Some(4));
    // The preconditioning write's 32 x 1 MiB (16 + 2) when it runs.
    let pre = cfg(&["--guest-hugepages", "--bs", "4k"]).unwrap();
    assert_eq!(pre.guest_huge_buffers(), Some(18));
    // More than half the guest's RAM: refused, naming the way out.
    let e = cfg(&[
        "--guest-hugepages",
        "--guest-memory",
        "256M",
        "--bs",
        "1m",
        "--numjobs",
        "4",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--guest-memory") && e.contains("lower --iodepth"),
        "{e}"
    );
}
