//! The command itself: flags, preflight, image, binding, the cells in
//! order, and the report; `main.rs` only calls [`main`].

mod announce;
mod cells;
mod conclude;
mod prepare;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tokio::sync::watch;

use crate::cli::{Args, Config};

/// The command: parse the flags, then run the plan or re-report saved results.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("viommu_bench=info")),
        )
        .init();
    let cfg = match Args::parse().validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("viommu-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("viommu-bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(rt.block_on(run(cfg)))
}

/// Ctrl-C and SIGTERM flip the returned flag; the run then stops its VM,
/// restores the drive and writes what it has.
fn watch_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term_recv = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term_recv => {}
        }
        eprintln!("[viommu-bench] signal received: stopping the VM, restoring the drive, writing partial results");
        let _ = tx.send(true);
    });
    rx
}

/// The run: prepare, say what will happen, arm the host, run the cells,
/// give the drive back, report; the exit status.
async fn run(mut cfg: Config) -> u8 {
    if !cfg.args.report_from.is_empty() {
        return conclude::report_only(&cfg, &cfg.args.report_from);
    }
    let cancel = watch_signals();
    // 1. Prerequisites, before anything changes.
    let p = match prepare::prepare(&mut cfg) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // 2. Say what will happen.
    let what = announce::what_will_happen(&cfg, &p);
    if cfg.args.dry_run {
        return announce::dry_run(&cfg, &p, &what);
    }
    eprintln!("{what}");
    // 3. Directories, tracing, pinning; bind (restored when `guard`
    //    drops, whatever happens below).
    let mut armed = match prepare::arm(&cfg, &p) {
        Ok(a) => a,
        Err(code) => return code,
    };
    // 4. Every cell.
    let t0 = Instant::now();
    let ran = cells::run_cells(&cfg, &p, &armed, cancel).await;
    let _ = std::fs::remove_dir_all(&p.run_dir);
    // 5. Give the drive back before writing anything else.
    if let Some(mut g) = armed.guard.take() {
        g.restore();
    }
    // 6. Report.
    conclude::conclude(
        &cfg,
        &p.out,
        (p.pre.facts, p.host),
        ran.results,
        p.cells.len(),
        p.started,
        t0.elapsed().as_secs_f64(),
        ran.interrupted,
        armed.created,
    )
}
