//! The cells in order: one VM each, run again when a retryable fault
//! ended it, logged as it ends; `--serial-report`'s lines for a caller
//! reading stdout.

use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::cli::Config;
use crate::columns::{launch, Column, Launch};
use crate::plan::{self, Cell};
use crate::run::faults::{apply_bar0, name_unretried_fault, retry_reason};
use crate::run::results::{CellResult, CellStatus, Place};
use crate::run::runner::{run_cell, CellCtx, Progress, RunError};

use super::partial::PartialFile;
use super::prepare::{Armed, Prepared};

/// What the cell loop produced.
pub struct Ran {
    /// The cells that ended, well or not.
    pub results: Vec<CellResult>,
    /// Whether Ctrl-C, SIGTERM or SIGHUP stopped the run.
    pub interrupted: bool,
}

/// Runs every cell of `p` in order, until the end, a signal on `cancel`
/// or an error that leaves the host unfit for more.
pub async fn run_cells(
    cfg: &Config,
    p: &Prepared,
    armed: &Armed,
    cancel: watch::Receiver<bool>,
    partial: &mut Option<PartialFile>,
) -> Ran {
    let a = &cfg.args;
    let mut progress = Progress::new(
        p.cells.len(),
        a.rounds,
        p.total / (p.cells.len().max(1) as u32),
    );
    progress.first_round = a.first_round;
    let log_dir = p.out.join("logs");
    let mut ctx = CellCtx {
        stall: Duration::from_secs(a.stall_seconds),
        bound: plan::cell_bound(cfg),
        log_dir: &log_dir,
        cancel: cancel.clone(),
        kvm_exits: armed.kvm_exits.as_ref(),
        breakdown: armed.breakdown.as_ref(),
        stuck: None,
        placement: p.placement.as_ref(),
    };
    let mut results = Vec::new();
    let mut interrupted = *cancel.borrow();
    // Which host boot the cells ran on, for the report's order table.
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    for (index, cell) in p.cells.iter().enumerate() {
        if interrupted {
            break;
        }
        let col = &cfg.columns[cell.column];
        let l = launch(
            col,
            &p.inputs,
            &p.cmdline,
            &p.run_dir,
            &format!("{}-r{}", col.tag, cell.round + 1),
        );
        let place = Place {
            boot: boot_id.clone(),
            index: index as u32,
        };
        let attempt = Attempt {
            cfg,
            p,
            col,
            cell,
            l: &l,
        };
        match attempt.run(place, &mut ctx, &progress).await {
            Ok(r) => {
                if a.serial_report {
                    serial_cell(&r);
                }
                log_end(col, cell, &r);
                if let Some(f) = partial.as_mut() {
                    if let Err(e) = f.append(&r) {
                        warn!("{e}; the partial results stop here (results.json is still written at the end)");
                        *partial = None;
                    }
                }
                results.push(r);
            }
            Err(RunError::Interrupted) => interrupted = true,
            Err(e) => {
                error!("{e}");
                if a.serial_report && matches!(e, RunError::StuckVmm { .. }) {
                    // The lab runs this host's unfinished cells in a fresh one.
                    println!(
                        "@@LAB-HOST-STUCK@@ {}",
                        serde_json::json!({ "why": e.to_string() })
                    );
                }
                break;
            }
        }
        if let Some(t) = &l.trace {
            // QEMU traces grow large; the counts are in the results.
            let _ = std::fs::remove_file(t);
        }
        progress.done += 1;
    }
    Ran {
        results,
        interrupted,
    }
}

/// One cell, with what running it needs.
struct Attempt<'a> {
    cfg: &'a Config,
    p: &'a Prepared,
    col: &'a Column,
    cell: &'a Cell,
    l: &'a Launch,
}

