use super::markdown::render_markdown;
use super::summarize::summarize;
use super::summary::*;
use super::text::render_text;
use crate::columns::builtin;
use crate::columns::{Column, Counting};
use crate::plan::Phase;
use crate::run::guest::FioRecord;
use crate::run::metrics::DeviceCounters;
use crate::run::results::PhaseResult;
use crate::run::results::{CellResult, CellStatus};
use std::collections::BTreeMap;

/// The built-in columns of these tags.
pub(crate) fn cols(tags: &[&str]) -> Vec<Column> {
    tags.iter()
        .map(|c| crate::columns::builtin(c).unwrap())
        .collect()
}

/// The fio record of `c`'s randread-4k phase (the fixture's cells have one).
pub(crate) fn fio_4k(c: &mut CellResult) -> &mut FioRecord {
    let p = c
        .phases
        .get_mut("randread-4k")
        .expect("a randread-4k phase");
    p.fio.as_mut().expect("its fio record")
}

/// The fixture's phase: randread-4k, one job.
pub(crate) fn phase_4k() -> Phase {
    Phase {
        name: "randread-4k".into(),
        bs: "4k".into(),
        bs_bytes: 4096,
        numjobs: 1,
    }
}

pub(crate) fn cell(
    col: &str,
    round: u32,
    iops: u64,
    dev: Option<DeviceCounters>,
    lower: bool,
) -> CellResult {
    let mut phases = BTreeMap::new();
    phases.insert(
        "randread-4k".to_string(),
        PhaseResult {
            fio: Some(FioRecord {
                phase: "randread-4k".into(),
                numjobs: 1,
                read_iops: iops,
                read_kib: iops * 4 * 10,
                read_ms: 10_000,
                counters: [
                    ("iommu-dma-pool/hits".to_string(), 99),
                    ("iommu-dma-pool/misses".to_string(), 1),
                ]
                .into_iter()
                .collect(),
                ..Default::default()
            }),
            device: dev,
            kvm_exits: None,
            host_cpu: None,
            breakdown: None,
        },
    );
    CellResult {
        phases,
        lower_bound: lower,
        ..CellResult::test_ok(col, round)
    }
}

/// `c` as stock QEMU counts today: nothing in the timed phase, `dev`
/// in its untimed counting run (the same fio job and I/O count).
pub(crate) fn in_pass(mut c: CellResult, dev: Option<DeviceCounters>) -> CellResult {
    let mut run = c.phases["randread-4k"].clone();
    run.fio.as_mut().unwrap().phase = "count-randread-4k".into();
    run.device = dev;
    c.phases.get_mut("randread-4k").unwrap().device = None;
    c.phases.insert("count-randread-4k".into(), run);
    c.counting = Some(Counting::Pass);
    c
}

pub(crate) fn fixture() -> (Vec<Column>, Vec<Phase>, Vec<CellResult>) {
    let cols: Vec<Column> = ["qemu+stock", "ours+patched-lazy", "no-viommu"]
        .iter()
        .map(|c| builtin(c).unwrap())
        .collect();
    let phases = vec![Phase {
        name: "randread-4k".into(),
        bs: "4k".into(),
        bs_bytes: 4096,
        numjobs: 1,
    }];
    let q = |n| {
        Some(DeviceCounters {
            map_requests: n,
            unmap_requests: n,
            vfio_calls: 2 * n,
            ..Default::default()
        })
    };
    let lazy = Some(DeviceCounters {
        map_requests: 100,
        unmap_requests: 50,
        flush_requests: 10,
        vfio_calls: 30,
        deferred_unmaps: 50,
        flush_vfio_calls: 20,
        merged_ranges: 40,
        busy_ns: 4_000_000_000,
        vfio_ns: 1_000_000_000,
        ..Default::default()
    });
    let mut cells = vec![];
    for (r, (a, b, c)) in [(1000, 3000, 4000), (1100, 3300, 4400), (1050, 2900, 4200)]
        .into_iter()
        .enumerate()
    {
        cells.push(in_pass(
            cell("qemu+stock", r as u32, a, None, true),
            q(a * 10),
        ));
        let mut ours = cell("ours+patched-lazy", r as u32, b, lazy, false);
        ours.counting = Some(Counting::Exact);
        cells.push(ours);
        let mut ceiling = cell("no-viommu", r as u32, c, None, false);
        ceiling.counting = Some(Counting::None);
        cells.push(ceiling);
    }
    (cols, phases, cells)
}

