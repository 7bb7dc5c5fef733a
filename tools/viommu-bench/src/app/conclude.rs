//! The end of a run, or of `--report-from`: the summary, results.json,
//! table.md and chart.png, the files handed to the sudo user, the text
//! table on stdout and the exit status.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::warn;

use crate::cli::Config;
use crate::plan;
use crate::report::chart;
use crate::report::document::Results;
use crate::report::markdown::render_markdown;
use crate::report::summarize::summarize;
use crate::report::text::render_text;
use crate::run::results::{utc_timestamp, CellResult, CellStatus};
use crate::setup::provenance::Provenance;
use crate::setup::sysfs::Root;

use super::partial;
use super::prepare::out_dir;

/// The tool's name, version and git revision, for results.json.
pub fn tool_name() -> String {
    format!(
        "viommu-bench {} ({})",
        env!("CARGO_PKG_VERSION"),
        env!("VIOMMU_BENCH_GIT_REVISION")
    )
}

/// The run's settings, for results.json.
pub fn settings(
    cfg: &Config,
    facts: &crate::setup::preflight::DeviceFacts,
) -> std::collections::BTreeMap<String, String> {
    let a = &cfg.args;
    let join = |v: Vec<String>| v.join(",");
    [
        ("mode", a.mode.as_str().to_string()),
        ("rw", a.rw.as_str().to_string()),
        ("bs", join(cfg.bs.iter().map(|b| b.label.clone()).collect())),
        ("iodepth", a.iodepth.to_string()),
        (
            "numjobs",
            join(cfg.numjobs.iter().map(|n| n.to_string()).collect()),
        ),
        ("runtime_s", a.runtime.to_string()),
        ("ramp_s", a.ramp.to_string()),
        ("count_runtime_s", a.count_runtime.to_string()),
        ("breakdown", a.breakdown.to_string()),
        ("rounds", a.rounds.to_string()),
        ("guest_cpus", a.guest_cpus.to_string()),
        ("guest_memory_mib", cfg.memory_mib.to_string()),
        ("stall_seconds", a.stall_seconds.to_string()),
        ("pin", a.pin.to_string()),
        ("precondition", a.precondition.as_str().to_string()),
        (
            "precondition_bytes",
            match (a.precondition, plan::precondition_bytes(cfg)) {
                (crate::cli::Precondition::None, _) => "0".into(),
                (_, Some(b)) => b.to_string(),
                (_, None) => "unknown".into(),
            },
        ),
        (
            "guest_cmdline",
            plan::guest_cmdline(cfg, facts.logical_block_size),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Summary, files and table of `cells`; the exit status (0: `expected`
/// cells, all fine; 1: some hung or failed; 130: interrupted).
#[allow(clippy::too_many_arguments)]
pub fn conclude(
    cfg: &Config,
    out: &Path,
    (facts, host, provenance): (
        crate::setup::preflight::DeviceFacts,
        crate::setup::host::HostInfo,
        Provenance,
    ),
    cells: Vec<CellResult>,
    expected: usize,
    started: u64,
    elapsed_s: f64,
    interrupted: bool,
    created: Option<PathBuf>,
) -> u8 {
    let a = &cfg.args;
    let phases = plan::phases(cfg);
    let mut summary = summarize(&cfg.columns, &phases, &cells, cfg.baseline, a.rounds);
    summary.lead = a.lead.clone();
    let doc = Results {
        tool: tool_name(),
        command: std::env::args().collect(),
        started: utc_timestamp(started),
        host_kernel: Root::new(&a.root)
            .read_trim("/proc/sys/kernel/osrelease")
            .unwrap_or_default(),
        host,
        provenance,
        device: cfg.bdf.clone(),
        settings: settings(cfg, &facts),
        device_facts: facts,
        columns: cfg.columns.clone(),
        cells,
        summary,
        elapsed_s,
        interrupted,
    };
    let code = match std::fs::create_dir_all(out)
        .map_err(|e| format!("cannot create {}: {e}; pick another --out", out.display()))
        .and_then(|()| write_outputs(&doc, out))
    {
        Ok(()) => {
            if interrupted {
                130
            } else if doc.cells.iter().all(|c| c.status == CellStatus::Ok)
                && doc.cells.len() == expected
            {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("viommu-bench: {e}");
            1
        }
    };
    if let Some((uid, gid)) = crate::setup::host::sudo_user() {
        hand_over(out, created.as_deref(), uid, gid);
    }
    for l in doc.provenance.header_lines() {
        println!("{l}");
    }
    print!("{}", render_text(&doc.summary));
    code
}

/// Under sudo: what this run wrote in `out` (the directories it created,
/// `created`, and the files it wrote) becomes the invoking user's, not
/// root's.
fn hand_over(out: &Path, created: Option<&Path>, uid: u32, gid: u32) {
    let files = ["results.json", "table.md", "chart.png"].map(|f| out.join(f));
    for p in created
        .map(Path::to_path_buf)
        .into_iter()
        .chain(files.into_iter().filter(|f| f.exists()))
    {
        if let Err(e) = crate::setup::host::chown_tree(&p, uid, gid) {
            warn!(
                "cannot give {} to uid {uid} (SUDO_UID): {e}; it stays root's",
                p.display()
            );
        }
    }
}

/// `--report-from`: the cells of the FILEs (each a results.json, or lines
/// holding one cell's JSON each, `@@LAB-CELL@@` prefixes allowed; a later
/// cell of the same column and round replaces an earlier one) as a
/// finished run; a later file's rounds are numbered after the earlier
/// files'.
pub fn report_only(cfg: &Config, files: &[PathBuf]) -> u8 {
    let mut cells: Vec<CellResult> = Vec::new();
    let mut partial = false;
    let mut provenance = None;
    for given in files {
        let file = partial::resolve(given);
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_cells(&t));
        let ParsedCells {
            cells: mut more,
            header,
            provenance: given_provenance,
        } = match parsed {
            Ok(c) => c,
            Err(e) => {
                eprintln!("viommu-bench: --report-from {}: {e}", file.display());
                return 2;
            }
        };
        if let Some(h) = header {
            partial = true;
            println!(
                "PARTIAL: {} holds the {} cell(s) that finished of the {} its run planned ({}, started {}): the run did not end; the table shows those",
                file.display(),
                more.len(),
                h.viommu_bench_partial.cells_planned,
                h.viommu_bench_partial.tool,
                h.viommu_bench_partial.started
            );
        }
        provenance = given_provenance.or(provenance);
        let first = cells.iter().map(|c| c.round + 1).max().unwrap_or(0);
        for c in &mut more {
            c.round += first;
        }
        cells.append(&mut more);
    }
    let elapsed = cells.iter().map(|c| c.wall_s).sum();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = out_dir(cfg, now);
    let created = crate::setup::host::first_missing(&out);
    let expected = cfg.columns.len() * cfg.args.rounds as usize;
    // No host was read here: the files' own provenance (the last file's
    // that has one), else only what the flags say.
    let provenance = provenance.unwrap_or_else(|| Provenance {
        hugepages: cfg.args.hugepages,
        guest_hugepages: cfg.guest_huge_buffers(),
        ..Default::default()
    });
    let code = conclude(
        cfg,
        &out,
        (Default::default(), Default::default(), provenance),
        cells,
        expected,
        now,
        elapsed,
        partial,
        created,
    );
    // A partial run's report is drawn, not interrupted itself.
    if code == 130 {
        1
    } else {
        code
    }
}

/// What a `--report-from` file holds.
struct ParsedCells {
    cells: Vec<CellResult>,
    /// A partial file's header, when the lines are one.
    header: Option<partial::Header>,
    /// The run's provenance: results.json's, a partial header's or a
    /// `@@LAB-PROVENANCE@@` line's.
    provenance: Option<Provenance>,
}

/// The cells in a results.json or in cell lines, with what else it says
/// of the run.
fn parse_cells(text: &str) -> Result<ParsedCells, String> {
    if let Ok(doc) = serde_json::from_str::<Results>(text) {
        return Ok(ParsedCells {
            cells: doc.cells,
            header: None,
            provenance: Some(doc.provenance),
        });
    }
    // Marked lines among other output (a console), else one cell a line.
    let marked = text.contains("@@LAB-CELL@@");
    let mut cells: Vec<CellResult> = Vec::new();
    let mut header = None;
    let mut provenance = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some((_, j)) = line.split_once(partial::PROVENANCE_MARK) {
            // Only the table's header: one that does not parse is left out.
            match serde_json::from_str(j.trim()) {
                Ok(p) => provenance = Some(p),
                Err(e) => eprintln!(
                    "viommu-bench: line {}: not a provenance, left out: {e}",
                    i + 1
                ),
            }
            continue;
        }
        let json = match line.split_once("@@LAB-CELL@@") {
            Some((_, j)) => j.trim(),
            None if marked => continue,
            None => line,
        };
        if json.is_empty() {
            continue;
        }
        if let Some(h) = partial::header_of(json) {
            provenance = h.viommu_bench_partial.provenance.clone().or(provenance);
            header = Some(h);
            continue;
        }
        let c: CellResult = match serde_json::from_str(json) {
            Ok(c) => c,
            // A partial file's last line may be cut by the kill.
            Err(_) if header.is_some() && i + 1 == text.lines().count() => break,
            Err(e) => return Err(format!("line {}: not a cell: {e}", i + 1)),
        };
        cells.retain(|x| (x.column.as_str(), x.round) != (c.column.as_str(), c.round));
        cells.push(c);
    }
    Ok(ParsedCells {
        cells,
        header,
        provenance,
    })
}

/// results.json, table.md and chart.png in `out`.
fn write_outputs(doc: &Results, out: &Path) -> Result<(), String> {
    let w = |name: &str, body: &[u8]| {
        let p = out.join(name);
        std::fs::write(&p, body)
            .map_err(|e| format!("writing {}: {e}; pick another --out", p.display()))
    };
    let json = serde_json::to_string_pretty(doc).map_err(|e| format!("results.json: {e}"))?;
    w("results.json", json.as_bytes())?;
    let title = format!(
        "viommu-bench on {} ({}), {}{}",
        doc.device,
        doc.device_facts.model.as_deref().unwrap_or("NVMe"),
        doc.started,
        if doc.interrupted { ", INTERRUPTED" } else { "" }
    );
    let mut md = render_markdown(&doc.summary, &title);
    // The provenance, under the title.
    if let Some(end) = md.find('\n') {
        let lines: String = doc
            .provenance
            .header_lines()
            .iter()
            .map(|l| format!("\n{l}\n"))
            .collect();
        md.insert_str(end + 1, &lines);
    }
    md += &format!(
        "\nCommand: `{}` ({:.0} s).\n",
        doc.command.join(" "),
        doc.elapsed_s
    );
    for c in doc.cells.iter().filter(|c| c.status != CellStatus::Ok) {
        md += &format!(
            "\n- {} round {}: {:?} (log `{}`)\n",
            c.column,
            c.round + 1,
            c.status,
            c.log.display()
        );
    }
    w("table.md", md.as_bytes())?;
    let labels = chart::load_font(&chart::FONT_CANDIDATES);
    if !labels {
        warn!(
            "no TrueType font found ({}); chart.png has no text",
            chart::FONT_CANDIDATES.join(", ")
        );
    }
    if let Err(e) = chart::write_chart(&doc.summary, &out.join("chart.png"), labels) {
        warn!("{e}");
    }
    eprintln!(
        "[viommu-bench] wrote {0}/results.json, {0}/table.md, {0}/chart.png, logs in {0}/logs",
        out.display()
    );
    Ok(())
}
