use super::*;
use crate::report::markdown::render_markdown;
use crate::report::stats::Spread;
use crate::report::summarize::summarize;
use crate::report::summary::{Row, Summary};
use crate::report::tests::fixture;
use crate::report::text::render_text;

fn row(column: &str, vs_baseline: Option<RatioTest>, vs_ceiling: Option<RatioTest>) -> Row {
    Row {
        column: column.into(),
        iops: Spread::of(&[1000.0]),
        ratio: None,
        vs_ceiling,
        requests_per_io: None,
        vfio_per_io: None,
        lower_bound: false,
        counted: None,
        pool_hit_rate: None,
        reuse_hit_rate: None,
        rounds_ok: 5,
        hung: 0,
        failed: 0,
        vs_baseline,
    }
}

fn group(phase: &str, rows: Vec<Row>) -> Group {
    Group {
        phase: phase.into(),
        bs: "4k".into(),
        numjobs: 1,
        rows,
        verdict: String::new(),
    }
}

/// A test of five rounds with raw p-value `p`, ratio `ratio`.
fn tested(p: f64, ratio: f64) -> Option<RatioTest> {
    Some(RatioTest {
        n: 5,
        ratio,
        median: ratio,
        low: Some(ratio * 0.96),
        high: Some(ratio * 1.04),
        t: Some(3.0),
        p: Some(p),
        ..RatioTest::default()
    })
}

/// One phase: base, a, b and the ceiling, with the textbook p-values
/// (0.01, 0.04, 0.03, 0.005) on a and b against the base, a against
/// the ceiling, and the base against the ceiling (twice: both rows), and
/// b against the ceiling from one round.
fn textbook() -> Vec<Group> {
    let one = RatioTest::of(&[0.7]);
    vec![group(
        "randread-4k",
        vec![
            row("base", None, tested(0.005, 0.5)),
            row("a", tested(0.01, 1.3), tested(0.03, 0.8)),
            row("b", tested(0.04, 1.1), one),
            row("ceil", tested(0.005, 2.0), None),
        ],
    )]
}

#[test]
fn each_pair_counts_once_and_the_marks_follow_the_adjusted_p() {
    let mut groups = textbook();
    let fam = correct(&mut groups, "base", Some("ceil"));
    assert_eq!(fam.comparisons, 4, "base/ceil once, b/ceil untested");
    assert_eq!(fam.alpha, 0.05);
    let r = &groups[0].rows;
    let adj = |t: Option<RatioTest>| t.unwrap().p_holm.unwrap();
    // Holm: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04 -> 0.06.
    assert!((adj(r[0].vs_ceiling) - 0.02).abs() < 1e-12);
    assert!((adj(r[3].vs_baseline) - 0.02).abs() < 1e-12);
    assert!((adj(r[1].vs_baseline) - 0.03).abs() < 1e-12);
    assert!((adj(r[1].vs_ceiling) - 0.06).abs() < 1e-12);
    assert!((adj(r[2].vs_baseline) - 0.06).abs() < 1e-12);
    assert!(r[0].vs_ceiling.unwrap().significant && r[3].vs_baseline.unwrap().significant);
    assert!(r[1].vs_baseline.unwrap().significant);
    // Raw p 0.04 and 0.03 are below alpha, adjusted they are not.
    assert!(!r[2].vs_baseline.unwrap().significant);
    assert!(!r[1].vs_ceiling.unwrap().significant);
    let b_ceil = r[2].vs_ceiling.unwrap();
    assert_eq!((b_ceil.p_holm, b_ceil.significant), (None, false));
}

#[test]
fn both_renderers_mark_what_the_adjusted_test_marks() {
    let mut groups = textbook();
    let fam = correct(&mut groups, "base", Some("ceil"));
    let s = Summary {
        baseline: "base".into(),
        ceiling: Some("ceil".into()),
        rounds: 5,
        groups,
        significance: Some(fam),
        ..Summary::default()
    };
    let text = render_text(&s);
    // A row of the text table, its columns' padding squeezed to one space.
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        line("a").contains("0.80 [0.77..0.83] +30% [+25..+35] * -"),
        "{text}"
    );
    assert!(line("b").contains("0.70 (n/a) +10% [+6..+14] -"), "{text}");
    assert!(!line("b").contains('*'), "{text}");
    assert!(
        line("base").contains("0.50 [0.48..0.52] * (baseline)"),
        "{text}"
    );
    assert!(
        line("ceil").contains("(ceiling) +100% [+92..+108] *"),
        "{text}"
    );
    let md = render_markdown(&s, "t");
    assert!(
        md.contains("| a | 1000 | 0.80 [0.77..0.83] | +30% [+25..+35] * |"),
        "{md}"
    );
    assert!(
        md.contains("| b | 1000 | 0.70 (n/a) | +10% [+6..+14] |"),
        "{md}"
    );
    assert!(
        md.contains("| base | 1000 | 0.50 [0.48..0.52] * | (baseline) |"),
        "{md}"
    );
    for out in [&text, &md] {
        assert!(
            out.contains("paired t-test of ratio = 1 on the per-round log ratios")
                && out.contains("Holm-corrected over 4 comparison(s)")
                && out.contains("alpha 0.05"),
            "{out}"
        );
    }
}

