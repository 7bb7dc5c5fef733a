use super::*;
use crate::report::summarize::summarize;
use crate::report::tests::fixture;

#[test]
fn the_lead_columns_ratios_come_first_and_only_when_asked() {
    let (cols, phases, cells) = fixture();
    let mut s = summarize(&cols, &phases, &cells, 0, 3);
    assert!(
        lines(s.lead.as_deref(), &s.paired).is_empty(),
        "no --lead, no headline"
    );
    let lead = cols[1].tag.clone();
    s.lead = Some(lead.clone());
    let l = lines(s.lead.as_deref(), &s.paired);
    assert_eq!(l.len(), phases.len());
    let p = s.paired.iter().find(|r| r.column == lead).unwrap();
    assert_eq!(l[0].vs_baseline, p.vs_baseline);
    assert_eq!(l[0].vs_ceiling, p.vs_ceiling);
    assert!(l[0].vs_baseline.is_some() && l[0].vs_ceiling.is_some());
    let text = crate::report::text::render_text(&s);
    assert!(text.trim_start().starts_with("== headline: "), "{text}");
    assert!(crate::report::markdown::render_markdown(&s, "t").contains("Headline: "));
}

#[test]
fn the_baseline_as_lead_has_no_line_against_itself() {
    let (cols, phases, cells) = fixture();
    let mut s = summarize(&cols, &phases, &cells, 0, 3);
    s.lead = Some(cols[0].tag.clone());
    let l = lines(s.lead.as_deref(), &s.paired);
    assert!(l.iter().all(|l| l.vs_baseline.is_none()));
}
