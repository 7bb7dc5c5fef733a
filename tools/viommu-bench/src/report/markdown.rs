//! The report as markdown (report.md).

use crate::report::exits::{exit_tables, EXITS_NOTE};
use crate::report::row_text::{
    lazy_cells, notes, row_cells, time_cells, HEADER, LAZY_HEADER, TIME_HEADER, TIME_NOTE,
};
use crate::report::sections::{cpu_time, guest_time, headline, latency, order, paired, places};
use crate::report::summary::Summary;

pub(crate) fn md_table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut o = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        o += &format!("| {} |\n", r.join(" | "));
    }
    o
}

/// The table as Markdown (table.md), in the layout of the project's
/// comparison write-ups.
pub fn render_markdown(s: &Summary, title: &str) -> String {
    let mut head: Vec<String> = vec!["bs".into(), "numjobs".into()];
    head.extend(HEADER.iter().map(|h| h.to_string()));
    let mut rows = Vec::new();
    for g in &s.groups {
        for r in &g.rows {
            let mut cells = vec![g.bs.clone(), g.numjobs.to_string()];
            cells.extend(row_cells(r, &s.baseline, s.ceiling.as_deref()));
            rows.push(cells);
        }
    }
    let mut out = format!("# {title}\n\n");
    let lead = headline::lines(s.lead.as_deref(), &s.paired);
    if !lead.is_empty() {
        let cells: Vec<Vec<String>> = lead.iter().map(headline::cells).collect();
        out += &format!(
            "Headline: {}\n\n{}\n",
            s.headline_title().trim_start_matches("headline: "),
            md_table(&headline::header(&s.baseline, s.ceiling.as_deref()), &cells)
        );
    }
    out += &format!("{}\n", md_table(&head, &rows));
    out += "\n";
    for g in &s.groups {
        out += &format!("- {}: {}\n", g.phase, g.verdict);
    }
    if !s.latency.is_empty() {
        let lh = latency::HEADER.map(String::from).to_vec();
        let lr: Vec<Vec<String>> = s.latency.iter().map(latency::cells).collect();
        out += &format!("\n{}:\n\n{}", latency::NOTE, md_table(&lh, &lr));
    }
    if !s.lazy.is_empty() {
        let lh: Vec<String> = LAZY_HEADER.iter().map(|h| h.to_string()).collect();
        let lr: Vec<Vec<String>> = s.lazy.iter().map(lazy_cells).collect();
        out += &format!(
            "\nLazy unmap (device counters of the same phases, medians):\n\n{}",
            md_table(&lh, &lr)
        );
    }
    if !s.time.is_empty() {
        let th: Vec<String> = TIME_HEADER.iter().map(|h| h.to_string()).collect();
        let tr: Vec<Vec<String>> = s.time.iter().map(time_cells).collect();
        out += &format!("\n{TIME_NOTE}:\n\n{}", md_table(&th, &tr));
    }
    if !s.guest_time.is_empty() {
        let gh = guest_time::HEADER.map(String::from).to_vec();
        let gr: Vec<Vec<String>> = s.guest_time.iter().map(guest_time::cells).collect();
        out += &format!("\n{}:\n\n{}", guest_time::NOTE, md_table(&gh, &gr));
    }
    if !s.cpu.is_empty() {
        let ch = cpu_time::HEADER.map(String::from).to_vec();
        let cr: Vec<Vec<String>> = s.cpu.iter().map(cpu_time::cells).collect();
        out += &format!("\n{}:\n\n{}", cpu_time::NOTE, md_table(&ch, &cr));
    }
    if !s.paired.is_empty() {
        let ph = paired::HEADER.map(String::from).to_vec();
        let pr: Vec<Vec<String>> = s.paired.iter().map(paired::cells).collect();
        out += &format!(
            "\n{}:\n\n{}",
            paired::note(s.ceiling.as_deref(), &s.baseline),
            md_table(&ph, &pr)
        );
    }
    if !s.order.is_empty() {
        let oh = order::HEADER.map(String::from).to_vec();
        let or: Vec<Vec<String>> = s.order.iter().map(order::cells).collect();
        out += &format!("\n{}:\n\n{}", order::note(&s.baseline), md_table(&oh, &or));
    }
    if !s.places.is_empty() {
        let ph = places::HEADER.map(String::from).to_vec();
        let pr: Vec<Vec<String>> = s.places.iter().map(places::cells).collect();
        out += &format!("\n{}:\n\n{}", places::NOTE, md_table(&ph, &pr));
    }
    if let Some(n) = &s.noise {
        out += &format!("\n{}\n", places::noise_text(n));
    }
    if !s.breakdown.is_empty() {
        let bh = crate::report::sections::breakdown::HEADER
            .map(String::from)
            .to_vec();
        let br: Vec<Vec<String>> = s
            .breakdown
            .iter()
            .map(crate::report::sections::breakdown::cells)
            .collect();
        out += &format!(
            "\n{}:\n\n{}",
            crate::report::sections::breakdown::NOTE,
            md_table(&bh, &br)
        );
    }
    let exit_tables = exit_tables(s);
    if !exit_tables.is_empty() {
        out += &format!("\n{EXITS_NOTE}:\n");
        for (ph, head, body) in exit_tables {
            out += &format!("\n{ph}:\n\n{}", md_table(&head, &body));
        }
    }
    out += &format!("\n{}\n", notes(s));
    out
}