#[test]
fn kvm_exits_per_io_by_reason() {
    let (cols, phases, mut cells) = fixture();
    // ours: 3000/3300/2900 IOPS x 10 s; 0.5 MSR exits and 0.25 NPF per I/O.
    for c in cells.iter_mut().filter(|c| c.column == "ours+patched-lazy") {
        let p = c.phases.get_mut("randread-4k").unwrap();
        let ios = p.fio.as_ref().unwrap().read_iops * 10;
        p.kvm_exits = Some(
            [
                ("exit.MSR".to_string(), ios / 2),
                ("exit.NPF".to_string(), ios / 4),
                ("msr.6e0.w".to_string(), ios / 2),
            ]
            .into_iter()
            .collect(),
        );
    }
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.exits.len(), 1, "only the column that counted");
    let e = &s.exits[0];
    assert!((e.total - 0.75).abs() < 1e-9, "{}", e.total);
    assert!((e.per_io["msr.6e0.w"] - 0.5).abs() < 1e-9);
    let text = render_text(&s);
    assert!(text.contains("KVM exits per I/O: randread-4k"), "{text}");
    assert!(text.contains("exit.NPF"), "{text}");
    let md = render_markdown(&s, "t");
    assert!(md.contains("| msr.6e0.w | 0.500 |"), "{md}");
}

#[test]
fn summary_numbers() {
    let (cols, phases, cells) = fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let g = &s.groups[0];
    let q = &g.rows[0];
    assert_eq!(q.iops.unwrap().median, 1050.0);
    assert_eq!((q.iops.unwrap().min, q.iops.unwrap().max), (1000.0, 1100.0));
    assert_eq!(q.ratio.unwrap().median, 0.25);
    assert_eq!(q.requests_per_io, Some(2.0));
    assert_eq!(q.vfio_per_io, Some(2.0));
    assert!(q.lower_bound);
    assert_eq!(q.counted, Some(Counted::Untimed));
    assert_eq!(g.rows[1].counted, Some(Counted::Exact));
    assert!(!g.rows[1].lower_bound);
    assert_eq!(g.rows[2].counted, None);
    assert_eq!(q.pool_hit_rate, Some(0.99));
    assert_eq!(q.reuse_hit_rate, None, "no reuse counters in the fixture");
    let o = &g.rows[1];
    assert!(o.vs_baseline.unwrap().significant);
    // Round by round: 3000/1000, 3300/1100, 2900/1050; their geometric
    // mean, and the t interval from the log ratios with t(0.975, 2).
    let vb = o.vs_baseline.unwrap();
    let logs = [3f64.ln(), 3f64.ln(), (2900f64 / 1050.0).ln()];
    let mean = logs.iter().sum::<f64>() / 3.0;
    let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let half = 4.302_652_7 * sd / 3f64.sqrt();
    assert_eq!(vb.n, 3);
    assert!((vb.ratio - mean.exp()).abs() < 1e-12);
    assert!((vb.low.unwrap() - (mean - half).exp()).abs() < 1e-6);
    assert!((vb.high.unwrap() - (mean + half).exp()).abs() < 1e-6);
    assert!(
        render_text(&s).contains("+192% [+159..+229] *"),
        "{}",
        render_text(&s)
    );
    assert_eq!(g.rows[2].requests_per_io, None, "the ceiling has no vIOMMU");
    assert!(
        g.verdict
            .contains("highest median: ours+patched-lazy; beyond the noise against qemu+stock: ours+patched-lazy +192%"),
        "{}",
        g.verdict
    );
    assert_eq!(s.lazy.len(), 1);
    assert_eq!(s.lazy[0].deferred_per_flush, Some(5.0));
    assert_eq!(s.lazy[0].merged_per_call, Some(2.0));
    // Where the time goes: only our VMM reports busy time.
    assert_eq!(s.time.len(), 1);
    let t = &s.time[0];
    assert_eq!(t.column, "ours+patched-lazy");
    assert!((t.busy_share - 0.4).abs() < 1e-9);
    assert!((t.vfio_share - 0.1).abs() < 1e-9);
    assert_eq!(t.vfio_of_busy, Some(0.25));
    assert!((t.us_per_vfio_call.unwrap() - 1e6 / 30.0).abs() < 1e-6);
    assert!((t.requests_per_busy_ms.unwrap() - 160.0 / 4000.0).abs() < 1e-9);
}