impl Attempt<'_> {
    /// Runs the cell, again while a retryable fault ends it and retries
    /// are left; the last attempt's result carries the earlier ones as
    /// warnings.
    async fn run(
        &self,
        place: Place,
        ctx: &mut CellCtx<'_>,
        progress: &Progress,
    ) -> Result<CellResult, RunError> {
        let (a, col, cell) = (&self.cfg.args, self.col, self.cell);
        let mut earlier: Vec<String> = Vec::new();
        loop {
            let mut r = run_cell(self.l, &col.tag, cell.round, ctx, progress).await?;
            apply_bar0(&mut r, col, self.p.pre.facts.bar0.as_deref());
            r.place = Some(place.clone());
            let retry = (earlier.len() < a.retries as usize)
                .then(|| self.retry_why(&r))
                .flatten();
            let Some(why) = retry else {
                name_unretried_fault(&mut r, col.vmm);
                r.warnings.append(&mut earlier);
                return Ok(r);
            };
            earlier.push(self.keep_for_retry(&r, why, earlier.len() + 1));
        }
    }

    /// Why the cell that ended as `r` runs again, if it does.
    fn retry_why(&self, r: &CellResult) -> Option<String> {
        retry_reason(r, self.col.vmm).or_else(|| match &r.status {
            CellStatus::Hung {
                phase,
                after_s,
                device_owes: false,
            } if self.cfg.args.retry_hung => Some(format!(
                "the guest hung in {phase} (no I/O for {after_s} s; --retry-hung)"
            )),
            _ => None,
        })
    }

    /// Keeps attempt `n`'s log next to the next one's and says why it
    /// runs again; the warning the final result carries for it.
    fn keep_for_retry(&self, r: &CellResult, mut why: String, n: usize) -> String {
        let (col, cell) = (self.col, self.cell);
        // A hang's diagnosis stays with the attempt it was made of:
        // the lab counts hangs by kind over every attempt.
        if let Some(state) = r
            .warnings
            .iter()
            .find(|w| w.starts_with("state at the hang"))
        {
            why = format!("{why}; {state}");
        }
        // Keep the first attempt's log next to the new one.
        let kept =
            r.log
                .with_file_name(format!("{}-r{}-attempt{}.log", col.tag, cell.round + 1, n));
        let _ = std::fs::rename(&r.log, &kept);
        warn!(
            "{} round {}: {why}; running it again (log of this attempt: {})",
            col.tag,
            cell.round + 1,
            kept.display()
        );
        if self.cfg.args.serial_report {
            print_log(
                &format!("{}-r{} attempt {}", col.tag, cell.round + 1, n),
                &kept,
            );
        }
        format!(
            "{} ({why}); ran it again (log {})",
            crate::report::summarize::retry_warning_head(n),
            kept.display()
        )
    }
}

/// How the cell ended, on the log.
fn log_end(col: &Column, cell: &Cell, r: &CellResult) {
    match &r.status {
        CellStatus::Ok => info!(
            "{} round {}: done in {:.0} s",
            col.tag,
            cell.round + 1,
            r.wall_s
        ),
        CellStatus::Hung { phase, .. } => warn!(
            "{} round {}: hung in {phase}; log {}",
            col.tag,
            cell.round + 1,
            r.log.display()
        ),
        CellStatus::Failed { reason, .. } => warn!(
            "{} round {}: failed: {reason}; log {}",
            col.tag,
            cell.round + 1,
            r.log.display()
        ),
    }
}

/// `@@LAB-CELL@@ {json}` for a caller reading stdout, and the log of a cell
/// that did not end well.
fn serial_cell(r: &CellResult) {
    match serde_json::to_string(r) {
        Ok(j) => println!("@@LAB-CELL@@ {j}"),
        Err(e) => eprintln!("viommu-bench: cell {} as JSON: {e}", r.column),
    }
    // A VMM that would not exit is shown too: its log says what it did
    // last, the warnings where its threads were.
    let stuck = r
        .warnings
        .iter()
        .any(|w| w.starts_with(crate::run::hang::unkillable_vmm::UNKILLABLE));
    if r.status != CellStatus::Ok || stuck {
        print_log(&format!("{}-r{}", r.column, r.round + 1), &r.log);
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// A guest's serial log and VMM output on stdout, between marker lines.
fn print_log(name: &str, log: &Path) {
    println!("---- guest {name} failed; its serial log and VMM output follow ----");
    match std::fs::read(log) {
        Ok(b) => print!("{}", String::from_utf8_lossy(&b)),
        Err(e) => println!("({}: {e})", log.display()),
    }
    println!("---- end of guest {name} log ----");
}