#[test]
fn lost_rounds_are_left_out_of_the_pairs() {
    let (cols, phases, mut cells) = fixture();
    // ours loses round 1; the baseline round 2.
    cells.retain(|c| {
        !(c.column == "ours+patched-lazy" && c.round == 1
            || c.column == "qemu+stock" && c.round == 2)
    });
    let s = summarize(&cols, &phases, &cells, 0, 3);
    let rows = &s.groups[0].rows;
    let ours = &rows[1];
    // Against the baseline only round 0 is shared: one pair, no test.
    let vb = ours.vs_baseline.unwrap();
    assert_eq!((vb.n, vb.p, vb.low), (1, None, None));
    assert!((vb.ratio - 3.0).abs() < 1e-12);
    // Against the ceiling rounds 0 and 2: 3000/4000, 2900/4200.
    let vc = ours.vs_ceiling.unwrap();
    assert_eq!(vc.n, 2);
    assert!((vc.ratio - (0.75f64 * 2900.0 / 4200.0).sqrt()).abs() < 1e-12);
    assert!(vc.p.is_some());
    let text = render_text(&s);
    let line = text
        .lines()
        .find(|l| l.starts_with("ours+patched-lazy"))
        .unwrap();
    assert!(line.contains("+200% (n/a)"), "{text}");
    assert!(
        s.groups[0].verdict.contains("n/a"),
        "{}",
        s.groups[0].verdict
    );
    // The baseline against the ceiling: rounds 0 and 1.
    assert_eq!(rows[0].vs_ceiling.unwrap().n, 2);
    // One round in all: nothing is tested, nothing counted in the family.
    let one: Vec<_> = fixture().2.into_iter().filter(|c| c.round == 0).collect();
    let s1 = summarize(&cols, &phases, &one, 0, 1);
    assert_eq!(s1.significance.unwrap().comparisons, 0);
    assert!(s1.groups[0]
        .rows
        .iter()
        .all(|r| !r.vs_baseline.is_some_and(|t| t.significant)));
    assert!(s1.paired.is_empty(), "one round: no round-by-round rows");
}

/// SplitMix64, for the simulations' noise: seeded, so they are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// One simulated table: 5 phases of a baseline and 5 more columns over
/// `rounds` rounds (25 comparisons), each column's IOPS lognormal around
/// its true level (`effect[i]` times the baseline's) with log sd `sigma`,
/// plus a round effect shared by every column of the round; corrected.
fn simulated_table(rng: &mut Rng, rounds: usize, sigma: f64, effect: [f64; 5]) -> Vec<Group> {
    let mut groups: Vec<Group> = (0..5)
        .map(|ph| {
            let mut iops = vec![vec![0.0; rounds]; 6];
            for r in 0..rounds {
                let host = 0.25 * rng.normal();
                for (c, col) in iops.iter_mut().enumerate() {
                    let level = if c == 0 { 1.0 } else { effect[c - 1] };
                    col[r] = 1e5 * level * (host + sigma * rng.normal()).exp();
                }
            }
            let mut rows = vec![row("c0", None, None)];
            for (c, col) in iops.iter().enumerate().skip(1) {
                let ratios: Vec<f64> = col.iter().zip(&iops[0]).map(|(a, b)| a / b).collect();
                rows.push(row(&format!("c{c}"), RatioTest::of(&ratios), None));
            }
            group(&format!("p{ph}"), rows)
        })
        .collect();
    let fam = correct(&mut groups, "c0", None);
    assert_eq!(fam.comparisons, 25);
    groups
}

fn marked(groups: &[Group], column: Option<&str>) -> bool {
    groups.iter().flat_map(|g| &g.rows).any(|r| {
        column.is_none_or(|c| r.column == c) && r.vs_baseline.is_some_and(|t| t.significant)
    })
}

#[test]
fn identical_columns_are_marked_in_at_most_about_alpha_of_the_tables() {
    let mut rng = Rng(0x5eed_0001);
    let tables = 2000;
    let (mut any_mark, mut any_raw) = (0, 0);
    for _ in 0..tables {
        let g = simulated_table(&mut rng, 5, 0.1, [1.0; 5]);
        any_mark += usize::from(marked(&g, None));
        let raw = g.iter().flat_map(|g| &g.rows).any(|r| {
            r.vs_baseline
                .is_some_and(|t| t.p.is_some_and(|p| p < ALPHA))
        });
        any_raw += usize::from(raw);
    }
    let rate = any_mark as f64 / tables as f64;
    assert!(rate <= 0.08, "tables with a false mark: {rate}");
    // Uncorrected, 25 tests at 0.05 would mark most tables: the
    // correction is what keeps the rate down.
    let raw_rate = any_raw as f64 / tables as f64;
    assert!(raw_rate > 0.4, "uncorrected: {raw_rate}");
}

#[test]
fn a_twenty_percent_difference_with_small_noise_is_marked() {
    let mut rng = Rng(0x5eed_0002);
    let tables = 200;
    let (mut found, mut false_marks) = (0, 0);
    for _ in 0..tables {
        let g = simulated_table(&mut rng, 5, 0.02, [1.2, 1.0, 1.0, 1.0, 1.0]);
        // c1 is 20% ahead in every phase: marked in each of them.
        let every_phase = g.iter().all(|g| g.rows[1].vs_baseline.unwrap().significant);
        found += usize::from(every_phase);
        false_marks += usize::from(marked(&g, Some("c2")) || marked(&g, Some("c3")));
    }
    assert!(
        found as f64 >= 0.95 * tables as f64,
        "found in {found}/{tables}"
    );
    assert!(false_marks as f64 <= 0.08 * tables as f64, "{false_marks}");
}