/// The fixture's cells of `col`, changed by `f`.
fn with(cells: &mut [CellResult], col: &str, f: impl Fn(&mut CellResult)) {
    cells.iter_mut().filter(|c| c.column == col).for_each(f);
}

fn qemu_row(s: &Summary) -> String {
    render_text(s)
        .lines()
        .find(|l| l.starts_with("qemu+stock"))
        .unwrap()
        .to_string()
}

#[test]
fn stock_qemus_counts_come_from_its_counting_run_only() {
    let (cols, phases, mut cells) = fixture();
    // A timed-phase count (were QEMU traced there) is not what shows:
    // the counting run's 2 per I/O are.
    with(&mut cells, "qemu+stock", |c| {
        c.phases.get_mut("randread-4k").unwrap().device = Some(DeviceCounters {
            map_requests: 1,
            ..Default::default()
        })
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.groups[0].rows[0].requests_per_io, Some(2.0));
    // A round whose counting run failed or was skipped counts nothing;
    // the others still show.
    with(&mut cells, "qemu+stock", |c| {
        if c.round == 0 {
            c.phases.remove("count-randread-4k");
        }
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.groups[0].rows[0].counted, Some(Counted::Untimed));
    assert!(qemu_row(&s).contains(">=2.00 untimed"), "{}", qemu_row(&s));
    // None at all: said, not blank.
    with(&mut cells, "qemu+stock", |c| {
        c.phases.remove("count-randread-4k");
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[0];
    assert_eq!(
        (r.requests_per_io, r.counted),
        (None, Some(Counted::NotCounted))
    );
    assert_eq!(
        qemu_row(&s).matches("not counted").count(),
        2,
        "{}",
        qemu_row(&s)
    );
}

#[test]
fn a_qemu_that_wrote_no_trace_is_said_never_zero_or_blank() {
    let (cols, phases, mut cells) = fixture();
    with(&mut cells, "qemu+stock", |c| {
        c.counting = Some(Counting::NoTrace {
            why: "QEMU wrote no line to its trace file".into(),
        });
        // What an empty trace gives: zeros, which must not show.
        c.phases.get_mut("count-randread-4k").unwrap().device = Some(DeviceCounters::default());
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[0];
    assert_eq!((r.requests_per_io, r.vfio_per_io), (None, None));
    assert_eq!(r.counted, Some(Counted::NoTrace));
    let q = qemu_row(&s);
    assert!(
        q.matches("no trace").count() == 2 && !q.contains("0.00"),
        "{q}"
    );
    assert!(
        s.findings.iter().any(
            |f| f.starts_with("qemu+stock: QEMU wrote no trace in 3 of 3 VM(s)")
                && f.contains("no `log` trace backend")
        ),
        "{:?}",
        s.findings
    );
    let md = render_markdown(&s, "t");
    assert!(md.contains("| no trace | no trace |"), "{md}");
    assert!(
        md.contains("- qemu+stock: QEMU wrote no trace in 3 of 3"),
        "{md}"
    );
}

#[test]
fn not_counted_says_why() {
    let (cols, phases, mut cells) = fixture();
    with(&mut cells, "qemu+stock", |c| {
        c.counting = Some(Counting::NotCounted {
            why: "--count-runtime 0: no counting pass".into(),
        });
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert!(qemu_row(&s).contains("not counted"), "{}", qemu_row(&s));
    assert_eq!(
            s.findings,
            ["qemu+stock: requests and VFIO calls per I/O not counted in 3 of 3 VM(s) (`not counted`): --count-runtime 0: no counting pass"]
        );
}

#[test]
fn old_results_traced_in_the_timed_phase_are_marked() {
    let (cols, phases, mut cells) = fixture();
    // Before the counting run: QEMU's counts in the timed phase itself,
    // no `counting` recorded.
    with(&mut cells, "qemu+stock", |c| {
        let dev = c.phases["count-randread-4k"].device;
        c.phases.remove("count-randread-4k");
        c.phases.get_mut("randread-4k").unwrap().device = dev;
        c.counting = None;
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[0];
    assert_eq!(
        (r.requests_per_io, r.counted),
        (Some(2.0), Some(Counted::Traced))
    );
    assert!(r.lower_bound);
    assert!(qemu_row(&s).contains(">=2.00 traced"), "{}", qemu_row(&s));
    assert!(
        s.findings.iter().any(|f| f.starts_with(
            "qemu+stock: 3 of 3 VM(s) ran with QEMU's trace on during the timed phases"
        )),
        "{:?}",
        s.findings
    );
    // Old cells of ours: exact, as before.
    with(&mut cells, "ours+patched-lazy", |c| c.counting = None);
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.groups[0].rows[1].counted, Some(Counted::Exact));
}

#[test]
fn a_hang_in_the_counting_run_keeps_the_timed_phases() {
    let (cols, phases, mut cells) = fixture();
    with(&mut cells, "qemu+stock", |c| {
        c.phases.remove("count-randread-4k");
        c.status = CellStatus::Hung {
            phase: if c.round == 0 {
                "count-randread-4k".into()
            } else {
                "after count-randread-4k".into()
            },
            after_s: 60,
            device_owes: false,
        };
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[0];
    assert_eq!((r.rounds_ok, r.hung, r.failed), (3, 0, 0));
    assert_eq!(r.iops.unwrap().median, 1050.0);
    assert_eq!(r.counted, Some(Counted::NotCounted));
    assert!(
            s.findings.iter().any(|f| f.starts_with("qemu+stock: the guest hung in its untimed counting run (QEMU's trace on) in 3 of 3 VM(s)")),
            "{:?}",
            s.findings
        );
    // A hang in a timed phase still drops the cell.
    with(&mut cells, "qemu+stock", |c| {
        c.status = CellStatus::Hung {
            phase: "randread-4k".into(),
            after_s: 60,
            device_owes: false,
        }
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[0];
    assert_eq!((r.rounds_ok, r.hung), (0, 3));
}

#[test]
fn an_exact_zero_is_shown_as_zero() {
    let (cols, phases, mut cells) = fixture();
    // A patched guest whose mappings all hit its caches: no request.
    with(&mut cells, "ours+patched-lazy", |c| {
        c.phases.get_mut("randread-4k").unwrap().device = Some(DeviceCounters::default());
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let r = &s.groups[0].rows[1];
    assert_eq!((r.requests_per_io, r.vfio_per_io), (Some(0.0), Some(0.0)));
    let md = render_markdown(&s, "t");
    assert!(
        md.contains("| +192% [+159..+229] * | 0.00 | 0.00 |"),
        "{md}"
    );
}

#[test]
fn each_job_count_has_its_own_ceiling() {
    let (cols, mut phases, mut cells) = fixture();
    phases.push(Phase {
        name: "randread-4k-j2".into(),
        bs: "4k".into(),
        bs_bytes: 4096,
        numjobs: 2,
    });
    // With 2 jobs every column does twice as well as with 1.
    for c in &mut cells {
        let mut p = c.phases["randread-4k"].clone();
        let f = p.fio.as_mut().unwrap();
        f.phase = "randread-4k-j2".into();
        f.numjobs = 2;
        f.read_iops *= 2;
        f.read_kib *= 2;
        c.phases.insert("randread-4k-j2".into(), p);
    }
    // The 2-job ceiling alone doubles again: ratios halve for 2 jobs.
    for c in cells.iter_mut().filter(|c| c.column == "no-viommu") {
        let f = c
            .phases
            .get_mut("randread-4k-j2")
            .unwrap()
            .fio
            .as_mut()
            .unwrap();
        f.read_iops *= 2;
    }
    let s = summarize(&cols, &phases, &cells, 0, 3);
    assert_eq!(s.groups[0].rows[0].ratio.unwrap().median, 0.25);
    assert_eq!(s.groups[1].numjobs, 2);
    assert_eq!(
        s.groups[1].rows[0].ratio.unwrap().median,
        0.25 / 2.0 * 2.0 / 2.0
    );
}

#[test]
fn hung_and_noise() {
    let (cols, phases, mut cells) = fixture();
    // ours hangs in every round: the row says so.
    for c in cells.iter_mut().filter(|c| c.column == "ours+patched-lazy") {
        c.status = CellStatus::Hung {
            phase: "randread-4k".into(),
            after_s: 60,
            device_owes: false,
        };
    }
    // qemu's ranges overlap a made-up second contender: noise.
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let t = render_text(&s);
    let ours_line = t
        .lines()
        .find(|l| l.starts_with("ours+patched-lazy"))
        .unwrap();
    assert!(ours_line.contains("hung"), "{t}");
    assert!(s.groups[0]
        .verdict
        .starts_with("highest median: qemu+stock"));
    // One round: nothing is significant.
    let one: Vec<CellResult> = fixture().2.into_iter().filter(|c| c.round == 0).collect();
    let s1 = summarize(&cols, &phases, &one, 0, 1);
    assert!(!s1.groups[0].rows[1].vs_baseline.unwrap().significant);
    assert_eq!(s1.groups[0].rows[1].vs_baseline.unwrap().p, None);
    assert!(
        s1.groups[0]
            .verdict
            .contains("n/a (fewer than 2 rounds paired"),
        "{}",
        s1.groups[0].verdict
    );
    assert!(
        render_text(&s1).contains("+200% (n/a)"),
        "{}",
        render_text(&s1)
    );
}

#[test]
fn renders_text_and_markdown() {
    let (cols, phases, cells) = fixture();
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let t = render_text(&s);
    assert!(t.contains("== randread-4k (bs 4k, numjobs 1) =="), "{t}");
    let q = t.lines().find(|l| l.starts_with("qemu+stock")).unwrap();
    assert!(
        q.contains("1050 [1000-1100]")
            && q.contains("0.25 [0.25..0.25] *")
            && q.contains("(baseline)")
            && q.contains(">=2.00")
            && q.contains("99% / -"),
        "{q}"
    );
    let o = t
        .lines()
        .find(|l| l.starts_with("ours+patched-lazy"))
        .unwrap();
    assert!(
        o.contains("0.73 [0.65..0.82] *  +192% [+159..+229] *"),
        "{o}"
    );
    assert!(t.contains("== lazy unmap"));
    let md = render_markdown(&s, "viommu-bench");
    assert!(md.contains("| 4k | 1 | qemu+stock | 1050 [1000-1100] | 0.25 [0.25..0.25] * | (baseline) | >=2.00 untimed | >=2.00 untimed | 99% / - |"), "{md}");
    // Ours exact and plain; the ceiling has nothing to count.
    assert!(
            md.contains("| 4k | 1 | ours+patched-lazy | 3000 [2900-3300] | 0.73 [0.65..0.82] * | +192% [+159..+229] * | 0.01 | 0.00 |"),
            "{md}"
        );
    assert!(
        md.contains(
            "| 4k | 1 | no-viommu | 4200 [4000-4400] | (ceiling) | +300% [+300..+300] * | - | - |"
        ),
        "{md}"
    );
    assert!(
        md.contains("`>=N untimed` = stock QEMU's trace events over an untimed counting run"),
        "{md}"
    );
    assert!(s.findings.is_empty(), "{:?}", s.findings);
    assert!(
        md.contains("| randread-4k | ours+patched-lazy | 50 | 10 | 5.0 | 2.00 | 2.00 |"),
        "{md}"
    );
    assert!(t.contains("== where the time goes"), "{t}");
    assert!(
        md.contains("| randread-4k | ours+patched-lazy | 40% | 10% | 25% | 33333.3 | 0.0 |"),
        "{md}"
    );
}

#[test]
fn figures_per_io_divide_by_the_counter_windows_ios() {
    // The counter window held a quarter more I/O than fio counted (the end
    // of its ramp): the guest's sector count of the window divides.
    let (cols, phases, mut cells) = fixture();
    let ours = |s: &Summary| s.groups[0].rows[1].requests_per_io.unwrap();
    let by_fio = ours(&summarize(&cols, &phases, &cells, 0, 3));
    with(&mut cells, "ours+patched-lazy", |c| {
        let f = fio_4k(c);
        let sectors = f.read_kib as i64 * 2 * 5 / 4;
        f.counters
            .insert(crate::report::cells::WINDOW_SECTORS.into(), sectors);
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let by_window = ours(&s);
    assert!(
        (by_window - by_fio / 1.25).abs() < 1e-12,
        "{by_fio} {by_window}"
    );
    // IOPS stay fio's.
    assert_eq!(s.groups[0].rows[1].iops.unwrap().median, 3000.0);
}
