//! The summary's rows as text cells, their headers and the notes under
//! the table: what both renderers print.

use crate::report::stats::{RatioTest, Spread};
use crate::report::summary::{Counted, LazyRow, Row, Summary, TimeRow};

pub(crate) fn spread_cell(s: Option<Spread>, prec: usize) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{:.*}", prec, s.median),
        Some(s) => format!(
            "{:.*} [{:.*}-{:.*}]",
            prec, s.median, prec, s.min, prec, s.max
        ),
    }
}

/// One per-I/O count as the table shows it: plain (exact), `>=N untimed`
/// (stock QEMU's counting run), `>=N traced` (QEMU traced in the timed
/// phase, old results), or why there is none: never blank or zero for a
/// count that was not taken.
pub(crate) fn per_io(v: Option<f64>, how: Option<Counted>) -> String {
    match (v, how) {
        (Some(x), Some(Counted::Untimed)) => format!(">={x:.2} untimed"),
        (Some(x), Some(Counted::Traced)) => format!(">={x:.2} traced"),
        (Some(x), _) => format!("{x:.2}"),
        (None, Some(Counted::NoTrace)) => "no trace".into(),
        (None, Some(Counted::NotCounted | Counted::Untimed)) => "not counted".into(),
        (None, _) => "-".into(),
    }
}

/// A paired ratio as the table shows it: the geometric mean of the
/// per-round ratios (as a ratio, or with `pct` as a difference in
/// percent), its 95% interval, and ` *` when the Holm-corrected test puts
/// it beyond the noise; `(n/a)` for the interval and test of one round.
pub(crate) fn ratio_cell(t: Option<RatioTest>, pct: bool) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let show = |x: f64| {
        if pct {
            format!("{:+.0}", (x - 1.0) * 100.0)
        } else {
            format!("{x:.2}")
        }
    };
    let unit = if pct { "%" } else { "" };
    match (t.low, t.high, t.p) {
        (Some(low), Some(high), Some(_)) => format!(
            "{}{unit} [{}..{}]{}",
            show(t.ratio),
            show(low),
            show(high),
            if t.significant { " *" } else { "" }
        ),
        _ => format!("{}{unit} (n/a)", show(t.ratio)),
    }
}

/// The cells of one row, in [`HEADER`] order (after the group's bs/numjobs).
pub(crate) fn row_cells(r: &Row, baseline: &str, ceiling: Option<&str>) -> Vec<String> {
    let iops = if r.rounds_ok == 0 {
        if r.hung > 0 {
            "hung".to_string()
        } else {
            "failed".to_string()
        }
    } else {
        let mut s = spread_cell(r.iops, 0);
        if r.hung > 0 {
            s += &format!(" ({} hung)", r.hung);
        }
        if r.failed > 0 {
            s += &format!(" ({} failed)", r.failed);
        }
        s
    };
    let vs = if r.column == baseline {
        "(baseline)".to_string()
    } else {
        ratio_cell(r.vs_baseline, true)
    };
    let x_ceiling = if Some(r.column.as_str()) == ceiling {
        "(ceiling)".to_string()
    } else {
        ratio_cell(r.vs_ceiling, false)
    };
    vec![
        r.column.clone(),
        iops,
        x_ceiling,
        vs,
        per_io(r.requests_per_io, r.counted),
        per_io(r.vfio_per_io, r.counted),
        format!(
            "{} / {}",
            percent(r.pool_hit_rate),
            percent(r.reuse_hit_rate)
        ),
    ]
}

pub(crate) fn percent(rate: Option<f64>) -> String {
    rate.map_or("-".into(), |h| format!("{:.0}%", h * 100.0))
}

/// Column headings of the main table.
pub const HEADER: [&str; 7] = [
    "column",
    "IOPS median [min-max]",
    "x ceiling [95%]",
    "vs baseline [95%]",
    "requests/IO",
    "VFIO calls/IO",
    "hit rate pool / reuse",
];

pub(crate) fn aligned(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let w: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = w[i]))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn lazy_cells(l: &LazyRow) -> Vec<String> {
    let o = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.*}", p));
    vec![
        l.phase.clone(),
        l.column.clone(),
        format!("{:.0}", l.deferred_unmaps),
        format!("{:.0}", l.flushes),
        o(l.deferred_per_flush, 1),
        o(l.vfio_per_flush, 2),
        o(l.merged_per_call, 2),
    ]
}

pub(crate) const LAZY_HEADER: [&str; 7] = [
    "phase",
    "column",
    "deferred UNMAPs",
    "FLUSHes",
    "deferred/FLUSH",
    "VFIO calls/FLUSH",
    "mappings merged/VFIO call",
];

pub(crate) fn time_cells(t: &TimeRow) -> Vec<String> {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let o = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.*}", p));
    vec![
        t.phase.clone(),
        t.column.clone(),
        pct(t.busy_share),
        pct(t.vfio_share),
        t.vfio_of_busy.map_or("-".into(), pct),
        o(t.us_per_vfio_call, 1),
        o(t.requests_per_busy_ms, 1),
    ]
}

pub(crate) const TIME_HEADER: [&str; 7] = [
    "phase",
    "column",
    "device busy (of wall)",
    "in VFIO calls (of wall)",
    "VFIO share of busy",
    "us per VFIO call",
    "requests per busy ms",
];

pub(crate) const TIME_NOTE: &str = "Where our VMM's virtio-iommu time goes (device counters viommu_busy_ns_total and viommu_backend_{map,unmap}_ns_total over the phase, medians; wall = the fio phase's runtime; requests are served by the VMM's one virtio-iommu device thread, so a busy share near 100% is that path's ceiling)";

pub(crate) fn notes(s: &Summary) -> String {
    let mut n = format!(
        "IOPS: median [min-max] over {}. x ceiling and vs baseline: each column's IOPS over the reference column's of the same round (same host boot and drive), paired over the rounds both measured: the geometric mean of those ratios (vs baseline as a difference in percent) and its 95% interval, exp(mean ± t(0.975, n-1)·sd/√n) of the per-round log ratios (each interval on its own, not corrected for the table's many comparisons). * = beyond the noise: a two-sided paired t-test of ratio = 1 on the per-round log ratios over the paired rounds, Holm-corrected over {} in this table (every column against {} and against the ceiling in every phase), alpha 0.05, so that the chance of any false * in the whole table is at most 5%; no * = within the noise (not shown to differ: not shown to be equal); (n/a) = one round paired, no interval and no test.",
        s.rounds_text(),
        s.significance.as_ref().map_or("the comparisons".to_string(), |f| format!("{} comparison(s)", f.comparisons)),
        s.baseline
    );
    match &s.ceiling {
        Some(c) => n += &format!(" The ceiling: {c}."),
        None => n += " No no-viommu column ran, so there is no ceiling ratio.",
    }
    n += " requests/IO and VFIO calls/IO: plain = exact, our VMM's always-on device counters over the timed phase itself, divided by the I/Os of the same window (the drive's sectors in the guest's block statistics over the block size; fio's totals leave out its ramp); `>=N untimed` = stock QEMU's trace events over an untimed counting run of the same fio job after the timed phases (its events are off in every timed phase), lower bounds of a sample; `>=N traced` = QEMU traced during the timed phase (results from before the counting run: its IOPS paid for the trace); `no trace` = that QEMU wrote no trace (no `log` trace backend); `not counted` = no counting run gave a count. hung: the guest stopped completing I/O and was killed.";
    for f in &s.findings {
        n += &format!("\n- {f}");
    }
    n
}
