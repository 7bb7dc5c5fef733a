//! The report as aligned plain text, for the terminal and report.txt.

use crate::report::exits::exit_tables;
use crate::report::row_text::{
    aligned, lazy_cells, notes, row_cells, time_cells, HEADER, LAZY_HEADER, TIME_HEADER,
};
use crate::report::sections::{cpu_time, guest_time, headline, latency, order, paired, places};
use crate::report::summary::Summary;

/// The table for a terminal.
pub fn render_text(s: &Summary) -> String {
    let lead = headline::lines(s.lead.as_deref(), &s.paired);
    let mut out = if lead.is_empty() {
        String::new()
    } else {
        text_table(
            &s.headline_title(),
            headline::header(&s.baseline, s.ceiling.as_deref()),
            lead.iter().map(headline::cells),
        )
    };
    for g in &s.groups {
        out += &format!("\n== {} (bs {}, numjobs {}) ==\n", g.phase, g.bs, g.numjobs);
        let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
        rows.extend(
            g.rows
                .iter()
                .map(|r| row_cells(r, &s.baseline, s.ceiling.as_deref())),
        );
        out += &aligned(&rows);
        out += &format!("\n{}\n", g.verdict);
    }
    let heads = |h: &[&str]| h.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    out += &text_table(
        "completion latency (fio clat, medians over rounds; p99 x ceiling of the same round)",
        heads(&latency::HEADER),
        s.latency.iter().map(latency::cells),
    );
    out += &text_table(
        "lazy unmap (device counters, medians)",
        heads(&LAZY_HEADER),
        s.lazy.iter().map(lazy_cells),
    );
    out += &text_table(
        "where the time goes (our VMM's device, medians)",
        heads(&TIME_HEADER),
        s.time.iter().map(time_cells),
    );
    out += &text_table(
        "where the guest's mapping time goes (iommu-dma-time, medians)",
        heads(&guest_time::HEADER),
        s.guest_time.iter().map(guest_time::cells),
    );
    out += &text_table(
        "where the CPU time goes (/proc/stat, medians)",
        heads(&cpu_time::HEADER),
        s.cpu.iter().map(cpu_time::cells),
    );
    out += &text_table(
        "round by round (IOPS x ceiling and x baseline of the same round)",
        heads(&paired::HEADER),
        s.paired.iter().map(paired::cells),
    );
    out += &text_table(
        "by order on the host (IOPS x baseline of the same round)",
        heads(&order::HEADER),
        s.order.iter().map(order::cells),
    );
    out += &text_table(
        "by place on the host (IOPS x the column's usual)",
        heads(&places::HEADER),
        s.places.iter().map(places::cells),
    );
    if let Some(n) = &s.noise {
        out += &format!("\n{}\n", places::noise_text(n));
    }
    for (ph, head, body) in exit_tables(s) {
        out += &text_table(&format!("KVM exits per I/O: {ph}"), head, body);
    }
    out += &text_table(
        "where a request's time goes (--breakdown: untimed pass, host tracefs, medians)",
        heads(&crate::report::sections::breakdown::HEADER),
        s.breakdown
            .iter()
            .map(crate::report::sections::breakdown::cells),
    );
    out += &format!("\n{}\n", notes(s));
    out
}

/// A titled table for a terminal, or nothing when it has no rows.
pub(crate) fn text_table(
    title: &str,
    head: Vec<String>,
    body: impl IntoIterator<Item = Vec<String>>,
) -> String {
    let mut rows = vec![head];
    rows.extend(body);
    if rows.len() == 1 {
        return String::new();
    }
    format!("\n== {title} ==\n{}\n", aligned(&rows))
}
